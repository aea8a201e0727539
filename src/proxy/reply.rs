//! Replying, the last stage: the upstream's answer to the client. Without
//! detection (no dialect, or an error status) it streams through unchanged;
//! otherwise through the holder ([`super::hold`]): a whole body is judged
//! before it goes out, a stream is driven by [`super::respond::drive`] with
//! its headers held at most `header_hold_ms` for a verdict.

use std::time::Instant;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use tokio::sync::{mpsc, oneshot};

use super::admit::Admitted;
use super::decide::Decided;
use super::error::ProxyError;
use super::forward::Upstream;
use super::hold::Holder;
use super::tap::Tap;
use super::{headers, respond, set_verdict_header, stream};
use crate::config::Config;
use crate::dialect::{Dialect, Mode};
use crate::plan::StreamJudge;

/// Answers the client with the upstream's response.
pub(super) async fn reply(
    config: &Config,
    admitted: &Admitted<'_>,
    upstream: Upstream,
    mut decided: Decided,
    started: Instant,
) -> Response {
    let Upstream { response, overhead } = upstream;
    let dialect = admitted.matched.dialect;
    let status = response.status();
    let dialect_name = dialect.map_or("-", Dialect::name);
    metrics::counter!(
        "loopguard_requests_total",
        "route" => admitted.matched.route.prefix.clone(),
        "dialect" => dialect_name,
        "status" => status.as_u16().to_string()
    )
    .increment(1);

    let out_headers = headers::client_response_headers(response.headers());
    let log = stream::RequestLog {
        route: admitted.matched.route.prefix.clone(),
        dialect: dialect_name,
        status: status.as_u16(),
        started,
        request_messages: admitted.parsed().map(|p| p.transcript.messages.len()),
        session: decided.session.take(),
        overhead,
        verdict: decided.verdict,
        trace: admitted.trace.clone(),
    };
    let outbox = decided.outbox.clone();
    let Some(dialect) = dialect.filter(|_| status.is_success()) else {
        let body: Body = stream::client_body(response, config.server.idle_timeout, log);
        return with_headers(status, body, out_headers);
    };

    let mode = framing(dialect, &admitted.path, &admitted.query, response.headers());
    if let Some(coding) = super::encoded::coding(response.headers()) {
        // Encoded although identity was asked for: forwarded as is, never
        // held, judged on a decoded side copy (verdicts act on the next request).
        let side = super::encoded::SideJudge::new(
            &coding,
            dialect,
            mode,
            config.server.max_response_bytes,
            decided.judge,
        );
        let body =
            stream::client_body_observed(response, config.server.idle_timeout, log, Some(Box::new(side)));
        return with_headers(status, body, out_headers);
    }
    let holder = holder(config, admitted, dialect, mode, decided.judge.as_mut());
    let reply = Reply {
        status,
        headers: out_headers,
        dialect,
        log,
    };
    if mode == Mode::Whole {
        let out = whole(config, admitted, response, holder, decided.judge, reply).await;
        if let Some(outbox) = outbox {
            // Written before any byte of the answer goes out (boxed, as
            // every shared-store future on the request's path).
            Box::pin(outbox.flush()).await;
        }
        out
    } else {
        streamed(config, response, holder, decided.judge, reply, outbox).await
    }
}

/// The holder of a response judged in `dialect`, its tap copying what the
/// trace and the recording keep. Boxed: every stage it passes through would
/// otherwise keep a copy of it (about a kilobyte) in the request's future.
fn holder(
    config: &Config,
    admitted: &Admitted<'_>,
    dialect: Dialect,
    mode: Mode,
    judge: &mut dyn StreamJudge,
) -> Box<Holder> {
    let mut tap = Tap::new(dialect, mode, config.server.max_response_bytes);
    if admitted.trace.is_some() {
        tap.keep_for_trace();
    }
    if let Some(mut copy) = judge.recording() {
        copy.framed(mode);
        tap.record_into(copy);
    }
    let include_usage = admitted.parsed().is_some_and(|p| p.include_usage);
    Box::new(
        Holder::new(tap, dialect, mode, include_usage, config.server.max_held_bytes)
            .with_max_frame(config.server.max_response_bytes)
            .with_offload_above(config.server.offload_body_bytes),
    )
}

/// What every reply through the holder carries.
struct Reply {
    status: http::StatusCode,
    headers: http::HeaderMap,
    dialect: Dialect,
    log: stream::RequestLog,
}

/// A whole JSON body, judged before any of it goes out.
async fn whole(
    config: &Config,
    admitted: &Admitted<'_>,
    response: reqwest::Response,
    holder: Box<Holder>,
    judge: Box<dyn StreamJudge>,
    reply: Reply,
) -> Response {
    let Reply {
        status,
        headers: mut out_headers,
        dialect,
        log,
    } = reply;
    let idle = config.server.idle_timeout;
    match respond::whole(response, holder, judge, idle, log).await {
        respond::Whole::Answer { verdict, body } => {
            if let Some(v) = &verdict {
                set_verdict_header(&mut out_headers, v);
            }
            out_headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
            with_headers(status, Body::from(body), out_headers)
        }
        respond::Whole::Abort(cut) => abort_response(dialect, &cut),
        respond::Whole::Stream {
            prefix,
            upstream,
            log,
        } => {
            let length = out_headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
            let body = stream::client_body_after(prefix, upstream, length, idle, log);
            with_headers(status, body, out_headers)
        }
        respond::Whole::Broken(detail) => ProxyError::UpstreamUnreachable {
            upstream: admitted.matched.upstream_url.origin().ascii_serialization(),
            detail,
        }
        .into_response_for(Some(admitted.provider)),
    }
}

/// A stream: driven in its own task, its headers held at most
/// `header_hold_ms` for a verdict.
async fn streamed(
    config: &Config,
    response: reqwest::Response,
    holder: Box<Holder>,
    judge: Box<dyn StreamJudge>,
    reply: Reply,
    outbox: Option<std::sync::Arc<crate::state::Outbox>>,
) -> Response {
    let Reply {
        status,
        headers: mut out_headers,
        dialect,
        log,
    } = reply;
    let (head_tx, mut head_rx) = oneshot::channel();
    let (body_tx, body_rx) = mpsc::channel::<respond::BodyItem>(64);
    crate::task::spawn(respond::drive(
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
            respond_with(status, out_headers, body_rx, outbox)
        }
        None => {
            out_headers.remove(http::header::CONTENT_LENGTH);
            respond_with(status, out_headers, body_rx, outbox)
        }
    }
}

fn abort_response(dialect: Dialect, cut: &crate::plan::Cut) -> Response {
    let mut out = (
        http::StatusCode::BAD_REQUEST,
        [(http::header::CONTENT_TYPE, "application/json")],
        dialect.abort_body(&cut.message),
    )
        .into_response();
    set_verdict_header(out.headers_mut(), &cut.header);
    out
}

fn respond_with(
    status: http::StatusCode,
    headers: http::HeaderMap,
    body_rx: mpsc::Receiver<respond::BodyItem>,
    outbox: Option<std::sync::Arc<crate::state::Outbox>>,
) -> Response {
    let stream = futures_util::stream::unfold((body_rx, outbox), |(mut rx, outbox)| async move {
        let Some(item) = rx.recv().await else {
            // Shared state: what the response added is written before the
            // body ends (the end of the chunked body is its last byte).
            if let Some(outbox) = outbox {
                outbox.flush().await;
            }
            return None;
        };
        if item.is_err() {
            // Let the server write out what came before (headers included)
            // before the error aborts the response.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Some((item, (rx, outbox)))
    });
    with_headers(status, Body::from_stream(stream), headers)
}

/// How the response body is framed: SSE by its content type, else a JSON
/// array where the request asked for one (Gemini), else one document.
fn framing(dialect: Dialect, path: &str, query: &Option<String>, headers: &http::HeaderMap) -> Mode {
    if headers::is_event_stream(headers) {
        return Mode::Sse;
    }
    match dialect.mode(path, query.as_deref(), true) {
        Mode::JsonArray => Mode::JsonArray,
        // Ollama: a stream says so by its content type (`stream: false`
        // answers, and errors, are one JSON document).
        Mode::Ndjson if headers::is_ndjson(headers) => Mode::Ndjson,
        // Bedrock: likewise, errors are one JSON document.
        Mode::EventStream if headers::is_aws_event_stream(headers) => Mode::EventStream,
        Mode::Sse | Mode::Ndjson | Mode::EventStream | Mode::Whole => Mode::Whole,
    }
}

/// A response of `status` with `body` and exactly `headers` (the upstream's,
/// as filtered, plus loopguard's own).
fn with_headers(status: http::StatusCode, body: impl Into<Body>, headers: http::HeaderMap) -> Response {
    let mut out = (status, body.into()).into_response();
    *out.headers_mut() = headers;
    out
}
