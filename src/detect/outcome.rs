//! Tool-result outcomes: normalise, recognise errors, fingerprint, hash.
//!
//! An outcome is a 128-bit hash (the first 16 bytes of SHA-256) of a result
//! after normalisation (DESIGN §3, issue #12 point 1): volatile JSON keys
//! removed at any depth (the configured names, compared in any case style —
//! `request_id`, `requestId`, `RequestID` — and every id-like key: `id`,
//! `…_id`, `…Id`, `uuid`, `pid`), configured regex masks removed from text
//! (string values of JSON results included), then volatile values masked in
//! text (`mask_volatile`: UUIDs, long hex, short random tokens, timestamps,
//! clock times, durations, pids), whitespace trimmed. Text that is itself a
//! JSON object or array is parsed so volatile keys apply. SHA-256 runs once
//! per result and the session keeps the outcome with the step, so an item is
//! normalised once, when it is new (see `super::step::extract`).
//!
//! Results are read in every shape an agent writes them: the text of a JSON
//! result is the text nested under `output`, `result`, `stdout`, `stderr`,
//! `error`, `content`, `llmContent`, `text`, `message` at any depth (Gemini
//! CLI's `{"output": "… Exit Code: 1"}`, an SDK tool's `{"result": "Error: …"}`),
//! and the text rules below apply to each such text as to a text result.
//!
//! A result is a failure by structure — the dialect's `is_error` (Anthropic
//! `tool_result.is_error`, Gemini `response.error`), a non-empty `error`
//! member, a non-zero `exit_code` / `exitCode` / `returncode` / `exit_status`
//! at any depth, an `Exit code: N` / `Exit Code: N` / `Process exited with
//! code N` / `<returncode>N</returncode>` line (N ≠ 0) among the first lines
//! of a text, an agent's failure wrapper (Cline's `The tool execution failed
//! with the following error: <error>…</error>`, matched by the error
//! patterns) — or when the first line of a text matches a configured error
//! pattern (anchored at the line start).
//!
//! The fingerprint says *which* failure: the failure's own text (the inside
//! of an `<error>…</error>` wrapper, else the text), lines echoed from the
//! call's own arguments removed (Cline echoes the SEARCH block), then its
//! first line matching an error pattern (a Python `Traceback` line defers to
//! the last matching line, which names the exception) with digits, hex ids,
//! URLs and paths masked. An exit-code marker is never that line: it says the
//! step failed, not which error, so a failure with no matching line is
//! fingerprinted by its whole normalised text without the marker, and two
//! different failures with the same exit code stay different errors.

mod mask;

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::echo::strings;
use super::settings::Settings;
use crate::transcript::{Arguments, ResultContent, ToolCall, ToolResult, canonical_json};
use mask::mask;

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
static FINGERPRINT_MASK: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)[a-z][a-z0-9+.-]*://[^\s'"`)>\]]*|(?:[~.]?/)?[\w.-]+(?:/[\w.-]+)+/?|\b[\w-]+\.[a-z][a-z0-9]{0,4}\b|0x[0-9a-f]+|\b[0-9a-f]{7,}\b|\d+"#,
    )
    .ok()
});
/// An `<error>…</error>` failure wrapper (Cline).
/// What every [`EXIT_LINE`] match contains: a literal search (vectorised)
/// that spares the line-anchored regex most texts.
static EXIT_HINT: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?i)exit|returncode").ok());
static ERROR_WRAPPER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<error>\s*(.*?)\s*(?:</error>|$)").ok());

const EXIT_KEYS: &[&str] = &["exit_code", "exitCode", "returncode", "exit_status", "exitStatus"];
/// Keys whose string values are a JSON result's text.
pub(crate) const TEXT_KEYS: &[&str] = &[
    "output",
    "result",
    "stdout",
    "stderr",
    "error",
    "content",
    "llmContent",
    "text",
    "message",
];
/// Longest text of a JSON result read for errors, bytes.
const TEXT_CAP: usize = 64 * 1024;

/// Computes the outcome of a tool result under `settings`, without its call
/// (no echo removal).
pub fn outcome_of(result: &ToolResult, settings: &Settings) -> Outcome {
    outcome_for(result, None, settings)
}

/// Computes the outcome of a tool result answering `call`: as
/// [`outcome_of`], and a failure's fingerprint ignores lines the result
/// echoes from the call's own arguments.
pub fn outcome_for(result: &ToolResult, call: Option<&ToolCall>, settings: &Settings) -> Outcome {
    let echo = Echo::of(call);
    match &result.content {
        ResultContent::Json(value) => json_outcome(value.clone(), result.is_error, &echo, settings),
        ResultContent::Text(text) => {
            let trimmed = text.trim_start();
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
                    return json_outcome(value, result.is_error, &echo, settings);
                }
            }
            text_outcome(text, result.is_error, &echo, settings)
        }
    }
}

/// What a failure's text may echo of its call: the hashes of the (trimmed,
/// at least 4 bytes) lines of the call's string arguments, and the call
/// itself for its pieces ([`super::echo`]), read only for a failure.
#[derive(Default)]
struct Echo<'c> {
    lines: HashSet<u64>,
    call: Option<&'c ToolCall>,
}

impl<'c> Echo<'c> {
    fn of(call: Option<&'c ToolCall>) -> Self {
        let lines = match call.and_then(|c| c.digest.as_ref()) {
            Some(digest) => digest.echo.iter().copied().collect(),
            None => echo_lines(call).collect(),
        };
        Self { lines, call }
    }

    /// The text without the lines it echoes.
    fn remove(&self, text: &str) -> String {
        if self.lines.is_empty() {
            return text.to_owned();
        }
        text.lines()
            .filter(|l| !self.lines.contains(&hash64(l.trim().as_bytes())))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The error fingerprint of a failure's text: its echoed lines removed,
    /// and the argument pieces it echoes removed from the line (or text)
    /// that names the error (issue #38 point 2; only that subject is
    /// scanned for them).
    fn fingerprint(&self, text: &str, settings: &Settings) -> u64 {
        let pieces = self.call.map(super::echo::pieces).unwrap_or_default();
        fingerprint(&self.remove(text), &pieces, settings)
    }
}

/// The JSON a result's outcome hashes (volatile keys removed, strings
/// masked), when the result is JSON (a JSON value, or a text that is a JSON
/// object or array); with [`json_hash`], what `super::json_volatile`
/// compares and rehashes.
pub(crate) fn stripped_json(result: &ToolResult, settings: &Settings) -> Option<Value> {
    let mut value = match &result.content {
        ResultContent::Json(value) => value.clone(),
        ResultContent::Text(text) => {
            let trimmed = text.trim_start();
            if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
                return None;
            }
            serde_json::from_str::<Value>(trimmed).ok()?
        }
    };
    strip(&mut value, settings);
    Some(value)
}

/// The hash of a stripped JSON result, as its outcome has it.
pub(crate) fn json_hash(value: &Value) -> u128 {
    hash128(canonical_json(value).trim().as_bytes())
}

/// Hashes of the (trimmed, at least 4 bytes) lines of `call`'s string
/// arguments, in argument order (duplicates possible).
pub(crate) fn echo_lines(call: Option<&ToolCall>) -> impl Iterator<Item = u64> {
    let mut lines = Vec::new();
    let mut add = |text: &str| {
        for line in text.lines().map(str::trim).filter(|l| l.len() >= 4) {
            lines.push(hash64(line.as_bytes()));
        }
    };
    match call.map(|c| &c.arguments) {
        Some(Arguments::Json(value)) => strings(value, &mut |s| add(s)),
        Some(Arguments::Unparsable(raw)) => add(raw),
        None => {}
    }
    lines.into_iter()
}

/// Error reading of one text: (is a failure, exit marker seen).
fn text_failure(body: &str, settings: &Settings) -> bool {
    let exit_error = exit_code_line(body).is_some_and(|code| code != 0);
    let first_line = body.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let pattern_error = settings
        .error_pattern
        .as_ref()
        .is_some_and(|r| r.is_match(first_line.trim_start()));
    exit_error || pattern_error
}

fn text_outcome(text: &str, flagged: bool, echo: &Echo<'_>, settings: &Settings) -> Outcome {
    let masked = mask(text, settings);
    let body = masked.trim();
    let dedup = settings.dedup_notices.iter().any(|r| r.is_match(body));
    let hash = hash128(body.as_bytes());
    let is_error = !dedup && (flagged || text_failure(body, settings));
    Outcome {
        hash,
        is_error,
        fingerprint: if is_error {
            echo.fingerprint(body, settings)
        } else {
            0
        },
        dedup,
    }
}

fn json_outcome(mut value: Value, flagged: bool, echo: &Echo<'_>, settings: &Settings) -> Outcome {
    strip(&mut value, settings);
    let canonical = canonical_json(&value);
    let hash = hash128(canonical.trim().as_bytes());
    let mut texts = Vec::new();
    nested_texts(&value, 0, &mut texts);
    let structural = flagged || json_error(&value) || texts.iter().any(|t| text_failure(t, settings));
    let fingerprint = if structural {
        let error = error_member(&value);
        let text = match error {
            Some(err) => err,
            None if texts.is_empty() => canonical,
            None => texts.join("\n"),
        };
        echo.fingerprint(&text, settings)
    } else {
        0
    };
    Outcome {
        hash,
        is_error: structural,
        fingerprint,
        dedup: false,
    }
}

/// Whether a key is volatile: a configured name in any case style
/// (`request_id` = `requestId` = `RequestID`), or id-like (`id`, `…_id`,
/// `…-id`, `…Id`, `…ID`, `uuid`, `guid`).
fn volatile_key(key: &str, settings: &Settings) -> bool {
    let folded = fold(key);
    if settings.volatile_keys.iter().any(|v| fold(v) == folded) {
        return true;
    }
    if matches!(folded.as_str(), "id" | "uuid" | "guid" | "pid") {
        return true;
    }
    let lower = key.to_ascii_lowercase();
    lower.ends_with("_id")
        || lower.ends_with("-id")
        || key.ends_with("ID") && key.len() > 2
        || key.strip_suffix("Id").is_some_and(|head| {
            head.chars()
                .last()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// A key without case and separators.
fn fold(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Removes volatile keys at any depth and masks string values.
fn strip(value: &mut Value, settings: &Settings) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !volatile_key(k, settings));
            for v in map.values_mut() {
                strip(v, settings);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip(v, settings)),
        Value::String(s) => {
            let masked = mask(s, settings);
            *s = masked.trim().to_owned();
        }
        _ => {}
    }
}

/// The texts of a JSON result: string values under [`TEXT_KEYS`] at any
/// depth (and strings of arrays under them), in document order, up to
/// [`TEXT_CAP`] bytes in all.
fn nested_texts<'v>(value: &'v Value, used: usize, out: &mut Vec<&'v str>) -> usize {
    let mut used = used;
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if used >= TEXT_CAP {
                    break;
                }
                match v {
                    Value::String(s) if TEXT_KEYS.contains(&k.as_str()) => {
                        out.push(s);
                        used += s.len();
                    }
                    Value::Array(items) if TEXT_KEYS.contains(&k.as_str()) => {
                        for item in items {
                            match item {
                                Value::String(s) => {
                                    out.push(s);
                                    used += s.len();
                                }
                                other => used = nested_texts(other, used, out),
                            }
                        }
                    }
                    other => used = nested_texts(other, used, out),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                used = nested_texts(item, used, out);
            }
        }
        _ => {}
    }
    used
}

/// The text of a non-empty `error` member (top level).
fn error_member(value: &Value) -> Option<String> {
    let Value::Object(map) = value else {
        return None;
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
    map.get("error").and_then(as_text).filter(|t| !t.is_empty())
}

/// Whether a (stripped) JSON result is an error by structure: a non-empty
/// `error` member, or a non-zero exit code at any depth.
fn json_error(value: &Value) -> bool {
    if error_member(value).is_some() {
        return true;
    }
    fn exit(value: &Value, depth: usize) -> bool {
        match value {
            Value::Object(map) if depth < 4 => {
                EXIT_KEYS
                    .iter()
                    .filter_map(|k| map.get(*k))
                    .filter_map(Value::as_i64)
                    .any(|c| c != 0)
                    || map.values().any(|v| exit(v, depth + 1))
            }
            _ => false,
        }
    }
    exit(value, 0)
}

/// The exit code from an `Exit code: N`-style line among the first 6 lines.
fn exit_code_line(body: &str) -> Option<i64> {
    let end = body.match_indices('\n').nth(5).map_or(body.len(), |(i, _)| i);
    let head = &body[..end];
    if EXIT_HINT.as_ref().is_some_and(|hint| !hint.is_match(head)) {
        return None;
    }
    let re = EXIT_LINE.as_ref()?;
    re.captures(head)?.get(1)?.as_str().parse().ok()
}

/// The error fingerprint of a failure's text (see the module doc): the
/// inside of an `<error>` wrapper if any; its first line matching an error
/// pattern (a `Traceback` lead-in defers to the last matching line) with
/// digits, hex ids, URLs and paths masked; else the whole text without
/// exit-code marker lines, digits masked.
/// The `pieces` of the call's arguments are removed from the subject before
/// it is masked (see [`super::echo`]).
fn fingerprint(text: &str, pieces: &[String], settings: &Settings) -> u64 {
    let inner = ERROR_WRAPPER
        .as_ref()
        .and_then(|re| re.captures(text))
        .and_then(|c| c.get(1))
        .map(|m| m.as_str())
        .filter(|t| !t.trim().is_empty());
    let text = inner.unwrap_or(text);
    let exit = EXIT_LINE.as_ref();
    let not_marker = |l: &&str| !exit.is_some_and(|re| re.is_match(l));
    let line = settings.error_pattern.as_ref().and_then(|pattern| {
        let mut matching = text
            .lines()
            .map(str::trim)
            .filter(not_marker)
            .filter(|l| pattern.is_match(l));
        let first = matching.next()?;
        Some(if first.starts_with("Traceback") {
            matching.next_back().unwrap_or(first)
        } else {
            first
        })
    });
    let subject = match line {
        Some(line) => line.to_owned(),
        None => text
            .lines()
            .map(str::trim)
            .filter(not_marker)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let subject = if pieces.is_empty() {
        subject
    } else {
        super::echo::without(&subject, pieces)
    };
    let masked = match FINGERPRINT_MASK.as_ref() {
        Some(re) => re.replace_all(&subject, "#").into_owned(),
        None => subject,
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

/// A fast 64-bit hash (FNV-1a with a final avalanche) for internal keys:
/// user texts, message keys, fingerprints (also kept in the shared state
/// store, so the function must not change between versions).
pub(crate) fn hash64(bytes: &[u8]) -> u64 {
    hash64_parts(&[bytes])
}

/// [`hash64`] of the parts' concatenation, without building it.
pub(crate) fn hash64_parts(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
