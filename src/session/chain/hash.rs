//! Chain hashes: hash `i` of a history covers its scope and items `0..=i`,
//! so equal hashes at `i` mean equal prefixes; and the pieces a history is
//! parsed in.

use serde_json::value::RawValue;
use xxhash_rust::xxh3::{xxh3_128, xxh3_128_with_seed};

/// What stands for a conversation in [`super::frequency::Frequency`]: its hash after the
/// first two items (the system prompt and the first request, or the first
/// two turns), which every later request of it repeats.
pub(super) fn conversation(hashes: &[u128]) -> Option<u128> {
    hashes.get(1).or(hashes.first()).copied()
}

/// The chain hashes of `items` from `start`: hash `i` is the xxh3-128 of hash
/// `i - 1` (or `start`) and item `i`'s own hash (seeded by `seed`).
pub fn chain_hashes(seed: u64, start: u128, items: &[&RawValue]) -> Vec<u128> {
    let mut previous = start;
    items
        .iter()
        .map(|item| {
            let own = xxh3_128_with_seed(item.get().as_bytes(), seed);
            let mut pair = [0_u8; 32];
            pair[..16].copy_from_slice(&previous.to_le_bytes());
            pair[16..].copy_from_slice(&own.to_le_bytes());
            previous = xxh3_128(&pair);
            previous
        })
        .collect()
}

/// Bytes of raw history items parsed at a time: the parse trees of one
/// piece are all that is held besides the items parsed so far.
pub const CHUNK_BYTES: usize = 256 << 10;

/// The end of the piece of `items` starting at `at`: at least one item,
/// at most [`CHUNK_BYTES`] of them unless one item alone is larger.
pub(super) fn chunk_end(items: &[&RawValue], at: usize) -> usize {
    let mut bytes = 0;
    let mut end = at;
    while let Some(raw) = items.get(end) {
        if end > at && bytes + raw.get().len() > CHUNK_BYTES {
            break;
        }
        bytes += raw.get().len();
        end += 1;
    }
    end
}

/// How many leading hashes two chains share. Chain hashes that are equal at
/// `i` are equal before `i`, so a binary search finds it.
pub fn common_prefix(a: &[u128], b: &[u128]) -> usize {
    // a[..low] == b[..low]; the answer is in low..=high.
    let (mut low, mut high) = (0, a.len().min(b.len()));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if a[mid - 1] == b[mid - 1] {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}
