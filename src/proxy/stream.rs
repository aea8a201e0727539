//! The plain response body for paths loopguard does not parse (and upstream
//! error answers): the upstream's chunks forwarded as received, an idle
//! timeout between reads, and an abort (never a clean end) when the
//! upstream's body broke off.

use std::pin::Pin;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

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
}

struct State {
    upstream: Upstream,
    idle: Duration,
    log: RequestLog,
    bytes: u64,
    outcome: Option<&'static str>,
}

impl State {
    /// Records how the body ended; the log line is written when the state drops.
    fn end(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
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
            outcome,
            "request"
        );
    }
}

/// Wraps the upstream's body for the client: every chunk is forwarded as
/// soon as it is read; the client's response is aborted when the upstream
/// body fails or stays silent longer than `idle`. Dropping the returned body
/// (client gone) drops the upstream request with it.
pub fn client_body(upstream: reqwest::Response, idle: Duration, log: RequestLog) -> Body {
    let state = State {
        upstream: Box::pin(upstream.bytes_stream()),
        idle,
        log,
        bytes: 0,
        outcome: None,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        if st.outcome.is_some() {
            return None;
        }
        match tokio::time::timeout(st.idle, st.upstream.next()).await {
            Ok(Some(Ok(chunk))) => {
                st.bytes += chunk.len() as u64;
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
    });
    Body::from_stream(stream)
}
