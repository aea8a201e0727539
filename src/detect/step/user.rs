//! User texts: what of a user message is the person's own (synthetic
//! wrappers and loopguard's own lines removed), and whether it is the
//! person, canned or injected.

use crate::detect::outcome::hash64;
use crate::detect::settings::Settings;
use crate::transcript::{Message, UserRead, UserText};

/// The synthetic wrappers an agent puts in a user message (an opener and
/// the closer that ends it; the first closer after the opener ends it).
const WRAPPERS: [(&str, &str); 3] = [
    ("<system-reminder>", "</system-reminder>"),
    ("<environment_details>", "</environment_details>"),
    ("<session_context>", "</session_context>"),
];

/// A line starting with this is loopguard's own text: it and all that
/// follows it are synthetic.
const OWN_LINE: &str = "[loopguard]";

/// A user message's text with synthetic wrappers removed, trimmed: each
/// [`WRAPPERS`] element with its content, leftmost first, and everything
/// from an [`OWN_LINE`] line on. One pass over the text (a wrapper whose
/// closer is missing is looked for once), with no regex: a text-protocol
/// agent sends every tool result as a user message, so each request runs
/// this over its whole history (issue #14: as a regex search it was most of
/// the CPU of a Cline-shaped 500 KB history's request).
pub(crate) fn own_text(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut own = String::new();
    // Text before `kept` is decided (copied into `own` or removed).
    let mut kept = 0;
    let mut at = 0;
    // Wrappers whose closer is past all that is left of the text.
    let mut unclosed = [false; WRAPPERS.len()];
    while let Some(found) = bytes.get(at..).and_then(|rest| memchr::memchr2(b'<', b'[', rest)) {
        let start = at + found;
        let rest = &bytes[start..];
        let end = if rest.starts_with(OWN_LINE.as_bytes()) && (start == 0 || bytes[start - 1] == b'\n') {
            Some(bytes.len())
        } else {
            WRAPPERS
                .iter()
                .zip(&mut unclosed)
                .find(|((open, _), _)| rest.starts_with(open.as_bytes()))
                .and_then(|((open, close), unclosed)| {
                    let after = start + open.len();
                    let end = (!*unclosed)
                        .then(|| memchr::memmem::find(&bytes[after..], close.as_bytes()))
                        .flatten()
                        .map(|i| after + i + close.len());
                    *unclosed = end.is_none();
                    end
                })
        };
        match end {
            Some(end) => {
                own.push_str(&text[kept..start]);
                kept = end;
                at = end;
            }
            None => at = start + 1,
        }
    }
    if kept == 0 {
        return text.trim().to_owned();
    }
    own.push_str(&text[kept..]);
    own.trim().to_owned()
}

/// Whether a text is one XML-like element as a whole (`<tag …>…</tag>`): a
/// wrapper an agent injects (`<system-reminder>`, `<environment_details>`,
/// …), never typed by the person.
fn one_element(text: &str) -> bool {
    let Some(rest) = text.strip_prefix('<') else {
        return false;
    };
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':'))
        .collect();
    !name.is_empty()
        && rest[name.len()..].starts_with(['>', ' '])
        && text.ends_with(&format!("</{name}>"))
        && text.matches(&format!("<{name}")).count() == 1
}

/// Classifies a user text: injected text (synthetic wrappers, a whole
/// XML-like element, `injected_patterns` such as Claude Code's skill
/// bodies, a compaction summary) is not the person (issue #12 point 7).
pub(crate) fn classify_user(text: &str, s: &Settings) -> (UserText, String) {
    let own = own_text(text);
    if own.is_empty()
        || one_element(&own)
        || s.injected_patterns.iter().any(|r| r.is_match(&own))
        || s.compaction.summary_prefixes.iter().any(|r| r.is_match(&own))
    {
        return (UserText::Synthetic, own);
    }
    if s.canned_patterns.iter().any(|r| r.is_match(&own)) {
        return (UserText::Canned, own);
    }
    (UserText::Own, own)
}

/// A fingerprint of the patterns a user text is read under
/// ([`classify_user`]): the [`UserRead`] kept with a message holds while
/// they are the same.
pub(super) fn user_patterns(s: &Settings) -> u64 {
    use xxhash_rust::xxh3::xxh3_64_with_seed;
    // Each pattern's hash seeds the next one's; each list's end mixes in
    // its number by another function than a pattern's hash, so no pattern
    // reads as a list's end (a pattern moved to another list is another
    // reading).
    let lists = [
        &s.injected_patterns,
        &s.compaction.summary_prefixes,
        &s.canned_patterns,
    ];
    lists.iter().zip(1_u64..).fold(0, |seed, (list, n)| {
        let seed = list.iter().fold(seed, |seed, pattern| {
            xxh3_64_with_seed(pattern.as_str().as_bytes(), seed)
        });
        seed.rotate_left(29) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    })
}

/// How detection reads user message `message` under the patterns
/// fingerprinted `patterns`: kept with the message on its first judgement
/// and reused while the patterns are the same; debug builds (the tests)
/// check the kept read against the message as it is now.
pub(super) fn user_read(message: &Message, s: &Settings, patterns: u64) -> UserRead {
    let read = || {
        let (text, own) = classify_user(&message.text, s);
        UserRead {
            patterns,
            text,
            key: hash64(own.as_bytes()),
        }
    };
    let kept = *message.read.get_or_init(read);
    let now = if kept.patterns == patterns { kept } else { read() };
    debug_assert_eq!(
        now,
        read(),
        "a user message changed after detection kept its read"
    );
    now
}
