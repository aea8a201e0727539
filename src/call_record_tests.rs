use serde_json::json;

use super::*;
use crate::detect::outcome_for;
use crate::transcript::{ResultContent, ToolResult};

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(Some(id.to_owned()), name, Arguments::Json(arguments))
}

/// A response built to be as large as a model can make it: more calls
/// than kept, huge ids and names, thousands of keys, long multi-line
/// strings, escapes that take six bytes per character.
fn pathological() -> Vec<ToolCall> {
    let long = "x\u{1}\"é".repeat(1_000);
    let lines: String = (0..2_000)
        .map(|i| format!("line number {i} of the file\n"))
        .collect();
    (0..MAX_CALLS + 6)
        .map(|i| {
            let mut map = Map::new();
            for k in 0..20 {
                map.insert(format!("{k}{}", "k".repeat(500)), Value::String(long.clone()));
            }
            map.insert("content".to_owned(), Value::String(lines.clone()));
            map.insert("nested".to_owned(), json!([[long.clone()], {"a": lines.clone()}]));
            call(
                &format!("{i}{}", "i".repeat(2_000)),
                &"n".repeat(2_000),
                Value::Object(map),
            )
        })
        .collect()
}

/// The issue: every key's size is bounded. The response record's calls
/// stay under MAX_RECORD_BYTES, one call under MAX_CALL_BYTES, whatever
/// the model emitted.
#[test]
fn a_pathological_response_record_stays_within_its_bound() {
    let settings = Settings::default();
    let calls = pathological();
    let whole = encode(&calls, &settings);
    assert!(!whole.is_empty());
    assert!(
        whole.len() <= MAX_RECORD_BYTES,
        "{} > {MAX_RECORD_BYTES}",
        whole.len()
    );
    assert_eq!(decode(&whole).len(), MAX_CALLS);
    let one = encode(&calls[..1], &settings);
    assert!(
        one.len() <= MAX_CALL_BYTES + 2,
        "{} > {MAX_CALL_BYTES}",
        one.len()
    );
    // An unparsable giant is bounded too.
    let raw = ToolCall::new(None, "t", Arguments::Unparsable("{\u{1}".repeat(100_000)));
    assert!(encode(&[raw], &settings).len() <= MAX_CALL_BYTES + 2);
}

/// Detection reads a stored call as it reads the call itself: the same
/// raw signature (merge key), identity (streaks) and failure fingerprint
/// (echo removal), although the arguments were cut.
#[test]
fn a_stored_call_keeps_what_detection_derives_from_its_full_arguments() {
    let settings = Settings::default();
    let body: String = (0..40)
        .map(|i| format!("fn item_{i}() {{ body {i} }}\n"))
        .collect();
    let original = vec![
        call("c1", "write_file", json!({"path": "src/lib.rs", "content": body})),
        call(
            "c2",
            "Bash",
            json!({"command": format!("cat   src/lib.rs # {}", "y".repeat(900)), "description": "look"}),
        ),
    ];
    let stored = decode(&encode(&original, &settings));
    assert_eq!(stored.len(), 2);
    let result = ToolResult {
        call_id: Some("c1".to_owned()),
        name: Some("write_file".to_owned()),
        content: ResultContent::Text(format!("Error: could not write\n{body}")),
        is_error: true,
    };
    for (a, b) in original.iter().zip(&stored) {
        assert_eq!(a.id, b.id);
        assert_eq!(a.name, b.name);
        assert_eq!(a.signature, b.signature);
        assert_eq!(
            crate::detect::identity::of(a, &settings),
            crate::detect::identity::of(b, &settings)
        );
        assert_eq!(
            outcome_for(&result, Some(a), &settings),
            outcome_for(&result, Some(b), &settings)
        );
    }
    // The arguments were cut: the stored form is not the original.
    assert_ne!(stored[0].arguments, original[0].arguments);
    // The echo hashes are those of the full arguments (40 lines of the
    // content, past the cut), so the checks above compared something.
    let Some(digest) = &stored[0].digest else {
        panic!("a stored call carries its digest");
    };
    let full: Vec<u64> = crate::detect::outcome::echo_lines(Some(&original[0])).collect();
    assert_eq!(digest.echo.len(), 41, "{full:?}");
    assert!(digest.echo.iter().all(|h| full.contains(h)));
}

/// Issue #15 point 6: no credentials in what is stored.
#[test]
fn stored_arguments_are_redacted() {
    let settings = Settings::default();
    let calls = vec![call(
        "c",
        "Bash",
        json!({
            "command": "curl -H 'Authorization: Bearer abcdefghijklmnop1234' https://x",
            "password": "hunter2hunter2",
            "env": {"OPENAI_API_KEY": "sk-proj-0123456789abcdefghij"}
        }),
    )];
    let text = String::from_utf8(encode(&calls, &settings)).unwrap_or_default();
    assert!(text.contains("[REDACTED]"), "{text}");
    for secret in [
        "abcdefghijklmnop1234",
        "hunter2hunter2",
        "sk-proj-0123456789abcdefghij",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

/// Short arguments are stored as they are (poll and exempt matchers read them).
#[test]
fn short_arguments_are_stored_unchanged() {
    let settings = Settings::default();
    let calls = vec![call("c", "read_file", json!({"path": "a.txt", "lines": [1, 2]}))];
    let stored = decode(&encode(&calls, &settings));
    assert_eq!(stored[0].arguments, calls[0].arguments);
}
