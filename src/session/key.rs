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
use http::header::HeaderName;
use sha2::{Digest, Sha256};

use crate::detect::compaction::RequestSummary;

/// Where a header counts in a session key ([`slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// An agent header that carries a conversation id; the number is its
    /// priority (0 first).
    Agent(usize),
    /// Codex's window header: `<conversation>:<window>`.
    CodexWindow,
    /// A header naming a sub-agent within a session, by priority.
    Subagent(usize),
    /// `User-Agent` (Codex's `prompt_cache_key` counts only from Codex).
    UserAgent,
}

/// Agent headers of [`Slot::Agent`].
const AGENT_HEADERS: usize = 9;
/// Sub-agent headers of [`Slot::Subagent`].
const SUBAGENT_HEADERS: usize = 3;

/// The slot of a (lowercase) header name, if it has one: the agent headers
/// in priority order, Codex's window header, the sub-agent headers. One
/// `match`, so a request's header is compared with these names once, not
/// with each in turn.
fn slot(name: &str) -> Option<Slot> {
    Some(match name {
        "x-claude-code-session-id" => Slot::Agent(0),
        "session_id" => Slot::Agent(1),
        "session-id" => Slot::Agent(2),
        "conversation_id" => Slot::Agent(3),
        "thread-id" => Slot::Agent(4),
        "x-session-affinity" => Slot::Agent(5),
        "x-opencode-session" => Slot::Agent(6),
        "x-session-id" => Slot::Agent(7),
        "x-task-id" => Slot::Agent(8),
        "x-codex-window-id" => Slot::CodexWindow,
        "x-claude-code-agent-id" => Slot::Subagent(0),
        "x-openai-subagent" => Slot::Subagent(1),
        "x-parent-session-id" => Slot::Subagent(2),
        "user-agent" => Slot::UserAgent,
        _ => return None,
    })
}

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
///
/// The SHA-256 runs once per credential: its result is kept in a small
/// memo under a secret-keyed hash of the same parts (see
/// `CredentialMemo`), so a caller that sends one credential all day (a
/// sidecar's agent, a gateway's teams) pays a keyed hash per request.
pub fn tenant(headers: &HeaderMap, query: Option<&str>) -> String {
    let memo = CredentialMemo::global();
    let id = memo.id(headers, query);
    if let Some(hit) = memo.hashes.get(id) {
        return hit;
    }
    let hash = credential_hash(headers, query);
    memo.hashes.put(id, hash.clone());
    hash
}

/// [`tenant`] without the memo: the SHA-256 of the credential's parts.
fn credential_hash(headers: &HeaderMap, query: Option<&str>) -> String {
    let mut h = Sha256::new();
    for name in &CREDENTIAL_HEADERS {
        for v in headers.get_all(name) {
            feed(&mut h, &[name.as_str().as_bytes(), b"=", v.as_bytes()]);
        }
    }
    for kv in query_keys(query) {
        feed(&mut h, &[kv.as_bytes()]);
    }
    hex::encode(&h.finalize()[..8])
}

/// The query's `key=` parameters (Gemini's API key), in order.
fn query_keys(query: Option<&str>) -> impl Iterator<Item = &str> {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|kv| kv.starts_with("key="))
}

/// Credential hashes ([`tenant`]) already computed, by a 128-bit id of the
/// credential's parts: two SipHash-1-3 keyed with this process's random
/// keys (std's `RandomState`, which std's maps use against chosen
/// collisions), so no caller can craft a credential whose id is another's,
/// and no credential is kept in memory. At most [`MEMO_ENTRIES`] entries;
/// a full memo is emptied and refills (a gateway with more credentials
/// than that pays the SHA-256 again now and then).
struct CredentialMemo {
    keys: [std::hash::RandomState; 2],
    hashes: crate::detect::memo::Memo<String>,
}

/// Entries the credential memo holds at most.
const MEMO_ENTRIES: usize = 1024;

impl CredentialMemo {
    fn global() -> &'static Self {
        static MEMO: std::sync::LazyLock<CredentialMemo> = std::sync::LazyLock::new(|| CredentialMemo {
            keys: [std::hash::RandomState::new(), std::hash::RandomState::new()],
            hashes: crate::detect::memo::Memo::new(MEMO_ENTRIES),
        });
        &MEMO
    }

    /// The id of a request's credential parts: its credential headers in
    /// the order the map holds them (another order gives another id, whose
    /// entry holds the same hash), then the query's keys; each part framed
    /// by its length.
    fn id(&self, headers: &HeaderMap, query: Option<&str>) -> u128 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = self.keys.each_ref().map(BuildHasher::build_hasher);
        let mut part = |pieces: &[&[u8]]| {
            for h in &mut h {
                h.write_usize(pieces.iter().map(|p| p.len()).sum());
                for p in pieces {
                    h.write(p);
                }
            }
        };
        for (name, value) in headers {
            if CREDENTIAL_HEADERS.contains(name) {
                part(&[name.as_str().as_bytes(), b"=", value.as_bytes()]);
            }
        }
        for kv in query_keys(query) {
            part(&[b"?", kv.as_bytes()]);
        }
        let [a, b] = h.map(|h| h.finish());
        (u128::from(a) << 64) | u128::from(b)
    }
}

/// A header's value, trimmed, if it is text and not empty.
fn header_text(value: Option<&http::HeaderValue>) -> Option<&str> {
    value
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The headers a session key is read from, found in one pass over the
/// request's headers (a lookup by name hashes the name: the fifteen lookups
/// cost more than the pass). Each holds its name's first value, as a lookup
/// by name gives.
#[derive(Default)]
struct SessionHeaders<'h> {
    configured: Option<&'h http::HeaderValue>,
    agent: [Option<&'h http::HeaderValue>; AGENT_HEADERS],
    codex_window: Option<&'h http::HeaderValue>,
    subagent: [Option<&'h http::HeaderValue>; SUBAGENT_HEADERS],
    user_agent: Option<&'h http::HeaderValue>,
}

impl<'h> SessionHeaders<'h> {
    /// `configured` is `[sessions] header`, in any case.
    fn of(headers: &'h HeaderMap, configured: &str) -> Self {
        fn first<'h>(slot: &mut Option<&'h http::HeaderValue>, value: &'h http::HeaderValue) {
            slot.get_or_insert(value);
        }
        let mut found = Self::default();
        for (name, value) in headers {
            if name.as_str().eq_ignore_ascii_case(configured) {
                first(&mut found.configured, value);
            }
            let slot = match slot(name.as_str()) {
                None => continue,
                Some(Slot::Agent(i)) => found.agent.get_mut(i),
                Some(Slot::Subagent(i)) => found.subagent.get_mut(i),
                Some(Slot::CodexWindow) => Some(&mut found.codex_window),
                Some(Slot::UserAgent) => Some(&mut found.user_agent),
            };
            if let Some(slot) = slot {
                first(slot, value);
            }
        }
        found
    }
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
    let found = SessionHeaders::of(headers, configured);
    let user_agent = header_text(found.user_agent).unwrap_or_default();
    let (source, value) = if let Some(v) = header_text(found.configured) {
        (KeySource::Header, v.to_owned())
    } else if let Some(v) = found.agent.iter().find_map(|v| header_text(*v)) {
        (KeySource::AgentHeader, v.to_owned())
    } else if let Some(v) = header_text(found.codex_window) {
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
    if let Some(child) = found.subagent.iter().find_map(|v| header_text(*v)) {
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
#[path = "key_tests.rs"]
mod tests;
