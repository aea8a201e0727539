//! Resuming a request after the bytes of a kept chain's last body: a body
//! that repeats them is split only after them
//! ([`crate::dialect::split::resume_with`]).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use xxhash_rust::xxh3::{Xxh3, xxh3_128_with_seed};

use super::kept::{BytePrefix, Chain};
use super::{ChainStore, chain_hashes};
use crate::dialect::Dialect;
use crate::dialect::split::SplitRequest;

/// Shortest body prefix, bytes, a request resumes after, and the step of
/// the prefix lengths kept chains are indexed by
/// ([`ChainStore::with_byte_prefix_from`]): a smaller body's scan is cheap.
pub const BYTE_PREFIX_FROM: usize = 4096;

/// Most candidate chains whose last bytes (under a step each) one request
/// compares with its own.
const BYTE_CANDIDATES: usize = 16;

impl ChainStore {
    /// The digests of `body`'s first `step`, `2 × step`, `3 × step`, …
    /// bytes (`step`: [`ChainStore::with_byte_prefix_from`]), shortest
    /// first; seeded and starting with the scope's chain start. One pass
    /// over the body, shared by the lookup ([`ChainStore::resume`]) and the
    /// record ([`ChainStore::byte_prefix`]). None for a body too small to
    /// resume, or too large for its history to be kept.
    pub(super) fn byte_groups(&self, start: u128, body: &[u8]) -> Vec<u128> {
        let step = self.byte_prefix_from;
        if body.len() < step || body.len() > self.budget / 2 {
            return Vec::new();
        }
        let mut hasher = Xxh3::with_seed(self.seed);
        hasher.update(&start.to_le_bytes());
        body.chunks_exact(step)
            .map(|chunk| {
                hasher.update(chunk);
                hasher.digest128()
            })
            .collect()
    }

    /// The byte prefix of `body` up to `len` (just past its last history
    /// item), from the body's `groups`; `None` when shorter than the
    /// store's step (or the body has no groups).
    pub(super) fn byte_prefix(&self, groups: &[u128], body: &[u8], len: usize) -> Option<BytePrefix> {
        let whole = len - len % self.byte_prefix_from;
        let group = *groups.get((whole / self.byte_prefix_from).checked_sub(1)?)?;
        Some(BytePrefix {
            len,
            group,
            tail: self.byte_tail(body, whole, len),
        })
    }

    /// The digest of `body[from..to]` (see [`BytePrefix::tail`]).
    fn byte_tail(&self, body: &[u8], from: usize, to: usize) -> u128 {
        xxh3_128_with_seed(body.get(from..to).unwrap_or_default(), self.seed)
    }

    /// A kept chain whose last body's bytes this one starts with, taken out
    /// of the store, this body split after them, and the chain hashes of
    /// the items after the chain's (the chain's own are not copied); `None` when there is
    /// none (or the body does not go on as a history would), and the request
    /// is split in full.
    pub(super) fn resume<'a>(
        &self,
        dialect: Dialect,
        groups: &[u128],
        body: &'a [u8],
    ) -> Option<(SplitRequest<'a>, Vec<u128>, Chain)> {
        // The chains sharing the longest step-aligned prefix with this body
        // first, the newest first within each length; each told by the
        // digest of its last bytes (under a step).
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (id, prefix) = groups
            .iter()
            .enumerate()
            .rev()
            .filter_map(|(k, group)| Some(((k + 1) * self.byte_prefix_from, inner.by_bytes.get(group)?)))
            .flat_map(|(whole, ids)| ids.iter().rev().map(move |id| (whole, *id)))
            .take(BYTE_CANDIDATES)
            .find_map(|(whole, id)| {
                let prefix = inner.kept_chain(id)?.bytes?;
                (prefix.len <= body.len() && self.byte_tail(body, whole, prefix.len) == prefix.tail)
                    .then_some((id, prefix))
            })?;
        let mut chain = inner.take(id)?;
        let conversation = inner.conversation_of(id);
        drop(inner);
        let from = crate::dialect::split::Resume {
            at: prefix.len,
            items: chain.items.len(),
            after: chain.after.clone(),
        };
        let resumed = dialect
            .resume_request(body, from)
            .ok()
            .filter(|split| split.items.len() >= chain.items.len());
        let (Some(split), Some(last)) = (resumed, chain.last_hash()) else {
            // Not a continuation: the chain goes back as it was, and the
            // request is split in full (and seen there).
            chain.bytes = Some(prefix);
            self.put_back(chain);
            return None;
        };
        if let Some(conversation) = conversation {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.frequency.note(conversation);
        }
        self.resumed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("loopguard_parse_resumed_total").increment(1);
        let hashes = chain_hashes(self.seed, last, &split.items[chain.items.len()..]);
        Some((split, hashes, chain))
    }
}
