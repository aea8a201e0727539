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

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::settings::Settings;
use crate::transcript::{Arguments, ResultContent, ToolCall, ToolResult, canonical_json};

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
/// Volatile values inside result text, masked before hashing (UUIDs, ISO
/// timestamps, clock times, durations, pids).
static VOLATILE_TEXT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i-u)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
        r"|\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
        r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b",
        r"|\b\d+(?:\.\d+)?\s?(?:ns|us|ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)\b",
        r"|\b(?:pid|pgid|process)[ =:#]*\d+",
    ))
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

/// Calls `f` with every string of a JSON value, at any depth.
pub(crate) fn strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| strings(v, f)),
        _ => {}
    }
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

/// Applies the configured masks (matches removed), then [`mask_volatile`].
fn mask(text: &str, settings: &Settings) -> String {
    let mut out = Cow::Borrowed(text);
    for re in &settings.outcome_masks {
        // Most results hold none of the banners: a literal search spares
        // the regex scan (5 masks were 4 % of a replay's instructions).
        if required_literal(re.as_str()).is_some_and(|lit| !out.contains(lit)) {
            continue;
        }
        if let Cow::Owned(masked) = re.replace_all(&out, "") {
            out = Cow::Owned(masked);
        }
    }
    mask_volatile(&out)
}

/// A literal every match of `pattern` starts with, when the pattern is a
/// plain `^literal…` (optionally after `(?m)`) with no alternation and no
/// case folding: what [`mask`] checks for before running the regex.
fn required_literal(pattern: &str) -> Option<&str> {
    if pattern.contains('|') {
        return None;
    }
    let rest = pattern
        .strip_prefix("(?m)")
        .unwrap_or(pattern)
        .strip_prefix('^')?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, ' ' | ':' | '_' | '-' | ',');
    let mut end = rest.find(|c: char| !plain(c)).unwrap_or(rest.len());
    // A quantifier after the literal applies to its last character.
    if rest[end..].starts_with(['?', '*', '{']) {
        end = end.saturating_sub(1);
    }
    (end >= 4).then(|| &rest[..end])
}

/// Masks volatile values in text: UUIDs, ISO timestamps, clock times,
/// durations (`0.52s`, `12 ms`, `3 minutes`), pids, and tokens that look
/// random — hex of 8 or more characters mixing letters and digits, and words
/// of 6 to 40 letters and digits with at least two of each and three
/// letter/digit alternations (`tmpa8f3k2x1`; `python3`, `x86_64`, `sha256`
/// stay). Plain numbers stay: a count that grows is progress.
pub(crate) fn mask_volatile(text: &str) -> String {
    match VOLATILE_TEXT.as_ref() {
        // One pass: random tokens masked while no byte could start a value
        // the regex masks (the common case: no regex scan at all).
        Some(re) => match mask_tokens_unless_volatile(text) {
            Some(masked) => masked,
            None => mask_tokens(&re.replace_all(text, "~")),
        },
        None => mask_tokens(text),
    }
}

/// A byte after which an alphanumeric word is part of a longer name.
fn joiner(b: u8) -> bool {
    matches!(b, b'_' | b'.' | b'-')
}

/// Masks the random tokens (see [`random_token`]) of `text`.
fn mask_tokens(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Masked::new(text);
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        let mut digits = false;
        while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
            digits |= bytes[i].is_ascii_digit();
            i += 1;
        }
        if digits {
            out.word(start, i);
        }
    }
    out.finish()
}

/// [`mask_tokens`] fused with [`may_hold_volatile`]: `None` as soon as a
/// byte could start a [`VOLATILE_TEXT`] match (the caller then runs the
/// regex first), else the text with its random tokens masked. Only the
/// words around digits are looked at: a random token holds a digit.
fn mask_tokens_unless_volatile(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Masked::new(text);
    // Bytes before this were seen (words are scanned whole).
    let mut seen = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !VOLATILE_TRIGGER[usize::from(bytes[i])] {
            i += 1;
            continue;
        }
        if volatile_at(bytes, i) {
            return None;
        }
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        // The word around this digit: its start lies in bytes already
        // passed (letters, or `p`s checked above).
        let mut start = i;
        while start > seen && bytes[start - 1].is_ascii_alphanumeric() {
            start -= 1;
        }
        let mut end = i + 1;
        while end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
            if VOLATILE_TRIGGER[usize::from(bytes[end])] && volatile_at(bytes, end) {
                return None;
            }
            end += 1;
        }
        out.word(start, end);
        seen = end;
        i = end;
    }
    Some(out.finish())
}

/// The masked copy of a text, written only from its first random token on.
struct Masked<'t> {
    text: &'t str,
    out: String,
    /// End of the text copied (or masked) so far.
    last: usize,
}

impl<'t> Masked<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            text,
            out: String::new(),
            last: 0,
        }
    }

    /// The alphanumeric word `start..end` (holding a digit): masked when
    /// it looks random. A word joined to others (`x86_64`, `v1.2.3`,
    /// `pod-ab12cd34`) is part of a name: only its long hex counts there.
    fn word(&mut self, start: usize, end: usize) {
        if !(6..=40).contains(&(end - start)) {
            return;
        }
        let bytes = self.text.as_bytes();
        let joined = start > 0 && joiner(bytes[start - 1]) || end < bytes.len() && joiner(bytes[end]);
        if random_token(&bytes[start..end], joined) {
            if self.out.capacity() == 0 {
                self.out.reserve(self.text.len());
            }
            self.out.push_str(&self.text[self.last..start]);
            self.out.push('~');
            self.last = end;
        }
    }

    fn finish(mut self) -> String {
        if self.last == 0 {
            return self.text.to_owned();
        }
        self.out.push_str(&self.text[self.last..]);
        self.out
    }
}

/// Bytes that can start a [`VOLATILE_TEXT`] candidate: digits, `-` and
/// `p`/`P`; every other byte costs one table lookup.
const VOLATILE_TRIGGER: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = b'0';
    while b <= b'9' {
        t[b as usize] = true;
        b += 1;
    }
    t[b'-' as usize] = true;
    t[b'p' as usize] = true;
    t[b'P' as usize] = true;
    t
};

/// Whether [`VOLATILE_TEXT`] can match anywhere in `text`: one cheap pass
/// that every match passes (a superset), so the regex scans only texts
/// that may hold a value it masks (see [`volatile_at`]).
#[cfg(test)]
fn may_hold_volatile(text: &[u8]) -> bool {
    (0..text.len()).any(|i| VOLATILE_TRIGGER[usize::from(text[i])] && volatile_at(text, i))
}

/// Whether a [`VOLATILE_TEXT`] candidate starts at trigger byte `i`. Each
/// alternative needs one of: a `-` after 8 hex characters or after a digit
/// (UUIDs, dates); a digit, `:` and a digit (clock times); a digit, at most
/// one whitespace and a unit's first letter `n u m s h` (durations); `pid`,
/// `pgid` or `process` followed by `[ =:#]*` and a digit.
fn volatile_at(text: &[u8], i: usize) -> bool {
    let at = |i: usize| text.get(i).copied().unwrap_or(0);
    let c = text[i];
    if c == b'-' {
        return i >= 8 && text[i - 8..i].iter().all(u8::is_ascii_hexdigit);
    }
    if c.is_ascii_digit() {
        let next = at(i + 1);
        if next == b'-' || next == b':' && at(i + 2).is_ascii_digit() {
            return true;
        }
        let unit = if next.is_ascii_whitespace() {
            at(i + 2)
        } else {
            next
        };
        return matches!(unit.to_ascii_lowercase(), b'n' | b'u' | b'm' | b's' | b'h');
    }
    let rest = &text[i + 1..];
    let word = ["id", "gid", "rocess"].iter().find_map(|w| {
        rest.get(..w.len())
            .filter(|r| r.eq_ignore_ascii_case(w.as_bytes()))
            .map(|_| w.len())
    });
    word.is_some_and(|len| {
        rest[len..]
            .iter()
            .find(|b| !matches!(b, b' ' | b'=' | b':' | b'#'))
            .is_some_and(u8::is_ascii_digit)
    })
}

/// Whether an alphanumeric word looks random (see [`mask_volatile`]).
fn random_token(word: &[u8], joined: bool) -> bool {
    if word.len() < 6 || word.len() > 40 {
        return false;
    }
    let digits = word.iter().filter(|b| b.is_ascii_digit()).count();
    let letters = word.len() - digits;
    if digits == 0 || letters == 0 {
        return false;
    }
    let hex = word.iter().all(u8::is_ascii_hexdigit);
    if hex && word.len() >= 8 {
        return true;
    }
    if joined {
        return false;
    }
    let switches = word
        .windows(2)
        .filter(|w| w[0].is_ascii_digit() != w[1].is_ascii_digit())
        .count();
    digits >= 2 && letters >= 2 && switches >= 3
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
mod tests {
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
}
