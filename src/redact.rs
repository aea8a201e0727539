//! Credential redaction: what loopguard writes about tool calls and results
//! (verdict messages and log lines, `/admin/sessions/{key}`, the semantic
//! judge's prompt) never carries a credential the agent put in them.
//!
//! The patterns cover private-key blocks, `Authorization` values,
//! bearer/basic credentials, passwords in connection URLs, known key and
//! token shapes, and values of keys named like a secret. A [`RegexSet`]
//! over all of them decides first whether any replacement is needed, so a
//! text without secrets costs one scan.

use std::sync::LazyLock;

use regex::{Regex, RegexSet};

/// Truncates to `max` characters, marking the cut with `…`.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        // No more characters than bytes.
        return text.to_owned();
    }
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Each pattern with its replacement.
const PATTERNS: [(&str, &str); 12] = [
    // Private-key blocks, also when cut before their END line.
    (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        "[REDACTED PRIVATE KEY]",
    ),
    // Authorization header values, whatever the scheme.
    (
        r#"(?i)((?:proxy-)?authorization"?\s*[:=]\s*"?)[^"\r\n]+"#,
        "${1}[REDACTED]",
    ),
    (r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", "$1 [REDACTED]"),
    // Passwords in connection URLs (postgres://user:pass@host).
    (
        r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@",
        "${1}[REDACTED]@",
    ),
    // Known key and token shapes. `sk-` keys also glued to a word before
    // them (`KEYsk-proj-…`, `token_sk-…`) when the key's shape is
    // unmistakable: a known kind, or 32 letters and digits in a row.
    (
        r"\bsk-[A-Za-z0-9_-]{16,}|sk-(?:proj|ant|svcacct|admin)-[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9]{32,}",
        "[REDACTED]",
    ),
    (r"\bAIza[0-9A-Za-z_-]{30,}", "[REDACTED]"),
    (
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        "[REDACTED]",
    ),
    (r"\bglpat-[A-Za-z0-9_-]{20,}", "[REDACTED]"),
    (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "[REDACTED]"),
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "[REDACTED]"),
    (
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        "[REDACTED]",
    ),
    // key = value / "key": "value" where the key names a secret.
    (
        r#"(?i)([A-Za-z0-9_.-]*(?:api[_-]?key|secret|token|passw(?:or)?d|credential)[A-Za-z0-9_.-]*"?\s*[:=]\s*"?)[A-Za-z0-9_\-+/.=~]{6,}"#,
        "${1}[REDACTED]",
    ),
];

static SECRETS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    PATTERNS
        .into_iter()
        .filter_map(|(pattern, with)| Regex::new(pattern).ok().map(|r| (r, with)))
        .collect()
});

static ANY: LazyLock<Option<RegexSet>> = LazyLock::new(|| RegexSet::new(PATTERNS.map(|(p, _)| p)).ok());

/// Literals of which every match of [`PATTERNS`] holds one, ASCII case
/// ignored: one literal search that rules out most texts before the set's
/// automaton runs (the secret-named key pattern has no literal start, so
/// without it every text paid a full automaton scan).
const HINTS: [&str; 23] = [
    "-----BEGIN",
    "authorization",
    "bearer",
    "basic",
    "://",
    "sk-",
    "AIza",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "AKIA",
    "ASIA",
    "eyJ",
    "api",
    "secret",
    "token",
    "passw",
    "credential",
];

static HINT: LazyLock<Option<aho_corasick::AhoCorasick>> = LazyLock::new(|| {
    aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .build(HINTS)
        .ok()
});

/// Replaces what looks like a credential by `[REDACTED]`: private-key
/// blocks, `Authorization` values, bearer/basic credentials, API-key and
/// token shapes (OpenAI/Anthropic `sk-…`, Google `AIza…`, GitHub, GitLab,
/// Slack, AWS access key ids, JWTs) and values of keys named like a secret.
pub fn redact(text: &str) -> String {
    if HINT.as_ref().is_some_and(|hint| !hint.is_match(text))
        || ANY.as_ref().is_some_and(|set| !set.is_match(text))
    {
        return text.to_owned();
    }
    let mut out = text.to_owned();
    for (re, with) in SECRETS.iter() {
        if re.is_match(&out) {
            out = re.replace_all(&out, *with).into_owned();
        }
    }
    out
}

/// Redacted and cut to `max` characters, marking a cut with `…`. The text
/// is first cut a little past `max` (bounded work for long texts) and
/// redacted before the final cut, so a secret straddling `max` is still
/// recognised whole.
pub fn clip(text: &str, max: usize) -> String {
    let rough = truncate(text, max.saturating_mul(2).max(max + 256));
    truncate(&redact(&rough), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_without_secrets_is_kept() {
        let text = r#"{"cmd":"cargo test --lib","path":"src/main.rs"}"#;
        assert_eq!(redact(text), text);
    }

    #[test]
    fn every_pattern_is_compiled_and_in_the_prefilter() {
        assert_eq!(SECRETS.len(), PATTERNS.len());
        assert_eq!(ANY.as_ref().map(RegexSet::len), Some(PATTERNS.len()));
        assert!(HINT.is_some());
    }

    proptest::proptest! {
        /// The literal prefilter never rules out a text a pattern matches:
        /// texts glued from pieces of every secret shape, in any case.
        #[test]
        fn the_literal_prefilter_misses_no_secret(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "-----BEGIN RSA PRIVATE KEY-----", "MIIEow", "-----END RSA PRIVATE KEY-----",
                    "Authorization", "authorization: ", "Proxy-Authorization=", "\"", ": ", "=",
                    "Bearer ", "basic ", "BASIC\t", "postgres://", "u:", "pw@", "host", "sk-", "proj-",
                    "AIza", "ghp_", "github_pat_", "glpat-", "xoxb-", "AKIA", "ASIA", "eyJ", ".",
                    "API_KEY", "apikey", "Secret", "TOKEN", "passwd", "password", "credentials", "_",
                    "-", "abcdefghij", "0123456789", "ABCDEFGHIJKLMNOP", " ", "\n",
                ]),
                0..12,
            ),
            upper in proptest::bool::ANY,
        ) {
            let text: String = pieces.concat();
            let text = if upper { text.to_uppercase() } else { text };
            if ANY.as_ref().is_some_and(|set| set.is_match(&text)) {
                proptest::prop_assert!(HINT.as_ref().is_some_and(|h| h.is_match(&text)), "{text:?}");
            }
        }
    }

    #[test]
    fn curl_bearer_and_exported_key_are_redacted() {
        let text = r#"curl -H "Authorization: Bearer abcdefghijklmnop1234" https://x && export OPENAI_API_KEY=sk-proj-0123456789abcdefghij"#;
        let out = redact(text);
        assert!(!out.contains("abcdefghijklmnop1234"), "{out}");
        assert!(!out.contains("0123456789abcdefghij"), "{out}");
    }

    #[test]
    fn sk_keys_glued_to_the_word_before_them_are_redacted() {
        for text in [
            "OPENAI_KEYsk-proj-0123456789abcdefghij",
            "token_sk-ant-api03-abcdefghijklmnop0123",
            "xsk-0123456789abcdefghijABCDEFGHIJ012345",
        ] {
            let out = redact(text);
            assert!(
                out.contains("[REDACTED]") && !out.contains("0123"),
                "{text} -> {out}"
            );
        }
    }

    #[test]
    fn words_ending_in_sk_before_a_dash_stay() {
        for text in [
            "the desk-organizer-for-kitchens",
            "a task-runner-configuration-file",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn a_secret_straddling_the_cut_is_redacted_whole() {
        let text = format!("{} sk-{}", "x".repeat(109), "a".repeat(40));
        let out = clip(&text, 120);
        assert!(!out.contains("aaaaaaa"), "{out}");
        assert!(out.contains("[REDACTED]"), "{out}");
    }
}
