//! `consecutive_failures`: N failed steps in a row, any tool, with failures of one kind among them.
//!
//! Idea: Cline's MistakeTracker (api_error, invalid_tool_call,
//! tool_execution_failed; limit 6). Defaults: warning 3, critical 6. Failures
//! are cycles with an error outcome or unparsable arguments, and canned user
//! messages the agent answers with (e.g. "No tool calls found…"); a success
//! resets the count; assistant text turns and repeated screens are neutral.
//! Both levels need no-progress evidence (issue #12 point 2): some failure
//! kind occurs at least twice in the run — the same error fingerprint, the
//! same canned reminder, or unparsable arguments to the same tool — so three
//! *different* failures during normal diagnosis stay silent. Upstream API
//! errors and retries never appear in a transcript, so an outage does not
//! count. A pending call counts only when its arguments do not parse. Does
//! not flag: poll tools (skipped). Cost: O(run length²) in the worst case
//! per judged step (the run is bounded by the history).

use super::outcome::hash64;
use super::step::{Step, StepKind};
use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str =
    "Every recent step failed; stop and re-read the last error, then change approach or ask the user.";

/// The kind of a failed step, or None when it did not fail.
fn failure(step: &Step) -> Option<u64> {
    match &step.kind {
        StepKind::Cycle(c) if c.unparsable => Some(hash64(c.name.as_bytes()) ^ 0x0bad),
        StepKind::Cycle(c) => c.outcome.filter(|o| o.is_error).map(|o| o.fingerprint),
        StepKind::Canned => Some(step.key),
        StepKind::Said(_) | StepKind::Screen(_) => None,
    }
}

/// Checks the judged step.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged()?;
    failure(judged)?;
    let kinds: Vec<u64> = v
        .epoch_rev()
        .filter(|s| !matches!(&s.kind, StepKind::Said(_) | StepKind::Screen(_)))
        .filter(|s| !s.cycle().is_some_and(|c| c.poll))
        .map_while(failure)
        .collect();
    let count = kinds.len();
    let evidence = kinds.iter().enumerate().any(|(i, k)| kinds[i + 1..].contains(k));
    if !evidence {
        return None;
    }
    let t = v.settings.thresholds(DetectorKind::ConsecutiveFailures);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("{count} steps in a row failed");
    Some(v.finding(DetectorKind::ConsecutiveFailures, level, count, detail, ADVICE))
}
