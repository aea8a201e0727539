//! Echoes: the parts of a failure's text that the call's own arguments put there.
//!
//! Issue #38 point 2. A tool that fails often repeats what it was asked —
//! `404 Not Found: /v2/items/a8Zq`, `No such file: ./tmp/run-7/out.txt`,
//! `invalid token 'k3J9…'` — so the same failure reached with other
//! arguments (URL variants, a random token per call) reads as a new error
//! each time. Before a failure is fingerprinted ([`super::outcome`]), every
//! occurrence of an argument's piece is replaced by `#`. The pieces of a
//! call are its string arguments (whole, when at most [`WHOLE_MAX`] bytes),
//! their words, and for a word that is a URL or a path its host, path,
//! path without query, query values and last segment. A piece is at least
//! [`MIN_PIECE`] bytes long (a `/`-led path piece at least 2: `/a`), is
//! removed only where it stands as a whole token (not inside a longer word:
//! the piece `app` leaves `application` alone); the words of an argument
//! longer than [`WORDS_MAX`] bytes (a file's content) are no pieces; at most
//! [`MAX_PIECES`] pieces are kept per call, longest first. Successes are
//! never rewritten: their text is what the agent learned.

use serde_json::Value;

use crate::transcript::{Arguments, ToolCall};

/// Shortest piece, bytes (a `/`-led path piece: 2).
const MIN_PIECE: usize = 3;
/// Longest whole argument string kept as one piece, bytes.
const WHOLE_MAX: usize = 512;
/// Pieces kept per call, longest first.
const MAX_PIECES: usize = 64;
/// Longest argument string whose words are pieces, bytes: a file's content
/// being written is no echo source (and would cost a scan per word).
const WORDS_MAX: usize = 2048;

/// The pieces of `call`'s arguments a failure may echo, longest first.
pub(crate) fn pieces(call: &ToolCall) -> Vec<String> {
    let mut out = Vec::new();
    match &call.arguments {
        Arguments::Json(value) => strings(value, &mut |s| add_string(s, &mut out)),
        Arguments::Unparsable(raw) => add_string(raw, &mut out),
    }
    out.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out.truncate(MAX_PIECES);
    out
}

fn keep(piece: &str, out: &mut Vec<String>) {
    let long_enough = piece.len() >= MIN_PIECE || piece.starts_with('/') && piece.len() >= 2;
    if long_enough && piece.len() <= WHOLE_MAX && !piece.chars().all(|c| c.is_ascii_punctuation()) {
        out.push(piece.to_owned());
    }
}

/// One argument string: itself, its words, and the parts of each word.
fn add_string(text: &str, out: &mut Vec<String>) {
    let trimmed = text.trim();
    keep(trimmed, out);
    if trimmed.len() > WORDS_MAX {
        return;
    }
    let separators =
        |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | '(' | ')' | '<' | '>');
    for word in trimmed.split(separators) {
        let word = word.trim_matches(|c: char| matches!(c, '.' | ':' | '[' | ']' | '{' | '}'));
        if word.is_empty() {
            continue;
        }
        keep(word, out);
        if let Some((_, value)) = word.split_once('=') {
            keep(value, out);
        }
        add_parts(word, out);
    }
}

/// A URL's host, path (with and without query), query values; a path's
/// form without `./` and its last segment.
fn add_parts(word: &str, out: &mut Vec<String>) {
    let path = match word.split_once("://") {
        Some((_, rest)) => {
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            keep(host, out);
            path
        }
        None => word,
    };
    if !path.contains('/') {
        return;
    }
    keep(path, out);
    let (bare, query) = path.split_once('?').unwrap_or((path, ""));
    keep(bare, out);
    for pair in query.split('&') {
        if let Some((_, value)) = pair.split_once('=') {
            keep(value, out);
        }
    }
    if let Some(rest) = bare.strip_prefix("./") {
        keep(rest, out);
    }
    let bare = bare.trim_end_matches('/');
    if let Some((_, last)) = bare.rsplit_once('/') {
        keep(last, out);
        keep(&format!("/{last}"), out);
    }
}

/// Whether a byte continues a word (a piece inside it is no echo).
fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// `text` with every whole-token occurrence of each piece (longest first)
/// replaced by `#`.
pub(crate) fn without(text: &str, pieces: &[String]) -> String {
    let mut out = text.to_owned();
    for piece in pieces {
        if !out.contains(piece.as_str()) {
            continue;
        }
        let bytes = out.as_bytes();
        let first = piece.as_bytes()[0];
        let last = piece.as_bytes()[piece.len() - 1];
        let mut next = String::with_capacity(out.len());
        let mut copied = 0;
        for (at, _) in out.match_indices(piece.as_str()) {
            if at < copied {
                continue;
            }
            let end = at + piece.len();
            let starts = at == 0 || !word_byte(bytes[at - 1]) || !word_byte(first);
            let ends = end == bytes.len() || !word_byte(bytes[end]) || !word_byte(last);
            if starts && ends {
                next.push_str(&out[copied..at]);
                next.push('#');
                copied = end;
            }
        }
        next.push_str(&out[copied..]);
        out = next;
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn call(args: Value) -> ToolCall {
        ToolCall::new(None, "fetch", Arguments::Json(args))
    }

    #[test]
    fn a_url_variant_echoed_back_is_one_text() {
        let a = pieces(&call(json!({"url": "https://api.example.com/v2/items/a"})));
        let b = pieces(&call(json!({"url": "https://api.example.com/v2/items/b?x=1"})));
        assert_eq!(
            without("404 Not Found for /v2/items/a", &a),
            without("404 Not Found for /v2/items/b?x=1", &b)
        );
        assert_eq!(without("not found: /a (HTTP 404)", &a), "not found: # (HTTP 404)");
    }

    #[test]
    fn a_random_token_in_the_arguments_is_removed_from_the_failure() {
        let a = pieces(&call(
            json!({"command": "curl -H 'X-Nonce: k3J9xQ' http://localhost:8080/health"}),
        ));
        assert_eq!(
            without("error: nonce k3J9xQ rejected by localhost:8080", &a),
            "error: nonce # rejected by #"
        );
    }

    #[test]
    fn a_piece_inside_a_longer_word_stays() {
        let a = pieces(&call(json!({"module": "app"})));
        assert_eq!(
            without("ModuleNotFoundError: application 'app'", &a),
            "ModuleNotFoundError: application '#'"
        );
    }

    #[test]
    fn short_words_and_punctuation_are_no_pieces() {
        let a = pieces(&call(json!({"command": "ls -l a && cd .."})));
        assert!(a.iter().all(|p| p.len() >= 3 || p.starts_with('/')), "{a:?}");
        assert!(!a.contains(&"&&".to_owned()));
    }
}
