//! How often each conversation was seen lately, estimated in a fixed 4 KiB
//! (a count-min sketch of 4-bit-capped counters, halved every
//! [`Frequency::PERIOD_PER_SLOT`] × slots sightings): the admission test of
//! the parse cache ([`super::chain`]), after TinyLFU (Einziger, Friedman and
//! Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017; the
//! policy of Caffeine and moka).
//!
//! A cache that admits every new entry by evicting the least recently used
//! keeps nothing when more conversations take turns than it holds: each is
//! evicted before its next request, so every request is parsed in full. With
//! the admission test, a new conversation's history is kept only when it
//! was seen more often than the histories it would evict; the ones kept
//! stay, and are reused.

/// Counters per row (a power of two).
const WIDTH: usize = 1024;
/// Rows, each indexed by a different 16 bits of the (uniform) key.
const ROWS: usize = 4;
/// A counter's ceiling: a conversation seen more often counts the same.
const CAP: u8 = 15;

/// The sketch (see the module docs).
#[derive(Debug, Clone)]
pub struct Frequency {
    rows: Box<[[u8; WIDTH]; ROWS]>,
    seen: usize,
    period: usize,
}

impl Frequency {
    /// Sightings per cache slot between two halvings.
    pub const PERIOD_PER_SLOT: usize = 10;

    /// A sketch for a cache of `slots` entries: every counter is halved
    /// after `10 × slots` sightings, so what was frequent long ago fades.
    pub fn new(slots: usize) -> Self {
        Self {
            rows: Box::new([[0; WIDTH]; ROWS]),
            seen: 0,
            period: slots.max(1).saturating_mul(Self::PERIOD_PER_SLOT),
        }
    }

    /// Notes one sighting of `key` (a hash: its bits are uniform). Only the
    /// smallest of its counters grow (conservative update).
    pub fn note(&mut self, key: u128) {
        let least = self.estimate(key);
        if least < CAP {
            for (row, slot) in self.rows.iter_mut().zip(slots(key)) {
                if row[slot] == least {
                    row[slot] += 1;
                }
            }
        }
        self.seen += 1;
        if self.seen >= self.period {
            self.seen = 0;
            for counter in self.rows.iter_mut().flatten() {
                *counter /= 2;
            }
        }
    }

    /// How often `key` was seen lately (at most 15; never less than the
    /// truth since the last halving, sometimes more).
    pub fn estimate(&self, key: u128) -> u8 {
        self.rows
            .iter()
            .zip(slots(key))
            .map(|(row, slot)| row[slot])
            .min()
            .unwrap_or(0)
    }
}

/// `key`'s counter in each row.
fn slots(key: u128) -> impl Iterator<Item = usize> {
    (0..ROWS).map(move |row| (key >> (16 * row)) as usize % WIDTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sightings_up_to_the_cap() {
        let mut f = Frequency::new(1_000);
        let (a, b) = (0x1234_5678_9abc_def0_u128, 0x0fed_cba9_8765_4321_u128);
        for _ in 0..3 {
            f.note(a);
        }
        f.note(b);
        assert_eq!(f.estimate(a), 3);
        assert_eq!(f.estimate(b), 1);
        assert_eq!(f.estimate(42), 0);
        for _ in 0..100 {
            f.note(a);
        }
        assert_eq!(f.estimate(a), CAP);
    }

    #[test]
    fn old_sightings_fade() {
        let mut f = Frequency::new(1);
        let a = 0xdead_beef_u128 << 64 | 0x1357;
        for _ in 0..8 {
            f.note(a);
        }
        // 10 sightings per slot, one slot: the 10th halves every counter.
        assert_eq!(f.estimate(a), 8);
        f.note(7);
        f.note(9);
        assert_eq!(f.estimate(a), 4);
    }
}
