//! Unit tests of session keys: which conversation a request belongs to.

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

/// The memo gives what the SHA-256 gives, for every credential shape,
/// on a miss and on a hit, and tells credentials apart.
#[test]
fn memo_gives_each_credential_its_own_hash() {
    let mut one = HeaderMap::new();
    one.append("authorization", HeaderValue::from_static("Bearer sk-1"));
    let mut two = HeaderMap::new();
    two.append("x-api-key", HeaderValue::from_static("a"));
    two.append("x-api-key", HeaderValue::from_static("b"));
    two.append("authorization", HeaderValue::from_static("Bearer sk-1"));
    let mut swapped = HeaderMap::new();
    swapped.append("x-api-key", HeaderValue::from_static("b"));
    swapped.append("x-api-key", HeaderValue::from_static("a"));
    swapped.append("authorization", HeaderValue::from_static("Bearer sk-1"));
    let cases = [
        (HeaderMap::new(), None),
        (HeaderMap::new(), Some("key=q")),
        (HeaderMap::new(), Some("x=1&key=q&key=r")),
        (one.clone(), None),
        (one, Some("key=q")),
        (two, None),
        (swapped, None),
    ];
    let mut seen = std::collections::HashSet::new();
    for (headers, query) in &cases {
        let expected = credential_hash(headers, *query);
        assert_eq!(tenant(headers, *query), expected, "a miss");
        assert_eq!(tenant(headers, *query), expected, "a hit");
        assert!(seen.insert(expected), "two credentials, one hash");
    }
}

/// One pass over the headers reads what lookups by name read: a name's
/// first value only, and the configured name in any case.
#[test]
fn session_headers_are_read_as_lookups_read_them() {
    let mut h = HeaderMap::new();
    h.append("session_id", HeaderValue::from_static(" "));
    h.append("session_id", HeaderValue::from_static("later"));
    h.append("x-task-id", HeaderValue::from_static("task"));
    let k = resolve(&h, None, "x", BodyIds::default, "/v1", &summary(1));
    let task = resolve(
        &headers(&[("x-task-id", "task")]),
        None,
        "x",
        BodyIds::default,
        "/v1",
        &summary(2),
    );
    assert_eq!(
        k.key, task.key,
        "a blank first value is no value, as a lookup reads it"
    );
    let mixed = resolve(
        &headers(&[("x-loopguard-session", "abc")]),
        None,
        "X-LoopGuard-Session",
        BodyIds::default,
        "/v1",
        &summary(1),
    );
    assert_eq!(mixed.source, KeySource::Header);
}

/// Every agent header names the session, and the first in priority
/// order wins whatever order the request sends them in.
#[test]
fn agent_headers_count_in_priority_order() {
    let names = [
        "x-claude-code-session-id",
        "session_id",
        "session-id",
        "conversation_id",
        "thread-id",
        "x-session-affinity",
        "x-opencode-session",
        "x-session-id",
        "x-task-id",
    ];
    let alone = |name: &'static str| {
        resolve(
            &headers(&[(name, name)]),
            None,
            "x",
            BodyIds::default,
            "/v1",
            &summary(1),
        )
    };
    for (i, name) in names.iter().enumerate() {
        assert_eq!(alone(name).source, KeySource::AgentHeader, "{name}");
        let mut all = HeaderMap::new();
        for later in names[i..].iter().rev() {
            all.append(*later, HeaderValue::from_static(later));
        }
        let k = resolve(&all, None, "x", BodyIds::default, "/v1", &summary(1));
        assert_eq!(k.key, alone(name).key, "{name} comes before the ones after it");
    }
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
