//! Finding where a request's new items start (issue #12 point 8): agents
//! prune, clip or replace older items every turn (SWE-agent's last-N
//! observations, OpenCode's prune, Claude Code's context edits), so a
//! request is merged by stable identity, never by position alone, and
//! rewritten older items neither hide nor double-count new ones.
//!
//! Kept from the previous request: its item count, its last
//! [`TAIL_KEYS`](super::absorb) keys, its newest call ids (anchors) and
//! every item's shape (kind and tool). A rewrite keeps an item's shape
//! (a clipped result is still that tool's result) or drops the item; it
//! never adds one. So where the previous request's tail occurs more than
//! once (new items repeating it: the same reminder, the same screen), the
//! occurrence whose history before it could come from the previous one by
//! drops alone wins, nearest the place an unchanged history would have it.
//! When none could (the tail itself was rewritten, or occurs only where the
//! history would have grown), the place an unchanged history would have it
//! is taken after an anchor, the nearest occurrence otherwise.
//!
//! A dropped item that came back could not be told from a new identical
//! one; no agent we know restores what it pruned, and neither does the
//! property test's generator (`detect/rewrite_tests.rs`).

use super::SessionState;
use crate::detect::step::Keys;

/// Occurrences of the previous tail that are checked against the shapes.
const CANDIDATES: usize = 8;

impl SessionState {
    /// Index of the first item not absorbed yet. In order:
    ///
    /// 1. an anchor: the newest call whose id the previous request carried
    ///    (and that occurs once in this one) — the items after it in the
    ///    previous request are there again (rewritten, or older ones among
    ///    them dropped), the rest is new;
    /// 2. the same item shapes as the whole previous request, in place: an
    ///    append, or older items rewritten in place — id-less histories
    ///    (Gemini);
    /// 3. the previous request's last keys (a compacted or pruned request
    ///    whose kept tail matches; see the module doc for which occurrence);
    ///    else its last key known (a stale retry), else everything is new.
    pub(super) fn align(&self, k: &Keys) -> usize {
        let keys = k.keys;
        if self.tail.is_empty() {
            return 0;
        }
        let seen = self.seen_items;
        if let Some((i, after)) = self.anchor(k) {
            return self.after_anchor(k, i, after);
        }
        if !self.realign && k.shapes.len() >= seen && k.shapes[..seen] == self.shapes[..] {
            return seen;
        }
        let full = self.tail.len();
        for width in (1..=full).rev() {
            let tail = &self.tail[full - width..];
            // A compacted request may hold items the previous one did not
            // (its summary): then the occurrence nearest its place.
            let end = pick(keys, k.shapes, tail, seen, &self.shapes)
                .or_else(|| nearest_ends(keys, tail, seen).first().copied());
            if let Some(end) = end {
                return end;
            }
        }
        match keys.last() {
            Some(last) if self.knows(*last) => keys.len(),
            _ => 0,
        }
    }

    /// The newest call of this request whose id the previous request
    /// carried, occurring once here: its index, and how many items came
    /// after it in the previous request.
    fn anchor(&self, k: &Keys) -> Option<(usize, usize)> {
        k.idents.iter().enumerate().rev().find_map(|(i, id)| {
            let id = (*id)?;
            let after = self.anchors.iter().find(|(a, _)| *a == id)?.1;
            let unique = k.idents.iter().filter(|x| **x == Some(id)).count() == 1;
            unique.then_some((i, after))
        })
    }

    /// Where the previous request's items after the anchor at `i` end in
    /// this request: its last keys found after the anchor (see the module
    /// doc), else `i + 1 + after` (its last items were rewritten too, such
    /// as a reminder sent whole and clipped from the next request on).
    fn after_anchor(&self, k: &Keys, i: usize, after: usize) -> usize {
        let bound = (i + 1 + after).min(k.keys.len());
        let width = self.tail.len().min(after);
        if width == 0 {
            return bound;
        }
        let tail = &self.tail[self.tail.len() - width..];
        let previous = &self.shapes[self.shapes.len().saturating_sub(after)..];
        pick(
            &k.keys[i + 1..],
            &k.shapes[i + 1..],
            tail,
            bound - i - 1,
            previous,
        )
        .map_or(bound, |end| i + 1 + end)
    }
}

/// The end of the occurrence of `tail` in `keys` that ends the part carried
/// over from the previous request: of the occurrences nearest `expected`
/// (an end at or before it wins a tie: rewriting drops, it does not add),
/// the first whose item shapes before it are `previous` with items dropped.
/// `None` when there is none.
fn pick(keys: &[u64], shapes: &[u64], tail: &[u64], expected: usize, previous: &[u64]) -> Option<usize> {
    nearest_ends(keys, tail, expected)
        .into_iter()
        .find(|&end| by_drops(&shapes[..end], previous))
}

/// Ends of up to [`CANDIDATES`] occurrences of `tail` in `keys`, nearest
/// `expected` first, an end at or before it first on a tie.
fn nearest_ends(keys: &[u64], tail: &[u64], expected: usize) -> Vec<usize> {
    let width = tail.len();
    let at = |end: &usize| keys[end - width..*end] == *tail;
    let mut before = (width..=keys.len().min(expected)).rev().filter(at).peekable();
    let mut after = (expected.max(width - 1) + 1..=keys.len()).filter(at).peekable();
    let mut ends = Vec::new();
    while ends.len() < CANDIDATES {
        let next = match (before.peek(), after.peek()) {
            (Some(&b), Some(&a)) if a - expected < expected - b => after.next(),
            (Some(_), _) => before.next(),
            (None, Some(_)) => after.next(),
            (None, None) => break,
        };
        ends.extend(next);
    }
    ends
}

/// Whether `shapes` is `previous` with some items dropped (a subsequence).
fn by_drops(shapes: &[u64], previous: &[u64]) -> bool {
    let mut rest = previous.iter();
    shapes.iter().all(|s| rest.any(|p| p == s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_ends_orders_by_distance_and_prefers_earlier_on_a_tie() {
        let keys = [1, 2, 1, 2, 1, 2, 1, 2];
        assert_eq!(nearest_ends(&keys, &[1, 2], 4), vec![4, 2, 6, 8]);
        assert_eq!(nearest_ends(&keys, &[1, 2], 5), vec![4, 6, 2, 8]);
        assert_eq!(nearest_ends(&keys, &[3], 5), Vec::<usize>::new());
    }

    #[test]
    fn by_drops_accepts_a_subsequence_only() {
        assert!(by_drops(&[1, 3], &[1, 2, 3]));
        assert!(by_drops(&[], &[1]));
        assert!(!by_drops(&[3, 1], &[1, 2, 3]));
        assert!(!by_drops(&[1, 2, 3, 3], &[1, 2, 3]));
    }

    #[test]
    fn pick_finds_nothing_when_every_occurrence_would_need_added_items() {
        // Previous: [call, c, c, F]; now [call, c, c, c, F]: the whole F
        // was clipped to c and a new F came, so (c, F) only occurs where
        // the old part would have grown.
        let keys = [3, 3, 3, 4];
        let shapes = [1, 1, 1, 1];
        assert_eq!(pick(&keys, &shapes, &[3, 4], 3, &[1, 1, 1]), None);
    }

    #[test]
    fn pick_skips_an_occurrence_that_would_need_added_items() {
        // Previous: [U, call, S, R] ending in (S, R); now the call was
        // dropped and (S, R) repeated: the old part ends at 3, not 5.
        let previous_shapes = [10, 20, 30, 40];
        let keys = [1, 3, 4, 3, 4];
        let shapes = [10, 30, 40, 30, 40];
        assert_eq!(pick(&keys, &shapes, &[3, 4], 4, &previous_shapes), Some(3));
    }
}
