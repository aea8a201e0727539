//! Deciding, the second stage: request-time detection through the guard
//! (only for a parsed body of a known dialect), carried out as planned
//! ([`crate::plan`]): forward as received, forward with the warning
//! injected, or answer in the upstream's place.

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
    /// The request-time verdict that let it go (observe, warn), for the log.
    pub(super) verdict: Option<String>,
    /// Escalated: the model and upstream it goes to instead.
    pub(super) retarget: Option<crate::escalate::Retarget>,
}

/// Decides what becomes of an admitted request: sent upstream, or answered
/// by loopguard (a block or an abort).
pub(super) fn decide(guard: &Guard, config: &Config, admitted: &Admitted<'_>) -> Result<Decided, Answered> {
    let mut decided = Decided {
        forward: admitted.body.clone(),
        body_replaced: false,
        judge: Box::new(PassJudge),
        session: None,
        verdict: None,
        retarget: None,
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
    let (decision, key) = guard.on_request(config, &view);
    decided.session = key;
    match decision {
        RequestDecision::Forward {
            body,
            judge,
            verdict,
            retarget,
        } => {
            if let Some(replaced) = body {
                decided.forward = replaced;
                decided.body_replaced = true;
            }
            decided.judge = judge;
            decided.verdict = verdict;
            decided.retarget = retarget;
        }
        RequestDecision::Answer {
            status,
            answer,
            verdict,
        } => {
            // The `request` event is written by the handler, as for every answer of loopguard's own.
            let route = &admitted.matched.route.prefix;
            return Err(Box::new(counted(
                route,
                d.name(),
                answer_response(status, answer, &verdict),
            )));
        }
    }
    Ok(decided)
}
