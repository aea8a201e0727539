//! Tool-result outcomes: normalise, recognise errors, fingerprint, hash.
//!
//! An outcome is a 128-bit hash (the first 16 bytes of SHA-256) of a result
//! after normalisation (DESIGN §3): configured volatile JSON keys removed at
//! any depth, regex masks removed from text (string values of JSON results
//! included), whitespace trimmed. Text that is itself a JSON object or array
//! is parsed so volatile keys apply. SHA-256 is already a dependency and runs
//! once per result (results are small next to the request); 128 bits make an
//! accidental collision negligible.
//!
//! Errors are recognised from structure first — the dialect's `is_error`, a
//! non-empty `error` member, a non-zero `exit_code` / `exitCode` /
//! `returncode` / `exit_status` in a JSON result, or an `Exit code: N` /
//! `Process exited with code N` / `<returncode>N</returncode>` line among the
//! first lines of a text result (Codex, mini-swe-agent) — then from the
//! configured error patterns matched at the start of the result's first line.
//! The fingerprint is the first line anywhere in the error text that matches
//! an error pattern (a Python `Traceback` line defers to the last matching
//! line, which names the exception), digits and hex ids masked; with no
//! matching line it is the outcome hash itself.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::settings::Settings;
use crate::transcript::{ResultContent, ToolResult, canonical_json};

/// A normalised tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Hash of the normalised result.
    pub hash: u128,
    /// The result is an error (structure or pattern).
    pub is_error: bool,
    /// Error fingerprint hash (0 when not an error).
    pub fingerprint: u64,
    /// The result was a known dedup notice: "same as the previous outcome".
    pub dedup: bool,
}

static EXIT_LINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?mi)^\s*(?:exit code|process exited with code|exit status|<returncode>)[:= ]*(-?\d+)").ok()
});
static FINGERPRINT_MASK: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)0x[0-9a-f]+|\b[0-9a-f]{7,}\b|\d+").ok());

const EXIT_KEYS: &[&str] = &["exit_code", "exitCode", "returncode", "exit_status", "exitStatus"];

/// Computes the outcome of a tool result under `settings`.
pub fn outcome_of(result: &ToolResult, settings: &Settings) -> Outcome {
    match &result.content {
        ResultContent::Json(value) => json_outcome(value.clone(), result.is_error, settings),
        ResultContent::Text(text) => {
            let trimmed = text.trim_start();
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
                    return json_outcome(value, result.is_error, settings);
                }
            }
            text_outcome(text, result.is_error, settings)
        }
    }
}

fn text_outcome(text: &str, flagged: bool, settings: &Settings) -> Outcome {
    let masked = mask(text, settings);
    let body = masked.trim();
    let dedup = settings.dedup_notices.iter().any(|r| r.is_match(body));
    let exit_error = exit_code_line(body).is_some_and(|code| code != 0);
    let first_line = body.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let pattern_error = settings
        .error_pattern
        .as_ref()
        .is_some_and(|r| r.is_match(first_line.trim_start()));
    let hash = hash128(body.as_bytes());
    let is_error = !dedup && (flagged || exit_error || pattern_error);
    Outcome {
        hash,
        is_error,
        fingerprint: if is_error {
            fingerprint(body, hash, settings)
        } else {
            0
        },
        dedup,
    }
}

fn json_outcome(mut value: Value, flagged: bool, settings: &Settings) -> Outcome {
    strip(&mut value, settings);
    let canonical = canonical_json(&value);
    let hash = hash128(canonical.trim().as_bytes());
    let (structural, error_text) = json_error(&value);
    let is_error = flagged || structural;
    let fingerprint = if is_error {
        let text = error_text.unwrap_or_else(|| canonical.clone());
        fingerprint(&text, hash, settings)
    } else {
        0
    };
    Outcome {
        hash,
        is_error,
        fingerprint,
        dedup: false,
    }
}

/// Removes volatile keys at any depth and masks string values.
fn strip(value: &mut Value, settings: &Settings) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !settings.volatile_keys.iter().any(|v| v == k));
            for v in map.values_mut() {
                strip(v, settings);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip(v, settings)),
        Value::String(s) if !settings.outcome_masks.is_empty() => {
            let masked = mask(s, settings);
            *s = masked.trim().to_owned();
        }
        _ => {}
    }
}

/// Whether a (stripped) JSON result is an error by structure, and the text to
/// fingerprint.
fn json_error(value: &Value) -> (bool, Option<String>) {
    let Value::Object(map) = value else {
        return (false, None);
    };
    let as_text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| Some(canonical_json(v))),
        Value::Null | Value::Bool(false) => None,
        other => Some(other.to_string()),
    };
    if let Some(err) = map.get("error").and_then(as_text).filter(|t| !t.is_empty()) {
        return (true, Some(err));
    }
    let code = EXIT_KEYS.iter().find_map(|k| map.get(*k)).and_then(Value::as_i64);
    if code.is_some_and(|c| c != 0) {
        let text = ["stderr", "output", "stdout", "llmContent"]
            .iter()
            .filter_map(|k| map.get(*k).and_then(Value::as_str))
            .find(|s| !s.trim().is_empty())
            .map(str::to_owned);
        return (true, text);
    }
    (false, None)
}

/// Applies the configured masks (matches removed).
fn mask(text: &str, settings: &Settings) -> String {
    let mut out = text.to_owned();
    for re in &settings.outcome_masks {
        if re.is_match(&out) {
            out = re.replace_all(&out, "").into_owned();
        }
    }
    out
}

/// The exit code from an `Exit code: N`-style line among the first 6 lines.
fn exit_code_line(body: &str) -> Option<i64> {
    let head: String = body.lines().take(6).collect::<Vec<_>>().join("\n");
    let re = EXIT_LINE.as_ref()?;
    re.captures(&head)?.get(1)?.as_str().parse().ok()
}

/// The error fingerprint of a text: the first line matching an error pattern
/// (a `Traceback` lead-in defers to the last matching line), digits and hex
/// ids masked; the outcome hash when no line matches.
pub(crate) fn fingerprint(text: &str, fallback: u128, settings: &Settings) -> u64 {
    let Some(pattern) = settings.error_pattern.as_ref() else {
        return fallback as u64;
    };
    let mut matching = text.lines().map(str::trim).filter(|l| pattern.is_match(l));
    let Some(first) = matching.next() else {
        return fallback as u64;
    };
    let line = if first.starts_with("Traceback") {
        matching.next_back().unwrap_or(first)
    } else {
        first
    };
    let masked = match FINGERPRINT_MASK.as_ref() {
        Some(re) => re.replace_all(line, "#").into_owned(),
        None => line.to_owned(),
    };
    hash64(masked.as_bytes())
}

/// The first 16 bytes of SHA-256.
pub(crate) fn hash128(bytes: &[u8]) -> u128 {
    let digest = Sha256::digest(bytes);
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

/// A fast 64-bit hash (FNV-1a with a final avalanche) for internal keys that
/// never leave the process: user texts, message keys, fingerprints.
pub(crate) fn hash64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
