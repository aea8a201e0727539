//! Byte budgets of requests in flight (issue #13), per request and all
//! requests together: the parse-memory budget, what the parsed forms of
//! request bodies may hold, so a body whose parse grows many times over (a
//! 54 MB history of 10⁶ small calls) cannot take the process past its
//! memory limit; and the bodies themselves while they are received and
//! held (`server.max_request_bytes_in_flight`, see
//! [`crate::proxy::body::read_limited`]).
//!
//! A request's [`Reservation`] grows before each piece of its parse (by an
//! [`estimate`] of what parsing it allocates) and shrinks to what the parse
//! kept; it is released when the request is done. A piece that does not fit
//! makes the caller fall back to a smaller form (see [`crate::session::chain`])
//! or pass the body unjudged. Nothing waits: a reservation is granted or not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes held by all requests in flight (their parsed forms, or their bodies).
#[derive(Debug, Default)]
pub struct ByteBudget {
    in_use: AtomicUsize,
}

impl ByteBudget {
    /// Bytes reserved now, all requests together.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// A reservation of nothing yet, allowed to grow to `per_request` bytes
    /// while all reservations together stay within `total` bytes.
    pub fn reserve(self: &Arc<Self>, per_request: usize, total: usize) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            held: AtomicUsize::new(0),
            per_request,
            total,
        }
    }

    fn take(&self, bytes: usize, total: usize) -> bool {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= total)
            })
            .is_ok()
    }
}

/// One request's share of the [`ByteBudget`], released on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ByteBudget>,
    held: AtomicUsize,
    per_request: usize,
    total: usize,
}

impl Reservation {
    /// An unlimited reservation on a budget of its own (tests, tools).
    pub fn unlimited() -> Self {
        Arc::new(ByteBudget::default()).reserve(usize::MAX, usize::MAX)
    }

    /// The limit of all reservations together, bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes this reservation holds.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Grows by `bytes`: `false` (and nothing taken) when the request would
    /// pass its own limit or all requests the total.
    pub fn grow(&self, bytes: usize) -> bool {
        let held = self.held();
        if held.saturating_add(bytes) > self.per_request || !self.budget.take(bytes, self.total) {
            return false;
        }
        self.held.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    /// Whether `bytes` more could be granted now.
    pub fn fits(&self, bytes: usize) -> bool {
        self.held().saturating_add(bytes) <= self.per_request
            && self.budget.in_use().saturating_add(bytes) <= self.total
    }

    /// The most that could be granted now, bytes.
    pub fn room(&self) -> usize {
        let own = self.per_request.saturating_sub(self.held());
        own.min(self.total.saturating_sub(self.budget.in_use()))
    }

    /// Grows or shrinks to hold exactly `bytes`: `false` (and nothing
    /// changed) when growing does not fit.
    pub fn hold(&self, bytes: usize) -> bool {
        let held = self.held();
        if bytes <= held {
            self.shrink(held - bytes);
            true
        } else {
            self.grow(bytes - held)
        }
    }

    /// Shrinks by `bytes` (at most what it holds).
    pub fn shrink(&self, bytes: usize) {
        let bytes = bytes.min(self.held());
        self.held.fetch_sub(bytes, Ordering::Relaxed);
        self.budget.in_use.fetch_sub(bytes, Ordering::AcqRel);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.shrink(self.held());
    }
}

/// Bytes parsing the JSON text `raw` into a `serde_json::Value` and a
/// history item allocates at its peak, estimated from its shape in one pass
/// without allocating: its bytes twice (the strings of the tree and of the
/// item) and [`NODE_BYTES`] per value (a `[0,0,…]` takes 2 bytes an element
/// as text, about 80 parsed).
pub fn estimate(raw: &[u8]) -> usize {
    Estimate::of(raw).peak
}

/// Bytes the history items parsed from `raw` keep once its parse tree is
/// gone, estimated as [`estimate`] does: its bytes once and
/// [`KEPT_NODE_BYTES`] per value (measured: a 20.7 MB history of 5,000 calls
/// with 125k values keeps 25.7 MB, estimated 28.7 MB).
pub fn estimate_kept(raw: &[u8]) -> usize {
    Estimate::of(raw).kept
}

/// Both estimates of one JSON text, from one read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// [`estimate`]: the peak while it is parsed, bytes.
    pub peak: usize,
    /// [`estimate_kept`]: what its parsed items keep, bytes.
    pub kept: usize,
}

impl Estimate {
    /// Reads `raw`'s shape once.
    pub fn of(raw: &[u8]) -> Self {
        let values = values(raw);
        Self {
            peak: raw
                .len()
                .saturating_mul(2)
                .saturating_add(values.saturating_mul(NODE_BYTES)),
            kept: raw.len().saturating_add(values.saturating_mul(KEPT_NODE_BYTES)),
        }
    }
}

/// How many JSON values `raw` holds, roughly: one, and one more per
/// `,` `:` `[` `{` outside strings. Over [`WALKED_BYTES`], strings (most of
/// a history's bytes) are skipped with `memchr`, not walked byte by byte:
/// this runs over every request body, and the byte walk cost a 2 MB history
/// 3 ms (issue #14). A short text is walked: the `memchr` calls, two per
/// string, cost more than its bytes (a small request's items are a few
/// hundred bytes of short strings).
fn values(raw: &[u8]) -> usize {
    if raw.len() <= WALKED_BYTES {
        values_walked(raw)
    } else {
        values_skipping(raw)
    }
}

/// Texts up to this many bytes are walked byte by byte by [`values`].
const WALKED_BYTES: usize = 512;

/// [`values`] a byte at a time.
fn values_walked(raw: &[u8]) -> usize {
    let mut nodes = 1_usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in raw {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => nodes += 1,
                _ => {}
            }
        }
    }
    nodes
}

/// [`values`] with strings skipped by `memchr`.
fn values_skipping(raw: &[u8]) -> usize {
    let structure = |text: &[u8]| {
        text.iter()
            .filter(|&&b| matches!(b, b',' | b':' | b'[' | b'{'))
            .count()
    };
    let mut nodes = 1_usize;
    let mut at = 0;
    while at < raw.len() {
        let Some(quote) = memchr::memchr(b'"', &raw[at..]) else {
            return nodes + structure(&raw[at..]);
        };
        nodes += structure(&raw[at..at + quote]);
        at += quote + 1;
        // In a string: to its closing quote, each escape skipping the byte
        // after its backslash.
        loop {
            match memchr::memchr2(b'"', b'\\', raw.get(at..).unwrap_or_default()) {
                None => return nodes,
                Some(i) if raw[at + i] == b'"' => {
                    at += i + 1;
                    break;
                }
                Some(i) => at += i + 2,
            }
        }
    }
    nodes
}

/// Bytes counted per JSON value by [`estimate`]: the tree's node and map
/// entry, and what the history item built from it keeps.
pub const NODE_BYTES: usize = 160;

/// Bytes counted per JSON value by [`estimate_kept`].
pub const KEPT_NODE_BYTES: usize = 64;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn skipping_strings_counts_as_the_byte_walk(raw in proptest::collection::vec(
            prop_oneof![Just(b'"'), Just(b'\\'), Just(b','), Just(b':'), Just(b'['), Just(b'{'), any::<u8>()],
            0..200,
        )) {
            prop_assert_eq!(values_skipping(&raw), values_walked(&raw));
        }
    }

    #[test]
    fn the_estimates_weigh_bytes_and_values() {
        // One, and `{` `:` `,` `:` `[` `,` `,` outside the strings.
        let raw = br#"{"role":"tool","content":[0,0,0]}"#;
        let values = values(raw);
        assert_eq!(values, 8);
        assert_eq!(estimate(raw), 2 * raw.len() + values * NODE_BYTES);
        assert_eq!(estimate_kept(raw), raw.len() + values * KEPT_NODE_BYTES);
    }

    #[test]
    fn values_skips_strings_and_their_escapes() {
        assert_eq!(values(br#"{"a,b:[{":1,"c\"[,":[0,0]}"#), 7);
        assert_eq!(values(br#""unterminated \","#), 1);
        assert_eq!(values(br#"[1,2"#), 3);
    }

    #[test]
    fn reservations_stay_within_their_own_limit_and_the_total_and_release_on_drop() {
        let budget = Arc::new(ByteBudget::default());
        let a = budget.reserve(100, 150);
        assert!(a.grow(80));
        assert!(!a.grow(30), "past its own limit");
        let b = budget.reserve(100, 150);
        assert!(!b.grow(80), "past the total");
        assert!(b.grow(70));
        assert_eq!(budget.in_use(), 150);
        a.shrink(50);
        assert_eq!((a.held(), budget.in_use()), (30, 100));
        drop(a);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn the_estimate_counts_values_not_string_contents() {
        let many = estimate(b"[0,0,0,0,0,0,0,0,0,0]");
        let one = estimate(br#""0,0,0,0,0,0,0,0,0,0""#);
        assert_eq!(many, 21 * 2 + 11 * NODE_BYTES);
        assert_eq!(one, 21 * 2 + NODE_BYTES);
        assert_eq!(estimate(br#"["a\"b,c"]"#), 10 * 2 + 2 * NODE_BYTES);
        assert_eq!(estimate_kept(b"[0,0]"), 5 + 3 * KEPT_NODE_BYTES);
    }
}
