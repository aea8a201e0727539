//! `consecutive_failures`: N failed steps in a row, any tool, any error.
//!
//! Idea: Cline's MistakeTracker (api_error, invalid_tool_call,
//! tool_execution_failed; limit 6). Defaults: warning 3, critical 6. Failures
//! are cycles with an error outcome or unparsable arguments, and canned user
//! messages the agent answers with (e.g. "No tool calls found…"); a success
//! resets the count; assistant text turns are neutral. Upstream API errors and
//! retries never appear in a transcript, so an outage does not count. A
//! pending call counts only when its arguments do not parse. Does not flag:
//! poll tools (skipped). Cost: O(run length) per judged step.

use super::step::StepKind;
use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str =
    "Every recent step failed; stop and re-read the last error, then change approach or ask the user.";

/// Checks the judged step.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged()?;
    let failed = |k: &StepKind| match k {
        StepKind::Cycle(c) => c.failed(),
        StepKind::Canned => true,
        StepKind::Said(_) => false,
    };
    if !failed(&judged.kind) {
        return None;
    }
    let count = v
        .epoch_rev()
        .filter(|s| !matches!(&s.kind, StepKind::Said(_)) && !s.cycle().is_some_and(|c| c.poll))
        .take_while(|s| failed(&s.kind))
        .count();
    let t = v.settings.thresholds(DetectorKind::ConsecutiveFailures);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("{count} steps in a row failed");
    Some(v.finding(DetectorKind::ConsecutiveFailures, level, count, detail, ADVICE))
}
