//! Request-time judgement: a request located in its session and lane, its
//! history classified (compaction, fresh start) and run through the
//! detectors, the follow-ups (semantic check, recording, logs) and the
//! decision planned ([`crate::plan::request`]), with the judge of its
//! response.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, PoisonError};

use super::echo::Echo;
use super::stream::StreamReviewer;
use super::{Echoes, Guard, RequestView, Resolved, TEST_PANIC_HEADER, detection_for, escalation, record};
use crate::config::Config;
use crate::detect::compaction::{Classification, Evidence, RequestSummary, classify_summarized};
use crate::detect::{Settings, Verdict, decisive};
use crate::plan::{PassJudge, RequestDecision, Target, abort_instead_of_block};
use crate::session::{Lane, SharedSession, key};

/// Where a request belongs, as [`Guard::judge_request`] found it.
struct Located<'r> {
    /// A stateful Responses request: blocks become aborts.
    stateful: bool,
    /// The caller's credential hash.
    tenant: String,
    /// The request chains to an earlier response (`previous_response_id`).
    chained: bool,
    /// The history the detectors see.
    transcript: Cow<'r, crate::transcript::Transcript>,
    /// The lane id.
    lane: u64,
    /// The session key.
    key: key::SessionKey,
    /// The session.
    session: SharedSession,
}

/// What request-time detection found.
struct Detected {
    /// The verdicts, decisive or not.
    verdicts: Vec<Verdict>,
    /// The semantic check to run in the background, if one is due.
    ticket: Option<crate::semantic::Ticket>,
    /// The person spoke in what is new in the request.
    person_spoke: bool,
}

/// Who a request is judged as: the session header, the agent's settings.
struct Who<'a> {
    session_header: &'a str,
    settings: &'a Arc<Settings>,
    agent: Option<&'a str>,
}

impl Guard {
    pub(super) fn on_request_as(
        &self,
        config: &Config,
        request: &RequestView<'_>,
        outbox: Option<Arc<crate::state::Outbox>>,
        echo: Echo,
    ) -> (RequestDecision, Option<String>, Echoes) {
        let Some((agent, settings)) = detection_for(config, request.headers) else {
            return (pass(), None, Echoes::default());
        };
        let settings = Arc::clone(settings);
        let agent = agent.map(str::to_owned);
        let header = config.sessions.header.as_str();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let who = Who {
                session_header: header,
                settings: &settings,
                agent: agent.as_deref(),
            };
            let mut echoes = Echoes::default();
            let (decision, key) = self.judge_request(config, request, &who, outbox, echo, &mut echoes);
            (decision, key, echoes)
        }));
        match result {
            Ok((decision, key, echoes)) => (decision, Some(key), echoes),
            Err(_) => {
                tracing::error!("detector panicked at request time; forwarding unchanged");
                crate::telemetry::fail_open("detector_panic");
                (pass(), None, Echoes::default())
            }
        }
    }

    /// Request-time detection for one request: locate its session, run the
    /// detectors, follow up (background semantic check, logs), then plan
    /// the decision ([`crate::plan::request`]).
    fn judge_request(
        &self,
        config: &Config,
        request: &RequestView<'_>,
        who: &Who<'_>,
        outbox: Option<Arc<crate::state::Outbox>>,
        echo: Echo,
        echoes: &mut Echoes,
    ) -> (RequestDecision, String) {
        let (settings, agent) = (who.settings, who.agent);
        let (located, summary) = self.locate(request, who.session_header, settings);
        if self.wants_panic(request.headers, "request") {
            panic!("fault injection: request-time detector panic");
        }
        let now = self.store.now();
        let told = echo.tells().then_some(&mut *echoes);
        let (detected, session_key) = self.detect(request, &located, summary, now, who, told);
        let recording_lane = crate::recording::LaneId {
            session: session_key.clone(),
            lane: located.lane,
        };
        if echo.tells() {
            self.record_request(
                request,
                &recording_lane,
                now,
                detected.as_ref().map(|d| d.verdicts.as_slice()),
                echoes,
            );
        }
        let Some(Detected {
            verdicts,
            ticket,
            person_spoke,
        }) = detected
        else {
            return (pass(), session_key);
        };
        self.follow_up(&located, ticket, &session_key, settings, echo, echoes);
        if echo.tells() && !verdicts.is_empty() {
            let (told, key, agent) = (verdicts.clone(), session_key.clone(), agent.map(str::to_owned));
            let trace = request.trace.cloned();
            echoes.push(move || {
                for v in &told {
                    record(v, &key, agent.as_deref(), "request", trace.as_deref());
                }
            });
        }
        let session = Arc::clone(&located.session);
        let lane = located.lane;
        let mut judge = self.stream_reviewer(request, located, &session_key, settings, agent, outbox);
        // A deferred run's decision (and this judge) is dropped unless it goes out.
        if let (Some(recorder), true) = (&self.recorder, echo.tells()) {
            judge.record_into(recorder.clone(), recording_lane);
        }
        let model = request.model();
        let target = Target {
            dialect: request.dialect,
            mode: request.mode(),
            model: &model,
            include_usage: request.parsed.include_usage,
        };
        let decisive = decisive(&verdicts);
        let decision = crate::plan::request(decisive, &target, judge, |warning| request.inject(warning));
        let seen = escalation::Seen {
            session: &session,
            lane,
            key: &session_key,
            wants: decisive.is_some_and(|v| v.action == crate::detect::Action::Escalate),
            person_spoke,
        };
        let told = echo.tells().then_some(&mut *echoes);
        let decision = escalation::apply(config, request, &seen, settings, &model, decision, told);
        if echo.tells() && matches!(decision, RequestDecision::Answer { .. }) {
            echoes.push(|| metrics::counter!("loopguard_upstream_requests_avoided_total").increment(1));
        }
        (decision, session_key)
    }

    /// The request's session and lane, its key, and the history the
    /// detectors see (with the calls of the response a Responses request
    /// chains to put first).
    fn locate<'r>(
        &self,
        request: &RequestView<'r>,
        session_header: &str,
        settings: &Settings,
    ) -> (Located<'r>, RequestSummary) {
        let responses = request.parsed.responses.as_ref();
        let stateful = responses.is_some_and(|r| r.stateful);
        let tenant = match request.resolved {
            Some(r) => r.key.tenant.clone(),
            None => request.tenant.to_owned(),
        };
        // A request chaining to an earlier response carries only the items
        // new since: the calls it answers come from that response.
        let chained = request
            .previous_response_id()
            .and_then(|id| self.store.response(&tenant, id));
        let transcript = match &chained {
            Some(link) => Cow::Owned(with_calls(&request.parsed.transcript, &link.calls)),
            None => Cow::Borrowed(&request.parsed.transcript),
        };
        let Resolved {
            summary,
            lane,
            mut key,
        } = match (request.resolved, &chained) {
            (Some(resolved), None) => resolved.clone(),
            _ => Resolved::of(request, &transcript, tenant.clone(), session_header, settings),
        };
        if let Some(link) = &chained {
            key = key::SessionKey {
                key: link.session.clone(),
                source: key::KeySource::Body,
                tenant: tenant.clone(),
            };
        }
        let session = self.session_for(&key, lane, &summary, &transcript, settings);
        let located = Located {
            stateful,
            tenant,
            chained: chained.is_some(),
            transcript,
            lane,
            key,
            session,
        };
        (located, summary)
    }

    /// Runs the detectors on the session's lane: the verdicts and the
    /// semantic check's ticket (`None` for a summarizer request, which is
    /// not judged), and the session key. The compaction and fresh-start log
    /// lines and the outcome counters go to `told` (`None`: a re-run that
    /// tells nothing).
    fn detect(
        &self,
        request: &RequestView<'_>,
        located: &Located<'_>,
        summary: RequestSummary,
        now: std::time::Duration,
        who: &Who<'_>,
        mut told: Option<&mut Echoes>,
    ) -> (Option<Detected>, String) {
        let (settings, agent) = (who.settings.as_ref(), who.agent);
        let transcript = located.transcript.as_ref();
        let mut guard = located.session.lock().unwrap_or_else(PoisonError::into_inner);
        guard.agent = agent.map(str::to_owned);
        guard.last_seen = std::time::SystemTime::now();
        let session_key = guard.key.clone();
        let lane_state = guard.lane(located.lane);
        let classification = if request.explicit_summarizer() {
            Classification::Summarizer
        } else if located.chained {
            // A chain carries only what is new: never a compaction or a rerun.
            Classification::Continuation
        } else {
            classify_summarized(lane_state.prev.as_ref(), &summary, transcript, settings)
        };
        if !follow_classification(classification, lane_state, &session_key, told.as_deref_mut()) {
            return (None, session_key);
        }
        lane_state.prev = Some(summary);
        let absorbed = if request.carries_only_new() {
            lane_state.state.absorb_new(transcript, now, settings)
        } else {
            lane_state.state.absorb(transcript, now, settings)
        };
        let mut verdicts = lane_state.state.judge_request(settings);
        if located.stateful {
            abort_instead_of_block(&mut verdicts);
        }
        let ticket = crate::semantic::on_request(
            &self.judge,
            lane_state,
            absorbed.person_spoke,
            settings,
            &mut verdicts,
        );
        let arm = crate::escalate::experiment::arm(&settings.experiment, &session_key);
        crate::escalate::experiment::apply(arm, &mut verdicts);
        for v in &verdicts {
            lane_state.remember(v);
        }
        let ended =
            crate::escalate::outcome::follow(&mut lane_state.stretch, decisive(&verdicts), arm, false);
        drop(guard);
        if let (Some((stretch, outcome)), Some(told)) = (ended, told) {
            let (store, key) = (Arc::clone(&self.store), session_key.clone());
            told.push(move || store.outcomes().count(&key, &stretch, outcome));
        }
        let person_spoke = absorbed.person_spoke;
        (
            Some(Detected {
                verdicts,
                ticket,
                person_spoke,
            }),
            session_key,
        )
    }

    /// Hands the request to the recorder (when `echoes` are told), when
    /// recording is on: its body as received and the request-time verdicts
    /// (`None`: a summarizer request).
    fn record_request(
        &self,
        request: &RequestView<'_>,
        lane: &crate::recording::LaneId,
        now: std::time::Duration,
        verdicts: Option<&[Verdict]>,
        echoes: &mut Echoes,
    ) {
        let Some(recorder) = self.recorder.clone() else {
            return;
        };
        let record = crate::recording::Record::Request {
            lane: lane.clone(),
            dialect: request.dialect,
            route: request.route.prefix.clone(),
            t: now,
            body: request.decoded.clone(),
            summarizer: verdicts.is_none(),
            verdicts: verdicts
                .unwrap_or_default()
                .iter()
                .map(|v| (v.detector, v.level))
                .collect(),
        };
        echoes.push(move || {
            recorder.send(record);
        });
    }

    /// After detection: the semantic check in the background and the lane
    /// noted for a later compaction. A deferred run's check starts when
    /// its decision goes out (see [`Echoes`]).
    fn follow_up(
        &self,
        located: &Located<'_>,
        ticket: Option<crate::semantic::Ticket>,
        session_key: &str,
        settings: &Arc<Settings>,
        echo: Echo,
        echoes: &mut Echoes,
    ) {
        let key = &located.key;
        if let Some(ticket) = ticket {
            // In the background: the request is forwarded without waiting.
            let check = self.judge.prepare(
                ticket,
                Arc::clone(&located.session),
                located.lane,
                settings,
                &located.transcript,
                session_key.to_owned(),
            );
            match echo {
                Echo::Deferred => echoes.push_check(check),
                Echo::Told | Echo::Quiet => check.start(),
            }
        }
        if key.source == key::KeySource::Fingerprint {
            // Only fingerprinted sessions can lose their key to a compaction
            // (it is made of the first message); explicit keys never need it.
            self.store.note_lane(&key.tenant, located.lane, session_key);
        }
    }

    /// The judge of the response while it streams.
    fn stream_reviewer(
        &self,
        request: &RequestView<'_>,
        located: Located<'_>,
        session_key: &str,
        settings: &Arc<Settings>,
        agent: Option<&str>,
        outbox: Option<Arc<crate::state::Outbox>>,
    ) -> Box<StreamReviewer> {
        let judge = StreamReviewer::new(
            Arc::clone(&located.session),
            session_key.to_owned(),
            located.lane,
            Arc::clone(settings),
            Arc::clone(&self.store),
            agent.map(str::to_owned),
            self.fault_injection
                && request
                    .headers
                    .get(TEST_PANIC_HEADER)
                    .is_some_and(|v| v == "stream"),
        )
        .with_outbox(outbox)
        .with_trace(request.trace.cloned());
        Box::new(if request.dialect.chains_responses() {
            let root = !request.carries_only_new() && located.key.source == key::KeySource::Fingerprint;
            judge.for_responses(located.tenant, located.stateful, root)
        } else {
            judge
        })
    }

    /// The session for a key. A request with a new fingerprint that carries
    /// a post-compaction marker (a known summary prefix) continues the most
    /// recently active fingerprinted session of its lane: the compaction
    /// replaced the first message its fingerprint was made of. Without such a
    /// marker a new fingerprint is a new conversation — a second task started
    /// with the same key, system text and tools must never inherit another's
    /// loop state.
    fn session_for(
        &self,
        key: &key::SessionKey,
        lane: u64,
        summary: &RequestSummary,
        transcript: &crate::transcript::Transcript,
        settings: &Settings,
    ) -> SharedSession {
        if key.source == key::KeySource::Fingerprint {
            // A known session is found with one lookup (the usual request).
            if let Some(known) = self.store.get(&key.key) {
                return known;
            }
            // Without a summary prefix no compaction is recognised below:
            // the lane's session is not looked up (nor locked, nor kept
            // from going idle by a conversation that is not its own).
            let marked = crate::detect::compaction::carries_summary_marker(transcript, settings);
            if let Some(previous) = marked.then(|| self.store.by_lane(&key.tenant, lane)).flatten() {
                let compacted = {
                    let mut s = previous.lock().unwrap_or_else(PoisonError::into_inner);
                    let prev = s.lane(lane).prev;
                    matches!(
                        classify_summarized(prev.as_ref(), summary, transcript, settings),
                        Classification::Compacted(Evidence::SummaryPrefix)
                    )
                };
                if compacted {
                    return previous;
                }
            }
        }
        self.store.get_or_create(&key.key).0
    }
}

/// Carries out what the request's classification means for the lane: a
/// compaction noted, a fresh start's state reset (each logged through
/// `told`). `false` for a summarizer request, which is not judged.
fn follow_classification(
    classification: Classification,
    lane_state: &mut Lane,
    session_key: &str,
    told: Option<&mut Echoes>,
) -> bool {
    match classification {
        Classification::Summarizer => {
            tracing::debug!(session = %session_key, "summarizer request: no detection");
            return false;
        }
        Classification::Compacted(evidence) => {
            if let Some(told) = told {
                let key = session_key.to_owned();
                told.push(move || tracing::info!(session = %key, ?evidence, "compaction"));
            }
            lane_state.state.note_compaction();
        }
        Classification::FreshStart => {
            if let Some(told) = told {
                let key = session_key.to_owned();
                told.push(move || {
                    tracing::info!(session = %key, "fresh start of the same task: session state reset");
                });
            }
            lane_state.state.reset();
            lane_state.judge.new_stretch();
        }
        Classification::Continuation => {}
    }
    true
}

/// The transcript with an assistant turn carrying `calls` put first (the
/// calls of the response a `previous_response_id` request chains to).
fn with_calls(
    transcript: &crate::transcript::Transcript,
    calls: &[crate::transcript::ToolCall],
) -> crate::transcript::Transcript {
    let mut out = transcript.clone();
    if !calls.is_empty() {
        let mut turn = crate::transcript::Message::text(crate::transcript::Role::Assistant, "");
        turn.tool_calls = calls.to_vec();
        out.messages_mut().insert(0, turn);
    }
    out
}

fn pass() -> RequestDecision {
    RequestDecision::Forward {
        body: None,
        judge: Box::new(PassJudge),
        verdict: None,
        retarget: None,
    }
}
