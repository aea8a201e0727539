//! One channel of `content_chanting`: its window, line table and markdown
//! structure (where tracking resets).

use super::low_entropy::LowEntropy;
use super::window::{Index, Map, Window, Winnow};
use crate::detect::settings::ChantingParams;

/// Longest line kept, bytes.
const LINE_CAP: usize = 4096;
/// Most distinct lines counted.
const MAX_LINES: usize = 4096;

/// Per-channel state.
#[derive(Debug)]
pub(super) struct Track {
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
    pub(super) fn new(p: &ChantingParams) -> Self {
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

    pub(super) fn heap_size(&self) -> usize {
        self.window.ring.capacity()
            + self.index.heap_size()
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
    pub(super) fn push(&mut self, text: &str, p: &ChantingParams) -> Option<(usize, String)> {
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
            } else if self.low.running() {
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
                    found = Some((*n, super::quote(trimmed)));
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
