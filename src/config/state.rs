//! `[state]`: where session state lives — in the process (`memory`, the
//! default) or in a Redis-compatible server shared by several replicas
//! (`redis`, see [`crate::state`]). The URL's password never appears in an
//! error, a log line or `check-config` output ([`StateUrl`]'s `Display` and
//! `Debug` redact it).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::problems::Problems;

/// `[state]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    /// `"memory"` or `"redis"`.
    #[serde(default = "default_backend")]
    pub backend: String,
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS).
    #[serde(default = "default_url")]
    pub url: String,
    /// Prefix of every key loopguard writes.
    #[serde(default = "default_prefix")]
    pub key_prefix: String,
    /// Longest wait for one store call, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

impl Default for RawState {
    fn default() -> Self {
        Self {
            backend: default_backend(),
            url: default_url(),
            key_prefix: default_prefix(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

fn default_backend() -> String {
    "memory".to_owned()
}
fn default_url() -> String {
    "redis://127.0.0.1:6379/0".to_owned()
}
fn default_prefix() -> String {
    "loopguard:".to_owned()
}
fn default_timeout_ms() -> u64 {
    50
}

/// Which store keeps the sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In the process only (one replica, or sticky routing).
    Memory,
    /// In Redis, shared by every replica.
    Redis,
}

/// A store URL whose password is never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct StateUrl(Url);

impl StateUrl {
    /// The full URL, password included (for the client only).
    pub fn secret(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for StateUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redacted(&self.0))
    }
}

impl fmt::Debug for StateUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StateUrl({self})")
    }
}

/// The URL with its password (and a user name) replaced by `***`, and the
/// value of every query parameter but `protocol` too.
fn redacted(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_fragment(None);
    if shown.password().is_some() {
        let _ = shown.set_password(Some("***"));
    } else if !shown.username().is_empty() {
        // `redis://SECRET@host`: a password written without its colon.
        let _ = shown.set_username("***");
    }
    if shown.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "protocol" {
                    v.into_owned()
                } else {
                    "***".to_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        shown.query_pairs_mut().clear().extend_pairs(pairs);
    }
    shown.to_string()
}

/// What is wrong with a store URL's database path or query, if anything:
/// the path is empty or a database number, and the only query parameter
/// the Redis client reads is `protocol` (a password elsewhere than in the
/// URL's user part would be ignored: every call would fail with NOAUTH).
fn url_problem(url: &Url) -> Option<String> {
    if url.fragment().is_some() {
        return Some(format!(
            "a URL fragment (#…) is not read by the Redis client; {ENCODE_HINT}"
        ));
    }
    if url.password().is_none() && !url.username().is_empty() {
        return Some(
            "a user name without a password is not sent to Redis; \
             the password goes after a colon: redis://:PASSWORD@host:port/0 or redis://USER:PASSWORD@host:port/0"
                .to_owned(),
        );
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Some(format!(
            "the path must be a database number (/0, /1, …), got /{db}"
        ));
    }
    if let Some((key, _)) = url.query_pairs().find(|(k, _)| k != "protocol") {
        return Some(format!(
            "query parameter {key:?} is not read by the Redis client (the only one is protocol); \
             a password goes in the URL's user part: redis://:PASSWORD@host:port/0"
        ));
    }
    None
}

/// Validated `[state]`.
#[derive(Debug, Clone, PartialEq)]
pub struct StateConfig {
    /// Which store.
    pub backend: Backend,
    /// The Redis URL (used with [`Backend::Redis`]); `None` only in a
    /// configuration that failed validation.
    pub url: Option<StateUrl>,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Longest wait for one store call.
    pub timeout: Duration,
}

/// What a URL that does not parse may need said: a password holding a
/// character that ends the URL's user part.
const ENCODE_HINT: &str =
    "a password holding # ? / @ or % must be percent-encoded (# is %23, ? %3F, / %2F, @ %40, % %25)";

/// Parses a store URL; the error names the URL without its password.
pub(super) fn parse_url(text: &str) -> Result<StateUrl, String> {
    // What follows the last `@`: never a password.
    let after_user = || text.rsplit('@').next().unwrap_or_default();
    // A `/`, `?` or `#` before the last `@` ends the URL's authority inside
    // the user part: a password holding one (`redis://user:#pw@host` would
    // even parse, as host `user` with the password in its fragment).
    let rest = text.split_once("://").map_or(text, |(_, rest)| rest);
    if let Some((user, _)) = rest.rsplit_once('@')
        && user.contains(['/', '?', '#'])
    {
        return Err(format!(
            "\"…@{}\" is not a URL with its password where the client reads it: {ENCODE_HINT}",
            after_user()
        ));
    }
    let hint = if text.contains('@') {
        format!("; {ENCODE_HINT}")
    } else {
        String::new()
    };
    match Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "redis" | "rediss") && url.host().is_some() => {
            match url_problem(&url) {
                None => Ok(StateUrl(url)),
                Some(problem) => Err(format!("{:?}: {problem}", redacted(&url))),
            }
        }
        // Without a host the user part may be read as a path (`redis:pw@h`):
        // show only what follows a possible `user:password@`.
        Ok(url) if url.host().is_none() => Err(format!(
            "{:?} is not a redis:// or rediss:// URL with a host{hint}",
            after_user()
        )),
        Ok(url) => Err(format!(
            "{:?} is not a redis:// or rediss:// URL with a host{hint}",
            redacted(&url)
        )),
        // Not a URL: show only what follows a possible `user:password@`.
        Err(e) => Err(format!("{:?} is not a URL ({e}){hint}", after_user())),
    }
}

/// Validates `[state]`, every problem reported with its key path.
pub(super) fn validate(raw: &RawState, problems: &mut Problems) -> StateConfig {
    let backend = match raw.backend.as_str() {
        "memory" => Backend::Memory,
        "redis" => Backend::Redis,
        other => {
            problems.push(
                "state.backend",
                format!("{other:?} is not a backend (memory or redis)"),
            );
            Backend::Memory
        }
    };
    let url = parse_url(&raw.url)
        .map_err(|e| problems.push("state.url", e))
        .ok();
    if raw.key_prefix.is_empty() {
        problems.push("state.key_prefix", "must not be empty");
    }
    if raw.timeout_ms == 0 || raw.timeout_ms > 10_000 {
        problems.push(
            "state.timeout_ms",
            format!("must be 1..=10000, got {}", raw.timeout_ms),
        );
    }
    StateConfig {
        backend,
        url,
        key_prefix: raw.key_prefix.clone(),
        timeout: Duration::from_millis(raw.timeout_ms.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A password put in the query (which the Redis client ignores) is
    /// refused, and never shown; so is a database path that is no number.
    #[test]
    fn a_password_in_the_query_is_refused_and_never_shown() {
        let err = parse_url("redis://127.0.0.1:6379/0?password=Secret7")
            .err()
            .unwrap_or_default();
        assert!(err.contains("\"password\" is not read"), "{err}");
        assert!(!err.contains("Secret7"), "{err}");
        assert!(parse_url("redis://127.0.0.1:6379/0?protocol=resp3").is_ok());
        let err = parse_url("redis://:pw@127.0.0.1:6379/abc")
            .err()
            .unwrap_or_default();
        assert!(err.contains("database number") && !err.contains("pw@"), "{err}");
    }

    #[test]
    fn a_password_never_shows() {
        let url = parse_url("redis://user:hunter2@cache:6380/1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(url.to_string(), "redis://user:***@cache:6380/1");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert!(url.secret().contains("hunter2"));
        let bad = parse_url("http://user:hunter2@cache:6380").map_or_else(|e| e, |_| panic!("accepted"));
        assert!(!bad.contains("hunter2"), "{bad}");
        let unparsable = parse_url("redis://user:hunter2@[::1").map_or_else(|e| e, |_| panic!("accepted"));
        assert!(!unparsable.contains("hunter2"), "{unparsable}");
    }

    /// `redis://SECRET@host` (the colon before a password forgotten): the
    /// client would not send it, and it would be shown as a user name; it
    /// is refused, and not shown (found by a new-user test).
    #[test]
    fn a_password_without_its_colon_is_refused_and_never_shown() {
        let err = parse_url("redis://hunter2@cache:6380/0").map_or_else(|e| e, |_| panic!("accepted"));
        assert!(err.contains("after a colon") && !err.contains("hunter2"), "{err}");
        assert!(parse_url("redis://:hunter2@cache:6380/0").is_ok());
    }

    /// A password holding `#`, `?` or `/` cuts the URL short: the error
    /// says to percent-encode it, without showing it; encoded, it parses.
    #[test]
    fn a_password_with_url_characters_gets_the_encoding_hint() {
        for text in [
            "redis://:ab#cd@cache:6380/0",
            "redis://:ab/cd@cache:6380/0",
            "redis://:ab?cd@cache:6380/0",
        ] {
            let err = parse_url(text).map_or_else(|e| e, |_| panic!("accepted {text}"));
            assert!(
                err.contains("percent-encoded") && !err.contains("ab"),
                "{text}: {err}"
            );
        }
        // With a user name (found by a review): `user:#pw@host` parsed as
        // host `user` with the password in the fragment, and was shown.
        for text in [
            "redis://default:#hunter2@cache:6379/0",
            "redis://user:1234#hunter2@cache:6379/0",
            "redis://default:/hunter2@cache:6379/0",
            "redis://default:?hunter2@cache:6379/0",
            "redis:user:hunter2@cache:6379",
            "redis://cache:6379/0#hunter2",
        ] {
            let err = parse_url(text).map_or_else(|e| e, |_| panic!("accepted {text}"));
            assert!(!err.contains("hunter2"), "{text}: {err}");
        }
        let url = parse_url("redis://:ab%23cd@cache:6380/0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(url.to_string(), "redis://:***@cache:6380/0");
    }
}
