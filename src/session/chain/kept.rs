//! One kept history: its chain hashes, parsed items and assembled turns,
//! and the byte prefix of the body it came from.

use std::sync::Arc;
use std::time::Instant;

use crate::dialect::HistoryItem;
use crate::dialect::split::push_turns;
use crate::session::size::parsed_size;
use crate::transcript::{Lineage, Message};

/// One history's items: their chain hashes and parses, and the turns they
/// assemble into.
#[derive(Debug, Default)]
pub(super) struct Chain {
    /// `hashes[i]` covers the scope and items `0..=i`. While the chain is
    /// out with a request ([`Chain::out`]) its slot keeps the first
    /// [`Out::len`] of them (still indexed) and the chain only those its
    /// request adds: taking a long history out copies none of its hashes.
    pub(super) hashes: Vec<u128>,
    /// `weights[i]`: the weight of items `0..=i` (see [`super::ITEM_OVERHEAD`]).
    pub(super) weights: Vec<usize>,
    pub(super) items: Vec<HistoryItem>,
    /// The turns of `items[..built]`, assembled: a request that repeats or
    /// extends the chain shares them (an `Arc` clone) instead of copying
    /// every reused item's turns again, which was a third of the CPU of a
    /// 500 KB history's request (issue #14). While no request holds them
    /// any more, the next one extends them in place.
    pub(super) turns: Arc<Vec<Message>>,
    /// The stamp of `turns` (see [`Lineage`]): given when they are first
    /// handed to a request, kept while they only grow. A prefix copied
    /// from another chain assembles turns of its own, so it starts without.
    pub(super) lineage: Lineage,
    /// How many of `items` have their turns in `turns` (a prefix copied
    /// from another chain has none until [`Chain::build_turns`]).
    pub(super) built: usize,
    /// Heap bytes of `turns`, estimated as their items' parsed size: kept
    /// chains count them in the store's budget.
    pub(super) turns_bytes: usize,
    pub(super) last_used: Option<Instant>,
    /// The slot it was taken from by the request now extending it
    /// ([`super::index::Inner::take`]): put back there, without the
    /// admission test.
    pub(super) out: Option<Out>,
    /// Where the body of the request that left it here ended its history,
    /// for the next request that repeats those bytes ([`super::ChainStore::resume`]).
    pub(super) bytes: Option<BytePrefix>,
    /// That body's fields after its history, when its split was resumed:
    /// the next resumed body whose bytes after its history are the same
    /// takes them unread.
    pub(super) after: Option<Arc<crate::dialect::split::AfterHistory>>,
}

/// What a chain out with a request knows of the hashes its slot kept
/// ([`Chain::hashes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Out {
    /// The slot's id.
    pub(super) id: u64,
    /// How many hashes the slot kept (as many as the chain's items then).
    pub(super) len: usize,
    /// The last of them: the next item's hash is chained from it.
    pub(super) last: Option<u128>,
}

/// The bytes of a kept chain's last body up to its last history item, by
/// digest (seeded, and with the chain's scope and dialect): a request whose
/// body starts with the same bytes continues that history, and its split
/// starts after them (issue #14: the scan of a reused 2 MB history was a
/// third of its request's CPU; a digest of it is a tenth of that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BytePrefix {
    /// Bytes, up to just past the last history item.
    pub(super) len: usize,
    /// The digest of the first `len` bytes rounded down to the store's step
    /// (4 KiB): the store's index key, which a request computes for each of
    /// its own step multiples in one pass.
    pub(super) group: u128,
    /// The digest of the rest, up to `len` (under a step): a candidate is
    /// told from the others sharing its group at the cost of that much.
    pub(super) tail: u128,
}

impl Chain {
    /// The hash of the chain's last item: the next one's is chained from it.
    pub(super) fn last_hash(&self) -> Option<u128> {
        self.hashes.last().copied().or(self.out.and_then(|out| out.last))
    }

    /// What a request given these items holds (see [`super::ITEM_OVERHEAD`]).
    pub(super) fn weight(&self) -> usize {
        self.weights.last().copied().unwrap_or(0)
    }

    /// What the chain weighs in the store: its items and its turns.
    pub(super) fn kept_weight(&self) -> usize {
        self.weight() + self.turns_bytes + self.after.as_ref().map_or(0, |a| a.weight())
    }

    /// What building the turns of the items that have none adds, bytes.
    pub(super) fn unbuilt_bytes(&self) -> usize {
        self.items
            .get(self.built..)
            .unwrap_or_default()
            .iter()
            .map(parsed_size)
            .sum()
    }

    /// A copy of the first `len` items (their hashes, weights and parses);
    /// their turns are built outside the store's lock, by the request.
    pub(super) fn prefix(&self, len: usize) -> Self {
        let len = len.min(self.items.len());
        Self {
            hashes: self.hashes[..len.min(self.hashes.len())].to_vec(),
            weights: self.weights[..len.min(self.weights.len())].to_vec(),
            items: self.items[..len].to_vec(),
            ..Self::default()
        }
    }

    /// Assembles the turns of the items that have none yet, from copies of
    /// them (the turns are copied first when a request still holds them);
    /// `bytes` is what they add ([`Chain::unbuilt_bytes`], measured once).
    pub(super) fn build_turns(&mut self, bytes: usize) {
        let Some(unbuilt) = self.items.get(self.built..).filter(|rest| !rest.is_empty()) else {
            return;
        };
        let turns = Arc::make_mut(&mut self.turns);
        self.turns_bytes += bytes;
        for item in unbuilt {
            push_turns(turns, item.clone());
        }
        self.built = self.items.len();
    }
}
