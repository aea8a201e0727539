//! Forwarding, the third stage: the request to the upstream, its response
//! headers awaited at most `first_byte_timeout`; an unreachable upstream or
//! a timeout is answered in the route's provider's error shape (502 / 504).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;

use super::Answered;
use super::admit::Admitted;
use super::error::ProxyError;
use super::{counted, headers};
use crate::config::Config;
use crate::dialect::Dialect;
use crate::upstream_pool::Pool;

/// The upstream's response, headers received.
pub(super) struct Upstream {
    /// The response (its body still streaming).
    pub(super) response: reqwest::Response,
    /// loopguard's own time on the request: from the body read to the
    /// upstream request sent.
    pub(super) overhead: Duration,
}

/// What is sent upstream, as decided ([`super::decide::Decided`]).
pub(super) struct Sending<'a> {
    /// The body.
    pub(super) body: bytes::Bytes,
    /// The body is not the one received.
    pub(super) body_replaced: bool,
    /// Escalated: the model (Gemini: in the path), upstream and credential.
    pub(super) retarget: Option<&'a crate::escalate::Retarget>,
}

/// The clients a request can go upstream with.
#[derive(Clone, Copy)]
pub(super) struct Clients<'a> {
    /// reqwest's pooled client: TLS upstreams, and plain HTTP without `pool`.
    pub(super) client: &'a reqwest::Client,
    /// Plain-HTTP connections driven in the request's task.
    pub(super) pool: Option<&'a Arc<Pool>>,
}

/// Sends the request upstream.
pub(super) async fn forward(
    clients: Clients<'_>,
    config: &Config,
    admitted: &Admitted<'_>,
    sending: Sending<'_>,
) -> Result<Upstream, Answered> {
    let dialect = admitted.matched.dialect;
    let bypass = config.server.bypass_header.as_deref();
    let mut headers = headers::upstream_request_headers(&admitted.parts.headers, dialect.is_some(), bypass);
    if sending.body_replaced {
        // The injected warning went into the decoded body, which is sent as is.
        headers.remove(http::header::CONTENT_ENCODING);
    }
    let mut url = admitted.matched.upstream_url.clone();
    if let (Some(retarget), Some(d)) = (sending.retarget, dialect) {
        crate::escalate::retarget_url(
            retarget,
            d,
            &admitted.matched.route.upstream,
            &mut url,
            &mut headers,
        );
    }
    // Serialized only for an error's message.
    let origin = url.origin();
    let method = admitted.parts.method.clone();
    let sent = Instant::now();
    let overhead = sent.duration_since(admitted.body_read);
    let provider = Some(admitted.provider);
    let failed = |response: Response| {
        counted(
            &admitted.matched.route.prefix,
            dialect.map_or("-", Dialect::name),
            response,
        )
    };
    let send = send(clients, method, url, headers, sending.body);
    let response = match tokio::time::timeout(config.server.first_byte_timeout, send).await {
        Ok(Ok(response)) => response,
        Ok(Err(detail)) => {
            let origin = origin.ascii_serialization();
            tracing::warn!(upstream = %origin, error = %detail, "upstream unreachable");
            let response = ProxyError::UpstreamUnreachable {
                upstream: origin,
                detail,
            }
            .into_response_for(provider);
            return Err(Box::new(failed(response)));
        }
        Err(_) => {
            let origin = origin.ascii_serialization();
            tracing::warn!(upstream = %origin, "upstream first-byte timeout");
            let response = ProxyError::UpstreamTimeout {
                upstream: origin,
                secs: config.server.first_byte_timeout.as_secs(),
            }
            .into_response_for(provider);
            return Err(Box::new(failed(response)));
        }
    };
    metrics::histogram!("loopguard_upstream_duration_seconds").record(sent.elapsed().as_secs_f64());
    Ok(Upstream { response, overhead })
}

/// Sends the request: a plain-HTTP upstream on the request's own
/// connection from `pool` when there is one, anything else with reqwest.
/// An error is its message with its sources.
async fn send(
    clients: Clients<'_>,
    method: http::Method,
    url: url::Url,
    headers: http::HeaderMap,
    body: bytes::Bytes,
) -> Result<reqwest::Response, String> {
    if let Some(pool) = clients.pool.filter(|_| url.scheme() == "http") {
        if let Some(target) = PlainTarget::of(&url) {
            let mut request = http::Request::new(http_body_util::Full::new(body));
            *request.method_mut() = method;
            *request.uri_mut() = target.uri;
            *request.headers_mut() = headers;
            let headers = request.headers_mut();
            headers.insert(http::header::HOST, target.host);
            headers
                .entry(http::header::ACCEPT)
                .or_insert(http::HeaderValue::from_static("*/*"));
            return match pool.send(&target.authority, request).await {
                Ok(response) => Ok(as_reqwest(response, url)),
                Err(e) => Err(error_chain(&e)),
            };
        }
    }
    // The `Url` itself, not its text: reqwest would parse the text again.
    let request = clients.client.request(method, url).headers(headers).body(body);
    // Boxed: reqwest's future is large, and the usual plain-HTTP request
    // above should not carry room for it in its own.
    Box::pin(request.send()).await.map_err(|e| reqwest_error(&e))
}

/// A pooled connection's response as reqwest's, which the later stages
/// read. It carries the request's `url`: without one, reqwest parses a
/// placeholder URL for every response (a few thousand instructions of a
/// small request's path, issue #14), and [`reqwest::Response::url`] would
/// name that placeholder instead of the upstream.
fn as_reqwest(
    response: http::Response<crate::upstream_pool::PooledBody>,
    url: url::Url,
) -> reqwest::Response {
    use reqwest::ResponseBuilderExt;
    let mut response = response.map(reqwest::Body::wrap);
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        response
            .extensions_mut()
            .extend(carrier.into_parts().0.extensions);
    }
    reqwest::Response::from(response)
}

/// Where a request for [`Pool::send`] goes, and what it says of it: the
/// `host:port` to connect to, the origin-form URI, and `Host` as reqwest
/// sets it (the port only when it is not the scheme's). The request also
/// gets reqwest's `Accept: */*` when the agent sent none, so the upstream
/// sees the same headers on either path.
struct PlainTarget<'u> {
    authority: std::borrow::Cow<'u, str>,
    uri: http::Uri,
    host: http::HeaderValue,
}

impl<'u> PlainTarget<'u> {
    /// `None` for a URL without a host, with credentials (reqwest sends them
    /// as `Authorization: Basic`), or whose path `http` does not accept: it
    /// then goes through reqwest.
    fn of(url: &'u url::Url) -> Option<Self> {
        url.host_str()?;
        if !url.username().is_empty() || url.password().is_some() {
            return None;
        }
        // `host[:port]` as the URL writes it, which leaves out the scheme's
        // own port: `Host` as reqwest sends it, and the authority itself
        // when the port is written.
        let written = &url[url::Position::BeforeHost..url::Position::AfterPort];
        let authority = match url.port() {
            Some(_) => std::borrow::Cow::Borrowed(written),
            None => std::borrow::Cow::Owned(format!("{written}:{}", url.port_or_known_default()?)),
        };
        Some(Self {
            authority,
            uri: url[url::Position::BeforePath..url::Position::AfterQuery]
                .parse()
                .ok()?,
            host: http::HeaderValue::from_str(written).ok()?,
        })
    }
}

/// A reqwest error with its sources, for a message that says what failed.
/// The URL's query is cut out: it may carry a `?key=` credential.
fn reqwest_error(e: &reqwest::Error) -> String {
    let mut text = error_chain(e);
    if let Some(url) = e.url() {
        let mut safe = url.clone();
        safe.set_query(None);
        text = text.replace(url.as_str(), safe.as_str());
    }
    text
}

/// An error's message followed by its sources', `: `-separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::PlainTarget;

    /// Authority, `Host` and URI of `url`'s plain target (`None` when it
    /// has none).
    fn target(url: &str) -> Option<(String, String, String)> {
        let url = url::Url::parse(url).ok()?;
        let t = PlainTarget::of(&url)?;
        let host = t.host.to_str().ok()?.to_owned();
        Some((t.authority.into_owned(), host, t.uri.to_string()))
    }

    fn some(authority: &str, host: &str, uri: &str) -> Option<(String, String, String)> {
        Some((authority.into(), host.into(), uri.into()))
    }

    #[test]
    fn a_plain_target_connects_to_host_and_port_names_the_host_as_reqwest_does_and_leaves_credentials_to_reqwest()
     {
        assert_eq!(
            target("http://127.0.0.1:8080/v1/chat?x=1"),
            some("127.0.0.1:8080", "127.0.0.1:8080", "/v1/chat?x=1")
        );
        // The scheme's own port: connected to, left out of `Host`.
        assert_eq!(
            target("http://example.com/v1"),
            some("example.com:80", "example.com", "/v1")
        );
        assert_eq!(
            target("http://example.com:80/"),
            some("example.com:80", "example.com", "/")
        );
        assert_eq!(target("http://[::1]:9/a"), some("[::1]:9", "[::1]:9", "/a"));
        // Credentials in the URL: reqwest's path, which sends them.
        assert_eq!(target("http://user:pw@upstream:81/p"), None);
        assert_eq!(target("http://user@upstream:81/p"), None);
    }
}
