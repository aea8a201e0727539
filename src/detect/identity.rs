//! Call identity: which calls are "the same call" for the streak detectors.
//!
//! Issue #12 point 5. A call's identity is the SHA-256 [`Signature`] of its
//! tool name and its arguments after two steps:
//!
//! - (a) **per-tool identity** (`[loop_detection.call_identity]`): arguments
//!   that do not identify the call are dropped — free text and output
//!   shaping only. Defaults: every tool `justification`, `max_output_tokens`
//!   (Codex); `Bash` and `bash` `description`, `timeout` (Claude Code,
//!   OpenCode); `run_shell_command` `description` (Gemini CLI); `shell`
//!   `timeout_ms` (Codex); `execute_command` `requires_approval` (Cline).
//!   Everything that changes what runs stays: the command, paths, `dir_path`,
//!   `workdir`, `run_in_background`, …
//! - (b) **neutral rewrites** are undone: in a shell command (the string, or
//!   list of strings, under a `command`, `cmd`, `script` or `commandLine`
//!   key) whitespace runs, comments, quoting, line continuations, the order
//!   of a command's flags and the bundling of one-letter flags (`-la` =
//!   `-a -l`) do not count; in every single-token value and command word a
//!   trailing slash and URL tracking parameters (`utm_*`, `fbclid`, `gclid`,
//!   `ref`, …) do not count. A different path, URL path, word or identifier
//!   always makes a different call.
//!
//! Why a canonical rewrite and not a similarity sketch (the MinHash
//! suggestion): every neutral rewrite the issue names can be undone exactly,
//! while a similarity threshold would also merge calls that differ by one
//! path segment or identifier — which must never count as the same. The
//! result is stored as a hash, costs one linear pass over the arguments, and
//! only counts as a repeat where the detectors also see identical normalised
//! results (`identical_call` critical, no-progress evidence for warnings).
//! The raw signature (not this identity) remains the merge key of requests.

use serde_json::{Map, Value};

use super::outcome::{hash64, hash64_parts};
use super::settings::Settings;
use crate::transcript::{Arguments, Signature, ToolCall};

/// Keys (folded: lowercase, no `_`/`-`) whose values are shell commands.
const COMMAND_KEYS: &[&str] = &["command", "cmd", "script", "commandline", "shellcommand"];
/// URL query parameters that only track (removed); `utm_*` by prefix.
const TRACKING: &[&str] = &[
    "fbclid", "gclid", "msclkid", "mc_cid", "mc_eid", "ref", "ref_src", "_ga", "igshid", "si",
];

/// The identity of a call under `settings` (see the module doc).
pub(crate) fn of(call: &ToolCall, settings: &Settings) -> Signature {
    if let Some(digest) = &call.digest {
        // Read back from the shared store with bounded arguments: the
        // identity of the full ones, computed when they were stored.
        return digest.identity;
    }
    let Arguments::Json(Value::Object(map)) = &call.arguments else {
        return call.signature;
    };
    let ignored = ignored_args(call, settings);
    // Nothing to drop or undo (most calls of most tools): the identity is
    // the raw signature, already computed when the call was parsed.
    if map
        .iter()
        .all(|(key, value)| !ignored.contains(&key.as_str()) && unchanged(key, value))
    {
        return call.signature;
    }
    normalised(&call.name, map, &ignored)
}

/// The arguments of `call`'s tool that do not identify it
/// (`[loop_detection.call_identity]`).
fn ignored_args<'s>(call: &ToolCall, settings: &'s Settings) -> Vec<&'s str> {
    settings
        .call_identity
        .iter()
        .filter(|(tool, _)| tool == "*" || *tool == call.name)
        .flat_map(|(_, args)| args.iter().map(String::as_str))
        .collect()
}

/// The signature of `map` with the `ignored` keys dropped and every value
/// [`normal`].
fn normalised(name: &str, map: &Map<String, Value>, ignored: &[&str]) -> Signature {
    let mut out = Map::new();
    for (key, value) in map {
        if ignored.contains(&key.as_str()) {
            continue;
        }
        out.insert(key.clone(), normal(key, value));
    }
    Signature::of(name, &Arguments::Json(Value::Object(out)))
}

/// A value with neutral rewrites undone.
fn normal(key: &str, value: &Value) -> Value {
    let command = is_command_key(key);
    match value {
        Value::String(s) if command => Value::String(shell(s)),
        Value::Array(items) if command && items.iter().all(Value::is_string) => {
            let joined: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            Value::String(shell(&joined.join(" ")))
        }
        Value::String(s) if !s.trim().contains(char::is_whitespace) => Value::String(token(s.trim())),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), normal(k, v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(|v| normal(key, v)).collect()),
        other => other.clone(),
    }
}

/// Whether [`normal`] leaves `value` as it is (conservative: `false` may
/// still be unchanged). Allocates nothing.
fn unchanged(key: &str, value: &Value) -> bool {
    match value {
        Value::String(_) | Value::Array(_) if is_command_key(key) => false,
        Value::String(s) if !s.trim().contains(char::is_whitespace) => {
            s.trim().len() == s.len() && !(s.len() > 1 && s.ends_with('/')) && !s.contains("://")
        }
        Value::Object(map) => map.iter().all(|(k, v)| unchanged(k, v)),
        Value::Array(items) => items.iter().all(|v| unchanged(key, v)),
        _ => true,
    }
}

/// Whether a key's values are shell commands ([`COMMAND_KEYS`], folded).
fn is_command_key(key: &str) -> bool {
    COMMAND_KEYS.iter().any(|c| {
        let mut folded = key
            .bytes()
            .filter(u8::is_ascii_alphanumeric)
            .map(|b| b.to_ascii_lowercase());
        c.bytes().all(|b| folded.next() == Some(b)) && folded.next().is_none()
    })
}

/// One word: no trailing slash, no tracking parameters.
fn token(word: &str) -> String {
    let mut w = word.to_owned();
    if w.contains("://") {
        if let Some((head, query)) = w.split_once('?') {
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| {
                    let name = p.split('=').next().unwrap_or("");
                    !name.is_empty() && !name.starts_with("utm_") && !TRACKING.contains(&name)
                })
                .collect();
            let mut rebuilt = head.to_owned();
            while rebuilt.ends_with('/') && !rebuilt.ends_with("://") {
                rebuilt.pop();
            }
            if !kept.is_empty() {
                rebuilt.push('?');
                rebuilt.push_str(&kept.join("&"));
            }
            if let Some(f) = fragment {
                rebuilt.push('#');
                rebuilt.push_str(f);
            }
            w = rebuilt;
        }
    }
    while w.len() > 1 && w.ends_with('/') && !w.ends_with("://") {
        w.pop();
    }
    w
}

/// A shell word: its text, and whether any of it was quoted.
struct Word {
    text: String,
    quoted: bool,
}

/// Splits a shell command into words: quotes removed, comments and line
/// continuations dropped; unquoted `;`, `&&`, `||`, `|`, `&` and newlines
/// are words of their own.
fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut started = false;
    let mut chars = text.chars().peekable();
    let flush = |cur: &mut String, quoted: &mut bool, started: &mut bool, out: &mut Vec<Word>| {
        if *started {
            out.push(Word {
                text: std::mem::take(cur),
                quoted: *quoted,
            });
        }
        *quoted = false;
        *started = false;
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                started = true;
                quoted = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    cur.push(q);
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => {
                    started = true;
                    cur.push(n);
                }
            },
            '#' if !started => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        flush(&mut cur, &mut quoted, &mut started, &mut out);
                        out.push(Word {
                            text: "\n".into(),
                            quoted: false,
                        });
                        break;
                    }
                }
            }
            ';' | '|' | '&' | '\n' => {
                flush(&mut cur, &mut quoted, &mut started, &mut out);
                let mut op = c.to_string();
                if matches!(c, '|' | '&') && chars.peek() == Some(&c) {
                    op.push(c);
                    chars.next();
                }
                out.push(Word {
                    text: op,
                    quoted: false,
                });
            }
            c if c.is_whitespace() => flush(&mut cur, &mut quoted, &mut started, &mut out),
            c => {
                started = true;
                cur.push(c);
            }
        }
    }
    flush(&mut cur, &mut quoted, &mut started, &mut out);
    out
}

/// A shell command with neutral rewrites undone: per simple command, its
/// flags sorted into the flag positions (one-letter bundles expanded), words
/// normalised ([`token`]), joined by single separators.
fn shell(text: &str) -> String {
    let mut commands: Vec<Vec<String>> = vec![Vec::new()];
    for w in words(text) {
        let operator = !w.quoted && matches!(w.text.as_str(), ";" | "|" | "||" | "&" | "&&" | "\n");
        if operator {
            let sep = if w.text == "\n" { ";".to_owned() } else { w.text };
            if commands.last().is_some_and(|c| !c.is_empty()) {
                commands.push(vec![sep]);
                commands.push(Vec::new());
            }
            continue;
        }
        if let Some(current) = commands.last_mut() {
            let bundle = !w.quoted
                && w.text.len() >= 3
                && w.text.starts_with('-')
                && w.text[1..].chars().all(|c| c.is_ascii_alphabetic());
            let distinct = {
                let mut letters: Vec<char> = w.text.chars().skip(1).collect();
                letters.sort_unstable();
                letters.dedup();
                letters.len() + 1 == w.text.len()
            };
            if bundle && distinct && !w.text.starts_with("--") {
                current.extend(w.text[1..].chars().map(|c| format!("-{c}")));
            } else {
                current.push(token(&w.text));
            }
        }
    }
    let mut out = Vec::new();
    for mut command in commands.into_iter().filter(|c| !c.is_empty()) {
        let slots: Vec<usize> = (0..command.len())
            .filter(|&i| i > 0 && command[i].starts_with('-') && command[i] != "-" && command[i] != "--")
            .collect();
        let mut flags: Vec<String> = slots.iter().map(|&i| command[i].clone()).collect();
        flags.sort();
        for (slot, flag) in slots.into_iter().zip(flags) {
            command[slot] = flag;
        }
        out.push(command.join("\u{1f}"));
    }
    out.join(" ")
}

/// The call's *spelling-free* key (issue #38, `super::novelty`): the tool
/// name and the set of words its arguments hold, however they are spelled.
/// Beyond [`of`]'s rewrites it also forgets word order and repetition, a
/// leading `./`, a lone `.` or `--`, `--flag=value` (= `--flag value`), one
/// flag bundle of repeated letters, and a `| cat` at the end of a pipeline:
/// `ls -la ./src/`, `ls -a -l src | cat` and `ls src -al` share one key,
/// while another path or word gives another key. Arguments dropped by
/// `[loop_detection.call_identity]` do not count. Only `novelty` reads it,
/// and only together with a result already seen: two calls with one key
/// and different results are never judged alike.
pub(crate) fn loose(call: &ToolCall, settings: &Settings) -> u64 {
    let mut words: Vec<u64> = Vec::new();
    match &call.arguments {
        Arguments::Json(Value::Object(map)) => {
            let ignored = ignored_args(call, settings);
            for (key, value) in map.iter().filter(|(k, _)| !ignored.contains(&k.as_str())) {
                loose_words(key, value, &mut words);
            }
        }
        Arguments::Json(value) => loose_words("", value, &mut words),
        Arguments::Unparsable(raw) => shell_words(raw, &mut words),
    }
    // A set of words: order and repetition do not count.
    words.sort_unstable();
    words.dedup();
    words.iter().fold(hash64(call.name.as_bytes()), |h, w| {
        hash64_parts(&[&h.to_le_bytes(), &w.to_le_bytes()])
    })
}

/// The words of one argument value for [`loose`], hashed: a command's shell
/// words, else `key=token` for each scalar (nested keys by their own name).
fn loose_words(key: &str, value: &Value, out: &mut Vec<u64>) {
    let pair = |value: &str| hash64_parts(&[key.as_bytes(), b"=", value.as_bytes()]);
    match value {
        Value::String(s) if is_command_key(key) => shell_words(s, out),
        Value::Array(items) if is_command_key(key) && items.iter().all(Value::is_string) => {
            let joined: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            shell_words(&joined.join(" "), out);
        }
        Value::String(s) => out.push(pair(&loose_token(s.trim()))),
        Value::Object(map) => map.iter().for_each(|(k, v)| loose_words(k, v, out)),
        Value::Array(items) => items.iter().for_each(|v| loose_words(key, v, out)),
        Value::Null => {}
        other => out.push(pair(&other.to_string())),
    }
}

/// A word without what only spells it: [`token`]'s rewrites and a leading
/// `./` (borrowed when there is nothing to rewrite, the common case).
fn loose_token(word: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let rewritten = word.starts_with("./") || word.contains("://") || word.len() > 1 && word.ends_with('/');
    if !rewritten {
        return Cow::Borrowed(word);
    }
    let t = token(word);
    if t.contains("://") {
        return Cow::Owned(loose_url(&t));
    }
    match t.strip_prefix("./") {
        Some(rest) if !rest.is_empty() => Cow::Owned(rest.to_owned()),
        _ => Cow::Owned(t),
    }
}

/// A URL without what only spells it: the scheme, a loopback host's name
/// (`localhost` = `127.0.0.1` = `0.0.0.0`), and query parameters whose
/// value holds a digit (cache busters, nonces: `?_=1733550000`).
fn loose_url(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, ""));
    let host = match host {
        "127.0.0.1" | "0.0.0.0" | "[::1]" => "localhost",
        other => other,
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            !p.is_empty()
                && !p
                    .split_once('=')
                    .is_some_and(|(_, v)| v.contains(|c: char| c.is_ascii_digit()))
        })
        .collect();
    let mut out = format!("{host}:{port}{}", path.trim_end_matches('/'));
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    out
}

/// The shell words of a command for [`loose`] (see there), hashed.
fn shell_words(text: &str, out: &mut Vec<u64>) {
    let word = |w: &str| hash64(w.as_bytes());
    let all = words(text);
    let mut i = 0;
    while i < all.len() {
        let w = &all[i];
        i += 1;
        if w.quoted {
            out.push(word(&loose_token(&w.text)));
            continue;
        }
        let text = w.text.as_str();
        // `| cat` ending a pipeline (or followed by a separator) shows the
        // same output.
        if text == "|"
            && all.get(i).is_some_and(|n| !n.quoted && n.text == "cat")
            && all
                .get(i + 1)
                .is_none_or(|n| !n.quoted && matches!(n.text.as_str(), ";" | "&&" | "||" | "\n" | "&"))
        {
            i += 1;
            continue;
        }
        match text {
            "." | "./" | "--" | "\n" => {}
            _ if text.starts_with("--") && text.len() > 2 => match text.split_once('=') {
                Some((flag, value)) => {
                    out.push(word(flag));
                    out.push(word(&loose_token(value)));
                }
                None => out.push(word(text)),
            },
            _ if text.len() >= 2
                && text.starts_with('-')
                && text[1..].chars().all(|c| c.is_ascii_alphabetic()) =>
            {
                let mut flag = [b'-', 0, 0, 0, 0];
                for c in text[1..].chars() {
                    let n = c.encode_utf8(&mut flag[1..]).len();
                    out.push(hash64(&flag[..1 + n]));
                }
            }
            _ => out.push(word(&loose_token(text))),
        }
    }
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
