//! Volatile values inside JSON results, found by comparing a call's successive results.
//!
//! Issue #38 point 3. The known id shapes and volatile keys are removed from
//! every result ([`super::outcome`]), but a poll's answer may still carry a
//! value that changes on every call while the rest stays the same: a
//! counter (`"attempt": 7`, `"seq": 42`), a token under an unremarkable key
//! (`"etag": "W/7f3a"`, `"ref": "run-2291"`). So a JSON result is compared
//! key by key with the previous result of the same call (the same tool and
//! call identity, earlier in the request): when both have the same shape
//! (the same keys and array lengths at every depth) and they differ in at
//! most [`MAX_CHANGED`] leaves, at most half of all leaves, each of them
//! volatile-looking, those leaves are masked and the result is hashed again.
//! A chain of polls that differ only there then has one outcome from its
//! second result on (the first keeps its own: it had nothing to compare with).
//!
//! Volatile-looking: a number that is a call counter (one more than in the
//! previous result) or a Unix time that moved on, or a string of at most 64 bytes without
//! whitespace that holds a digit — never a text (a string under `output`,
//! `content`, …: see [`super::outcome::TEXT_KEYS`]), a word (`"running"` →
//! `"done"` is news), a boolean, or any value under a key that names
//! progress ([`PROGRESS_WORDS`]: `progress`, `percent`, `done`, `step`,
//! `status`, `bytes`, …; point 4: a counter that rises towards completion
//! is progress). A paginated listing differs in most leaves and a file
//! read in its text: neither is ever masked.

use serde_json::Value;

use super::outcome::{Outcome, TEXT_KEYS, json_hash, stripped_json};
use super::settings::Settings;
use crate::transcript::ToolResult;

/// Most leaves that may differ.
const MAX_CHANGED: usize = 3;
/// Most leaves compared (a larger result is left as it is).
const MAX_LEAVES: usize = 4096;
/// Longest string value that may be volatile, bytes.
const MAX_VOLATILE_STRING: usize = 64;
/// Words (lowercase, in a key folded to letters and digits) of keys whose
/// values are progress, never volatile.
const PROGRESS_WORDS: &[&str] = &[
    "progress",
    "percent",
    "complete",
    "done",
    "finish",
    "processed",
    "remaining",
    "step",
    "epoch",
    "iter",
    "loss",
    "accura",
    "bytes",
    "download",
    "upload",
    "transfer",
    "written",
    "lines",
    "rows",
    "records",
    "items",
    "total",
    "size",
    "length",
    "position",
    "offset",
    "status",
    "state",
    "phase",
    "stage",
    "passed",
    "failed",
    "error",
    "warning",
    "result",
    "exit",
    "code",
    "pending",
    "sent",
    "queued",
    "indexed",
    "ready",
    "available",
    "succeeded",
    "count",
];

/// Short progress keys, matched whole (folded).
const PROGRESS_KEYS: &[&str] = &["pct", "left"];

/// The outcome of `current`, with the leaves that changed since `previous`
/// (the same call's previous result) masked when they are volatile (see the
/// module doc); `outcome` as it is otherwise.
pub(crate) fn successive(
    outcome: Outcome,
    previous: &ToolResult,
    current: &ToolResult,
    settings: &Settings,
) -> Outcome {
    if outcome.dedup {
        return outcome;
    }
    let Some(mut now) = stripped_json(current, settings) else {
        return outcome;
    };
    let Some(before) = stripped_json(previous, settings) else {
        return outcome;
    };
    let mut diff = Diff::default();
    if !compare(&before, &mut now, "", &mut diff) {
        return outcome;
    }
    if diff.changed == 0 || !diff.volatile || diff.changed > MAX_CHANGED || 2 * diff.changed > diff.leaves {
        return outcome;
    }
    Outcome {
        hash: json_hash(&now),
        ..outcome
    }
}

/// What [`compare`] found.
#[derive(Default)]
struct Diff {
    leaves: usize,
    changed: usize,
    /// Every changed leaf looked volatile.
    volatile: bool,
}

/// Walks two values of the same shape, masking in `now` the changed
/// volatile leaves; `false` when the shapes differ (or past [`MAX_LEAVES`]).
fn compare(before: &Value, now: &mut Value, key: &str, diff: &mut Diff) -> bool {
    match (before, now) {
        (Value::Object(b), Value::Object(n)) => {
            b.len() == n.len()
                && n.iter_mut()
                    .all(|(k, v)| b.get(k).is_some_and(|bv| compare(bv, v, k, diff)))
        }
        (Value::Array(b), Value::Array(n)) => {
            b.len() == n.len()
                && b.iter()
                    .zip(n.iter_mut())
                    .all(|(bv, v)| compare(bv, v, key, diff))
        }
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        (b, n) => {
            diff.leaves += 1;
            if diff.leaves > MAX_LEAVES {
                return false;
            }
            if b != n {
                if diff.changed == 0 {
                    diff.volatile = true;
                }
                diff.changed += 1;
                if volatile(key, b, n) {
                    *n = Value::String("~".into());
                } else {
                    diff.volatile = false;
                }
            }
            true
        }
    }
}

/// Whether a changed leaf under `key` looks volatile (see the module doc).
fn volatile(key: &str, before: &Value, now: &Value) -> bool {
    if TEXT_KEYS.contains(&key) || progress_key(key) {
        return false;
    }
    let token = |s: &str| {
        s.len() <= MAX_VOLATILE_STRING
            && !s.is_empty()
            && !s.contains(char::is_whitespace)
            && s.contains(|c: char| c.is_ascii_digit())
    };
    match (before, now) {
        (Value::Number(a), Value::Number(b)) => counter_or_clock(a, b),
        (Value::String(a), Value::String(b)) => token(a) && token(b),
        _ => false,
    }
}

/// Whether a number that changed looks volatile: a call counter (one more
/// than before: `attempt`, `seq`, `poll`) or a Unix time in seconds or
/// milliseconds that moved on. Any other change — a queue draining by 150,
/// a count rising by 40 — is news.
fn counter_or_clock(before: &serde_json::Number, now: &serde_json::Number) -> bool {
    let (Some(a), Some(b)) = (before.as_i64(), now.as_i64()) else {
        return false;
    };
    let clock = |n: i64| {
        (1_000_000_000..10_000_000_000).contains(&n) || (1_000_000_000_000..10_000_000_000_000).contains(&n)
    };
    b == a + 1 || clock(a) && clock(b) && b > a
}

/// Whether a key names progress ([`PROGRESS_WORDS`]).
fn progress_key(key: &str) -> bool {
    let folded: String = key
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    // `eta` (`eta_s`, `etaSeconds`) but not `etag`, `metadata`, `beta`.
    let eta = folded.starts_with("eta") && !folded.starts_with("etag");
    eta || PROGRESS_WORDS.iter().any(|w| folded.contains(w)) || PROGRESS_KEYS.contains(&folded.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::outcome::outcome_of;
    use crate::transcript::ResultContent;
    use serde_json::json;

    fn result(v: Value) -> ToolResult {
        ToolResult {
            call_id: None,
            name: Some("job".into()),
            content: ResultContent::Text(v.to_string()),
            is_error: false,
        }
    }

    fn after(before: Value, now: Value) -> (u128, u128) {
        let s = Settings::default();
        let (b, n) = (result(before), result(now));
        let raw = outcome_of(&n, &s);
        (raw.hash, successive(raw, &b, &n, &s).hash)
    }

    #[test]
    fn a_counter_and_a_token_that_change_every_poll_are_masked() {
        let s = Settings::default();
        let polls: Vec<ToolResult> = (1..=4)
            .map(|i| {
                result(
                    json!({"state": "queued", "attempt": i, "etag": format!("W/{i}f3a{i}"), "queue": "ci"}),
                )
            })
            .collect();
        let hashes: Vec<u128> = polls
            .windows(2)
            .map(|w| successive(outcome_of(&w[1], &s), &w[0], &w[1], &s).hash)
            .collect();
        assert!(hashes.windows(2).all(|h| h[0] == h[1]), "{hashes:?}");
        assert_ne!(outcome_of(&polls[1], &s).hash, outcome_of(&polls[2], &s).hash);
    }

    #[test]
    fn progress_a_state_word_and_a_text_are_never_masked() {
        for (before, now) in [
            (
                json!({"job": "train", "progress": 41}),
                json!({"job": "train", "progress": 42}),
            ),
            (
                json!({"job": "b7", "status": "running"}),
                json!({"job": "b7", "status": "done"}),
            ),
            (
                json!({"kind": "log", "output": "step-1"}),
                json!({"kind": "log", "output": "step-2"}),
            ),
            (
                json!({"name": "a", "flag": true}),
                json!({"name": "a", "flag": false}),
            ),
        ] {
            let (raw, masked) = after(before.clone(), now.clone());
            assert_eq!(raw, masked, "{before} -> {now}");
        }
    }

    #[test]
    fn numbers_that_move_by_more_than_a_call_count_are_news() {
        for (before, now) in [
            (
                json!({"queue": "emails", "workers": 2, "pending": 1200, "sent": 150}),
                json!({"queue": "emails", "workers": 2, "pending": 1050, "sent": 300}),
            ),
            (
                json!({"a": 100, "b": "x", "c": "y"}),
                json!({"a": 250, "b": "x", "c": "y"}),
            ),
            (
                json!({"a": 100, "b": "x", "c": "y"}),
                json!({"a": 99, "b": "x", "c": "y"}),
            ),
            (
                json!({"job": "ix", "eta_s": 40, "n": "z"}),
                json!({"job": "ix", "eta_s": 41, "n": "z"}),
            ),
        ] {
            let (raw, masked) = after(before.clone(), now.clone());
            assert_eq!(raw, masked, "{before} -> {now}");
        }
        let (raw, masked) = after(
            json!({"a": 7, "b": "x", "c": "y"}),
            json!({"a": 8, "b": "x", "c": "y"}),
        );
        assert_ne!(raw, masked, "a call counter");
        let (raw, masked) = after(
            json!({"checked": 1_733_550_000, "b": "x", "c": "y"}),
            json!({"checked": 1_733_550_030, "b": "x", "c": "y"}),
        );
        assert_ne!(raw, masked, "a Unix time");
    }

    #[test]
    fn a_page_of_other_items_or_another_shape_is_never_masked() {
        let page = |n: u32| json!({"items": [{"name": format!("f{n}a"), "rev": n}, {"name": format!("f{n}b"), "rev": n + 1}]});
        let (raw, masked) = after(page(1), page(2));
        assert_eq!(raw, masked);
        let (raw, masked) = after(json!({"a": 1, "b": "x"}), json!({"a": 2, "b": "x", "c": 3}));
        assert_eq!(raw, masked);
        let (raw, masked) = after(json!({"a": 1}), json!({"a": 2}));
        assert_eq!(raw, masked, "a single leaf: nothing else to be identical");
    }
}
