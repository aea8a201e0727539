//! Masking a tool result's text before it is hashed: the configured masks,
//! then the volatile values (UUIDs, timestamps, durations, pids, random
//! tokens) that would make equal outcomes differ.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

use crate::detect::settings::Settings;

/// Volatile values inside result text, masked before hashing (UUIDs, ISO
/// timestamps, clock times, durations, pids).
pub(super) static VOLATILE_TEXT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i-u)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
        r"|\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
        r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b",
        r"|\b\d+(?:\.\d+)?\s?(?:ns|us|ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)\b",
        r"|\b(?:pid|pgid|process)[ =:#]*\d+",
    ))
    .ok()
});

/// Applies the configured masks (matches removed), then [`mask_volatile`].
pub(super) fn mask(text: &str, settings: &Settings) -> String {
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
pub(super) fn required_literal(pattern: &str) -> Option<&str> {
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
pub(super) fn mask_tokens(text: &str) -> String {
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
pub(super) fn mask_tokens_unless_volatile(text: &str) -> Option<String> {
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
pub(super) fn may_hold_volatile(text: &[u8]) -> bool {
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
