//! The window machinery of `content_chanting`: a Rabin–Karp rolling hash
//! over the last `chunk_size` bytes, winnowing (Schleimer et al. 2003) and
//! the index of selected windows that tells a recurring window.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::detect::settings::ChantingParams;

/// Windows per winnowing selection.
const WINNOW: u64 = 16;
/// The rolling hash's base.
const BASE: u64 = 0x100_0000_01b3;
/// Fewest distinct bytes of a window that is hashed.
const MIN_DISTINCT: u16 = 8;

/// Keys are already hashes: use them as they are.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Prehashed(u64);

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

pub(super) type Map<V> = HashMap<u64, V, BuildHasherDefault<Prehashed>>;

/// The rolling window: the last `chunk_size` bytes outside code, their
/// Rabin–Karp hash and how many distinct bytes they hold.
#[derive(Debug)]
pub(super) struct Window {
    /// Power-of-two ring of recent bytes (at least the window length).
    pub(super) ring: Vec<u8>,
    /// Bytes written to `ring` (wrapping).
    pub(super) written: usize,
    /// Window length (`chunk_size`, at least 1).
    len: usize,
    /// Bytes in the window so far (up to `len`).
    pub(super) filled: usize,
    hash: u64,
    /// `BASE^chunk_size`, to drop the outgoing byte.
    pow: u64,
    counts: [u16; 256],
    distinct: u16,
}

impl Window {
    pub(super) fn new(chunk_size: usize) -> Self {
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

    pub(super) fn reset(&mut self) {
        self.filled = 0;
        self.hash = 0;
        self.counts = [0; 256];
        self.distinct = 0;
    }

    /// Adds a byte; once the window is full, returns its hash (`u64::MAX`
    /// when it holds fewer than [`MIN_DISTINCT`] distinct bytes).
    #[inline]
    pub(super) fn push(&mut self, b: u8) -> Option<u64> {
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
    pub(super) fn sample(&self) -> String {
        let mask = self.ring.len() - 1;
        let start = self.written.wrapping_sub(self.len);
        let window: Vec<u8> = (0..self.len)
            .map(|i| self.ring[start.wrapping_add(i) & mask])
            .collect();
        super::quote(&String::from_utf8_lossy(&window))
    }
}

/// Winnowing: the minimum hash among the last [`WINNOW`] windows (the
/// rightmost on ties), reporting each newly selected window once.
#[derive(Debug)]
pub(super) struct Winnow {
    /// The last `WINNOW` windows pushed, as (position, hash), by push count.
    recent: [(u64, u64); WINNOW as usize],
    pushed: usize,
    /// The current minimum (position, hash); hash `u64::MAX` when none.
    min: (u64, u64),
    selected: u64,
}

impl Winnow {
    pub(super) fn new() -> Self {
        Self {
            recent: [(0, 0); WINNOW as usize],
            pushed: 0,
            min: (0, u64::MAX),
            selected: u64::MAX,
        }
    }

    pub(super) fn reset(&mut self) {
        self.pushed = 0;
        self.min = (0, u64::MAX);
        self.selected = u64::MAX;
    }

    /// Adds the window ending at `pos`; returns the selection when it changed.
    #[inline]
    pub(super) fn push(&mut self, pos: u64, h: u64) -> Option<(u64, u64)> {
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
pub(super) struct Index {
    /// Selections in position order; `order[i]` has sequence number `evicted + i`.
    order: VecDeque<Selection>,
    evicted: u64,
    /// hash → (count, sequence number of the first, of the last) within the buffer.
    occ: Map<(usize, u64, u64)>,
}

impl Index {
    /// Heap bytes held (estimate).
    pub(super) fn heap_size(&self) -> usize {
        self.order.capacity() * std::mem::size_of::<Selection>() + self.occ.capacity() * 40
    }

    pub(super) fn reset(&mut self) {
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
    pub(super) fn register(&mut self, pos: u64, h: u64, p: &ChantingParams) -> Option<usize> {
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
