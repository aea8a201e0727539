//! The indexed pairing of calls with results ([`Results`]) against the
//! linear-scan pairing it replaced, on random turns: the same result for
//! every call, so no verdict changes. Turns of up to 40 results cover both
//! the short scan and the index (over `SCAN_RESULTS`). And [`own_text`]
//! against the regex it replaced, on random texts made of the wrappers'
//! pieces.

use proptest::prelude::*;

use super::*;
use crate::transcript::ResultContent;

/// The pairing before the index: a scan of every result per call.
fn find_result_by_scan(
    call: &ToolCall,
    position: usize,
    results: &[&ToolResult],
    used: &mut [bool],
) -> Option<usize> {
    let by_id = call.id.as_ref().and_then(|id| {
        results
            .iter()
            .enumerate()
            .find(|(i, r)| !used[*i] && r.call_id.as_deref() == Some(id.as_str()))
    });
    let pick = by_id
        .or_else(|| {
            results.iter().enumerate().find(|(i, r)| {
                !used[*i] && r.call_id.is_none() && r.name.as_deref() == Some(call.name.as_str())
            })
        })
        .or_else(|| {
            results
                .iter()
                .enumerate()
                .find(|(i, r)| !used[*i] && *i == position && r.call_id.is_none())
        });
    let (i, _) = pick?;
    used[i] = true;
    Some(i)
}

fn call(id: Option<u8>, name: u8) -> ToolCall {
    ToolCall::new(
        id.map(|i| format!("c{i}")),
        format!("tool_{name}"),
        Arguments::Json(serde_json::json!({})),
    )
}

fn result(id: Option<u8>, name: Option<u8>, n: usize) -> ToolResult {
    ToolResult {
        call_id: id.map(|i| format!("c{i}")),
        name: name.map(|n| format!("tool_{n}")),
        content: ResultContent::Text(format!("result {n}")),
        is_error: false,
    }
}

/// [`own_text`] as it was: the wrappers removed by one regex.
#[expect(clippy::unwrap_used, reason = "a constant pattern")]
fn own_text_by_regex(text: &str) -> String {
    let synthetic = regex::Regex::new(
        r"(?s)<system-reminder>.*?</system-reminder>|<environment_details>.*?</environment_details>|<session_context>.*?</session_context>|(?m:^\[loopguard\].*$)",
    )
    .unwrap();
    synthetic.replace_all(text, "").trim().to_owned()
}

/// Texts made of the wrappers' openers and closers (whole and cut short),
/// line breaks, the marker of loopguard's own lines, and plain text.
fn wrapped_text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "<system-reminder>",
        "</system-reminder>",
        "<environment_details>",
        "</environment_details>",
        "<session_context>",
        "</session_context>",
        "<system-rem",
        "</environment",
        "[loopguard]",
        "[loopguard",
        "\n",
        "\r\n",
        " ",
        "<",
        "[",
        "a < b",
        "text",
        "é",
    ]);
    prop::collection::vec(pieces, 0..24).prop_map(|pieces| pieces.concat())
}

/// Different user-text patterns never share a fingerprint: not patterns
/// split otherwise, nor one moved to another list (a kept read would
/// otherwise outlive a reload that changed them).
#[test]
#[expect(clippy::unwrap_used, reason = "constant patterns")]
fn user_pattern_lists_have_their_own_fingerprints() {
    let with = |injected: &[&str], summary: &[&str], canned: &[&str]| {
        let compile = |list: &[&str]| list.iter().map(|p| regex::Regex::new(p).unwrap()).collect();
        let mut s = Settings {
            injected_patterns: compile(injected),
            canned_patterns: compile(canned),
            ..Settings::default()
        };
        s.compaction.summary_prefixes = compile(summary);
        user_patterns(&s)
    };
    let fingerprints = [
        with(&[], &[], &[]),
        with(&["^a$", "b"], &[], &[]),
        with(&["^a$\u{0}b"], &[], &[]),
        with(&["\u{0}"], &[], &[]),
        with(&[], &["\u{0}"], &[]),
        with(&[], &[], &["\u{0}"]),
        with(&["x"], &[], &[]),
        with(&[], &["x"], &[]),
        with(&["x", "y"], &[], &[]),
        with(&["y", "x"], &[], &[]),
    ];
    for (i, a) in fingerprints.iter().enumerate() {
        for b in &fingerprints[i + 1..] {
            assert_ne!(a, b, "pattern lists {i} and a later one share a fingerprint");
        }
    }
    assert_eq!(
        with(&["x"], &[], &[]),
        with(&["x"], &[], &[]),
        "the same lists, the same fingerprint"
    );
}

#[test]
fn own_text_removes_what_the_regex_did() {
    for text in [
        "",
        "  plain  ",
        "go <system-reminder>x</system-reminder> on",
        "<environment_details>a</environment_details>\n<environment_details>b",
        "line\n[loopguard] warned\nmore\n",
        "not at a line start [loopguard] x",
        "<session_context>\nunclosed",
        "a < b and g::<T>() <environment_details>\n# files\n</environment_details>\nrest",
    ] {
        assert_eq!(own_text(text), own_text_by_regex(text), "{text:?}");
    }
}

proptest! {
    #[test]
    fn own_text_is_the_regex_removal(text in wrapped_text()) {
        prop_assert_eq!(own_text(&text), own_text_by_regex(&text), "{:?}", text);
    }

    #[test]
    fn indexed_pairing_matches_the_scan(
        calls in prop::collection::vec((prop::option::of(0u8..6), 0u8..3), 0..40),
        results in prop::collection::vec((prop::option::of(0u8..6), prop::option::of(0u8..3)), 0..40),
    ) {
        let calls: Vec<ToolCall> = calls.into_iter().map(|(id, name)| call(id, name)).collect();
        let results: Vec<ToolResult> = results
            .into_iter()
            .enumerate()
            .map(|(n, (id, name))| result(id, name, n))
            .collect();
        let refs: Vec<&ToolResult> = results.iter().collect();
        let mut used = vec![false; refs.len()];
        // Buffers left by another turn's pairing first: a refill starts over.
        let mut indexed = Results::new();
        indexed.refill(refs.iter().rev().copied());
        for (position, c) in calls.iter().enumerate() {
            indexed.take(c, position);
        }
        indexed.refill(refs.iter().copied());
        for (position, c) in calls.iter().enumerate() {
            let old = find_result_by_scan(c, position, &refs, &mut used).map(|i| refs[i] as *const ToolResult);
            let new = indexed.take(c, position).map(|r| r as *const ToolResult);
            prop_assert_eq!(old, new, "call {} ({:?})", position, c);
        }
    }
}
