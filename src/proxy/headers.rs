//! Header rules: hop-by-hop headers dropped both ways, `Host` set by the
//! client library, loopguard's own request headers (`x-loopguard-*`, the
//! bypass header) and `Expect` kept from the upstream, `Accept-Encoding:
//! identity` on dialect paths, and the no-buffering headers on event streams.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Hop-by-hop headers (RFC 9110 §7.6.1 plus the de-facto ones): never
/// forwarded. (Names, not text: a standard name compares as a number.)
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn is_hop_by_hop(name: &HeaderName, listed: &[&str]) -> bool {
    HOP_BY_HOP.contains(name) || listed.iter().any(|l| l.eq_ignore_ascii_case(name.as_str()))
}

/// Names listed in the `Connection` header (also hop-by-hop), in the case
/// they were sent in. Those already hop-by-hop are left out (`keep-alive`,
/// which nearly every `Connection` header says), so the usual list is
/// empty and takes no allocation.
fn connection_listed(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty() && !HOP_BY_HOP.iter().any(|h| s.eq_ignore_ascii_case(h.as_str())))
        .collect()
}

/// Prefix of loopguard's own headers: meant for loopguard, never for the upstream.
const OWN_PREFIX: &str = "x-loopguard-";

/// The headers to send upstream: the client's end-to-end headers, minus
/// `Host` and `Content-Length` (the client library sets both), `Expect`
/// (loopguard answered `100-continue` itself and sends the whole body),
/// loopguard's own `x-loopguard-*` headers and the `bypass` header; and with
/// `Accept-Encoding: identity` when loopguard must read the response. An
/// agent's own header that `sessions.header` names goes on upstream.
pub fn upstream_request_headers(
    incoming: &HeaderMap,
    read_response: bool,
    bypass: Option<&str>,
) -> HeaderMap {
    let listed = connection_listed(incoming);
    let mut out = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        if is_hop_by_hop(name, &listed)
            || name == header::HOST
            || name == header::CONTENT_LENGTH
            || name == header::EXPECT
            || name.as_str().starts_with(OWN_PREFIX)
            || bypass == Some(name.as_str())
        {
            continue;
        }
        if read_response && name == header::ACCEPT_ENCODING {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if read_response {
        out.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    }
    out
}

/// The headers to send to the client: the upstream's, minus hop-by-hop ones;
/// on an event stream, `Cache-Control: no-cache` and `X-Accel-Buffering: no`
/// so no intermediary buffers it.
pub fn client_response_headers(upstream: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(upstream);
    let mut out = HeaderMap::with_capacity(upstream.len() + 2);
    for (name, value) in upstream {
        if is_hop_by_hop(name, &listed) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if is_event_stream(upstream) {
        out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        out.insert(
            HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        );
    }
    out
}

/// The response is `text/event-stream`.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    content_type_starts_with(headers, "text/event-stream")
}

/// The response is newline-delimited JSON (`application/x-ndjson`, Ollama's streams).
pub fn is_ndjson(headers: &HeaderMap) -> bool {
    content_type_starts_with(headers, "application/x-ndjson")
}

/// The response is an AWS event stream (`application/vnd.amazon.eventstream`,
/// Bedrock's streams).
pub fn is_aws_event_stream(headers: &HeaderMap) -> bool {
    content_type_starts_with(headers, crate::dialect::bedrock::EVENT_STREAM)
}

/// The response's media type starts with `prefix` (case-insensitive).
pub fn content_type_starts_with(headers: &HeaderMap, prefix: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.trim_start().as_bytes();
            v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_listed_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        h.insert(header::HOST, HeaderValue::from_static("loopguard:8080"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-test"));
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip, zstd"));
        let out = upstream_request_headers(&h, true, None);
        assert_eq!(out.get(header::AUTHORIZATION), h.get(header::AUTHORIZATION));
        assert_eq!(
            out.get(header::ACCEPT_ENCODING).map(|v| v.as_bytes()),
            Some(&b"identity"[..])
        );
        for gone in ["connection", "x-private", "transfer-encoding", "host"] {
            assert!(!out.contains_key(gone), "{gone} was forwarded");
        }
        let out = upstream_request_headers(&h, false, None);
        assert_eq!(out.get(header::ACCEPT_ENCODING), h.get(header::ACCEPT_ENCODING));
    }

    #[test]
    fn loopguards_own_headers_and_expect_stay_here() {
        let mut h = HeaderMap::new();
        h.insert(header::EXPECT, HeaderValue::from_static("100-continue"));
        h.insert("x-loopguard-session", HeaderValue::from_static("s1"));
        h.insert("x-loopguard-anything", HeaderValue::from_static("1"));
        h.insert("x-skip-loopguard", HeaderValue::from_static("1"));
        h.insert("session_id", HeaderValue::from_static("agent-own"));
        let out = upstream_request_headers(&h, true, Some("x-skip-loopguard"));
        for gone in [
            "expect",
            "x-loopguard-session",
            "x-loopguard-anything",
            "x-skip-loopguard",
        ] {
            assert!(!out.contains_key(gone), "{gone} was forwarded");
        }
        assert_eq!(
            out.get("session_id").map(|v| v.as_bytes()),
            Some(&b"agent-own"[..])
        );
    }

    #[test]
    fn event_streams_get_no_buffering_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        let out = client_response_headers(&h);
        assert_eq!(
            out.get("x-accel-buffering").map(|v| v.as_bytes()),
            Some(&b"no"[..])
        );
        assert_eq!(
            out.get(header::CACHE_CONTROL).map(|v| v.as_bytes()),
            Some(&b"no-cache"[..])
        );
    }
}
