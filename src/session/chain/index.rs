//! The chain store's kept chains and their indexes: by id, by recency, by
//! last hash, by every hash and by byte prefix, so that finding a request's
//! longest kept prefix is a few probes and a binary search.

use std::collections::{BTreeMap, HashMap, hash_map};
use std::time::Instant;

use super::conversation;
use super::kept::{Chain, Out};
use crate::session::frequency::Frequency;

/// A hash map keyed by chain hashes (xxh3 outputs, already uniform: a fast
/// hash of them is enough).
pub(super) type ByHash<V> = HashMap<u128, V, foldhash::fast::FixedState>;

/// The kept chains and their indexes. Every lookup is a few hash-map probes
/// and a binary search, never a walk over the chains (issue #14: at a
/// gateway of 1,024 conversations sharing one system prompt, comparing a new
/// conversation with every kept chain was a tenth of the proxy's CPU).
///
/// A chain keeps its id, and its hashes stay indexed, while the request
/// that repeats or extends it has it out ([`Inner::take`]): putting it back
/// indexes only the hashes that request added ([`Inner::restore`]). Taking a
/// 500 KB history out and putting it back used to remove and re-add each of
/// its hashes, a tenth of such a request's CPU (issue #14).
#[derive(Debug)]
pub(super) struct Inner {
    /// By id: the kept chains, and the hashes of those out with a request.
    pub(super) chains: ById<Slot>,
    /// Ids by recency (a tick from [`Inner::next`]): the first is the least
    /// recently used.
    pub(super) order: BTreeMap<u64, u64>,
    /// The next id or tick: both only grow.
    pub(super) next: u64,
    /// Sum of the kept chains' weights (items and turns); a chain out with
    /// a request weighs nothing here until it is back.
    pub(super) bytes: usize,
    /// Chains out with a request.
    pub(super) out: usize,
    /// The newest chain ending with each hash (its last one): a request
    /// that repeats or extends a kept chain finds it here.
    pub(super) ends: ByHash<u64>,
    /// Every hash of every chain in [`Inner::chains`]: how many chains hold
    /// it, and the one that indexed it last. A prefix of a kept chain is
    /// found by a binary search of the request's hashes here (hash `i`
    /// covers items `0..=i`, so a hash held means every earlier one is held
    /// too).
    pub(super) prefixes: ByHash<Holders>,
    /// How often each conversation was seen lately (the admission test).
    pub(super) frequency: Frequency,
    /// The chains with a byte prefix, by its group digest (newest last).
    pub(super) by_bytes: ByHash<Vec<u64>>,
}

/// A hash map keyed by chain ids (small counters: a fast hash is enough).
pub(super) type ById<V> = HashMap<u64, V, foldhash::fast::FixedState>;

/// One chain of [`Inner::chains`].
#[derive(Debug)]
pub(super) struct Slot {
    /// Its place in [`Inner::order`].
    pub(super) tick: u64,
    /// The chain; while it is out, only its hashes (still indexed).
    pub(super) chain: Chain,
    /// Out with the request that repeats or extends it.
    pub(super) out: bool,
}

/// Who holds one hash (see [`Inner::prefixes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holders {
    pub(super) count: u32,
    /// The chain that indexed the hash last; `None` once that chain left
    /// the store while others still hold it (they are then found by a
    /// walk, see [`Inner::holder`]).
    pub(super) last: Option<u64>,
}

impl Inner {
    pub(super) fn new(max_chains: usize) -> Self {
        Self {
            chains: ById::default(),
            order: BTreeMap::new(),
            next: 0,
            bytes: 0,
            out: 0,
            ends: ByHash::default(),
            prefixes: ByHash::default(),
            frequency: Frequency::new(max_chains),
            by_bytes: ByHash::default(),
        }
    }

    /// The next id or tick.
    fn next(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// How many chains are kept (not out with a request).
    pub(super) fn kept(&self) -> usize {
        self.chains.len() - self.out
    }

    /// Takes kept chain `id` out for a request that repeats or extends it:
    /// its hashes stay in its slot, indexed (the chain carries only those
    /// its request adds, see [`Chain::out`]), and it becomes the most
    /// recently used. `None` when it is out already (another request of the
    /// same conversation, at the same time: that one is parsed without the
    /// chain, even when another kept chain shares a shorter prefix with it,
    /// since the index finds the longer one out). A chain never put back
    /// (its request panicked) leaves its hashes until its slot goes idle.
    pub(super) fn take(&mut self, id: u64) -> Option<Chain> {
        let tick = self.next();
        let slot = self.chains.get_mut(&id).filter(|slot| !slot.out)?;
        let hollow = Chain {
            // Out since now: idle only past the idle TTL from here.
            last_used: Some(Instant::now()),
            ..Chain::default()
        };
        let mut chain = std::mem::replace(&mut slot.chain, hollow);
        slot.chain.hashes = std::mem::take(&mut chain.hashes);
        let kept = &slot.chain.hashes;
        chain.out = Some(Out {
            id,
            len: kept.len(),
            last: kept.last().copied(),
        });
        slot.out = true;
        self.order.remove(&slot.tick);
        slot.tick = tick;
        self.order.insert(tick, id);
        self.out += 1;
        self.bytes -= chain.kept_weight();
        if let Some(prefix) = chain.bytes.take() {
            self.unindex_bytes(prefix.group, id);
        }
        Some(chain)
    }

    /// Puts `chain` back into the slot it was taken from: its slot's hashes
    /// and the ones its request added become its hashes again, and only the
    /// added ones are indexed. `false` when that slot went while the chain
    /// was out (see [`super::ChainStore::put_back`]): the chain, which
    /// carries only the added hashes, cannot be kept.
    pub(super) fn restore(&mut self, out: Out, mut chain: Chain) -> bool {
        let tick = self.next();
        let Some(slot) = self
            .chains
            .get_mut(&out.id)
            .filter(|slot| slot.out && slot.chain.hashes.len() == out.len)
        else {
            return false;
        };
        let id = out.id;
        let old_end = slot.chain.hashes.last().copied();
        let mut hashes = std::mem::take(&mut slot.chain.hashes);
        hashes.append(&mut chain.hashes);
        slot.chain = Chain {
            out: None,
            hashes,
            ..chain
        };
        slot.out = false;
        self.out -= 1;
        self.order.remove(&slot.tick);
        slot.tick = tick;
        self.order.insert(tick, id);
        let chain = &slot.chain;
        self.bytes += chain.kept_weight();
        if let Some(end) = old_end
            && chain.hashes.last() != Some(&end)
            && self.ends.get(&end) == Some(&id)
        {
            self.ends.remove(&end);
        }
        if let Some(end) = chain.hashes.last() {
            self.ends.insert(*end, id);
        }
        for hash in &chain.hashes[out.len..] {
            Self::index(&mut self.prefixes, *hash, id);
        }
        if let Some(prefix) = &chain.bytes {
            self.by_bytes.entry(prefix.group).or_default().push(id);
        }
        true
    }

    /// The conversation of chain `id` ([`conversation`]), from the hashes
    /// its slot keeps (whether it is kept or out).
    pub(super) fn conversation_of(&self, id: u64) -> Option<u128> {
        conversation(&self.chains.get(&id)?.chain.hashes)
    }

    /// Whether `chain`, new to the store, may push out the least recently
    /// used chains it needs the room of: when its conversation was seen
    /// more often lately than each of theirs (TinyLFU's test, see
    /// [`Frequency`]). No room needed: yes.
    pub(super) fn admits(&self, chain: &Chain, budget: usize, max_chains: usize) -> bool {
        let Some(candidate) = conversation(&chain.hashes).map(|c| self.frequency.estimate(c)) else {
            return true;
        };
        let mut bytes = self.bytes + chain.kept_weight();
        let mut count = self.kept() + 1;
        let victims = self
            .order
            .values()
            .filter_map(|id| self.chains.get(id))
            .filter(|slot| !slot.out);
        for victim in victims {
            if bytes <= budget && count <= max_chains {
                break;
            }
            let seen = conversation(&victim.chain.hashes).map_or(0, |c| self.frequency.estimate(c));
            if seen >= candidate {
                return false;
            }
            bytes -= victim.chain.kept_weight();
            count -= 1;
        }
        true
    }

    /// Counts `id` as a holder of `hash`, the last to index it.
    fn index(prefixes: &mut ByHash<Holders>, hash: u128, id: u64) {
        let holders = prefixes.entry(hash).or_insert(Holders { count: 0, last: None });
        holders.count += 1;
        holders.last = Some(id);
    }

    /// Keeps `chain`, new to the store, as the most recently used.
    pub(super) fn push(&mut self, mut chain: Chain) {
        let id = self.next();
        chain.out = None;
        if let Some(end) = chain.hashes.last() {
            self.ends.insert(*end, id);
        }
        for hash in &chain.hashes {
            Self::index(&mut self.prefixes, *hash, id);
        }
        if let Some(prefix) = &chain.bytes {
            self.by_bytes.entry(prefix.group).or_default().push(id);
        }
        self.bytes += chain.kept_weight();
        let tick = self.next();
        self.order.insert(tick, id);
        self.chains.insert(
            id,
            Slot {
                tick,
                chain,
                out: false,
            },
        );
    }

    fn unindex_bytes(&mut self, group: u128, id: u64) {
        if let hash_map::Entry::Occupied(mut entry) = self.by_bytes.entry(group) {
            entry.get_mut().retain(|&held| held != id);
            if entry.get().is_empty() {
                entry.remove();
            }
        }
    }

    /// Drops chain `id` (kept or out) and every index entry of it.
    pub(super) fn remove(&mut self, id: u64) -> Option<Chain> {
        let slot = self.chains.remove(&id)?;
        self.order.remove(&slot.tick);
        let chain = slot.chain;
        if slot.out {
            self.out -= 1;
        } else {
            self.bytes -= chain.kept_weight();
        }
        if let Some(prefix) = &chain.bytes {
            self.unindex_bytes(prefix.group, id);
        }
        if let Some(end) = chain.hashes.last()
            && self.ends.get(end) == Some(&id)
        {
            self.ends.remove(end);
        }
        for hash in &chain.hashes {
            if let hash_map::Entry::Occupied(mut entry) = self.prefixes.entry(*hash) {
                let holders = entry.get_mut();
                holders.count -= 1;
                if holders.count == 0 {
                    entry.remove();
                } else if holders.last == Some(id) {
                    holders.last = None;
                }
            }
        }
        Some(chain)
    }

    /// The least recently used chain's id.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.order.values().next().copied()
    }

    /// The kept chain `id`, unless it is out.
    pub(super) fn kept_chain(&self, id: u64) -> Option<&Chain> {
        self.chains
            .get(&id)
            .filter(|slot| !slot.out)
            .map(|slot| &slot.chain)
    }

    /// The most recently used chain that the request with `hashes` repeats
    /// or extends and that ends within its last [`END_WINDOW`] items.
    pub(super) fn ending_in(&self, hashes: &[u128]) -> Option<u64> {
        let lowest = hashes.len().saturating_sub(END_WINDOW);
        hashes[lowest..]
            .iter()
            .rev()
            .find_map(|end| self.ends.get(end).copied())
    }

    /// How many of `hashes` some chain shares (its longest common prefix
    /// with them).
    pub(super) fn longest_shared(&self, hashes: &[u128]) -> usize {
        // hashes[..low] are held; the answer is in low..=high.
        let (mut low, mut high) = (0, hashes.len());
        while low < high {
            let mid = low + (high - low).div_ceil(2);
            if self.prefixes.contains_key(&hashes[mid - 1]) {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        low
    }

    /// A kept chain (not out) holding `hash` as its hash `at`: the one that
    /// indexed it last, else the most recently used.
    pub(super) fn holder(&self, at: usize, hash: u128) -> Option<u64> {
        let last = self.prefixes.get(&hash)?.last;
        if let Some(id) = last.filter(|id| self.kept_chain(*id).is_some()) {
            return Some(id);
        }
        // That chain left (dropped, or out with its own conversation's
        // request): the most recent of the others, by a walk.
        self.order.values().rev().copied().find(|id| {
            self.kept_chain(*id)
                .is_some_and(|chain| chain.hashes.get(at) == Some(&hash))
        })
    }
}

/// How far back from a request's last item [`super::ChainStore`] looks for a kept
/// chain ending there (a turn adds a few items) before comparing the
/// request with every kept chain.
pub(super) const END_WINDOW: usize = 64;
