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

mod hash;
mod index;
mod kept;
mod resume;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_128_with_seed;

pub use hash::{CHUNK_BYTES, chain_hashes, common_prefix};
use hash::{chunk_end, conversation};
use index::Inner;
use kept::Chain;
pub use resume::BYTE_PREFIX_FROM;

pub use super::size::ITEM_OVERHEAD;
use super::size::{parsed_size, weight};
use super::{lean, slice};
use crate::budget::{Estimate, Reservation, estimate};
use crate::detect::Settings;
use crate::dialect::split::{SplitRequest, assemble, assemble_shared};
use crate::dialect::{Dialect, DialectError, HistoryItem, ParsedRequest};
use crate::transcript::Lineage;

/// Most bytes the store keeps, all chains together (128 MiB: a kept chain
/// weighs its items and its assembled turns, so this keeps as many
/// histories as 64 MiB did before the turns were kept).
pub const BUDGET_BYTES: usize = 128 << 20;
/// Most chains the store keeps.
pub const MAX_CHAINS: usize = 1024;

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

    /// [`ChainStore::parse`] within `budget` (see [`crate::budget`]): the
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

    /// [`ChainStore::parse_within`], and how many items it took from a
    /// kept chain.
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
        // `hashes` are those of the items from `base` on.
        let (split, hashes, base, mut chain) = match self.resume(dialect, &groups, body) {
            Some((split, hashes, chain)) => {
                let base = chain.items.len();
                (split, hashes, base, chain)
            }
            None => {
                let Some(Ok(split)) = dialect.split_request(body) else {
                    return full();
                };
                let hashes = chain_hashes(self.seed, start, &split.items);
                let chain = self.take_longest(&hashes).unwrap_or_default();
                (split, hashes, 0, chain)
            }
        };
        let from = chain.items.len();
        match Self::grow_full(&split, &hashes[from - base..], &mut chain, budget) {
            Grown::Whole => {
                tracing::debug!(
                    items = chain.items.len(),
                    reused = from,
                    held = budget.held(),
                    "history parsed"
                );
                let parsed = self.finish_full(split, chain, budget, &groups, body);
                Ok((Parsed::Full(parsed), from))
            }
            Grown::Lean(at) => {
                let lean = Lean {
                    budget,
                    settings,
                    from,
                };
                self.parse_lean(split, chain, at, &lean, full)
            }
            Grown::Unparsed => {
                self.put_back(chain);
                full()
            }
        }
    }

    /// Parses in full the items of `split` after those `chain` has, a
    /// piece ([`CHUNK_BYTES`]) at a time, each piece's estimate reserved in
    /// `budget` first, and adds them to `chain`. The reused items are the
    /// request's too (cloned into it): a body whose whole estimate cannot
    /// fit goes lean at once, without parsing in full what would be thrown
    /// away. `hashes` are the chain hashes of the items after `chain`'s.
    fn grow_full(
        split: &SplitRequest<'_>,
        hashes: &[u128],
        chain: &mut Chain,
        budget: &Reservation,
    ) -> Grown {
        let from = chain.items.len();
        let rest = split.items.get(from..).unwrap_or_default();
        // Each item's shape is read once: what it keeps, and its peak.
        let guesses: Vec<Estimate> = rest
            .iter()
            .map(|raw| Estimate::of(raw.get().as_bytes()))
            .collect();
        let rest_guess: usize = guesses.iter().map(|g| g.kept).sum();
        if !budget.fits(rest_guess.saturating_add(chain.weight())) || !budget.grow(chain.weight()) {
            return Grown::Lean(from);
        }
        let mut at = from;
        while at < split.items.len() {
            let end = chunk_end(&split.items, at);
            let guess: usize = guesses[at - from..end - from].iter().map(|g| g.peak).sum();
            if !budget.grow(guess) {
                return Grown::Lean(at);
            }
            let Ok(new) = split.parse_range(&chain.items, at..end) else {
                return Grown::Unparsed;
            };
            let mut weight = chain.weight();
            let own = &hashes[at - from..end - from];
            for ((raw, hash), item) in split.items[at..end].iter().zip(own).zip(&new) {
                weight += raw.get().len().max(parsed_size(item)) + ITEM_OVERHEAD;
                chain.hashes.push(*hash);
                chain.weights.push(weight);
            }
            chain.items.extend(new);
            at = end;
            // Hold what the items weigh, not the guess.
            if !budget.hold(chain.weight()) {
                return Grown::Lean(at);
            }
        }
        Grown::Whole
    }

    /// The request of a history parsed in full. Kept: the request shares
    /// the chain's turns, built for the new items (and held in the budget
    /// while the request lives). Too large to keep, or past the budget: the
    /// items are moved into the request, not copied.
    fn finish_full(
        &self,
        split: SplitRequest<'_>,
        mut chain: Chain,
        budget: &Reservation,
        groups: &[u128],
        body: &[u8],
    ) -> ParsedRequest {
        let unbuilt = chain.unbuilt_bytes();
        chain.after = split.after.clone();
        let kept = chain.kept_weight() + unbuilt;
        if kept <= self.budget && budget.hold(kept) {
            chain.build_turns(unbuilt);
            chain.bytes = split
                .history_end
                .and_then(|len| self.byte_prefix(groups, body, len));
            if !chain.lineage.is_some() {
                chain.lineage = Lineage::fresh();
            }
            let mut parsed = assemble_shared(split.head, &chain.items, Arc::clone(&chain.turns));
            parsed.transcript.lineage = chain.lineage;
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
        }
    }

    /// The lean form of a request whose full form does not fit from item
    /// `at` on: what was parsed in full stays kept (within the store's own
    /// budget) for the next request, this one holds its lean copies, and
    /// the rest is parsed a chunk at a time (a tool message's parse reads
    /// the calls before it once a chunk), as many items as the budget has
    /// room for; slices of one item when the item alone does not fit.
    fn parse_lean(
        &self,
        split: SplitRequest<'_>,
        chain: Chain,
        mut at: usize,
        lean: &Lean<'_>,
        full: impl FnOnce() -> Result<(Parsed, usize), DialectError>,
    ) -> Result<(Parsed, usize), DialectError> {
        let Lean {
            budget,
            settings,
            from,
        } = *lean;
        let mut items: Vec<HistoryItem> = chain.items.iter().map(|i| lean::item(i, settings)).collect();
        self.put_back(chain);
        budget.shrink(budget.held());
        if !budget.grow(items.iter().map(weight).sum()) {
            return Ok((Parsed::OverBudget, from));
        }
        while at < split.items.len() {
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

    /// How many requests were split after a kept chain's bytes (the rest
    /// were scanned whole).
    pub fn resumed(&self) -> u64 {
        self.resumed.load(Ordering::Relaxed)
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
        if let Some(out) = chain.out {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if inner.chains.get(&out.id).is_some_and(|slot| slot.out) {
                inner.remove(out.id);
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
        let chain = match chain.out {
            Some(out) => {
                if !inner.restore(out, chain) {
                    // Its slot went while it was out (idle past the TTL, or
                    // pushed out by the others): the chain carries only the
                    // hashes its request added, so it is not kept, and the
                    // conversation's next request is parsed in full.
                    inner.remove(out.id);
                }
                None
            }
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

/// How far [`ChainStore::grow_full`] got.
enum Grown {
    /// Every item parsed in full and held in the budget.
    Whole,
    /// The full form does not fit from this item on: the request goes lean.
    Lean(usize),
    /// An item did not parse: the request gets the dialect's full parse.
    Unparsed,
}

/// What the lean form of a request is parsed within.
#[derive(Clone, Copy)]
struct Lean<'a> {
    /// The request's parse budget.
    budget: &'a Reservation,
    /// The detection settings the lean call identities are taken under.
    settings: &'a Settings,
    /// How many items came from a kept chain.
    from: usize,
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "chain_tests.rs"]
mod tests;
