//! The response body sent to the client: the upstream's chunks forwarded as
//! received, a tap parsing a side copy, an idle timeout between reads, and
//! an abort (never a clean end) when the upstream's body broke off.

use std::pin::Pin;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::tap::{Tap, TapEnd};
use crate::dialect::StreamEvent;

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
}

struct State {
    upstream: Upstream,
    tap: Option<Tap>,
    idle: Duration,
    log: RequestLog,
    bytes: u64,
    outcome: Option<&'static str>,
}

impl Drop for State {
    fn drop(&mut self) {
        // Fires exactly once: on end, on error, or when the client went away
        // (the body was dropped before it ended).
        let outcome = self.outcome.unwrap_or("client_disconnected");
        let events = self.tap.as_ref().map_or(0, |t| t.events().len());
        let summary = self
            .tap
            .as_ref()
            .map(|t| Summary::of(t.events()))
            .unwrap_or_default();
        tracing::info!(
            route = %self.log.route,
            dialect = self.log.dialect,
            status = self.log.status,
            duration_ms = u64::try_from(self.log.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            bytes = self.bytes,
            events,
            request_messages = self.log.request_messages.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
            text_chars = summary.text_chars,
            tool_calls = %summary.tool_calls.join(","),
            finish = %summary.finish.join(","),
            outcome,
            "request"
        );
    }
}

impl State {
    /// Records how the body ended; the log line is written when the state drops.
    fn end(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }
}

/// What a response carried, for the request log line.
#[derive(Debug, Default)]
struct Summary {
    text_chars: usize,
    tool_calls: Vec<String>,
    finish: Vec<String>,
}

impl Summary {
    fn of(events: &[StreamEvent]) -> Self {
        let mut s = Self::default();
        for event in events {
            match event {
                StreamEvent::TextDelta { text, .. } => s.text_chars += text.chars().count(),
                StreamEvent::ToolCallComplete { call, .. } => s.tool_calls.push(call.name.clone()),
                StreamEvent::Finish { reason, .. } => s.finish.push(reason.clone()),
                _ => {}
            }
        }
        s
    }
}

fn broken(message: String) -> std::io::Error {
    std::io::Error::other(message)
}

/// Wraps the upstream's body for the client.
///
/// Every chunk is forwarded as soon as it is read and fed to `tap`. The
/// client's response is aborted (the connection closed without the chunked
/// terminator, so no client mistakes it for a whole answer) when the upstream
/// body fails, stays silent longer than `idle`, or ends before its dialect's
/// end marker. Dropping the returned body (client gone) drops the upstream
/// request with it.
pub fn client_body(upstream: reqwest::Response, tap: Option<Tap>, idle: Duration, log: RequestLog) -> Body {
    let state = State {
        upstream: Box::pin(upstream.bytes_stream()),
        tap,
        idle,
        log,
        bytes: 0,
        outcome: None,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        if st.outcome.is_some() {
            return None;
        }
        let next = tokio::time::timeout(st.idle, st.upstream.next()).await;
        match next {
            Ok(Some(Ok(chunk))) => {
                st.bytes += chunk.len() as u64;
                if let Some(tap) = st.tap.as_mut() {
                    tap.feed(&chunk);
                }
                Some((Ok(chunk), st))
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(route = %st.log.route, error = %e, "upstream body broke off; aborting the client's response");
                st.outcome = Some("upstream_broke_off");
                Some((Err(broken(format!("upstream body broke off: {e}"))), st))
            }
            Ok(None) => {
                let end = st.tap.as_mut().map_or(TapEnd::Unknown, Tap::finish);
                if let Some(reason) = st.tap.as_ref().and_then(Tap::failure) {
                    crate::telemetry::fail_open(reason_label(reason));
                }
                match end {
                    TapEnd::Truncated(reason) => {
                        tracing::warn!(route = %st.log.route, %reason, "upstream stream ended early; aborting the client's response");
                        st.outcome = Some("upstream_truncated");
                        Some((Err(broken(format!("upstream stream truncated: {reason}"))), st))
                    }
                    TapEnd::Complete | TapEnd::Unknown => {
                        st.end("complete");
                        None
                    }
                }
            }
            Err(_) => {
                tracing::warn!(route = %st.log.route, idle_secs = st.idle.as_secs(), "upstream idle timeout; aborting the client's response");
                st.outcome = Some("upstream_idle_timeout");
                Some((Err(broken("upstream idle timeout".to_owned())), st))
            }
        }
    });
    Body::from_stream(stream)
}

fn reason_label(reason: &str) -> &'static str {
    if reason.starts_with("response_too_large") {
        "response_too_large"
    } else if reason.starts_with("json array") {
        "json_array_invalid"
    } else {
        "response_unparsable"
    }
}
