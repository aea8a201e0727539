//! Values computed from long texts, computed once per text: a system
//! prompt or a tool list is tens of KB that every request of a
//! conversation (and every conversation of an agent) carries again.
//! [`hash64_parts`] reads it a byte at a time (about four instructions a
//! byte), a summarizer pattern search goes over all of it: each value is
//! kept under an xxh3-128 of the same bytes and of what else the value
//! depends on, seeded per process, which reads them some thirty times
//! faster. The values are those computed directly, so nothing stored
//! changes.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{LazyLock, Mutex, PoisonError};

use xxhash_rust::xxh3::Xxh3;

use super::outcome::hash64_parts;

/// Parts shorter than this, all together, are hashed directly: the memo's
/// lock and lookup cost more than the bytes.
const DIRECT_BYTES: usize = 1024;

/// Texts the memo holds at most.
const ENTRIES: usize = 4096;

/// Values by a 128-bit id of what they were computed from, at most
/// `entries` of them: a full memo is emptied and refills (what it holds is
/// cheap to compute again, and nothing is scanned to pick a victim). The
/// ids are the caller's: keyed or seeded per process, so that no input can
/// be made to take another's id.
pub(crate) struct Memo<V> {
    entries: usize,
    values: Mutex<HashMap<u128, V>>,
}

impl<V: Clone> Memo<V> {
    /// An empty memo holding at most `entries` values.
    pub(crate) fn new(entries: usize) -> Self {
        Self {
            entries,
            values: Mutex::new(HashMap::new()),
        }
    }

    /// The value kept for `id`.
    pub(crate) fn get(&self, id: u128) -> Option<V> {
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    /// Keeps `value` for `id`.
    pub(crate) fn put(&self, id: u128, value: V) {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        if values.len() >= self.entries {
            values.clear();
        }
        values.insert(id, value);
    }
}

/// The memo of long texts' values, and the seed of their ids.
static TEXTS: LazyLock<(u64, Memo<u64>)> =
    LazyLock::new(|| (std::hash::RandomState::new().hash_one(0_u64), Memo::new(ENTRIES)));

/// What a memoised value is of (part of its key).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// [`hash64_parts`] of the text.
    Hash64,
    /// Whether the text matches one of the summarizer patterns
    /// fingerprinted by this number.
    Summarizer(u64),
}

/// Whether `parts` are long enough for [`memoised`] to keep their value
/// (shorter ones are computed directly: the memo costs more).
pub(crate) fn kept(parts: &[&[u8]]) -> bool {
    parts.iter().map(|p| p.len()).sum::<usize>() >= DIRECT_BYTES
}

/// [`hash64_parts`] of `parts`, from the memo when the text was hashed
/// before. (Two texts whose xxh3-128 collide would share a value; with a
/// secret seed that is no easier to arrange than a collision of the 64-bit
/// FNV value itself.)
pub(crate) fn hash64_parts_memo(parts: &[&[u8]]) -> u64 {
    memoised(Kind::Hash64, parts, || hash64_parts(parts))
}

/// `compute()`, a value of `kind` of the text `parts` make, from the memo
/// when it was computed before. Short texts are computed directly.
pub(crate) fn memoised(kind: Kind, parts: &[&[u8]], compute: impl FnOnce() -> u64) -> u64 {
    if !kept(parts) {
        return compute();
    }
    let (seed, memo) = &*TEXTS;
    let mut id = Xxh3::with_seed(*seed);
    match kind {
        Kind::Hash64 => id.update(&[0]),
        Kind::Summarizer(patterns) => {
            id.update(&[1]);
            id.update(&patterns.to_le_bytes());
        }
    }
    for p in parts {
        id.update(p);
    }
    let id = id.digest128();
    if let Some(value) = memo.get(id) {
        return value;
    }
    let value = compute();
    memo.put(id, value);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of another kind of the same text is another entry.
    #[test]
    fn kinds_are_kept_apart() {
        let long = "summarize ".repeat(200);
        let parts = [long.as_bytes()];
        assert_eq!(memoised(Kind::Summarizer(1), &parts, || 7), 7);
        assert_eq!(memoised(Kind::Summarizer(1), &parts, || 8), 7, "a hit");
        assert_eq!(memoised(Kind::Summarizer(2), &parts, || 8), 8);
        assert_eq!(hash64_parts_memo(&parts), hash64_parts(&parts));
    }

    /// The memo gives what the direct hash gives, short or long, on a miss
    /// and on a hit, however the text is cut into parts.
    #[test]
    fn the_memo_gives_the_direct_value() {
        let long = "tool schema ".repeat(400);
        for text in ["", "short", long.as_str(), &long[1..]] {
            let bytes = text.as_bytes();
            let direct = hash64_parts(&[bytes]);
            assert_eq!(hash64_parts_memo(&[bytes]), direct, "a miss");
            assert_eq!(hash64_parts_memo(&[bytes]), direct, "a hit");
            let (a, b) = bytes.split_at(bytes.len() / 3);
            assert_eq!(hash64_parts_memo(&[a, b]), direct, "in parts");
        }
    }
}
