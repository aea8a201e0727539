//! Forwarding: one request from the agent to the upstream and the answer
//! back, streamed, with a side tap that parses what passes.
//!
//! Stages, in order: route match → misroute check → request body (capped) →
//! dialect parse (side copy, fail open) → upstream request (first-byte
//! timeout) → response headers → body stream (see [`stream`]).

pub mod body;
pub mod error;
pub mod headers;
pub mod hold;
pub mod respond;
pub mod stream;
pub mod tap;
pub mod upstream;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::config::Config;
use crate::dialect::{Dialect, ParsedRequest};
use crate::guard::{Guard, RequestDecision, RequestView};
use crate::route;
use error::ProxyError;
use hold::{Holder, PassJudge, ResponseJudge};
use tap::Tap;
use tokio::sync::{mpsc, oneshot};

use crate::dialect::Mode;

/// Shared state of the proxy listener.
#[derive(Debug)]
pub struct ProxyState {
    /// The configuration in force (swapped by a reload; each request keeps
    /// the one it started with).
    pub config: crate::reload::SharedConfig,
    /// The upstream client (pooled).
    pub client: reqwest::Client,
    /// Sessions and detectors.
    pub guard: Guard,
}

/// The axum handler for every path on the proxy listener.
pub async fn handle(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let started = Instant::now();
    let config: Arc<Config> = state.config.load_full();
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);

    if path.split('/').any(|segment| segment == ".." || segment == ".") {
        return counted("-", "-", ProxyError::DotSegments { path }.into_response_for(None));
    }
    let Some(matched) = route::resolve(&config.routes, &path, query.as_deref()) else {
        let prefixes = config
            .routes
            .iter()
            .map(|r| r.prefix.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return counted(
            "-",
            "-",
            ProxyError::NoRoute { path, prefixes }.into_response_for(None),
        );
    };
    let provider = matched.route.provider;
    if let Some(wanted) = route::misrouted(matched.route, &path, query.as_deref(), &parts.headers) {
        // A client whose own path must reach the upstream unchanged (an SDK
        // at loopguard's root) needs a route that strips its prefix.
        let candidates: Vec<&crate::config::Route> =
            config.routes.iter().filter(|r| r.provider == wanted).collect();
        let hint = candidates
            .iter()
            .find(|r| r.strip_prefix)
            .or_else(|| candidates.first())
            .map(|r| format!(" (prefix {})", r.prefix))
            .unwrap_or_else(|| {
                format!(
                    " (none is configured: add a [[routes]] entry with provider = \"{}\")",
                    wanted.name()
                )
            });
        let response = ProxyError::Misrouted {
            wanted: wanted.name(),
            route: provider.name(),
            prefix: matched.route.prefix.clone(),
            hint,
        }
        .into_response_for(Some(provider));
        return counted(&matched.route.prefix, "-", response);
    }

    let body = match body::read_limited(body, config.server.max_request_bytes).await {
        Ok(bytes) => bytes,
        Err(e) => return counted(&matched.route.prefix, "-", e.into_response_for(Some(provider))),
    };

    // loopguard's own time on the request starts here: decoding, parsing and detection count.
    let body_read = Instant::now();
    let dialect = matched.dialect;
    let side = dialect.and_then(|d| {
        let route = matched.route.prefix.as_str();
        let limit = config.server.max_request_bytes;
        parse_side_copy(
            &state.guard,
            d,
            route,
            query.as_deref(),
            &parts.headers,
            &body,
            limit,
        )
    });
    let parsed = side.as_ref().map(|(_, p)| p);
    let mut forward = body;
    let mut judge: Box<dyn ResponseJudge> = Box::new(PassJudge);
    let mut body_replaced = false;
    let mut session: Option<String> = None;
    if let (Some(d), Some((decoded, parsed))) = (dialect, &side) {
        let view = RequestView {
            route: matched.route,
            dialect: d,
            path: &path,
            query: query.as_deref(),
            headers: &parts.headers,
            decoded,
            parsed,
        };
        let (decision, key) = state.guard.on_request(&config, &view);
        session = key;
        match decision {
            RequestDecision::Forward {
                body: Some(replaced),
                judge: j,
            } => {
                forward = replaced;
                body_replaced = true;
                judge = j;
            }
            RequestDecision::Forward { body: None, judge: j } => judge = j,
            RequestDecision::Answer {
                status,
                answer,
                verdict,
            } => {
                tracing::info!(
                    route = %matched.route.prefix,
                    dialect = d.name(),
                    status = status.as_u16(),
                    duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    verdict = %verdict,
                    outcome = "answered_by_loopguard",
                    "request"
                );
                return counted(
                    &matched.route.prefix,
                    d.name(),
                    answer_response(status, answer, &verdict),
                );
            }
        }
    }

    let mut headers = headers::upstream_request_headers(&parts.headers, dialect.is_some());
    if body_replaced {
        // The injected warning went into the decoded body, which is sent as is.
        headers.remove(http::header::CONTENT_ENCODING);
    }
    let upstream_req = state
        .client
        .request(parts.method.clone(), matched.upstream_url.as_str())
        .headers(headers)
        .body(forward);
    let origin = matched.upstream_url.origin().ascii_serialization();
    let sent = Instant::now();
    let request_overhead = sent.duration_since(body_read);
    let response = match tokio::time::timeout(config.server.first_byte_timeout, upstream_req.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => {
            let detail = error_chain(&e);
            tracing::warn!(upstream = %origin, error = %detail, "upstream unreachable");
            let response = ProxyError::UpstreamUnreachable {
                upstream: origin,
                detail,
            }
            .into_response_for(Some(provider));
            return counted(
                &matched.route.prefix,
                dialect.map_or("-", Dialect::name),
                response,
            );
        }
        Err(_) => {
            tracing::warn!(upstream = %origin, "upstream first-byte timeout");
            let response = ProxyError::UpstreamTimeout {
                upstream: origin,
                secs: config.server.first_byte_timeout.as_secs(),
            }
            .into_response_for(Some(provider));
            return counted(
                &matched.route.prefix,
                dialect.map_or("-", Dialect::name),
                response,
            );
        }
    };
    metrics::histogram!("loopguard_upstream_duration_seconds").record(sent.elapsed().as_secs_f64());

    let status = response.status();
    let dialect_name = dialect.map_or("-", Dialect::name);
    metrics::counter!(
        "loopguard_requests_total",
        "route" => matched.route.prefix.clone(),
        "dialect" => dialect_name,
        "status" => status.as_u16().to_string()
    )
    .increment(1);

    let mut out_headers = headers::client_response_headers(response.headers());
    let log = stream::RequestLog {
        route: matched.route.prefix.clone(),
        dialect: dialect_name,
        status: status.as_u16(),
        started,
        request_messages: parsed.map(|p| p.transcript.messages.len()),
        session,
        overhead: request_overhead,
    };
    let Some(dialect) = dialect.filter(|_| status.is_success()) else {
        let body: Body = stream::client_body(response, config.server.idle_timeout, log);
        let mut out = (status, body).into_response();
        *out.headers_mut() = out_headers;
        return out;
    };

    let mode = framing(dialect, &path, &query, response.headers());
    let tap = Tap::new(dialect, mode, config.server.max_response_bytes);
    let include_usage = parsed.is_some_and(|p| p.include_usage);
    let holder = Holder::new(tap, dialect, mode, include_usage, config.server.max_held_bytes);
    if mode == Mode::Whole {
        let idle = config.server.idle_timeout;
        return match respond::whole(response, holder, judge, idle, log).await {
            respond::Whole::Answer { verdict, body } => {
                if let Some(v) = &verdict {
                    set_verdict_header(&mut out_headers, v);
                }
                out_headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
                let mut out = (status, Body::from(body)).into_response();
                *out.headers_mut() = out_headers;
                out
            }
            respond::Whole::Abort(cut) => abort_response(dialect, &cut),
            respond::Whole::Broken(detail) => ProxyError::UpstreamUnreachable {
                upstream: origin_of(&matched.upstream_url),
                detail,
            }
            .into_response_for(Some(provider)),
        };
    }
    let (head_tx, mut head_rx) = oneshot::channel();
    let (body_tx, body_rx) = mpsc::channel::<respond::BodyItem>(64);
    tokio::spawn(respond::drive(
        response,
        holder,
        judge,
        head_tx,
        body_tx,
        respond::Timing {
            idle: config.server.idle_timeout,
            keepalive: config.server.keepalive,
        },
        log,
    ));
    // A stream's headers wait at most `header_hold_ms` for a verdict.
    let head = match tokio::time::timeout(config.server.header_hold, &mut head_rx).await {
        Ok(head) => head.ok(),
        Err(_) => {
            head_rx.close();
            head_rx.try_recv().ok()
        }
    };
    match head {
        Some(respond::Head::Abort(cut)) => abort_response(dialect, &cut),
        Some(respond::Head::Pass { verdict }) => {
            if let Some(v) = &verdict {
                set_verdict_header(&mut out_headers, v);
            }
            out_headers.remove(http::header::CONTENT_LENGTH);
            respond_with(status, out_headers, body_rx)
        }
        None => {
            out_headers.remove(http::header::CONTENT_LENGTH);
            respond_with(status, out_headers, body_rx)
        }
    }
}

fn abort_response(dialect: Dialect, cut: &hold::Cut) -> Response {
    let mut out = (
        http::StatusCode::BAD_REQUEST,
        [(http::header::CONTENT_TYPE, "application/json")],
        dialect.abort_body(&cut.message),
    )
        .into_response();
    set_verdict_header(out.headers_mut(), &cut.header);
    out
}

fn origin_of(url: &url::Url) -> String {
    url.origin().ascii_serialization()
}

fn respond_with(
    status: http::StatusCode,
    headers: http::HeaderMap,
    body_rx: mpsc::Receiver<respond::BodyItem>,
) -> Response {
    let stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
        let item = rx.recv().await?;
        if item.is_err() {
            // Let the server write out what came before (headers included)
            // before the error aborts the response.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Some((item, rx))
    });
    let mut out = (status, Body::from_stream(stream)).into_response();
    *out.headers_mut() = headers;
    out
}

/// Counts a response loopguard wrote itself in `loopguard_requests_total`.
fn counted(route: &str, dialect: &'static str, response: Response) -> Response {
    metrics::counter!(
        "loopguard_requests_total",
        "route" => route.to_owned(),
        "dialect" => dialect,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response
}

fn answer_response(status: http::StatusCode, answer: crate::dialect::Answer, verdict: &str) -> Response {
    let mut out = (status, answer.body).into_response();
    let headers = out.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(answer.content_type),
    );
    if answer.content_type == "text/event-stream" {
        headers.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-cache"),
        );
    }
    set_verdict_header(headers, verdict);
    out
}

fn set_verdict_header(headers: &mut http::HeaderMap, value: &str) {
    if let Ok(v) = http::HeaderValue::from_str(value) {
        headers.insert(http::HeaderName::from_static("x-loopguard-verdict"), v);
    }
}

/// Parses the request's side copy (through the guard, which reparses only
/// the history items the caller has not sent before); failures are counted
/// as fail-open and yield `None` (the body is forwarded unchanged either way).
fn parse_side_copy(
    guard: &Guard,
    dialect: Dialect,
    route: &str,
    query: Option<&str>,
    headers: &http::HeaderMap,
    body: &bytes::Bytes,
    limit: usize,
) -> Option<(bytes::Bytes, ParsedRequest)> {
    let decoded = match body::decoded_for_parsing(headers, body, limit) {
        Ok(decoded) => decoded,
        Err(e) => {
            tracing::warn!(error = %e, "request body not decodable; no detection");
            crate::telemetry::fail_open("request_undecodable");
            return None;
        }
    };
    let parsed = guard.parse_request(dialect, route, headers, query, &decoded);
    // One lone surrogate escape would make every later request of the
    // conversation unparsable: parse a copy with it replaced.
    let retried = match &parsed {
        Err(crate::dialect::DialectError::Json(_)) => body::replace_lone_surrogates(&decoded)
            .map(bytes::Bytes::from)
            .and_then(|fixed| {
                let parsed = guard.parse_request(dialect, route, headers, query, &fixed).ok()?;
                tracing::debug!("request body parsed with its lone surrogate escapes replaced");
                Some((fixed, parsed))
            }),
        _ => None,
    };
    if retried.is_some() {
        return retried;
    }
    match parsed {
        Ok(parsed) => Some((decoded, parsed)),
        Err(e) => {
            tracing::warn!(dialect = dialect.name(), error = %e, "request body not understood; no detection");
            crate::telemetry::fail_open("request_unparsable");
            None
        }
    }
}

/// How the response body is framed: SSE by its content type, else a JSON
/// array where the request asked for one (Gemini), else one document.
fn framing(dialect: Dialect, path: &str, query: &Option<String>, headers: &http::HeaderMap) -> Mode {
    if headers::is_event_stream(headers) {
        return Mode::Sse;
    }
    match dialect.mode(path, query.as_deref(), false) {
        Mode::JsonArray => Mode::JsonArray,
        Mode::Sse | Mode::Whole => Mode::Whole,
    }
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
