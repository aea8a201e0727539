//! The LLM judge (`[loop_detection.semantic_check]`): Gemini CLI's semantic
//! loop check, off the hot path.
//!
//! - [`schedule`]: per lane, when a check is due and what a finished one left
//!   behind (pure).
//! - [`prompt`]: what the judge sees — the person's request, a trimmed window
//!   of the history, credentials redacted, texts cut — and the instruction.
//! - [`client`]: the HTTP call and the defensive parse of the answer.
//! - [`rerun`]: the semantic check over a recorded session (`loopguard replay`).
//! - [`Checker`]: the runtime — the HTTP client and the process-wide limit of
//!   calls in flight (`max_concurrent`); it spawns checks as tokio tasks.
//!
//! Flow, per request of a session lane ([`crate::guard`]): after the
//! detectors ran, [`on_request`] turns a loop found by an earlier check into
//! a `semantic_loop` verdict (a warning carrying the analysis; critical when
//! one was already given since the person last spoke), and, when a check is
//! due and a permit is free, hands back a [`Ticket`]. The guard forwards the
//! request at once and starts it ([`Checker::prepare`], [`Prepared::start`]; with
//! shared state, once the decision goes out): the check runs in the
//! background and writes its result into the lane under the session mutex.
//! Failures (timeout, HTTP error, unparsable answer) give no verdict; they are
//! logged and counted in `loopguard_judge_calls_total{outcome}`.

pub mod client;
pub mod prompt;
pub mod rerun;
pub use crate::session::semantic_schedule as schedule;

use std::sync::{Arc, PoisonError};

use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::config::semantic::SemanticCheck;
use crate::detect::verdict::Finding;
use crate::detect::{DetectorKind, Level, Settings, Verdict, rank};
use crate::session::{Lane, SharedSession};
use crate::transcript::Transcript;
pub use schedule::{CheckState, Finished, LoopFound, Plan};

/// Longest analysis quoted in a verdict message, characters.
pub const ANALYSIS_CHARS: usize = 600;

/// What the agent is advised to do after a `semantic_loop` verdict.
const ADVICE: &str = "Stop and take stock: say what you tried and what it showed, then change the approach or ask the person for guidance instead of repeating the same steps";

/// Counts one judge call (or a skipped one) by outcome. The metric keeps
/// its historical name, `loopguard_judge_calls_total`, from when this module
/// was called `judge`: dashboards depend on it.
pub fn count(outcome: &'static str) {
    metrics::counter!("loopguard_judge_calls_total", "outcome" => outcome).increment(1);
}

/// The judge's runtime: HTTP client and process-wide limit of calls in flight.
#[derive(Debug)]
pub struct Checker {
    client: Option<reqwest::Client>,
    permits: Arc<Semaphore>,
}

/// A started check: the permit it holds and what it must hand back.
#[derive(Debug)]
pub struct Ticket {
    permit: OwnedSemaphorePermit,
    generation: u64,
}

impl Checker {
    /// The runtime for a configuration: `max_concurrent` from the defaults'
    /// `[loop_detection.semantic_check]` (fixed until restart), the client
    /// built like the upstream client.
    pub fn new(config: &Config) -> Self {
        let client = match crate::http_client::client(config.server.connect_timeout) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot build the judge's HTTP client; semantic checks are off");
                None
            }
        };
        Self {
            client,
            permits: Arc::new(Semaphore::new(
                config.loop_detection.defaults.semantic_check.max_concurrent,
            )),
        }
    }

    /// A started check made ready (its prompt drawn from `transcript`):
    /// [`Prepared::start`] runs it in the background. Dropped unstarted, it
    /// frees the lane as a failed check; discarded ([`Prepared::discard`]),
    /// it leaves the session alone.
    pub fn prepare(
        &self,
        ticket: Ticket,
        session: SharedSession,
        lane: u64,
        settings: &Settings,
        transcript: &Transcript,
        key: String,
    ) -> Prepared {
        let flight = Flight {
            session,
            lane,
            generation: ticket.generation,
            cfg: settings.semantic_check.clone(),
            key,
            finished: None,
            armed: true,
        };
        Prepared {
            ready: Some((flight, prompt::Draft::of(transcript, settings), ticket.permit)),
            client: self.client.clone(),
        }
    }
}

/// A check ready to run (see [`Checker::prepare`]).
pub struct Prepared {
    ready: Option<(Flight, prompt::Draft, OwnedSemaphorePermit)>,
    client: Option<reqwest::Client>,
}

impl Prepared {
    /// Runs the check in the background. Never waits: without a tokio
    /// runtime the check is abandoned (and the lane freed).
    pub fn start(mut self) {
        let Some((flight, draft, permit)) = self.ready.take() else {
            return;
        };
        let (Some(client), Ok(handle)) = (self.client.take(), tokio::runtime::Handle::try_current()) else {
            count("transport_error");
            return; // `flight` drops: the lane is freed with a failed check.
        };
        crate::task::spawn_on(&handle, async move {
            let _permit = permit;
            let mut flight = flight;
            let messages = draft.messages();
            let finished = check(&client, &flight.cfg, &messages, &flight.key).await;
            flight.finished = Some(finished);
        });
    }
}

impl Prepared {
    /// Drops the check without touching the session: for a run whose state
    /// was replaced (the shared state's write-first path meeting another
    /// replica's version, see [`crate::guard::shared`]), the lane's
    /// in-flight mark went with it.
    pub fn discard(mut self) {
        if let Some((mut flight, _, _)) = self.ready.take() {
            flight.armed = false;
        }
    }
}

/// Clears the lane's in-flight flag exactly once, whatever ends the task
/// (done, cancelled at shutdown, panicked).
struct Flight {
    session: SharedSession,
    lane: u64,
    generation: u64,
    cfg: SemanticCheck,
    key: String,
    finished: Option<Finished>,
    /// Hands its end back to the lane when dropped (not for a check that
    /// never started, see [`Prepared`]).
    armed: bool,
}

impl Drop for Flight {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let finished = self.finished.take().unwrap_or(Finished::Failed);
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = session.lanes.iter_mut().find(|l| l.id == self.lane) {
            lane.judge.finish(self.generation, finished, &self.cfg);
        }
    }
}

/// One check: the judge, then the double check when the first reached the bar.
async fn check(client: &reqwest::Client, cfg: &SemanticCheck, messages: &Value, key: &str) -> Finished {
    let Some(first) = ask_logged(client, cfg, &cfg.model, messages, key).await else {
        return Finished::Failed;
    };
    if first.confidence < cfg.confidence {
        return Finished::NoLoop(first.confidence);
    }
    let second = match &cfg.double_check_model {
        None => None,
        Some(model) => match ask_logged(client, cfg, model, messages, key).await {
            None => return Finished::Failed,
            Some(a) if a.confidence < cfg.confidence => {
                tracing::info!(session = key, model = %model, confidence = a.confidence, "semantic check: the double check disagreed; no verdict");
                return Finished::NoLoop(a.confidence);
            }
            Some(a) => Some(a.confidence),
        },
    };
    Finished::Loop(LoopFound {
        analysis: crate::detect::truncate(first.analysis.trim(), ANALYSIS_CHARS),
        confidence: first.confidence,
        second,
    })
}

/// One call, bounded by `timeout_secs`, logged and counted.
async fn ask_logged(
    client: &reqwest::Client,
    cfg: &SemanticCheck,
    model: &str,
    messages: &Value,
    key: &str,
) -> Option<client::Answer> {
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(cfg.timeout, client::ask(client, cfg, model, messages))
        .await
        .unwrap_or(Err(client::Failure::Timeout));
    let ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(answer) => {
            let outcome = if answer.confidence >= cfg.confidence {
                "loop"
            } else {
                "no_loop"
            };
            count(outcome);
            tracing::info!(session = key, model, confidence = answer.confidence, outcome, ms, analysis = %crate::detect::truncate(&answer.analysis, 200), "semantic check");
            Some(answer)
        }
        Err(failure) => {
            count(failure.label());
            tracing::warn!(session = key, model, outcome = failure.label(), ms, error = %failure, "semantic check failed; no verdict");
            None
        }
    }
}

/// The `semantic_loop` verdict for a loop reported `count` times in this stretch.
pub fn verdict(found: &LoopFound, count: u32, settings: &Settings) -> Verdict {
    let critical = settings
        .thresholds(DetectorKind::SemanticLoop)
        .get(Level::Critical);
    let level = if critical > 0 && count >= critical {
        Level::Critical
    } else {
        Level::Warning
    };
    let confidence = match found.second {
        Some(second) => format!("confidence {:.2}, double check {second:.2}", found.confidence),
        None => format!("confidence {:.2}", found.confidence),
    };
    let analysis = found.analysis.trim().trim_end_matches('.');
    Finding {
        detector: DetectorKind::SemanticLoop,
        level,
        count,
        tool: None,
        arguments: None,
        detail: format!(
            "an LLM judge reviewed the recent turns and found no progress ({confidence}): {analysis}"
        ),
        advice: ADVICE,
        observe_only: false,
    }
    .into_verdict(settings)
}

/// The request-time hook, under the session mutex, after the detectors ran:
/// adds the `semantic_loop` verdict of a loop found earlier to `verdicts`
/// (re-ranked) and, when a check is due and a permit is free, starts one.
pub fn on_request(
    judge: &Checker,
    lane: &mut Lane,
    person_spoke: bool,
    settings: &Settings,
    verdicts: &mut Vec<Verdict>,
) -> Option<Ticket> {
    let cfg = &settings.semantic_check;
    if !cfg.enabled {
        return None;
    }
    let turns = lane.state.turns_since_person();
    let plan = lane.judge.on_request(person_spoke, turns, cfg);
    if let Some((found, n)) = &plan.found {
        verdicts.push(verdict(found, *n, settings));
        rank(verdicts);
    }
    if !plan.due || judge.client.is_none() {
        return None;
    }
    match Arc::clone(&judge.permits).try_acquire_owned() {
        Ok(permit) => Some(Ticket {
            permit,
            generation: lane.judge.start(turns),
        }),
        Err(_) => {
            count("busy");
            None
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    /// A lane with a check in flight (generation `g`) and that check's ticket.
    fn in_flight() -> (SharedSession, Ticket) {
        let session: SharedSession = Arc::new(std::sync::Mutex::new(crate::session::Session::empty("k")));
        let generation = session.lock().unwrap().lane(7).judge.start(3);
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        (session, Ticket { permit, generation })
    }

    #[test]
    fn a_discarded_check_leaves_the_lane_alone_and_a_dropped_one_frees_it() {
        let config = crate::config::load_str(
            "[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"http://127.0.0.1:9\"\n",
            "t.toml",
        )
        .unwrap()
        .config;
        let checker = Checker::new(&config);
        let settings = Settings::default();
        let prepare = |session: &SharedSession, ticket| {
            checker.prepare(
                ticket,
                Arc::clone(session),
                7,
                &settings,
                &Transcript::default(),
                "k".into(),
            )
        };
        let (session, ticket) = in_flight();
        prepare(&session, ticket).discard();
        assert!(
            session.lock().unwrap().lane(7).judge.in_flight(),
            "a discarded check touched the lane"
        );
        // Dropped unstarted (a request cancelled before its decision went out): freed.
        let (session, ticket) = in_flight();
        drop(prepare(&session, ticket));
        assert!(
            !session.lock().unwrap().lane(7).judge.in_flight(),
            "a dropped check kept the lane in flight"
        );
        // Started with no runtime to run on: abandoned, and the lane freed.
        let (session, ticket) = in_flight();
        prepare(&session, ticket).start();
        assert!(
            !session.lock().unwrap().lane(7).judge.in_flight(),
            "an abandoned check kept the lane in flight"
        );
    }

    #[test]
    fn the_first_verdict_warns_with_the_analysis_and_the_second_is_critical() {
        let settings = Settings::default();
        let found = LoopFound {
            analysis: "It reads a.txt again and again.".into(),
            confidence: 0.95,
            second: None,
        };
        let first = verdict(&found, 1, &settings);
        assert_eq!((first.level, first.action.name()), (Level::Warning, "warn"));
        assert!(
            first
                .message
                .starts_with("[loopguard] semantic_loop (warning, count 1): an LLM judge")
                && first
                    .message
                    .contains("(confidence 0.95): It reads a.txt again and again. Stop"),
            "{}",
            first.message
        );
        let second = verdict(&found, 2, &settings);
        assert_eq!((second.level, second.action.name()), (Level::Critical, "block"));
    }
}
