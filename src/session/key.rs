//! Session keys (DESIGN §5): which conversation a request belongs to.
//!
//! First hit wins: the configured header; known agent headers; body fields
//! (`metadata.session_id`; `prompt_cache_key` only from Codex, which sets it
//! per conversation); else a fingerprint of the route, the declared tools,
//! the system text, the first real user message and the id of the first
//! tool call (so parallel runs of one task are separate sessions). Every key is scoped by a
//! hash of the caller's credential, so one tenant can never read or steer
//! another's session; sub-agent headers make a child key.

use http::HeaderMap;
use http::header::{AsHeaderName, HeaderName};
use sha2::{Digest, Sha256};

use crate::detect::compaction::RequestSummary;

/// Agent headers that carry a conversation id, in priority order. (Header
/// names are constants, not text: a lookup by text parses the name first.)
const AGENT_HEADERS: [HeaderName; 9] = [
    HeaderName::from_static("x-claude-code-session-id"),
    HeaderName::from_static("session_id"),
    HeaderName::from_static("session-id"),
    HeaderName::from_static("conversation_id"),
    HeaderName::from_static("thread-id"),
    HeaderName::from_static("x-session-affinity"),
    HeaderName::from_static("x-opencode-session"),
    HeaderName::from_static("x-session-id"),
    HeaderName::from_static("x-task-id"),
];

/// Codex's window header: `<conversation>:<window>`.
const CODEX_WINDOW_HEADER: HeaderName = HeaderName::from_static("x-codex-window-id");

/// Headers naming a sub-agent within a session.
const SUBAGENT_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-claude-code-agent-id"),
    HeaderName::from_static("x-openai-subagent"),
    HeaderName::from_static("x-parent-session-id"),
];

/// Headers and query parameters that carry a credential.
const CREDENTIAL_HEADERS: [HeaderName; 5] = [
    HeaderName::from_static("authorization"),
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("api-key"),
    HeaderName::from_static("x-goog-api-key"),
    HeaderName::from_static("proxy-authorization"),
];

/// Where a session key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The configured session header.
    Header,
    /// A known agent header.
    AgentHeader,
    /// A body field.
    Body,
    /// The request fingerprint.
    Fingerprint,
}

/// A resolved session key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKey {
    /// The key: `<credential hash>:<source>:<value hash>[/<sub-agent>]`,
    /// hashed values only, so it can be logged and shown by the admin API.
    pub key: String,
    /// Where it came from.
    pub source: KeySource,
    /// Hash of the caller's credential (empty credential hashes too).
    pub tenant: String,
}

pub use crate::dialect::BodyIds;

fn short_hash(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        feed(&mut h, &[p]);
    }
    hex::encode(&h.finalize()[..8])
}

/// Feeds one part to the hash: its length, then its bytes, given in pieces
/// (so a part made of several pieces needs no copy to join them).
fn feed(h: &mut Sha256, pieces: &[&[u8]]) {
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    h.update((len as u64).to_le_bytes());
    for p in pieces {
        h.update(p);
    }
}

/// Hash of the caller's credential: every credential header (each part
/// `name=value`) and a `key` query parameter, so two tenants never share a
/// key. Keys stay the same across versions, which replicas sharing state
/// rely on.
pub fn tenant(headers: &HeaderMap, query: Option<&str>) -> String {
    let mut h = Sha256::new();
    for name in &CREDENTIAL_HEADERS {
        for v in headers.get_all(name) {
            feed(&mut h, &[name.as_str().as_bytes(), b"=", v.as_bytes()]);
        }
    }
    if let Some(q) = query {
        for kv in q.split('&').filter(|kv| kv.starts_with("key=")) {
            feed(&mut h, &[kv.as_bytes()]);
        }
    }
    hex::encode(&h.finalize()[..8])
}

fn header_value(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn body_session_id(ids: &BodyIds, user_agent: &str) -> Option<String> {
    if let Some(meta) = &ids.metadata {
        if let Some(id) = meta.get("session_id").and_then(|v| v.as_str()) {
            return Some(id.to_owned());
        }
        // Claude Code: metadata.user_id is a JSON string carrying session_id.
        if let Some(user_id) = meta.get("user_id").and_then(|v| v.as_str()) {
            if let Ok(inner) = serde_json::from_str::<serde_json::Value>(user_id) {
                if let Some(id) = inner.get("session_id").and_then(|v| v.as_str()) {
                    return Some(id.to_owned());
                }
            }
        }
    }
    // Apps often set prompt_cache_key to a constant; Codex sets it per conversation.
    if user_agent.to_ascii_lowercase().contains("codex") {
        return ids.prompt_cache_key.clone();
    }
    None
}

/// Resolves the session key of a request.
///
/// `ids` reads the body fields; it is called only when no header names the
/// session (reading them means scanning the body again). `configured` is
/// `[sessions] header`; `route` the route prefix; `summary`
/// the request's [`RequestSummary`] (system, tools and first real user
/// message hashes) for the fingerprint.
pub fn resolve(
    headers: &HeaderMap,
    query: Option<&str>,
    configured: &str,
    ids: impl FnOnce() -> BodyIds,
    route: &str,
    summary: &RequestSummary,
) -> SessionKey {
    resolve_for(tenant(headers, query), headers, configured, ids, route, summary)
}

/// [`resolve`] for a caller whose credential hash ([`tenant`]) is known already.
pub fn resolve_for(
    tenant: String,
    headers: &HeaderMap,
    configured: &str,
    ids: impl FnOnce() -> BodyIds,
    route: &str,
    summary: &RequestSummary,
) -> SessionKey {
    let user_agent = header_value(headers, http::header::USER_AGENT).unwrap_or_default();
    let (source, value) = if let Some(v) = header_value(headers, configured) {
        (KeySource::Header, v.to_owned())
    } else if let Some(v) = AGENT_HEADERS.iter().find_map(|h| header_value(headers, h)) {
        (KeySource::AgentHeader, v.to_owned())
    } else if let Some(v) = header_value(headers, &CODEX_WINDOW_HEADER) {
        let conversation = v.split(':').next().unwrap_or(v);
        (KeySource::AgentHeader, conversation.to_owned())
    } else if let Some(v) = body_session_id(&ids(), user_agent) {
        (KeySource::Body, v)
    } else {
        // The first call's id (random per run where the dialect has ids)
        // keeps parallel runs of the same task apart once they made a call.
        let mut fp = String::with_capacity(route.len() + 1 + 64);
        fp.push_str(route);
        fp.push('|');
        for h in [
            summary.system,
            summary.tools,
            summary.first_user,
            summary.first_call,
        ] {
            // `{h:016x}`: the big-endian bytes in hex.
            fp.push_str(&hex::encode(h.to_be_bytes()));
        }
        (KeySource::Fingerprint, fp)
    };
    let source_name = match source {
        KeySource::Header => "h",
        KeySource::AgentHeader => "a",
        KeySource::Body => "b",
        KeySource::Fingerprint => "f",
    };
    let mut key = format!("{tenant}:{source_name}:{}", short_hash(&[value.as_bytes()]));
    if let Some(child) = SUBAGENT_HEADERS.iter().find_map(|h| header_value(headers, h)) {
        key.push('/');
        key.push_str(&short_hash(&[child.as_bytes()]));
    }
    SessionKey { key, source, tenant }
}

/// The session key of the Responses chain rooted at response `id` of the
/// session `key`: `<key>/chain-<hash of id>`.
pub fn chain_session(key: &str, id: &str) -> String {
    format!("{key}/chain-{:016x}", xxhash_rust::xxh3::xxh3_64(id.as_bytes()))
}

/// The session of a Responses request chaining to a response loopguard
/// does not know (made before loopguard was in the path, or whose record
/// was lost: Redis flushed, a restart of the memory backend), which no
/// header or body field names (`fingerprint`: its fingerprinted key): the
/// chain rooted at that response ([`chain_session`]). Such a request
/// carries only what is new since (typically a call's output), so its
/// fingerprint (no system text, no user message, no call) is the same for
/// every such chain of the tenant and tool set, and unrelated runs would
/// share one loop count. Its own response is recorded under this key, so
/// the chain goes on in it.
pub fn chain_root(fingerprint: &SessionKey, previous_response_id: &str) -> SessionKey {
    SessionKey {
        key: chain_session(&fingerprint.key, previous_response_id),
        source: KeySource::Body,
        tenant: fingerprint.tenant.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn summary(first: u64) -> RequestSummary {
        RequestSummary {
            system: 1,
            tools: 2,
            first_user: first,
            messages: 3,
            compactions: 0,
            first_call: 0,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    /// Keys are stored by replicas sharing state and outlive a version: the
    /// tenant hash and a fingerprinted key stay byte for byte what they were.
    #[test]
    fn keys_stay_the_same_across_versions() {
        let mut h = HeaderMap::new();
        h.append("authorization", HeaderValue::from_static("Bearer sk-1"));
        h.append("x-api-key", HeaderValue::from_static("a"));
        h.append("x-api-key", HeaderValue::from_static("b"));
        let query = Some("x=1&key=q&key=r");
        assert_eq!(tenant(&h, query), "037809e79cecc09e");
        assert_eq!(tenant(&HeaderMap::new(), None), "e3b0c44298fc1c14");
        let s = RequestSummary {
            system: 0x0123_4567_89ab_cdef,
            tools: 7,
            first_user: u64::MAX,
            messages: 3,
            compactions: 0,
            first_call: 0,
        };
        let k = resolve(&h, query, "x-loopguard-session", BodyIds::default, "/v1", &s);
        assert_eq!(k.key, "037809e79cecc09e:f:4177bbcd6ceaedaf");
    }

    #[test]
    fn configured_header_wins_over_everything() {
        let h = headers(&[("x-loopguard-session", "abc"), ("session_id", "zzz")]);
        let k = resolve(
            &h,
            None,
            "x-loopguard-session",
            BodyIds::default,
            "/v1",
            &summary(9),
        );
        assert_eq!(k.source, KeySource::Header);
        let same = resolve(
            &headers(&[("x-loopguard-session", "abc")]),
            None,
            "x-loopguard-session",
            BodyIds::default,
            "/v1",
            &summary(10),
        );
        assert_eq!(
            k.key, same.key,
            "the fingerprint plays no part once a header names the session"
        );
    }

    #[test]
    fn fingerprint_separates_conversations_and_tenants() {
        let a = resolve(&HeaderMap::new(), None, "x", BodyIds::default, "/v1", &summary(1));
        let b = resolve(&HeaderMap::new(), None, "x", BodyIds::default, "/v1", &summary(2));
        assert_ne!(a.key, b.key);
        assert_eq!(a.source, KeySource::Fingerprint);
        let other_tenant = resolve(
            &headers(&[("authorization", "Bearer other")]),
            None,
            "x",
            BodyIds::default,
            "/v1",
            &summary(1),
        );
        assert_ne!(a.key, other_tenant.key);
    }

    #[test]
    fn codex_window_id_keeps_the_conversation_part() {
        let a = resolve(
            &headers(&[("x-codex-window-id", "conv1:0")]),
            None,
            "x",
            BodyIds::default,
            "/v1",
            &summary(1),
        );
        let b = resolve(
            &headers(&[("x-codex-window-id", "conv1:7")]),
            None,
            "x",
            BodyIds::default,
            "/v1",
            &summary(2),
        );
        assert_eq!(a.key, b.key);
    }

    #[test]
    fn prompt_cache_key_counts_only_for_codex() {
        let ids = BodyIds {
            metadata: None,
            prompt_cache_key: Some("constant".to_owned()),
        };
        let app = resolve(&HeaderMap::new(), None, "x", || ids.clone(), "/v1", &summary(1));
        assert_eq!(app.source, KeySource::Fingerprint);
        let codex = resolve(
            &headers(&[("user-agent", "codex_cli_rs/0.1")]),
            None,
            "x",
            || ids.clone(),
            "/v1",
            &summary(1),
        );
        assert_eq!(codex.source, KeySource::Body);
    }

    #[test]
    fn subagents_get_child_keys() {
        let parent = resolve(
            &headers(&[("session_id", "s")]),
            None,
            "x",
            BodyIds::default,
            "/v1",
            &summary(1),
        );
        let child = resolve(
            &headers(&[("session_id", "s"), ("x-claude-code-agent-id", "a1")]),
            None,
            "x",
            BodyIds::default,
            "/v1",
            &summary(1),
        );
        assert!(child.key.starts_with(&parent.key) && child.key.len() > parent.key.len());
    }
}
