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
use crate::guard::shared::{Begun, Commit, Speculated};
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

/// The shared store's write of a forwarded request's detector state
/// ([`crate::state`]), run beside the upstream request ([`Settle::run`]):
/// the verdict went out, the write only has to be acknowledged before the
/// response ends. Empty without a shared store.
pub(super) struct Settle<'a> {
    pending: Option<Pending<'a>>,
}

struct Pending<'a> {
    guard: &'a Guard,
    offload: &'a Offload,
    config: &'a Config,
    admitted: &'a Admitted<'a>,
    begun: crate::guard::shared::Begun<'a>,
    key: Option<String>,
    heavy: bool,
}

impl Settle<'_> {
    /// Writes the state compare-and-set; after a conflict (another replica
    /// wrote first) detection runs again, quietly, on the stored state and
    /// the result is written in its place. The verdict already sent stands.
    /// Releases the session's lock on this replica when done.
    pub(super) async fn run(self) {
        let Some(mut p) = self.pending else { return };
        let Some(view) = view_of(p.admitted) else { return };
        while Box::pin(p.guard.shared_commit(&mut p.begun, p.key.as_deref())).await == Commit::Again {
            let outbox = Some(Arc::clone(p.begun.outbox()));
            p.key = p
                .offload
                .run(p.heavy, || p.guard.redo_request(p.config, &view, outbox))
                .await;
        }
    }
}

/// What detection sees of an admitted request: `None` without a known
/// dialect or a parsed body.
fn view_of<'a>(admitted: &'a Admitted<'_>) -> Option<RequestView<'a>> {
    let (Some(dialect), Some((decoded, parsed))) = (admitted.matched.dialect, &admitted.side) else {
        return None;
    };
    Some(RequestView {
        route: admitted.matched.route,
        dialect,
        path: &admitted.path,
        query: admitted.query.as_deref(),
        headers: &admitted.parts.headers,
        tenant: &admitted.tenant,
        decoded,
        parsed,
        budget: Some(&admitted.parse_budget),
        resolved: None,
        trace: admitted.trace.as_ref(),
    })
}

/// Decides what becomes of an admitted request: sent upstream (with the
/// shared state's write to run beside it, see [`Settle`]), or answered by
/// loopguard (a block or an abort; the write then comes first).
pub(super) async fn decide<'a>(
    guard: &'a Guard,
    offload: &'a Offload,
    config: &'a Config,
    admitted: &'a Admitted<'a>,
) -> Result<(Decided, Settle<'a>), Answered> {
    let mut decided = Decided::as_received(admitted);
    let Some(view) = view_of(admitted) else {
        return Ok((decided, Settle { pending: None }));
    };
    let d = view.dialect;
    // Large bodies are judged on the offload pool, never on the async
    // workers; the shared store's load and write are the async frame around it.
    // Decided on the decoded body: a small compressed body may decode large.
    let heavy = view.decoded.len() > config.server.offload_body_bytes;
    let probe = offload.run(heavy, || guard.shared_probe(config, &view)).await;
    // The shared store's futures are boxed, here and below: they are large,
    // and a request without a store should not carry room for them.
    let mut begun = match probe {
        Some(probe) => Box::pin(guard.shared_begin(probe)).await,
        None => None,
    };
    let outbox = begun.as_ref().map(|b| Arc::clone(b.outbox()));
    decided.outbox.clone_from(&outbox);
    let resolved = begun.as_ref().map(|b| b.resolved().clone());
    let probed = RequestView {
        resolved: resolved.as_ref(),
        ..view
    };
    let judging = Judging {
        guard,
        offload,
        config,
        heavy,
    };
    let (decision, key) = judging.judge(&probed, begun.as_mut(), outbox).await;
    decided.session.clone_from(&key);
    if let (Some(trace), Some(key)) = (&admitted.trace, &key) {
        trace.session(key);
    }
    let settle = Settle {
        pending: begun.map(|begun| Pending {
            guard,
            offload,
            config,
            admitted,
            begun,
            key,
            heavy,
        }),
    };
    match decision {
        RequestDecision::Forward {
            body,
            judge,
            verdict,
            retarget,
        } => decided.forwarded(body, judge, verdict, retarget),
        RequestDecision::Answer {
            status,
            answer,
            verdict,
        } => {
            // The `request` event is written by the handler, as for every answer of loopguard's own.
            Box::pin(settle.run()).await;
            if let Some(outbox) = &decided.outbox {
                Box::pin(outbox.flush()).await;
            }
            let route = &admitted.matched.route.prefix;
            let response = answer_response(status, answer, &verdict);
            return Err(Box::new(counted(route, d.name(), response)));
        }
    }
    Ok((decided, settle))
}

impl Decided {
    /// The request as received: its body forwarded unchanged, the response
    /// passed through unjudged, no session.
    fn as_received(admitted: &Admitted<'_>) -> Self {
        Self {
            forward: admitted.body.clone(),
            body_replaced: false,
            judge: Box::new(PassJudge),
            session: None,
            outbox: None,
            verdict: None,
            retarget: None,
        }
    }

    /// Takes in what detection decided for a request it lets go.
    fn forwarded(
        &mut self,
        body: Option<Bytes>,
        judge: Box<dyn StreamJudge>,
        verdict: Option<String>,
        retarget: Option<crate::escalate::Retarget>,
    ) {
        if let Some(replaced) = body {
            self.forward = replaced;
            self.body_replaced = true;
        }
        self.judge = judge;
        self.verdict = verdict;
        self.retarget = retarget;
    }
}

/// What request-time detection runs with: the guard, the pool a heavy body
/// is judged on, and the configuration.
struct Judging<'a> {
    guard: &'a Guard,
    offload: &'a Offload,
    config: &'a Config,
    heavy: bool,
}

impl Judging<'_> {
    /// Runs the detectors on a request. Over a speculative shared-state load
    /// the decision is made with its echoes deferred, and stands only if the
    /// store confirms the state it was made on; otherwise it is dropped
    /// unsaid and made again on the state the store holds.
    async fn judge(
        &self,
        probed: &RequestView<'_>,
        begun: Option<&mut Begun<'_>>,
        outbox: Option<Arc<crate::state::Outbox>>,
    ) -> (RequestDecision, Option<String>) {
        let Self {
            guard,
            offload,
            config,
            heavy,
        } = *self;
        let Some(speculating) = begun.filter(|b| b.speculative()) else {
            return offload
                .run(heavy, || guard.on_request_with(config, probed, outbox))
                .await;
        };
        let (decision, key, echoes) = offload
            .run(heavy, || {
                guard.on_request_deferred(config, probed, outbox.clone())
            })
            .await;
        match Box::pin(guard.shared_speculate(speculating, key.as_deref())).await {
            Speculated::Stands => {
                echoes.tell();
                (decision, key)
            }
            Speculated::Again => {
                echoes.discard();
                drop(decision);
                offload
                    .run(heavy, || guard.on_request_with(config, probed, outbox))
                    .await
            }
        }
    }
}
