//! The stream-time judge of one response: the tool calls the model emits
//! are judged against the session's history ("would this call continue the
//! streak?") without changing it, and the text is scanned for chanting.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, PoisonError};

use super::record;
use crate::detect::{ContentScanner, Settings, decisive};
use crate::dialect::StreamEvent;
use crate::plan::{Decision, StreamJudge};
use crate::session::{SharedSession, Store};
use crate::transcript::ToolCall;

/// Judges one response of a session lane.
pub struct StreamReviewer {
    session: SharedSession,
    key: String,
    lane: u64,
    settings: Arc<Settings>,
    scanner: ContentScanner,
    store: Arc<Store>,
    agent: Option<String>,
    chanting_reported: bool,
    panic_for_test: bool,
    /// Block is never an option: the request is a stateful Responses one
    /// (the server keeps the withheld call), so blocks become aborts.
    stateful: bool,
    /// Responses only: the tenant, to remember the response's id with its
    /// calls for a later `previous_response_id` request.
    chain: Option<Chain>,
    /// Shared state: what the response adds, written before its end.
    outbox: Option<Arc<crate::state::Outbox>>,
    /// `[recording]`: the recorder and this response's lane.
    recording: Option<(crate::recording::Recorder, crate::recording::LaneId)>,
    /// The request's span, while traces are on: verdicts become its events.
    trace: Option<Arc<crate::trace::Trace>>,
}

/// What a Responses response leaves for a request that chains to it.
#[derive(Debug)]
struct Chain {
    tenant: String,
    id: Option<String>,
    calls: Vec<ToolCall>,
    /// The response starts a chain of its own session (see
    /// [`StreamReviewer::for_responses`]).
    root: bool,
}

impl std::fmt::Debug for StreamReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReviewer")
            .field("key", &self.key)
            .field("lane", &self.lane)
            .finish()
    }
}

impl StreamReviewer {
    /// A judge for one response (with a fresh chanting scanner).
    pub fn new(
        session: SharedSession,
        key: String,
        lane: u64,
        settings: Arc<Settings>,
        store: Arc<Store>,
        agent: Option<String>,
        panic_for_test: bool,
    ) -> Self {
        Self {
            session,
            key,
            lane,
            scanner: ContentScanner::new(&settings),
            settings,
            store,
            agent,
            chanting_reported: false,
            panic_for_test,
            stateful: false,
            chain: None,
            outbox: None,
            recording: None,
            trace: None,
        }
    }

    /// Records this response (its bytes, through the tap) and its
    /// stream-time verdicts for `lane`.
    pub fn record_into(&mut self, recorder: crate::recording::Recorder, lane: crate::recording::LaneId) {
        self.recording = Some((recorder, lane));
    }

    fn record_verdict(&self, verdict: &crate::detect::Verdict) {
        if let Some((recorder, lane)) = &self.recording {
            recorder.send(crate::recording::Record::Verdict {
                lane: lane.clone(),
                t: self.store.now(),
                detector: verdict.detector,
                level: verdict.level,
            });
        }
    }

    /// While traces are on: the response's verdicts go to its span too.
    #[must_use]
    pub fn with_trace(mut self, trace: Option<Arc<crate::trace::Trace>>) -> Self {
        self.trace = trace;
        self
    }

    /// With shared state: the response's additions also go to `outbox`.
    #[must_use]
    pub fn with_outbox(mut self, outbox: Option<Arc<crate::state::Outbox>>) -> Self {
        self.outbox = outbox;
        self
    }

    /// For an `openai-responses` response: its id is remembered (with the
    /// calls it carries) for requests of `tenant` that chain to it; a
    /// `stateful` request is aborted where others would be blocked.
    ///
    /// A `root` response (its request chained to nothing and had no session
    /// id but its fingerprint) starts a session of its own for the chain:
    /// two runs of one script, one after the other or k at once, send the
    /// same first request, and each run's chain must keep its own state.
    #[must_use]
    pub fn for_responses(mut self, tenant: String, stateful: bool, root: bool) -> Self {
        self.stateful = stateful;
        self.chain = Some(Chain {
            tenant,
            id: None,
            calls: Vec::new(),
            root,
        });
        self
    }

    /// Records the chain link of this response, when it has an id.
    fn note_chain(&self) {
        let Some(chain) = &self.chain else { return };
        let Some(id) = &chain.id else { return };
        let record = crate::session::StoredResponse {
            tenant: chain.tenant.clone(),
            session: if chain.root {
                crate::session::key::chain_session(&self.key, id)
            } else {
                self.key.clone()
            },
            calls: chain.calls.clone(),
        };
        if let Some(outbox) = &self.outbox {
            outbox.note_response(id, &record, &self.settings);
        }
        self.store.note_response(id, record);
    }
}

impl StreamReviewer {
    /// A stream-time block or abort ends the lane's loop stretch.
    fn follow_outcome(&self, verdict: Option<&crate::detect::Verdict>) {
        let Some(verdict) = verdict else { return };
        let arm = crate::escalate::experiment::arm(&self.settings.experiment, &self.key);
        let ended = {
            let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
            let lane = session.lane(self.lane);
            let ended = crate::escalate::outcome::follow(&mut lane.stretch, Some(verdict), arm, true);
            if let Some(outbox) = &self.outbox {
                outbox.note_stretch(self.lane, lane.stretch.clone());
            }
            ended
        };
        if let Some((stretch, outcome)) = ended {
            self.store.outcomes().count(&self.key, &stretch, outcome);
        }
    }
}

impl StreamJudge for StreamReviewer {
    fn recording(&mut self) -> Option<crate::recording::ResponseCopy> {
        let (recorder, lane) = self.recording.as_ref()?;
        Some(recorder.response(lane.clone(), self.store.now()))
    }

    fn calls(&mut self, calls: &[ToolCall]) -> Decision {
        if let Some(chain) = self.chain.as_mut() {
            chain.calls.extend_from_slice(calls);
            self.note_chain();
        }
        let now = self.store.now();
        let judged = catch_unwind(AssertUnwindSafe(|| {
            if self.panic_for_test {
                panic!("fault injection: stream-time detector panic");
            }
            let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
            let lane = session.lane(self.lane);
            let verdicts = lane.state.judge_pending(calls, now, &self.settings);
            for v in &verdicts {
                lane.remember(v);
            }
            verdicts
        }));
        let mut verdicts = match judged {
            Ok(v) => v,
            Err(_) => {
                tracing::error!(session = %self.key, "detector panicked at stream time; releasing the calls");
                crate::telemetry::fail_open("detector_panic");
                return Decision::Pass;
            }
        };
        if self.stateful {
            super::abort_instead_of_block(&mut verdicts);
        }
        // The holdout arm observes its warnings here too, as at request time.
        let arm = crate::escalate::experiment::arm(&self.settings.experiment, &self.key);
        crate::escalate::experiment::apply(arm, &mut verdicts);
        for v in &verdicts {
            record(
                v,
                &self.key,
                self.agent.as_deref(),
                "stream",
                self.trace.as_deref(),
            );
            if let Some(outbox) = &self.outbox {
                outbox.note_verdict(self.lane, v);
            }
            self.record_verdict(v);
        }
        self.follow_outcome(decisive(&verdicts));
        decisive(&verdicts).map_or(Decision::Pass, crate::plan::stream)
    }

    fn event(&mut self, event: &StreamEvent) -> Decision {
        if let (StreamEvent::ResponseId { id }, Some(chain)) = (event, self.chain.as_mut()) {
            chain.id = Some(id.clone());
            self.note_chain();
        }
        if self.chanting_reported {
            return Decision::Pass;
        }
        let Some(verdict) = self.scanner.observe(event).cloned() else {
            return Decision::Pass;
        };
        self.chanting_reported = true;
        record(
            &verdict,
            &self.key,
            self.agent.as_deref(),
            "stream",
            self.trace.as_deref(),
        );
        self.record_verdict(&verdict);
        if let Ok(mut session) = self.session.lock() {
            session.lane(self.lane).remember(&verdict);
        }
        if let Some(outbox) = &self.outbox {
            outbox.note_verdict(self.lane, &verdict);
        }
        self.follow_outcome(Some(&verdict));
        crate::plan::stream(&verdict)
    }
}
