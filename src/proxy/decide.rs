//! Deciding, the second stage: request-time detection through the guard
//! (only for a parsed body of a known dialect), carried out as planned
//! ([`crate::plan`]): forward as received, forward with the warning
//! injected, or answer in the upstream's place.

use std::time::Instant;

use bytes::Bytes;

use super::Answered;
use super::admit::Admitted;
use super::{answer_response, counted};
use crate::config::Config;
use crate::guard::{Guard, RequestDecision, RequestView};
use crate::plan::{PassJudge, StreamJudge};

/// A request to send upstream.
pub(super) struct Decided {
    /// The body to send.
    pub(super) forward: Bytes,
    /// The body is not the one received (a warning was injected).
    pub(super) body_replaced: bool,
    /// Judges the response while it streams.
    pub(super) judge: Box<dyn StreamJudge>,
    /// The session key (a hash, for logs).
    pub(super) session: Option<String>,
    /// Shared state: what the response adds, written before its end.
    pub(super) outbox: Option<std::sync::Arc<crate::state::Outbox>>,
}

/// Decides what becomes of an admitted request: sent upstream, or answered
/// by loopguard (a block or an abort).
pub(super) async fn decide(
    guard: &Guard,
    config: &Config,
    admitted: &Admitted<'_>,
    started: Instant,
) -> Result<Decided, Answered> {
    let mut decided = Decided {
        forward: admitted.body.clone(),
        body_replaced: false,
        judge: Box::new(PassJudge),
        session: None,
        outbox: None,
    };
    let (Some(d), Some((decoded, parsed))) = (admitted.matched.dialect, &admitted.side) else {
        return Ok(decided);
    };
    let view = RequestView {
        route: admitted.matched.route,
        dialect: d,
        path: &admitted.path,
        query: admitted.query.as_deref(),
        headers: &admitted.parts.headers,
        decoded,
        parsed,
    };
    let (decision, key, outbox) = guard.on_request_shared(config, &view).await;
    decided.session = key;
    decided.outbox = outbox;
    match decision {
        RequestDecision::Forward {
            body: Some(replaced),
            judge,
        } => {
            decided.forward = replaced;
            decided.body_replaced = true;
            decided.judge = judge;
        }
        RequestDecision::Forward { body: None, judge } => decided.judge = judge,
        RequestDecision::Answer {
            status,
            answer,
            verdict,
        } => {
            let route = &admitted.matched.route.prefix;
            tracing::info!(
                route = %route,
                dialect = d.name(),
                status = status.as_u16(),
                duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                verdict = %verdict,
                outcome = "answered_by_loopguard",
                "request"
            );
            if let Some(outbox) = &decided.outbox {
                outbox.flush().await;
            }
            return Err(Box::new(counted(
                route,
                d.name(),
                answer_response(status, answer, &verdict),
            )));
        }
    }
    Ok(decided)
}
