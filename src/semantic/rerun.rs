//! The judge over a recorded session (`loopguard replay` with
//! `[loop_detection.semantic_check]` enabled): the same schedule as live
//! traffic, each check run to completion before the next request is read,
//! its finding reported on the next request (on the last one when the check
//! was made at the end).

use std::time::Duration;

use super::schedule::{CheckState, Finished};
use super::{check, verdict};
use crate::detect::compaction::{Classification, RequestSummary, classify};
use crate::detect::{ReplayLine, SessionState, Settings};
use crate::transcript::Transcript;

/// Runs the judge over `requests` (successive request transcripts of one
/// session) and returns its `semantic_loop` lines. Checks are made one at a
/// time, with the judge's endpoint and key as configured.
///
/// # Errors
/// When the HTTP client or the runtime cannot be built.
pub fn run(settings: &Settings, requests: &[Transcript]) -> Result<Vec<ReplayLine>, String> {
    let cfg = &settings.semantic_check;
    let client = crate::http_client::client(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut session = SessionState::new();
    let mut judge = CheckState::default();
    let mut previous: Option<RequestSummary> = None;
    let mut lines = Vec::new();
    let mut carried = None;
    for (i, transcript) in requests.iter().enumerate() {
        match classify(previous.as_ref(), transcript, settings) {
            Classification::Summarizer => continue,
            Classification::Compacted(_) => session.note_compaction(),
            Classification::FreshStart => {
                session.reset();
                judge.new_stretch();
            }
            Classification::Continuation => {}
        }
        previous = Some(RequestSummary::of(transcript, settings));
        let absorbed = session.absorb(transcript, Duration::ZERO, settings);
        let turns = session.turns_since_person();
        let plan = judge.on_request(absorbed.person_spoke, turns, cfg);
        if let Some((found, n)) = plan.found {
            lines.push(line(i, &verdict(&found, n, settings)));
        }
        carried = None;
        if plan.due {
            let generation = judge.start(turns);
            let messages = super::prompt::Draft::of(transcript, settings).messages();
            let finished: Finished = runtime.block_on(check(&client, cfg, &messages, "replay"));
            judge.finish(generation, finished, cfg);
            carried = Some(i);
        }
    }
    if let Some(last) = carried {
        if let Some((found, n)) = judge.on_request(false, session.turns_since_person(), cfg).found {
            lines.push(line(last, &verdict(&found, n, settings)));
        }
    }
    Ok(lines)
}

fn line(request: usize, v: &crate::detect::Verdict) -> ReplayLine {
    ReplayLine {
        request,
        detector: v.detector,
        level: v.level,
        action: v.action,
        count: v.count,
        message: v.message.clone(),
        at: None,
    }
}
