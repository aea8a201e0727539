//! The plain response body for paths loopguard does not parse (and upstream
//! error answers): the upstream's chunks forwarded as received, an idle
//! timeout between reads, and an abort (never a clean end) when the
//! upstream's body broke off.

use std::pin::Pin;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

/// An upstream body as a stream of chunks.
pub type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// What the request log line needs once the body is over.
#[derive(Debug)]
pub struct RequestLog {
    /// Route prefix.
    pub route: String,
    /// Dialect name or `-`.
    pub dialect: &'static str,
    /// Upstream status.
    pub status: u16,
    /// When the request arrived.
    pub started: Instant,
    /// Messages in the parsed request, or `None` when it was not parsed.
    pub request_messages: Option<usize>,
    /// The session key (a hash), when detection ran.
    pub session: Option<String>,
    /// Time loopguard spent on the request before sending it upstream
    /// (parse, detection, warning injection).
    pub overhead: std::time::Duration,
    /// The request-time verdict that let the request go (observe, warn).
    pub verdict: Option<String>,
    /// The request's span, while traces are on: ended with the log line.
    pub trace: Option<std::sync::Arc<crate::trace::Trace>>,
}

/// Sees a copy of every chunk that passes (and the end), without changing
/// or delaying any ([`super::encoded`]).
pub trait Observer: Send {
    /// A chunk went to the client.
    fn chunk(&mut self, bytes: &[u8]);
    /// The body ended cleanly.
    fn end(&mut self);
}

struct State {
    upstream: Upstream,
    observer: Option<Box<dyn Observer>>,
    idle: Duration,
    log: RequestLog,
    bytes: u64,
    /// The upstream's declared length: reached, the body is complete
    /// (the server may never poll for the end).
    length: Option<u64>,
    outcome: Option<&'static str>,
}

impl State {
    /// Records how the body ended; the log line is written when the state drops.
    fn end(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
        if outcome == "complete" {
            if let Some(observer) = self.observer.as_mut() {
                observer.end();
            }
        }
    }

    fn observe(&mut self, bytes: &[u8]) {
        if let Some(observer) = self.observer.as_mut() {
            observer.chunk(bytes);
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // Fires exactly once: on end, on error, or when the client went away
        // (the body was dropped before it ended).
        let outcome = self.outcome.unwrap_or("client_disconnected");
        metrics::histogram!("loopguard_overhead_seconds").record(self.log.overhead.as_secs_f64());
        tracing::info!(
            session = self.log.session.as_deref().unwrap_or(""),
            overhead_us = u64::try_from(self.log.overhead.as_micros()).unwrap_or(u64::MAX),
            route = %self.log.route,
            dialect = self.log.dialect,
            status = self.log.status,
            duration_ms = u64::try_from(self.log.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            bytes = self.bytes,
            verdict = self.log.verdict.as_deref().unwrap_or(""),
            outcome,
            "request"
        );
        if let Some(trace) = &self.log.trace {
            trace.finish(&crate::trace::End {
                status: self.log.status,
                outcome,
                verdict: self.log.verdict.as_deref(),
                ..crate::trace::End::default()
            });
        }
    }
}

/// Wraps the upstream's body for the client: every chunk is forwarded as
/// soon as it is read; the client's response is aborted when the upstream
/// body fails or stays silent longer than `idle`. Dropping the returned body
/// (client gone) drops the upstream request with it.
pub fn client_body(upstream: reqwest::Response, idle: Duration, log: RequestLog) -> Body {
    client_body_observed(upstream, idle, log, None)
}

/// As [`client_body`], with `observer` shown every chunk.
pub fn client_body_observed(
    upstream: reqwest::Response,
    idle: Duration,
    log: RequestLog,
    observer: Option<Box<dyn Observer>>,
) -> Body {
    let length = upstream.content_length();
    let state = State {
        upstream: Box::pin(upstream.bytes_stream()),
        observer,
        idle,
        log,
        bytes: 0,
        length,
        outcome: None,
    };
    body_of(state, None)
}

/// As [`client_body`], for a body whose first bytes (`prefix`) were already
/// read from `upstream`; `length` is the upstream's declared length.
pub fn client_body_after(
    prefix: Bytes,
    upstream: Upstream,
    length: Option<u64>,
    idle: Duration,
    log: RequestLog,
) -> Body {
    let state = State {
        upstream,
        observer: None,
        idle,
        log,
        bytes: 0,
        length,
        outcome: None,
    };
    body_of(state, (!prefix.is_empty()).then_some(prefix))
}

fn body_of(state: State, first: Option<Bytes>) -> Body {
    let state = (state, first);
    let stream = futures_util::stream::unfold(state, |(mut st, first)| async move {
        if let Some(prefix) = first {
            st.bytes += prefix.len() as u64;
            if st.length == Some(st.bytes) {
                st.end("complete");
            }
            return Some((Ok(prefix), (st, None)));
        }
        next_chunk(st).await.map(|(item, st)| (item, (st, None)))
    });
    Body::from_stream(stream)
}

/// The next item of the client's body, or `None` at its end.
async fn next_chunk(mut st: State) -> Option<(Result<Bytes, std::io::Error>, State)> {
    if st.outcome.is_some() {
        return None;
    }
    match tokio::time::timeout(st.idle, st.upstream.next()).await {
        Ok(Some(Ok(chunk))) => {
            st.bytes += chunk.len() as u64;
            st.observe(&chunk);
            if st.length == Some(st.bytes) {
                st.end("complete");
            }
            Some((Ok(chunk), st))
        }
        Ok(Some(Err(e))) => {
            // Errors name the URL, whose query may carry a `?key=` credential.
            let e = e.without_url();
            tracing::warn!(route = %st.log.route, error = %e, "upstream body broke off; aborting the client's response");
            st.end("upstream_broke_off");
            Some((
                Err(std::io::Error::other(format!("upstream body broke off: {e}"))),
                st,
            ))
        }
        Ok(None) => {
            st.end("complete");
            None
        }
        Err(_) => {
            tracing::warn!(route = %st.log.route, "upstream idle timeout; aborting the client's response");
            st.end("upstream_idle_timeout");
            Some((Err(std::io::Error::other("upstream idle timeout")), st))
        }
    }
}
