//! `content_chanting`: repetitive generated text within one response (stream time).
//!
//! Idea: Gemini CLI's content-loop check. A 50-byte window (`chunk_size`)
//! that recurs ≥ 10 times (`min_repeats`) in the tracked text with a mean gap
//! ≤ 250 bytes (`max_mean_gap`) and ≤ 5 distinct gaps (`max_periods`) is
//! chanting; so is the same normalised line (trimmed, at least 6 letters or
//! digits) `max_line_repeats` (30) times in one response, in any context,
//! code included. Default level: critical, action `block`.
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
//! drawing, rules, runs of one character) are ignored. Lengths are bytes of
//! UTF-8, not characters. Answer text, reasoning text and each tool call's
//! argument text are separate channels.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::outcome::hash64;
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
        if let Some((count, sample)) = track.push(text.as_bytes(), &self.params) {
            let finding = Finding {
                detector: DetectorKind::ContentChanting,
                level: Level::Critical,
                count: u32::try_from(count).unwrap_or(u32::MAX),
                tool: None,
                arguments: None,
                detail: format!("the response repeats the same text {count} times (\"{sample}\")"),
                advice: ADVICE,
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

/// Per-channel state.
#[derive(Debug)]
struct Track {
    ring: Vec<u8>,
    slot: usize,
    filled: usize,
    hash: u64,
    pow: u64,
    counts: [u16; 256],
    distinct: u16,
    pos: u64,
    mins: VecDeque<(u64, u64)>,
    selected: u64,
    /// hash → (count, first position, last position) within the buffer.
    occ: Map<(usize, u64, u64)>,
    /// Selected windows in position order: (position, hash, next position of the same hash or 0).
    order: VecDeque<(u64, u64, u64)>,
    line: Vec<u8>,
    line_alnum: usize,
    prev_line: u64,
    in_code: bool,
    lines: Map<usize>,
}

impl Track {
    fn new(p: &ChantingParams) -> Self {
        let mut pow: u64 = 1;
        for _ in 0..p.chunk_size {
            pow = pow.wrapping_mul(BASE);
        }
        Self {
            ring: vec![0; p.chunk_size.max(1)],
            slot: 0,
            filled: 0,
            hash: 0,
            pow,
            counts: [0; 256],
            distinct: 0,
            pos: 0,
            mins: VecDeque::new(),
            selected: u64::MAX,
            occ: Map::default(),
            order: VecDeque::new(),
            line: Vec::new(),
            line_alnum: 0,
            prev_line: 0,
            in_code: false,
            lines: Map::default(),
        }
    }

    fn heap_size(&self) -> usize {
        self.ring.capacity()
            + self.mins.capacity() * 16
            + self.order.capacity() * 16
            + self.order.capacity() * 8
            + self.occ.capacity() * 40
            + self.line.capacity()
            + self.lines.capacity() * 24
    }

    /// Clears window tracking (not the line table).
    fn reset_windows(&mut self) {
        self.filled = 0;
        self.hash = 0;
        self.counts = [0; 256];
        self.distinct = 0;
        self.mins.clear();
        self.selected = u64::MAX;
        self.occ.clear();
        self.order.clear();
    }

    /// Feeds bytes; returns (count, sample) on detection.
    fn push(&mut self, bytes: &[u8], p: &ChantingParams) -> Option<(usize, String)> {
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, newline) = match chunk.split_last() {
                Some((b'\n', body)) => (body, true),
                _ => (chunk, false),
            };
            if self.line.len() < LINE_CAP {
                let take = body.len().min(LINE_CAP - self.line.len());
                self.line.extend_from_slice(&body[..take]);
            }
            self.line_alnum += body.iter().filter(|b| b.is_ascii_alphanumeric()).count();
            if !self.in_code {
                for &b in chunk {
                    if let Some(found) = self.window_byte(b, p) {
                        return Some(found);
                    }
                }
            } else {
                self.pos += chunk.len() as u64;
            }
            if newline {
                if let Some(found) = self.end_line(p) {
                    return Some(found);
                }
            }
        }
        None
    }

    #[inline]
    fn window_byte(&mut self, b: u8, p: &ChantingParams) -> Option<(usize, String)> {
        let n = self.ring.len();
        let out = self.ring[self.slot];
        self.ring[self.slot] = b;
        self.slot += 1;
        if self.slot == n {
            self.slot = 0;
        }
        self.pos += 1;
        self.hash = self.hash.wrapping_mul(BASE).wrapping_add(u64::from(b));
        if self.filled == n {
            self.hash = self.hash.wrapping_sub(u64::from(out).wrapping_mul(self.pow));
            let c = &mut self.counts[usize::from(out)];
            *c -= 1;
            if *c == 0 {
                self.distinct -= 1;
            }
        } else {
            self.filled += 1;
        }
        let c = &mut self.counts[usize::from(b)];
        *c += 1;
        if *c == 1 {
            self.distinct += 1;
        }
        if self.filled < n {
            return None;
        }
        let h = if self.distinct >= MIN_DISTINCT {
            self.hash
        } else {
            u64::MAX
        };
        while self.mins.back().is_some_and(|(_, bh)| *bh >= h) {
            self.mins.pop_back();
        }
        self.mins.push_back((self.pos, h));
        while self.mins.front().is_some_and(|(fp, _)| fp + WINNOW <= self.pos) {
            self.mins.pop_front();
        }
        let (sel_pos, sel_hash) = *self.mins.front()?;
        if sel_pos == self.selected || sel_hash == u64::MAX {
            return None;
        }
        self.selected = sel_pos;
        self.register(sel_pos, sel_hash, p)
    }

    fn index_of(&self, pos: u64) -> Option<usize> {
        self.order.binary_search_by_key(&pos, |e| e.0).ok()
    }

    fn register(&mut self, pos: u64, h: u64, p: &ChantingParams) -> Option<(usize, String)> {
        let horizon = pos.saturating_sub(p.buffer_chars as u64);
        while let Some(&(old_pos, old_h, next)) = self.order.front() {
            if old_pos >= horizon {
                break;
            }
            self.order.pop_front();
            if let Some(entry) = self.occ.get_mut(&old_h) {
                entry.0 -= 1;
                entry.1 = next;
                if entry.0 == 0 {
                    self.occ.remove(&old_h);
                }
            }
        }
        let previous = self.occ.get(&h).map(|e| e.2);
        if let Some(i) = previous.and_then(|last| self.index_of(last)) {
            self.order[i].2 = pos;
        }
        self.order.push_back((pos, h, 0));
        let entry = self.occ.entry(h).or_insert((0, pos, pos));
        entry.0 += 1;
        entry.2 = pos;
        let (count, first, last) = *entry;
        if count < p.min_repeats.max(2) || (last - first) / (count as u64 - 1) > p.max_mean_gap as u64 {
            return None;
        }
        let mut gaps = Vec::with_capacity(count);
        let mut at = first;
        while let Some(i) = self.index_of(at) {
            let next = self.order[i].2;
            if next == 0 {
                break;
            }
            gaps.push(next - at);
            at = next;
        }
        gaps.sort_unstable();
        gaps.dedup();
        if gaps.len() > p.max_periods {
            return None;
        }
        let start = self.slot;
        let window: Vec<u8> = self.ring[start..]
            .iter()
            .chain(&self.ring[..start])
            .copied()
            .collect();
        Some((count, truncate(&String::from_utf8_lossy(&window), 50)))
    }

    fn end_line(&mut self, p: &ChantingParams) -> Option<(usize, String)> {
        let line = std::mem::take(&mut self.line);
        let alnum = std::mem::replace(&mut self.line_alnum, 0);
        let text = String::from_utf8_lossy(&line);
        let trimmed = text.trim();
        let h = hash64(trimmed.as_bytes());
        let mut found = None;
        if p.max_line_repeats > 0 && alnum >= 6 {
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
        if kind == Structure::Fence {
            self.in_code = !self.in_code;
        }
        if kind != Structure::Plain && h != self.prev_line {
            self.reset_windows();
        }
        self.prev_line = h;
        self.line = line;
        self.line.clear();
        found
    }
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
    let divider = line.chars().count() >= 3
        && line
            .chars()
            .all(|c| matches!(c, '-' | '=' | '*' | '_' | '~' | ' ' | '─' | '━' | '═'));
    if line.starts_with('|') || list_item || heading || line.starts_with('>') || divider {
        Structure::Other
    } else {
        Structure::Plain
    }
}
