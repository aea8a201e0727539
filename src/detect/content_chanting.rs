//! `content_chanting`: repetitive generated text within one response (stream time).
//!
//! Idea: Gemini CLI's content-loop check. A 50-byte window (`chunk_size`)
//! that recurs ≥ 10 times (`min_repeats`) in the tracked text with a mean gap
//! ≤ 250 bytes (`max_mean_gap`) and ≤ 5 distinct gaps (`max_periods`) is
//! chanting; so is the same normalised line (trimmed, at least 6 letters or
//! digits, one of them a letter: a row of numbers is data) `max_line_repeats`
//! (30) times in one response, in any context, code included. Default level: critical, action `block`.
//!
//! Cost: O(1) amortised per byte and memory capped per channel. Windows are
//! hashed with a Rabin–Karp rolling hash; rather than indexing every window
//! (a hash-map write per byte), the scanner keeps only the windows selected
//! by winnowing (the minimum hash of every 16 consecutive windows, Schleimer
//! et al. 2003): repeated text selects the same windows in every repeat, so
//! recurrences are seen while map writes drop to about one per 8 bytes.
//! Tracked text is capped at `buffer_chars` (5000) bytes: older selections
//! are evicted; the line table holds at most 4096 distinct lines.
//!
//! Does not flag (deliberately): markdown structure — tracking resets at a
//! fence, table row, list item (`-`, `*`, `+`, `•`, `1.`), heading,
//! blockquote or divider line when that line differs from the previous line,
//! so a 40-row table or 60 distinct list items never count, while a repeated
//! bullet still does; a line of letters/digits is never a divider. Text
//! inside a code fence is checked by the line ceiling only, so repetitive but
//! distinct code is fine. Windows with fewer than 8 distinct bytes (box
//! drawing, rules, runs of one character) are not hashed; there, low-entropy
//! chanting (issue #12 point 6: one answer repeating `Yes,` 200 times,
//! aider#1841; `nynyny…`, gemini-cli#5813) is a unit of 1 to 16 bytes
//! repeated back to back `low_entropy_repeats` (50) times over at least 200
//! bytes, when the unit holds two distinct bytes and a letter — not only hex
//! digits and `x`, not a data literal (`null`, `true`, `nan`, …) — so base64
//! padding, separator lines, zero-filled CSV or hex arrays, progress bars and
//! table rules never count. Lengths are bytes of
//! UTF-8, not characters. Answer text, reasoning text and each tool call's
//! argument text are separate channels.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::settings::{ChantingParams, Settings};
use super::step::truncate;
use super::verdict::{Action, DetectorKind, Finding, Level, Verdict};
use crate::dialect::StreamEvent;

const WINNOW: u64 = 16;
const BASE: u64 = 0x100_0000_01b3;
const MIN_DISTINCT: u16 = 8;
const LINE_CAP: usize = 4096;
const MAX_LINES: usize = 4096;
const ADVICE: &str =
    "The response keeps repeating itself; stop, and answer once or make the tool call you need.";

/// Which text of a response a delta belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Answer text of a choice.
    Answer(u32),
    /// Reasoning text of a choice.
    Reasoning(u32),
    /// Argument text of a tool call (choice, index).
    ToolArguments(u32, u32),
}

/// Scans one response's text for chanting.
#[derive(Debug)]
pub struct ContentScanner {
    params: ChantingParams,
    enabled: bool,
    action: Action,
    channels: Vec<(Channel, Track)>,
    verdict: Option<Verdict>,
}

impl ContentScanner {
    /// A scanner for one response.
    pub fn new(settings: &Settings) -> Self {
        let t = settings.thresholds(DetectorKind::ContentChanting);
        Self {
            params: settings.chanting,
            enabled: settings.enabled && t.enabled && t.get(Level::Critical) > 0,
            action: settings.action_for(DetectorKind::ContentChanting, Level::Critical),
            channels: Vec::new(),
            verdict: None,
        }
    }

    /// Feeds a stream event; returns the verdict once chanting was seen (and
    /// on every later call: the condition holds for the rest of the response).
    pub fn observe(&mut self, event: &StreamEvent) -> Option<&Verdict> {
        match event {
            StreamEvent::TextDelta { choice, text } => self.feed(Channel::Answer(*choice), text),
            StreamEvent::ReasoningDelta { choice, text } => self.feed(Channel::Reasoning(*choice), text),
            StreamEvent::ToolCallDelta {
                choice,
                index,
                arguments_delta,
            } => self.feed(Channel::ToolArguments(*choice, *index), arguments_delta),
            _ => self.verdict.as_ref(),
        }
    }

    /// Feeds text of one channel.
    pub fn feed(&mut self, channel: Channel, text: &str) -> Option<&Verdict> {
        if !self.enabled || self.verdict.is_some() {
            return self.verdict.as_ref();
        }
        let i = match self.channels.iter().position(|(c, _)| *c == channel) {
            Some(i) => i,
            None => {
                self.channels.push((channel, Track::new(&self.params)));
                self.channels.len() - 1
            }
        };
        let track = &mut self.channels[i].1;
        if let Some((count, sample)) = track.push(text, &self.params) {
            let finding = Finding {
                detector: DetectorKind::ContentChanting,
                level: Level::Critical,
                count: u32::try_from(count).unwrap_or(u32::MAX),
                tool: None,
                arguments: None,
                detail: format!("the response repeats the same text {count} times (\"{sample}\")"),
                advice: ADVICE,
                observe_only: false,
            };
            self.verdict = Some(finding.with_action(self.action));
        }
        self.verdict.as_ref()
    }

    /// The verdict, once chanting was seen.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    /// Heap bytes held (estimate).
    pub fn heap_size(&self) -> usize {
        self.channels.iter().map(|(_, t)| t.heap_size()).sum()
    }
}

/// Keys are already hashes: use them as they are.
#[derive(Debug, Default, Clone, Copy)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map<V> = HashMap<u64, V, BuildHasherDefault<Prehashed>>;

/// The rolling window: the last `chunk_size` bytes outside code, their
/// Rabin–Karp hash and how many distinct bytes they hold.
#[derive(Debug)]
struct Window {
    /// Power-of-two ring of recent bytes (at least the window length).
    ring: Vec<u8>,
    /// Bytes written to `ring` (wrapping).
    written: usize,
    /// Window length (`chunk_size`, at least 1).
    len: usize,
    filled: usize,
    hash: u64,
    /// `BASE^chunk_size`, to drop the outgoing byte.
    pow: u64,
    counts: [u16; 256],
    distinct: u16,
}

impl Window {
    fn new(chunk_size: usize) -> Self {
        let mut pow: u64 = 1;
        for _ in 0..chunk_size {
            pow = pow.wrapping_mul(BASE);
        }
        let len = chunk_size.max(1);
        Self {
            ring: vec![0; len.next_power_of_two()],
            written: 0,
            len,
            filled: 0,
            hash: 0,
            pow,
            counts: [0; 256],
            distinct: 0,
        }
    }

    fn reset(&mut self) {
        self.filled = 0;
        self.hash = 0;
        self.counts = [0; 256];
        self.distinct = 0;
    }

    /// Adds a byte; once the window is full, returns its hash (`u64::MAX`
    /// when it holds fewer than [`MIN_DISTINCT`] distinct bytes).
    #[inline]
    fn push(&mut self, b: u8) -> Option<u64> {
        let mask = self.ring.len() - 1;
        let out = self.ring[self.written.wrapping_sub(self.len) & mask];
        self.ring[self.written & mask] = b;
        self.written = self.written.wrapping_add(1);
        self.hash = self.hash.wrapping_mul(BASE).wrapping_add(u64::from(b));
        if self.filled == self.len {
            self.hash = self.hash.wrapping_sub(u64::from(out).wrapping_mul(self.pow));
            let c = &mut self.counts[usize::from(out)];
            *c -= 1;
            self.distinct -= u16::from(*c == 0);
        } else {
            self.filled += 1;
        }
        let c = &mut self.counts[usize::from(b)];
        self.distinct += u16::from(*c == 0);
        *c += 1;
        if self.filled < self.len {
            return None;
        }
        Some(if self.distinct >= MIN_DISTINCT {
            self.hash
        } else {
            u64::MAX
        })
    }

    /// The window's text, for the verdict.
    fn sample(&self) -> String {
        let mask = self.ring.len() - 1;
        let start = self.written.wrapping_sub(self.len);
        let window: Vec<u8> = (0..self.len)
            .map(|i| self.ring[start.wrapping_add(i) & mask])
            .collect();
        truncate(&String::from_utf8_lossy(&window), 50)
    }
}

/// Low-entropy chanting (issue #12 point 6): a short unit repeated back to
/// back where the window has too few distinct bytes for window hashing.
/// Tracks the current period (1..=[`MAX_UNIT`]) and how many bytes in a row
/// equal the byte one period earlier; runs only on low-entropy bytes, so
/// prose pays nothing.
#[derive(Debug, Default)]
struct LowEntropy {
    period: usize,
    run: usize,
    /// Already reported or rejected at this run (no second look until it resets).
    judged: bool,
}

/// Longest unit of low-entropy chanting, bytes.
const MAX_UNIT: usize = 16;
/// Shortest low-entropy chanting run, bytes.
const LOW_MIN_BYTES: usize = 200;
/// Letters of data literals whose repetition is data, not chanting.
const DATA_LITERALS: &[&str] = &["null", "true", "false", "nan", "none", "inf", "undefined", "nil"];

impl LowEntropy {
    fn reset(&mut self) {
        *self = Self::default();
    }

    /// Feeds the byte just pushed into `w`; returns (repeats, unit) on detection.
    fn push(&mut self, w: &Window, repeats: usize) -> Option<(usize, String)> {
        let back = |d: usize| w.ring[w.written.wrapping_sub(1 + d) & (w.ring.len() - 1)];
        let b = back(0);
        if self.period > 0 && b == back(self.period) {
            self.run += 1;
        } else {
            self.judged = false;
            self.run = 0;
            self.period = (1..=MAX_UNIT.min(w.filled.saturating_sub(1)))
                .find(|&p| back(p) == b)
                .unwrap_or(0);
            if self.period > 0 {
                self.run = 1;
            }
        }
        let p = self.period;
        if self.judged || p == 0 || self.run < LOW_MIN_BYTES.max(p * repeats) {
            return None;
        }
        self.judged = true;
        let unit: Vec<u8> = (0..p).rev().map(back).collect();
        let mut distinct = unit.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // The letters of the unit read from each of its rotations: the run
        // may have been caught mid-word (`ull,n` is `null,`).
        let letters = |r: usize| -> String {
            unit[r..]
                .iter()
                .chain(&unit[..r])
                .filter(|c| c.is_ascii_alphabetic())
                .map(|c| char::from(c.to_ascii_lowercase()))
                .collect()
        };
        let literal = (0..p).any(|r| DATA_LITERALS.contains(&letters(r).as_str()));
        let hex_only = unit
            .iter()
            .all(|c| c.is_ascii_hexdigit() || !c.is_ascii_alphanumeric() || matches!(c, b'x' | b'X'));
        if distinct.len() < 2 || letters(0).is_empty() || hex_only || literal {
            return None;
        }
        Some((self.run / p + 1, truncate(&String::from_utf8_lossy(&unit), 50)))
    }
}

/// Winnowing: the minimum hash among the last [`WINNOW`] windows (the
/// rightmost on ties), reporting each newly selected window once.
#[derive(Debug)]
struct Winnow {
    /// The last `WINNOW` windows pushed, as (position, hash), by push count.
    recent: [(u64, u64); WINNOW as usize],
    pushed: usize,
    /// The current minimum (position, hash); hash `u64::MAX` when none.
    min: (u64, u64),
    selected: u64,
}

impl Winnow {
    fn new() -> Self {
        Self {
            recent: [(0, 0); WINNOW as usize],
            pushed: 0,
            min: (0, u64::MAX),
            selected: u64::MAX,
        }
    }

    fn reset(&mut self) {
        self.pushed = 0;
        self.min = (0, u64::MAX);
        self.selected = u64::MAX;
    }

    /// Adds the window ending at `pos`; returns the selection when it changed.
    #[inline]
    fn push(&mut self, pos: u64, h: u64) -> Option<(u64, u64)> {
        const SLOTS: usize = WINNOW as usize;
        self.recent[self.pushed % SLOTS] = (pos, h);
        self.pushed += 1;
        if h <= self.min.1 {
            // Not above any window still in range: the new rightmost minimum.
            self.min = (pos, h);
        } else if self.min.0 + WINNOW <= pos {
            // The minimum left the range: rescan it, newest first.
            let mut best = (pos, h);
            for back in 1..self.pushed.min(SLOTS) {
                let (p, bh) = self.recent[(self.pushed - 1 - back) % SLOTS];
                if p + WINNOW <= pos {
                    break;
                }
                if bh < best.1 {
                    best = (p, bh);
                }
            }
            self.min = best;
        }
        let (sel_pos, sel_hash) = self.min;
        if sel_pos == self.selected || sel_hash == u64::MAX {
            return None;
        }
        self.selected = sel_pos;
        Some(self.min)
    }
}

/// A selected window in position order.
#[derive(Debug, Clone, Copy)]
struct Selection {
    pos: u64,
    hash: u64,
    /// Sequence number of the next selection with the same hash, if any.
    next: Option<u64>,
}

/// Selected windows of the tracked text (the last `buffer_chars` bytes).
#[derive(Debug, Default)]
struct Index {
    /// Selections in position order; `order[i]` has sequence number `evicted + i`.
    order: VecDeque<Selection>,
    evicted: u64,
    /// hash → (count, sequence number of the first, of the last) within the buffer.
    occ: Map<(usize, u64, u64)>,
}

impl Index {
    fn reset(&mut self) {
        self.evicted += self.order.len() as u64;
        self.order.clear();
        self.occ.clear();
    }

    fn at(&self, seq: u64) -> Option<&Selection> {
        usize::try_from(seq.checked_sub(self.evicted)?)
            .ok()
            .and_then(|i| self.order.get(i))
    }

    /// Records a selected window; returns its count when it is chanting.
    fn register(&mut self, pos: u64, h: u64, p: &ChantingParams) -> Option<usize> {
        let horizon = pos.saturating_sub(p.buffer_chars as u64);
        while let Some(old) = self.order.front().copied() {
            if old.pos >= horizon {
                break;
            }
            self.order.pop_front();
            self.evicted += 1;
            if let Entry::Occupied(mut e) = self.occ.entry(old.hash) {
                let entry = e.get_mut();
                entry.0 -= 1;
                match old.next {
                    Some(next) if entry.0 > 0 => entry.1 = next,
                    _ => {
                        e.remove();
                    }
                }
            }
        }
        let seq = self.evicted + self.order.len() as u64;
        self.order.push_back(Selection {
            pos,
            hash: h,
            next: None,
        });
        let (count, first) = match self.occ.entry(h) {
            Entry::Occupied(mut e) => {
                let entry = e.get_mut();
                let last = entry.2;
                entry.0 += 1;
                entry.2 = seq;
                let (count, first) = (entry.0, entry.1);
                if let Some(i) = last
                    .checked_sub(self.evicted)
                    .and_then(|i| usize::try_from(i).ok())
                {
                    if let Some(prev) = self.order.get_mut(i) {
                        prev.next = Some(seq);
                    }
                }
                (count, first)
            }
            Entry::Vacant(e) => {
                e.insert((1, seq, seq));
                (1, seq)
            }
        };
        if count < p.min_repeats.max(2) {
            return None;
        }
        let first_pos = self.at(first)?.pos;
        if (pos - first_pos) / (count as u64 - 1) > p.max_mean_gap as u64 {
            return None;
        }
        let mut gaps = Vec::with_capacity(count);
        let mut at = self.at(first).copied();
        while let Some(sel) = at {
            let Some(next) = sel.next.and_then(|n| self.at(n)).copied() else {
                break;
            };
            gaps.push(next.pos - sel.pos);
            at = Some(next);
        }
        gaps.sort_unstable();
        gaps.dedup();
        (gaps.len() <= p.max_periods).then_some(count)
    }
}

/// Per-channel state.
#[derive(Debug)]
struct Track {
    window: Window,
    low: LowEntropy,
    winnow: Winnow,
    index: Index,
    /// Bytes seen on the channel (code included): window positions.
    pos: u64,
    /// The current line, up to [`LINE_CAP`] bytes.
    line: Vec<u8>,
    /// Letters and digits on the current line, counted up to 6 (all that matters).
    line_alnum: usize,
    /// The current line holds a letter (a row of numbers is data, not chanting).
    line_alpha: bool,
    prev_line: u64,
    in_code: bool,
    lines: Map<usize>,
}

impl Track {
    fn new(p: &ChantingParams) -> Self {
        Self {
            window: Window::new(p.chunk_size),
            low: LowEntropy::default(),
            winnow: Winnow::new(),
            index: Index::default(),
            pos: 0,
            line: Vec::new(),
            line_alnum: 0,
            line_alpha: false,
            prev_line: 0,
            in_code: false,
            lines: Map::default(),
        }
    }

    fn heap_size(&self) -> usize {
        self.window.ring.capacity()
            + self.index.order.capacity() * std::mem::size_of::<Selection>()
            + self.index.occ.capacity() * 40
            + self.line.capacity()
            + self.lines.capacity() * 24
    }

    /// Clears window tracking (not the line table).
    fn reset_windows(&mut self) {
        self.window.reset();
        self.low.reset();
        self.winnow.reset();
        self.index.reset();
    }

    /// Feeds text; returns (count, sample) on detection.
    fn push(&mut self, text: &str, p: &ChantingParams) -> Option<(usize, String)> {
        let mut rest = text;
        while !rest.is_empty() {
            let (chunk, newline) = match rest.find('\n') {
                Some(i) => (&rest.as_bytes()[..=i], true),
                None => (rest.as_bytes(), false),
            };
            rest = &rest[chunk.len()..];
            let body = &chunk[..chunk.len() - usize::from(newline)];
            if self.line.len() < LINE_CAP {
                let take = body.len().min(LINE_CAP - self.line.len());
                self.line.extend_from_slice(&body[..take]);
            }
            if self.line_alnum < 6 {
                self.line_alnum += body.iter().filter(|b| b.is_ascii_alphanumeric()).count();
            }
            if !self.line_alpha {
                self.line_alpha = body.iter().any(u8::is_ascii_alphabetic);
            }
            if self.in_code {
                self.pos += chunk.len() as u64;
            } else if let Some(found) = self.scan(chunk, p) {
                return Some(found);
            }
            if newline {
                if let Some(found) = self.end_line(p) {
                    return Some(found);
                }
            }
        }
        None
    }

    /// Slides the window over `bytes` (text outside code).
    fn scan(&mut self, bytes: &[u8], p: &ChantingParams) -> Option<(usize, String)> {
        for &b in bytes {
            self.pos += 1;
            let Some(h) = self.window.push(b) else {
                continue;
            };
            if h == u64::MAX {
                if p.low_entropy_repeats > 0 {
                    if let Some(found) = self.low.push(&self.window, p.low_entropy_repeats) {
                        return Some(found);
                    }
                }
            } else if self.low.run > 0 {
                self.low.reset();
            }
            let Some((pos, h)) = self.winnow.push(self.pos, h) else {
                continue;
            };
            if let Some(count) = self.index.register(pos, h, p) {
                return Some((count, self.window.sample()));
            }
        }
        None
    }

    fn end_line(&mut self, p: &ChantingParams) -> Option<(usize, String)> {
        let alnum = std::mem::replace(&mut self.line_alnum, 0);
        let alpha = std::mem::replace(&mut self.line_alpha, false);
        let text = String::from_utf8_lossy(&self.line);
        let trimmed = text.trim();
        let h = line_hash(trimmed.as_bytes());
        let mut found = None;
        if p.max_line_repeats > 0 && alnum >= 6 && alpha {
            let len = self.lines.len();
            let entry = if len < MAX_LINES {
                Some(self.lines.entry(h).or_insert(0))
            } else {
                self.lines.get_mut(&h)
            };
            if let Some(n) = entry {
                *n += 1;
                if *n >= p.max_line_repeats {
                    found = Some((*n, truncate(trimmed, 50)));
                }
            }
        }
        let kind = structure(trimmed);
        drop(text);
        self.line.clear();
        if kind == Structure::Fence {
            self.in_code = !self.in_code;
        }
        if kind != Structure::Plain && h != self.prev_line {
            self.reset_windows();
        }
        self.prev_line = h;
        found
    }
}

/// A fast 64-bit hash of a line, eight bytes at a time (lines only need
/// telling apart within one response; the hash never leaves the scanner).
fn line_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(K).rotate_left(29);
    }
    let rest = words.remainder();
    let mut word = [0u8; 8];
    word[..rest.len()].copy_from_slice(rest);
    h = (h ^ u64::from_le_bytes(word)).wrapping_mul(K);
    h ^= h >> 32;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 29)
}

/// Markdown structure of a (trimmed) line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Structure {
    Plain,
    Fence,
    Other,
}

fn structure(line: &str) -> Structure {
    if line.starts_with("```") || line.starts_with("~~~") {
        return Structure::Fence;
    }
    let list_item = ["- ", "* ", "+ ", "• "].iter().any(|b| line.starts_with(b)) || {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && (line[digits..].starts_with(". ") || line[digits..].starts_with(") "))
    };
    let heading = {
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        (1..=6).contains(&hashes) && line[hashes..].starts_with(' ')
    };
    let divider = line
        .chars()
        .all(|c| matches!(c, '-' | '=' | '*' | '_' | '~' | ' ' | '─' | '━' | '═'))
        && line.chars().count() >= 3;
    if line.starts_with('|') || list_item || heading || line.starts_with('>') || divider {
        Structure::Other
    } else {
        Structure::Plain
    }
}
