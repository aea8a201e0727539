//! Low-entropy chanting of `content_chanting`: a short unit repeated back to
//! back where windows have too few distinct bytes to be hashed.

use super::window::Window;

/// Low-entropy chanting (issue #12 point 6): a short unit repeated back to
/// back where the window has too few distinct bytes for window hashing.
/// Tracks the current period (1..=[`MAX_UNIT`]) and how many bytes in a row
/// equal the byte one period earlier; runs only on low-entropy bytes, so
/// prose pays nothing.
#[derive(Debug, Default)]
pub(super) struct LowEntropy {
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
    /// A run of repeats is under way.
    pub(super) fn running(&self) -> bool {
        self.run > 0
    }

    pub(super) fn reset(&mut self) {
        *self = Self::default();
    }

    /// Feeds the byte just pushed into `w`; returns (repeats, unit) on detection.
    pub(super) fn push(&mut self, w: &Window, repeats: usize) -> Option<(usize, String)> {
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
        Some((self.run / p + 1, super::quote(&String::from_utf8_lossy(&unit))))
    }
}
