//! Unit tests of tool-result outcomes: normalising, error recognition, fingerprints, hashes.

use super::mask::{
    VOLATILE_TEXT, mask_tokens, mask_tokens_unless_volatile, mask_volatile, may_hold_volatile,
    required_literal,
};
use super::*;
use serde_json::json;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    /// The prefilter never skips a text the volatile-value regex would change.
    #[test]
    fn the_volatile_prefilter_misses_no_match(
        parts in proptest::collection::vec(proptest::sample::select(vec![
            "0", "12", "2024", "-", ":", ".", ",", " ", "\n", "s", "ms", "Min", "h", "sec", "x",
            "deadbeef", "a1b2c3d4", "-0000-", "T", "Z", "+", "pid", "PGID", "Process", "=", "#",
            "é", "_",
        ]), 0..24)
    ) {
        let text = parts.concat();
        if VOLATILE_TEXT.as_ref().is_some_and(|re| re.is_match(&text)) {
            proptest::prop_assert!(may_hold_volatile(text.as_bytes()), "{:?}", text);
        }
    }

    /// The fused pass masks exactly as the regex then the token pass
    /// do, and gives up exactly where the prefilter says a value may be.
    #[test]
    fn the_fused_pass_masks_as_the_two_passes_do(
        parts in proptest::collection::vec(proptest::sample::select(vec![
            "0", "12", "2024", "-", ":", ".", " ", "\n", "s", "ms", "h", "x", "_", "pid", "=",
            "deadbeef", "a1b2c3d4", "tmpa8f3k2x1", "python3", "x86_64", "sha256", "k9z8y7",
            "ab12cd34ef56", "é", "p", "item_",
        ]), 0..24)
    ) {
        let text = parts.concat();
        let fused = mask_tokens_unless_volatile(&text);
        proptest::prop_assert_eq!(fused.is_none(), may_hold_volatile(text.as_bytes()), "{:?}", text);
        let two_passes = VOLATILE_TEXT
            .as_ref()
            .map(|re| mask_tokens(&re.replace_all(&text, "~")));
        proptest::prop_assert_eq!(Some(mask_volatile(&text)), two_passes, "{:?}", text);
        if let Some(fused) = fused {
            proptest::prop_assert_eq!(fused, mask_tokens(&text), "{:?}", text);
        }
    }
}

#[test]
fn the_volatile_prefilter_passes_each_kind_of_value() {
    for text in [
        "id 123e4567-e89b-12d3-a456-426614174000 ok",
        "at 2026-12-01T10:00:00Z",
        "at 10:00:01",
        "took 0.52s",
        "took 12 ms",
        "PID: 4242",
        "process=7",
    ] {
        assert!(may_hold_volatile(text.as_bytes()), "{text}");
        assert_ne!(mask_volatile(text), text, "{text}");
    }
    assert!(!may_hold_volatile(b"0: fn item_0() { /* body */ }"));
}

#[test]
fn a_mask_is_skipped_only_when_its_required_literal_is_absent() {
    assert_eq!(required_literal(r"(?m)^Chunk ID: .*$"), Some("Chunk ID: "));
    assert_eq!(
        required_literal(r"(?m)^Wall time: .*seconds?$"),
        Some("Wall time: ")
    );
    assert_eq!(required_literal(r"^Commands?: x"), Some("Command"));
    assert_eq!(required_literal(r"(?i)^chunk id"), None);
    assert_eq!(required_literal(r"(?m)^(a|b)"), None);
    assert_eq!(required_literal(r"(?m)^ab"), None);
    assert_eq!(required_literal(r"x^Chunk"), None);
    let s = Settings::default();
    let masked = mask("Chunk ID: 1\nhello", &s);
    assert_eq!(masked.trim(), "hello");
}

#[test]
fn hash64_of_parts_is_the_hash_of_their_concatenation() {
    assert_eq!(
        hash64_parts(&[b"id:", b"call_1", b"sig"]),
        hash64(b"id:call_1sig")
    );
    assert_eq!(hash64_parts(&[]), hash64(b""));
    assert_ne!(hash64(b"a"), hash64(b"b"));
}

fn text(s: &str) -> ToolResult {
    ToolResult {
        call_id: None,
        name: Some("t".into()),
        content: ResultContent::Text(s.into()),
        is_error: false,
    }
}

#[test]
fn codex_chunk_id_and_wall_time_lines_do_not_change_the_outcome() {
    let s = Settings::default();
    let a = outcome_of(
        &text("Chunk ID: 8f2a\nWall time: 0.5 seconds\nOutput:\nhello"),
        &s,
    );
    let b = outcome_of(
        &text("Chunk ID: 11c9\nWall time: 1.25 seconds\nOutput:\nhello"),
        &s,
    );
    assert_eq!(a.hash, b.hash);
    assert!(!a.is_error);
}

#[test]
fn volatile_keys_are_removed_at_any_depth_also_from_json_text() {
    let s = Settings::default();
    let a = outcome_of(
        &text(r#"{"out": "x", "meta": {"request_id": "a1", "ts": 1}}"#),
        &s,
    );
    let b = outcome_of(
        &text(r#"{"meta": {"request_id": "b2", "ts": 2}, "out": "x"}"#),
        &s,
    );
    assert_eq!(a.hash, b.hash);
}

#[test]
fn errors_are_recognised_from_structure_then_patterns() {
    let s = Settings::default();
    let gem = ToolResult {
        call_id: None,
        name: Some("run".into()),
        content: ResultContent::Json(json!({"output": "boom", "exit_code": 2})),
        is_error: false,
    };
    assert!(outcome_of(&gem, &s).is_error);
    assert!(
        outcome_of(
            &text("Exit code: 1\nWall time: 2 seconds\nOutput:\n== banner =="),
            &s
        )
        .is_error
    );
    assert!(outcome_of(&text("error: could not compile `x`"), &s).is_error);
    assert!(!outcome_of(&text("All good\nerror: mentioned later"), &s).is_error);
}

#[test]
fn fingerprint_skips_banners_and_masks_numbers() {
    let s = Settings::default();
    let a = outcome_of(
        &text("Exit code: 1\n=== test session starts ===\nValueError: bad id 123"),
        &s,
    );
    let b = outcome_of(
        &text("Exit code: 1\n=== test session starts ===\nValueError: bad id 987"),
        &s,
    );
    let c = outcome_of(
        &text("Exit code: 1\n=== test session starts ===\nKeyError: 'x'"),
        &s,
    );
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_ne!(a.fingerprint, c.fingerprint);
}

#[test]
fn claude_code_dedup_notice_is_recognised() {
    let s = Settings::default();
    let o = outcome_of(
        &text(
            "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead.",
        ),
        &s,
    );
    assert!(o.dedup && !o.is_error);
}
