//! Deciding, the second stage: request-time detection through the guard
//! (only for a parsed body of a known dialect), carried out as planned
//! ([`crate::plan`]): forward as received, forward with the warning
//! injected, or answer in the upstream's place.

use std::sync::Arc;

use bytes::Bytes;

use super::Answered;
use super::admit::Admitted;
use super::offload::Offload;
use super::{answer_response, counted};
use crate::config::Config;
use crate::guard::shared::Commit;
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
    /// The request-time verdict that let it go (observe, warn), for the log.
    pub(super) verdict: Option<String>,
    /// Escalated: the model and upstream it goes to instead.
    pub(super) retarget: Option<crate::escalate::Retarget>,
}

/// Decides what becomes of an admitted request: sent upstream, or answered
/// by loopguard (a block or an abort).
pub(super) async fn decide(
    guard: &Guard,
    offload: &Offload,
    config: &Config,
    admitted: &Admitted<'_>,
) -> Result<Decided, Answered> {
    let mut decided = Decided {
        forward: admitted.body.clone(),
        body_replaced: false,
        judge: Box::new(PassJudge),
        session: None,
        outbox: None,
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
        budget: Some(&admitted.parse_budget),
    };
    // Large bodies are judged on the offload pool, never on the async
    // workers; the shared store's load and write are the async frame around it.
    let heavy = admitted.body.len() > config.server.offload_body_bytes;
    let probe = offload.run(heavy, || guard.shared_probe(config, &view)).await;
    let mut begun = guard.shared_begin(probe).await;
    let (decision, key) = loop {
        let outbox = begun.as_ref().map(|b| Arc::clone(b.outbox()));
        let (decision, key) = offload
            .run(heavy, || guard.on_request_with(config, &view, outbox))
            .await;
        let Some(b) = begun.as_mut() else {
            break (decision, key);
        };
        if guard.shared_commit(b, key.as_deref()).await == Commit::Done {
            break (decision, key);
        }
    };
    decided.outbox = begun.map(|b| Arc::clone(b.outbox()));
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
