//! Hash chains of conversation histories: a request's history is scanned and
//! hashed, and only the items after the longest prefix parsed before get a
//! full parse, so a request costs what is new in it (issue #4, Benchmarks).
//!
//! Agents resend their whole history on every request. For a dialect with a
//! split ([`Dialect::split_request`]), [`ChainStore::parse`] scans the body
//! once into raw items and hashes them into a chain (xxh3-128; hash `i`
//! covers the scope and items `0..=i`, so equal hashes at `i` mean equal
//! prefixes). The kept chain sharing the longest prefix with the request
//! lends the parses of that prefix; the rest is parsed and the chain, now
//! this request's, goes back to the store. Appending (the usual turn), a
//! retry of the same body, a truncated history (compaction, a rerun) and an
//! edited earlier message all reuse the prefix before the first difference.
//! Anything unusual — no split for the dialect, a body that does not split,
//! an item that does not parse — gets the dialect's full `parse_request`,
//! and both ways give the same [`ParsedRequest`] (see the tests).
//!
//! Chains are found by content, not by session key: the session key itself
//! is derived from the parsed history (DESIGN §5 fingerprint), so it is not
//! known yet. The hash is seeded per process and by a scope (the caller's
//! credential hash and the route), so tenants never share a chain.
//!
//! A request that repeats or extends a kept chain shares the chain's
//! assembled turns ([`crate::transcript::Transcript::messages`] is an
//! `Arc`): reusing a long history costs no copy of it.
//!
//! A body that repeats, byte for byte, the body a kept chain came from up to
//! its last history item is not even scanned there: the chain keeps a digest
//! of those bytes (`BytePrefix`), found through the digest of their first
//! 4 KiB multiple, and the request's split starts after them
//! ([`crate::dialect::split::resume_with`]). Anything else is split whole.
//!
//! Memory: one chain per active conversation, holding the parsed items of
//! its last request and their assembled turns (each about the size of its
//! history), so the store is bounded
//! as a whole: at most [`BUDGET_BYTES`] (each item weighs the larger of its
//! raw bytes and an estimate of its parsed size, plus [`ITEM_OVERHEAD`], plus
//! its turns' parsed size) and [`MAX_CHAINS`] chains; the least recently
//! used go first, and a chain idle for the sessions' idle TTL is dropped at
//! the next request. A new conversation's chain that needs room is kept only
//! when its conversation was seen more often lately than each chain it would
//! push out ([`super::frequency`], TinyLFU's admission test): when more
//! conversations take turns than the store holds, the ones kept stay and
//! are reused, instead of each pushing out the next one's. A history larger
//! than the budget is not kept (each of its requests gets the full parse).

use std::collections::{BTreeMap, HashMap, hash_map};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use serde_json::value::RawValue;
use xxhash_rust::xxh3::{Xxh3, xxh3_128, xxh3_128_with_seed};

use super::budget::{Estimate, Reservation, estimate};
use super::frequency::Frequency;
use super::{lean, slice};
use crate::detect::Settings;
use crate::dialect::split::{SplitRequest, assemble, assemble_shared, push_turns};
use crate::dialect::{Dialect, DialectError, HistoryItem, ParsedRequest};
use crate::transcript::{Arguments, Message, ResultContent, ToolCall, ToolResult};

/// Most bytes the store keeps, all chains together (128 MiB: a kept chain
/// weighs its items and its assembled turns, so this keeps as many
/// histories as 64 MiB did before the turns were kept).
pub const BUDGET_BYTES: usize = 128 << 20;
/// Most chains the store keeps.
pub const MAX_CHAINS: usize = 1024;
/// Bytes counted per item on top of its raw JSON: the parsed message's
/// structure, its hash, its weight and its entry in the store's index.
pub const ITEM_OVERHEAD: usize = 256;

/// Bytes a parsed item holds on the heap, estimated: its texts, and every
/// node of its JSON values (a parsed value can be many times its raw text:
/// `[0,0,…]` takes 2 bytes an element as text, 32 parsed).
fn parsed_size(item: &HistoryItem) -> usize {
    item.messages()
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| {
                    size_of::<ToolCall>()
                        + c.name.len()
                        + c.id.as_ref().map_or(0, String::len)
                        + arguments_size(&c.arguments)
                        + c.digest.as_ref().map_or(0, |d| 64 + 8 * d.echo.len())
                })
                .sum();
            let results: usize = m
                .tool_results
                .iter()
                .map(|r| {
                    size_of::<ToolResult>()
                        + r.call_id.as_ref().map_or(0, String::len)
                        + r.name.as_ref().map_or(0, String::len)
                        + match &r.content {
                            ResultContent::Text(text) => text.len(),
                            ResultContent::Json(value) => value_size(value),
                        }
                })
                .sum();
            size_of::<Message>() + m.text.len() + calls + results
        })
        .sum::<usize>()
        + match item {
            HistoryItem::System(text) => text.len(),
            _ => 0,
        }
}

pub(super) fn arguments_size(arguments: &Arguments) -> usize {
    match arguments {
        Arguments::Json(value) => value_size(value),
        Arguments::Unparsable(text) => text.len(),
    }
}

/// Heap bytes of a JSON value: 32 per node, strings' bytes, and about 64 per
/// object entry (its key and map node).
fn value_size(value: &Value) -> usize {
    size_of::<Value>()
        + match value {
            Value::String(text) => text.len(),
            Value::Array(items) => items.iter().map(value_size).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| 64 + k.len() + value_size(v)).sum(),
            _ => 0,
        }
}

/// A request body parsed within its budget (see [`ChainStore::parse_within`]).
#[derive(Debug)]
pub enum Parsed {
    /// The full parse, as [`Dialect::parse_request`] gives it.
    Full(ParsedRequest),
    /// The lean form (see [`super::lean`]): past the budget for the full one.
    Lean(ParsedRequest),
    /// Not even the lean form fits: the body goes unjudged.
    OverBudget,
}

/// The built-in detection settings, for [`ChainStore::parse`]'s lean call
/// identities: built once, not per request (building them compiles every
/// default pattern, which cost each parse milliseconds — found by fuzzing).
static DEFAULT_SETTINGS: LazyLock<Settings> = LazyLock::new(Settings::default);

/// The parsed history items of recent requests, found by hash chain.
#[derive(Debug)]
pub struct ChainStore {
    inner: Mutex<Inner>,
    seed: u64,
    budget: usize,
    max_chains: usize,
    idle_ttl: Duration,
    /// Shortest body prefix kept for a byte resume (see [`BytePrefix`]).
    byte_prefix_from: usize,
    /// Requests split after a kept chain's bytes ([`ChainStore::resume`]).
    resumed: AtomicU64,
}

/// Shortest body prefix, bytes, a request resumes after, and the step of
/// the prefix lengths kept chains are indexed by
/// ([`ChainStore::with_byte_prefix_from`]): a smaller body's scan is cheap.
pub const BYTE_PREFIX_FROM: usize = 4096;

/// Most candidate chains whose last bytes (under a step each) one request
/// compares with its own.
const BYTE_CANDIDATES: usize = 16;

/// A hash map keyed by chain hashes (xxh3 outputs, already uniform: a fast
/// hash of them is enough).
type ByHash<V> = HashMap<u128, V, foldhash::fast::FixedState>;

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
struct Inner {
    /// By id: the kept chains, and the hashes of those out with a request.
    chains: ById<Slot>,
    /// Ids by recency (a tick from [`Inner::next`]): the first is the least
    /// recently used.
    order: BTreeMap<u64, u64>,
    /// The next id or tick: both only grow.
    next: u64,
    /// Sum of the kept chains' weights (items and turns); a chain out with
    /// a request weighs nothing here until it is back.
    bytes: usize,
    /// Chains out with a request.
    out: usize,
    /// The newest chain ending with each hash (its last one): a request
    /// that repeats or extends a kept chain finds it here.
    ends: ByHash<u64>,
    /// Every hash of every chain in [`Inner::chains`]: how many chains hold
    /// it, and the one that indexed it last. A prefix of a kept chain is
    /// found by a binary search of the request's hashes here (hash `i`
    /// covers items `0..=i`, so a hash held means every earlier one is held
    /// too).
    prefixes: ByHash<Holders>,
    /// How often each conversation was seen lately (the admission test).
    frequency: Frequency,
    /// The chains with a byte prefix, by its group digest (newest last).
    by_bytes: ByHash<Vec<u64>>,
}

/// A hash map keyed by chain ids (small counters: a fast hash is enough).
type ById<V> = HashMap<u64, V, foldhash::fast::FixedState>;

/// One chain of [`Inner::chains`].
#[derive(Debug)]
struct Slot {
    /// Its place in [`Inner::order`].
    tick: u64,
    /// The chain; while it is out, only its hashes (still indexed).
    chain: Chain,
    /// Out with the request that repeats or extends it.
    out: bool,
}

/// Who holds one hash (see [`Inner::prefixes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holders {
    count: u32,
    /// The chain that indexed the hash last; `None` once that chain left
    /// the store while others still hold it (they are then found by a
    /// walk, see [`Inner::holder`]).
    last: Option<u64>,
}

impl Inner {
    fn new(max_chains: usize) -> Self {
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
    fn kept(&self) -> usize {
        self.chains.len() - self.out
    }

    /// Takes kept chain `id` out for a request that repeats or extends it:
    /// its hashes stay indexed (a copy stays in its slot) and it becomes the
    /// most recently used. `None` when it is out already (another request
    /// of the same conversation, at the same time: that one is parsed
    /// without the chain, even when another kept chain shares a shorter
    /// prefix with it, since the index finds the longer one out). A chain
    /// never put back (its request panicked) leaves its hashes until its
    /// slot goes idle.
    fn take(&mut self, id: u64) -> Option<Chain> {
        let tick = self.next();
        let slot = self.chains.get_mut(&id).filter(|slot| !slot.out)?;
        let hollow = Chain {
            hashes: slot.chain.hashes.clone(),
            // Out since now: idle only past the idle TTL from here.
            last_used: Some(Instant::now()),
            ..Chain::default()
        };
        let mut chain = std::mem::replace(&mut slot.chain, hollow);
        slot.out = true;
        self.order.remove(&slot.tick);
        slot.tick = tick;
        self.order.insert(tick, id);
        self.out += 1;
        self.bytes -= chain.kept_weight();
        if let Some(prefix) = chain.bytes.take() {
            self.unindex_bytes(prefix.group, id);
        }
        // Its prefix is this request's to record again, once parsed.
        chain.id = Some(id);
        Some(chain)
    }

    /// Puts `chain` back into the slot it was taken from, when that slot is
    /// still there and the chain extends the hashes it kept: only the added
    /// hashes are indexed. Otherwise gives the chain back.
    fn restore(&mut self, id: u64, chain: Chain) -> Option<Chain> {
        let tick = self.next();
        let Some(slot) = self
            .chains
            .get_mut(&id)
            .filter(|slot| slot.out && chain.hashes.starts_with(&slot.chain.hashes))
        else {
            return Some(chain);
        };
        let kept = slot.chain.hashes.len();
        let old_end = slot.chain.hashes.last().copied();
        slot.chain = Chain { id: None, ..chain };
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
        for hash in &chain.hashes[kept..] {
            Self::index(&mut self.prefixes, *hash, id);
        }
        if let Some(prefix) = &chain.bytes {
            self.by_bytes.entry(prefix.group).or_default().push(id);
        }
        None
    }

    /// Whether `chain`, new to the store, may push out the least recently
    /// used chains it needs the room of: when its conversation was seen
    /// more often lately than each of theirs (TinyLFU's test, see
    /// [`Frequency`]). No room needed: yes.
    fn admits(&self, chain: &Chain, budget: usize, max_chains: usize) -> bool {
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
    fn push(&mut self, mut chain: Chain) {
        let id = self.next();
        chain.id = None;
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
    fn remove(&mut self, id: u64) -> Option<Chain> {
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
    fn oldest(&self) -> Option<u64> {
        self.order.values().next().copied()
    }

    /// The kept chain `id`, unless it is out.
    fn kept_chain(&self, id: u64) -> Option<&Chain> {
        self.chains
            .get(&id)
            .filter(|slot| !slot.out)
            .map(|slot| &slot.chain)
    }

    /// The most recently used chain that the request with `hashes` repeats
    /// or extends and that ends within its last [`END_WINDOW`] items.
    fn ending_in(&self, hashes: &[u128]) -> Option<u64> {
        let lowest = hashes.len().saturating_sub(END_WINDOW);
        hashes[lowest..]
            .iter()
            .rev()
            .find_map(|end| self.ends.get(end).copied())
    }

    /// How many of `hashes` some chain shares (its longest common prefix
    /// with them).
    fn longest_shared(&self, hashes: &[u128]) -> usize {
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
    fn holder(&self, at: usize, hash: u128) -> Option<u64> {
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

/// How far back from a request's last item [`ChainStore`] looks for a kept
/// chain ending there (a turn adds a few items) before comparing the
/// request with every kept chain.
const END_WINDOW: usize = 64;

/// One history's items: their chain hashes and parses, and the turns they
/// assemble into.
#[derive(Debug, Default)]
struct Chain {
    /// `hashes[i]` covers the scope and items `0..=i`.
    hashes: Vec<u128>,
    /// `weights[i]`: the weight of items `0..=i` (see [`ITEM_OVERHEAD`]).
    weights: Vec<usize>,
    items: Vec<HistoryItem>,
    /// The turns of `items[..built]`, assembled: a request that repeats or
    /// extends the chain shares them (an `Arc` clone) instead of copying
    /// every reused item's turns again, which was a third of the CPU of a
    /// 500 KB history's request (issue #14). While no request holds them
    /// any more, the next one extends them in place.
    turns: Arc<Vec<Message>>,
    /// How many of `items` have their turns in `turns` (a prefix copied
    /// from another chain has none until [`Chain::build_turns`]).
    built: usize,
    /// Heap bytes of `turns`, estimated as their items' parsed size: kept
    /// chains count them in the store's budget.
    turns_bytes: usize,
    last_used: Option<Instant>,
    /// The slot it was taken from by the request now extending it
    /// ([`Inner::take`]): put back there, without the admission test.
    id: Option<u64>,
    /// Where the body of the request that left it here ended its history,
    /// for the next request that repeats those bytes ([`ChainStore::resume`]).
    bytes: Option<BytePrefix>,
    /// That body's fields after its history, when its split was resumed:
    /// the next resumed body whose bytes after its history are the same
    /// takes them unread.
    after: Option<Arc<crate::dialect::split::AfterHistory>>,
}

/// The bytes of a kept chain's last body up to its last history item, by
/// digest (seeded, and with the chain's scope and dialect): a request whose
/// body starts with the same bytes continues that history, and its split
/// starts after them (issue #14: the scan of a reused 2 MB history was a
/// third of its request's CPU; a digest of it is a tenth of that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BytePrefix {
    /// Bytes, up to just past the last history item.
    len: usize,
    /// The digest of the first `len` bytes rounded down to the store's step
    /// (4 KiB): the store's index key, which a request computes for each of
    /// its own step multiples in one pass.
    group: u128,
    /// The digest of the rest, up to `len` (under a step): a candidate is
    /// told from the others sharing its group at the cost of that much.
    tail: u128,
}

impl Chain {
    /// What a request given these items holds (see [`ITEM_OVERHEAD`]).
    fn weight(&self) -> usize {
        self.weights.last().copied().unwrap_or(0)
    }

    /// What the chain weighs in the store: its items and its turns.
    fn kept_weight(&self) -> usize {
        self.weight() + self.turns_bytes + self.after.as_ref().map_or(0, |a| a.weight())
    }

    /// What building the turns of the items that have none adds, bytes.
    fn unbuilt_bytes(&self) -> usize {
        self.items
            .get(self.built..)
            .unwrap_or_default()
            .iter()
            .map(parsed_size)
            .sum()
    }

    /// A copy of the first `len` items (their hashes, weights and parses);
    /// their turns are built outside the store's lock, by the request.
    fn prefix(&self, len: usize) -> Self {
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
    fn build_turns(&mut self, bytes: usize) {
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

impl ChainStore {
    /// A store with the default limits ([`BUDGET_BYTES`], [`MAX_CHAINS`]),
    /// dropping chains idle for `idle_ttl`.
    pub fn new(idle_ttl: Duration) -> Self {
        Self::with_limits(BUDGET_BYTES, MAX_CHAINS, idle_ttl)
    }

    /// A store keeping at most `budget` bytes and `max_chains` chains.
    pub fn with_limits(budget: usize, max_chains: usize, idle_ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner::new(max_chains)),
            seed: rand::random(),
            budget,
            max_chains,
            idle_ttl,
            byte_prefix_from: BYTE_PREFIX_FROM,
            resumed: AtomicU64::new(0),
        }
    }

    /// The same store, resuming requests after a body prefix of at least
    /// `bytes` (at least 1; default [`BYTE_PREFIX_FROM`]; tests and fuzzing
    /// use small bodies).
    #[must_use]
    pub fn with_byte_prefix_from(mut self, bytes: usize) -> Self {
        self.byte_prefix_from = bytes.max(1);
        self
    }

    /// The digests of `body`'s first `step`, `2 × step`, `3 × step`, …
    /// bytes (`step`: [`ChainStore::with_byte_prefix_from`]), shortest
    /// first; seeded and starting with the scope's chain start. One pass
    /// over the body, shared by the lookup ([`ChainStore::resume`]) and the
    /// record ([`ChainStore::byte_prefix`]). None for a body too small to
    /// resume, or too large for its history to be kept.
    fn byte_groups(&self, start: u128, body: &[u8]) -> Vec<u128> {
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
    fn byte_prefix(&self, groups: &[u128], body: &[u8], len: usize) -> Option<BytePrefix> {
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
    /// of the store, and this body split after them; `None` when there is
    /// none (or the body does not go on as a history would), and the request
    /// is split in full.
    fn resume<'a>(
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
        drop(inner);
        let from = crate::dialect::split::Resume {
            at: prefix.len,
            items: chain.items.len(),
            after: chain.after.clone(),
        };
        let resumed = dialect
            .resume_request(body, from)
            .ok()
            .filter(|split| split.items.len() >= chain.hashes.len());
        let (Some(split), Some(last)) = (resumed, chain.hashes.last().copied()) else {
            // Not a continuation: the chain goes back as it was, and the
            // request is split in full (and seen there).
            chain.bytes = Some(prefix);
            self.put_back(chain);
            return None;
        };
        if let Some(conversation) = conversation(&chain.hashes) {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.frequency.note(conversation);
        }
        self.resumed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("loopguard_parse_resumed_total").increment(1);
        let mut hashes = chain.hashes.clone();
        hashes.extend(chain_hashes(self.seed, last, &split.items[chain.hashes.len()..]));
        Some((split, hashes, chain))
    }

    /// Parses a request body of `dialect`, reusing the parsed items of the
    /// longest prefix of its history a kept chain of the same `scope` has,
    /// and keeps this request's chain for the next one. The result is the
    /// same as [`Dialect::parse_request`]'s.
    ///
    /// # Errors
    /// As [`Dialect::parse_request`].
    pub fn parse(&self, dialect: Dialect, scope: &[u8], body: &[u8]) -> Result<ParsedRequest, DialectError> {
        self.parse_reusing(dialect, scope, body).map(|(parsed, _)| parsed)
    }

    /// [`ChainStore::parse`], and how many items it took from a kept chain.
    fn parse_reusing(
        &self,
        dialect: Dialect,
        scope: &[u8],
        body: &[u8],
    ) -> Result<(ParsedRequest, usize), DialectError> {
        let budget = Reservation::unlimited();
        match self.parse_budgeted(dialect, scope, body, &budget, &DEFAULT_SETTINGS)? {
            (Parsed::Full(parsed) | Parsed::Lean(parsed), reused) => Ok((parsed, reused)),
            (Parsed::OverBudget, _) => Err(DialectError::Shape("over the parse budget".into())),
        }
    }

    /// [`ChainStore::parse`] within `budget` (see [`super::budget`]): the
    /// history is parsed piece by piece ([`CHUNK_BYTES`] of raw items at a
    /// time), each piece reserved before it is parsed; when the full form
    /// does not fit, the request gets the lean form ([`super::lean`], its
    /// call identities under `settings`), and when that does not fit
    /// either, [`Parsed::OverBudget`]. `budget` keeps holding what the
    /// returned request holds.
    ///
    /// # Errors
    /// As [`Dialect::parse_request`].
    pub fn parse_within(
        &self,
        dialect: Dialect,
        scope: &[u8],
        body: &[u8],
        budget: &Reservation,
        settings: &Settings,
    ) -> Result<Parsed, DialectError> {
        self.parse_budgeted(dialect, scope, body, budget, settings)
            .map(|(parsed, _)| parsed)
    }

    fn parse_budgeted(
        &self,
        dialect: Dialect,
        scope: &[u8],
        body: &[u8],
        budget: &Reservation,
        settings: &Settings,
    ) -> Result<(Parsed, usize), DialectError> {
        let full = || {
            budget.shrink(budget.held());
            if !budget.grow(estimate(body)) {
                return Ok((Parsed::OverBudget, 0));
            }
            dialect
                .parse_request(body)
                .map(|parsed| (Parsed::Full(parsed), 0))
        };
        let start = xxh3_128_with_seed(&[scope, dialect.name().as_bytes()].concat(), self.seed);
        let groups = self.byte_groups(start, body);
        let (split, hashes, mut chain) = match self.resume(dialect, &groups, body) {
            Some(resumed) => resumed,
            None => {
                let Some(Ok(split)) = dialect.split_request(body) else {
                    return full();
                };
                let hashes = chain_hashes(self.seed, start, &split.items);
                let chain = self.take_longest(&hashes).unwrap_or_default();
                (split, hashes, chain)
            }
        };
        let from = chain.items.len();
        // The reused items are this request's too (cloned into it). A body
        // whose whole estimate cannot fit goes lean at once, without
        // parsing in full what would be thrown away.
        let rest = split.items.get(from..).unwrap_or_default();
        // Each item's shape is read once: what it keeps, and its peak.
        let guesses: Vec<Estimate> = rest
            .iter()
            .map(|raw| Estimate::of(raw.get().as_bytes()))
            .collect();
        let rest_guess: usize = guesses.iter().map(|g| g.kept).sum();
        let mut lean =
            !budget.fits(rest_guess.saturating_add(chain.weight())) || !budget.grow(chain.weight());
        let mut at = from;
        while !lean && at < split.items.len() {
            let end = chunk_end(&split.items, at);
            let guess: usize = guesses[at - from..end - from].iter().map(|g| g.peak).sum();
            if !budget.grow(guess) {
                lean = true;
                break;
            }
            let Ok(new) = split.parse_range(&chain.items, at..end) else {
                self.put_back(chain);
                return full();
            };
            let mut weight = chain.weight();
            for ((raw, hash), item) in split.items[at..end].iter().zip(&hashes[at..end]).zip(&new) {
                weight += raw.get().len().max(parsed_size(item)) + ITEM_OVERHEAD;
                chain.hashes.push(*hash);
                chain.weights.push(weight);
            }
            chain.items.extend(new);
            at = end;
            // Hold what the items weigh, not the guess.
            if !budget.hold(chain.weight()) {
                lean = true;
            }
        }
        if !lean {
            tracing::debug!(
                items = chain.items.len(),
                reused = from,
                held = budget.held(),
                "history parsed"
            );
            // Kept: the request shares the chain's turns, built for the new
            // items (and held in the budget while the request lives). Too
            // large to keep, or past the budget: the items are moved into
            // the request, not copied.
            let unbuilt = chain.unbuilt_bytes();
            chain.after = split.after.clone();
            let kept = chain.kept_weight() + unbuilt;
            let parsed = if kept <= self.budget && budget.hold(kept) {
                chain.build_turns(unbuilt);
                chain.bytes = split
                    .history_end
                    .and_then(|len| self.byte_prefix(&groups, body, len));
                let parsed = assemble_shared(split.head, &chain.items, Arc::clone(&chain.turns));
                self.put_back(chain);
                parsed
            } else {
                self.forget(&chain);
                let Chain {
                    mut items,
                    turns,
                    built,
                    ..
                } = chain;
                let rest = items.split_off(built.min(items.len()));
                assemble(assemble_shared(split.head, &items, turns), rest)
            };
            return Ok((Parsed::Full(parsed), from));
        }
        // The lean form: what was parsed in full stays kept (within the
        // store's own budget) for the next request, this one holds its lean copies.
        let mut items: Vec<HistoryItem> = chain.items.iter().map(|i| lean::item(i, settings)).collect();
        self.put_back(chain);
        budget.shrink(budget.held());
        if !budget.grow(items.iter().map(weight).sum()) {
            return Ok((Parsed::OverBudget, from));
        }
        while at < split.items.len() {
            // A chunk of items at a time (a tool message's parse reads the
            // calls before it once a chunk), as many as the budget has room
            // for; slices of one item when the item alone does not fit.
            let limit = chunk_end(&split.items, at);
            let (mut end, mut guess) = (at, 0_usize);
            while end < limit {
                let next = estimate(split.items[end].get().as_bytes());
                if !budget.fits(guess.saturating_add(next)) {
                    break;
                }
                guess += next;
                end += 1;
            }
            if end == at || !budget.grow(guess) {
                let Some(item) = slice::lean_item(&split, &mut items, split.items[at], budget, settings)
                else {
                    return Ok((Parsed::OverBudget, from));
                };
                items.push(item);
                at += 1;
                continue;
            }
            let Ok(new) = split.parse_range(&items, at..end) else {
                return full();
            };
            let new: Vec<HistoryItem> = new.iter().map(|i| lean::item(i, settings)).collect();
            budget.shrink(guess);
            if !budget.grow(new.iter().map(weight).sum()) {
                return Ok((Parsed::OverBudget, from));
            }
            items.extend(new);
            at = end;
        }
        tracing::debug!(
            items = items.len(),
            held = budget.held(),
            "history parsed in its lean form"
        );
        Ok((Parsed::Lean(assemble(split.head, items)), from))
    }

    /// Asserts the indexes hold exactly the kept chains' hashes: each end
    /// names its newest chain, each hash its holders (tests).
    #[cfg(test)]
    fn assert_indexed(&self) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(
            inner.order.len(),
            inner.chains.len(),
            "every chain has a place in the order"
        );
        // The chains from the least recently used.
        let slots: Vec<(u64, &Slot)> = inner
            .order
            .iter()
            .map(|(tick, id)| {
                let slot = &inner.chains[id];
                assert_eq!(slot.tick, *tick, "a chain's tick is its place in the order");
                (*id, slot)
            })
            .collect();
        let out = slots.iter().filter(|(_, slot)| slot.out).count();
        assert_eq!(out, inner.out, "chains out counted");
        let weight: usize = slots
            .iter()
            .filter(|(_, slot)| !slot.out)
            .map(|(_, slot)| slot.chain.kept_weight())
            .sum();
        assert_eq!(weight, inner.bytes, "kept chains weighed");
        let mut prefixes: HashMap<u128, u32> = HashMap::new();
        for (_, slot) in &slots {
            for hash in &slot.chain.hashes {
                *prefixes.entry(*hash).or_default() += 1;
            }
        }
        // An end names a chain ending there (one whose chain left is
        // forgotten, not pointed elsewhere).
        for (end, id) in &inner.ends {
            let last = inner.chains.get(id).map(|slot| slot.chain.hashes.last());
            assert_eq!(last, Some(Some(end)), "an end names a chain ending there");
        }
        assert_eq!(prefixes.len(), inner.prefixes.len(), "every held hash is indexed");
        for (hash, holders) in &inner.prefixes {
            assert_eq!(prefixes.get(hash), Some(&holders.count), "holders counted");
            if let Some(id) = holders.last {
                let holds = inner.chains.get(&id).map(|slot| slot.chain.hashes.contains(hash));
                assert_eq!(holds, Some(true), "the last holder is there and holds the hash");
            }
        }
        let mut by_bytes: HashMap<u128, Vec<u64>> = HashMap::new();
        for (id, slot) in &slots {
            if let Some(prefix) = &slot.chain.bytes {
                assert!(!slot.out, "a chain out has no byte prefix");
                by_bytes.entry(prefix.group).or_default().push(*id);
            }
        }
        let indexed: HashMap<u128, Vec<u64>> = inner
            .by_bytes
            .iter()
            .map(|(group, ids)| (*group, ids.clone()))
            .collect();
        assert_eq!(by_bytes, indexed, "every byte prefix is indexed, oldest first");
    }

    /// How many requests were split after a kept chain's bytes (the rest
    /// were scanned whole).
    pub fn resumed(&self) -> u64 {
        self.resumed.load(Ordering::Relaxed)
    }

    /// Chains kept or out with a request (tests).
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .chains
            .len()
    }

    /// Chains kept and their total weight in bytes.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (inner.kept(), inner.bytes)
    }

    /// The kept chain sharing the longest prefix with `hashes` (the most
    /// recently used on a tie): removed from the store when `hashes` covers
    /// all of it (the same conversation, resent or continued), otherwise a
    /// copy of the shared prefix, the kept chain staying in place.
    fn take_longest(&self, hashes: &[u128]) -> Option<Chain> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(conversation) = conversation(hashes) {
            inner.frequency.note(conversation);
        }
        // (A chain out with another request of this conversation is not
        // taken: the prefix is looked for among the kept ones.)
        if let Some(chain) = inner.ending_in(hashes).and_then(|id| inner.take(id)) {
            return Some(chain);
        }
        let shared = inner.longest_shared(hashes);
        let at = shared.checked_sub(1)?;
        let id = inner.holder(at, hashes[at])?;
        let chain = inner.kept_chain(id)?;
        if shared < chain.hashes.len() {
            // A fork: another conversation sharing a prefix (the same system
            // prompt and tools, the usual case at a shared gateway), or this
            // one edited or cut short. The kept chain stays for its own
            // conversation; this request gets a copy of the shared prefix.
            // (Taking the chain would let conversations that share a prompt
            // take each other's chains on every request: no reuse at all.)
            return Some(chain.prefix(shared));
        }
        inner.take(id)
    }

    /// Drops what the store still holds of `chain` when it was taken out of
    /// it and will not be put back (a history grown past what is kept).
    fn forget(&self, chain: &Chain) {
        if let Some(id) = chain.id {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if inner.chains.get(&id).is_some_and(|slot| slot.out) {
                inner.remove(id);
            }
        }
    }

    /// Keeps a chain as the most recently used, then drops chains past the
    /// limits or idle for too long. A chain taken out of the store goes
    /// back into its slot, indexing only the hashes its request added; a
    /// chain new to the store that would push others out is kept only when
    /// its conversation was seen more often lately than each of theirs
    /// ([`Inner::admits`]).
    fn put_back(&self, mut chain: Chain) {
        if chain.items.is_empty() || chain.kept_weight() > self.budget {
            self.forget(&chain);
            return;
        }
        let now = Instant::now();
        chain.last_used = Some(now);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(id) = inner.oldest() {
            let idle = inner.chains.get(&id).is_none_or(|oldest| {
                oldest
                    .chain
                    .last_used
                    .is_none_or(|at| now.duration_since(at) > self.idle_ttl)
            });
            if !idle {
                break;
            }
            inner.remove(id);
        }
        let chain = match chain.id {
            Some(id) => inner.restore(id, chain).inspect(|_| {
                // Its slot went while it was out (idle): kept as new, as it
                // was kept before.
                inner.remove(id);
            }),
            None if !inner.admits(&chain, self.budget, self.max_chains) => {
                metrics::counter!("loopguard_parse_cache_rejected_total").increment(1);
                return;
            }
            None => Some(chain),
        };
        if let Some(chain) = chain {
            inner.push(chain);
        }
        while inner.bytes > self.budget || inner.kept() > self.max_chains {
            let Some(id) = inner.oldest() else { break };
            inner.remove(id);
        }
    }
}

/// What stands for a conversation in [`Frequency`]: its hash after the
/// first two items (the system prompt and the first request, or the first
/// two turns), which every later request of it repeats.
fn conversation(hashes: &[u128]) -> Option<u128> {
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
fn chunk_end(items: &[&RawValue], at: usize) -> usize {
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

/// What a parsed item weighs in a budget (see [`ITEM_OVERHEAD`]).
pub(super) fn weight(item: &HistoryItem) -> usize {
    parsed_size(item) + ITEM_OVERHEAD
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

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "chain_tests.rs"]
mod tests;
