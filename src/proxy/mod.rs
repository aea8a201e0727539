//! Forwarding: one request from the agent to the upstream and the answer
//! back, streamed, with a side tap that parses what passes.
//!
//! Stages, in order, one file each: `admit` (path checks, route match,
//! misroute check, capped body, dialect parse of a side copy, fail open) →
//! `decide` (request-time detection, carried out as [`crate::plan`]
//! says) → `forward` (the upstream request, first-byte timeout) →
//! `reply` (response headers, the body through the holder, see
//! [`respond`] and [`stream`]). A large body's parse and judgement run off
//! the async workers ([`offload`]).

mod admit;
pub mod body;
mod decide;
pub mod encoded;
pub mod error;
mod forward;
pub mod headers;
pub mod hold;
pub mod offload;
pub mod path;
mod reply;
pub mod respond;
pub mod stream;
pub mod tap;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::config::Config;
use crate::guard::Guard;

/// A stage answered the request itself: it goes no further.
type Answered = Box<Response>;

/// Shared state of the proxy listener.
#[derive(Debug)]
pub struct ProxyState {
    /// The configuration in force (swapped by a reload; each request keeps
    /// the one it started with).
    pub config: crate::reload::SharedConfig,
    /// The upstream client (pooled): TLS upstreams, and every upstream
    /// when `pool` is `None`.
    pub client: reqwest::Client,
    /// Plain-HTTP upstream connections driven in the request's task; `None`
    /// while a proxy variable sends plain HTTP through a proxy
    /// ([`crate::http_client::plain_http_proxied`]).
    pub pool: Option<Arc<crate::upstream_pool::Pool>>,
    /// Sessions and detectors (shared by the proxy workers).
    pub guard: Arc<Guard>,
    /// Where large bodies are parsed and judged, off the async workers
    /// (one pool for all proxy workers).
    pub offload: Arc<offload::Offload>,
}

/// The axum handler for every path on the proxy listener: admit → decide
/// → forward → reply, each stage answering the client itself when the
/// request goes no further.
pub async fn handle(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let started = Instant::now();
    let config: Arc<Config> = state.config.load_full();
    let mut admitted = match admit::admit(&state.guard, &state.offload, &config, request).await {
        Ok(admitted) => admitted,
        Err(response) => return logged(*response, started, None),
    };
    admitted.trace = admitted.traced(started);
    let (decided, settle) = match decide::decide(&state.guard, &state.offload, &config, &admitted).await {
        Ok(decided) => decided,
        Err(answered) => return logged(*answered, started, admitted.trace.as_deref()),
    };
    let upstream_and_reply = async {
        let sending = forward::Sending {
            body: decided.forward.clone(),
            body_replaced: decided.body_replaced,
            retarget: decided.retarget.as_ref(),
        };
        let clients = forward::Clients {
            client: &state.client,
            pool: state.pool.as_ref(),
        };
        match forward::forward(clients, &config, &admitted, sending).await {
            Ok(upstream) => reply::reply(&config, &admitted, upstream, decided, started).await,
            Err(response) => logged(*response, started, admitted.trace.as_deref()),
        }
    };
    // The shared state's write goes beside the upstream request and the
    // reading and judging of its answer, not before them; the response is
    // handed to the client only once the write is acknowledged (and what
    // the answer adds waits for it: the outbox's write takes the session's
    // lock, held until this write is done).
    let ((), response) = tokio::join!(settle.run(), upstream_and_reply);
    response
}

/// Where an answer of loopguard's own belongs, for its `request` event.
#[derive(Debug, Clone)]
struct OwnAnswer {
    route: String,
    dialect: &'static str,
}

/// Marks an answer to a client that went away while sending its body: its
/// `request` event says `outcome="client_disconnected"` (nobody reads the answer).
#[derive(Debug, Clone, Copy)]
struct ClientGone;

/// Counts a response loopguard wrote itself in `loopguard_requests_total`
/// and marks it for its `request` event ([`logged`]).
fn counted(route: &str, dialect: &'static str, mut response: Response) -> Response {
    metrics::counter!(
        "loopguard_requests_total",
        "route" => route.to_owned(),
        "dialect" => dialect,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response.extensions_mut().insert(OwnAnswer {
        route: route.to_owned(),
        dialect,
    });
    response
}

/// Writes the `request` event of an answer of loopguard's own (no route,
/// unsafe path, misrouted, body too large, upstream unreachable or timed
/// out, a request-time block or abort), and ends its span.
fn logged(mut response: Response, started: Instant, trace: Option<&crate::trace::Trace>) -> Response {
    let own = response.extensions_mut().remove::<OwnAnswer>();
    let outcome = if response.extensions_mut().remove::<ClientGone>().is_some() {
        "client_disconnected"
    } else {
        "answered_by_loopguard"
    };
    let (route, dialect) = own.map_or(("-".to_owned(), "-"), |o| (o.route, o.dialect));
    let verdict = response
        .headers()
        .get("x-loopguard-verdict")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info!(
        route = %route,
        dialect,
        status = response.status().as_u16(),
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        verdict,
        outcome,
        "request"
    );
    if let Some(trace) = trace {
        trace.finish(&crate::trace::End {
            status: response.status().as_u16(),
            outcome,
            verdict: Some(verdict).filter(|v| !v.is_empty()),
            ..crate::trace::End::default()
        });
    }
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
