//! Forwarding, the third stage: the request to the upstream, its response
//! headers awaited at most `first_byte_timeout`; an unreachable upstream or
//! a timeout is answered in the route's provider's error shape (502 / 504).

use std::time::{Duration, Instant};

use axum::response::Response;

use super::Answered;
use super::admit::Admitted;
use super::error::ProxyError;
use super::{counted, headers};
use crate::config::Config;
use crate::dialect::Dialect;

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

/// Sends the request upstream.
pub(super) async fn forward(
    client: &reqwest::Client,
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
    let origin = url.origin().ascii_serialization();
    // The `Url` itself, not its text: reqwest would parse the text again.
    let upstream_req = client
        .request(admitted.parts.method.clone(), url)
        .headers(headers)
        .body(sending.body);
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
    let response = match tokio::time::timeout(config.server.first_byte_timeout, upstream_req.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            let detail = error_chain(&e);
            tracing::warn!(upstream = %origin, error = %detail, "upstream unreachable");
            let response = ProxyError::UpstreamUnreachable {
                upstream: origin,
                detail,
            }
            .into_response_for(provider);
            return Err(Box::new(failed(response)));
        }
        Err(_) => {
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

/// A reqwest error with its sources, for a message that says what failed.
/// The URL's query is cut out: it may carry a `?key=` credential.
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        let mut safe = url.clone();
        safe.set_query(None);
        text = text.replace(url.as_str(), safe.as_str());
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
