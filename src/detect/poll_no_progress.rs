//! `poll_no_progress`: a poll tool returning the same outcome N times in a row.
//!
//! Idea: OpenClaw's known-poll-no-progress. Poll tools come from `poll_tools`
//! (defaults: `command_status`, `process` with action `poll`/`log`,
//! `BashOutput`, `write_stdin` with empty input, `read_background_output`).
//! The streak is the trailing run of calls with the judged call's signature
//! (other calls in between, such as a `sleep`, neither break nor count) whose
//! outcomes are identical; a pending call is assumed to continue it.
//! Defaults: warning 10; critical 20 only if the streak also spans
//! `min_stall_secs` (300) of wall time, so a long build polled quickly is
//! warned, never killed. Does not flag: output that changes (a growing log).
//! Cost: O(epoch length) per judged poll.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::{View, span};

const WARN_ADVICE: &str =
    "The job's output has not changed; wait longer between polls (sleep first) or report the job as stuck.";
const CRIT_ADVICE: &str = "The job has made no progress for minutes; stop polling and report the job as stuck, or kill and restart it.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged_step = v.judged()?;
    let judged = judged_step.cycle()?;
    if !judged.poll {
        return None;
    }
    let mut same = v
        .epoch_rev()
        .filter_map(|s| s.cycle().map(|c| (s, c)))
        .filter(|(_, c)| c.signature == judged.signature);
    let mut latest = judged.outcome.map(|o| o.hash);
    let mut count = 0usize;
    let mut first_at = judged_step.at;
    for (step, cycle) in same.by_ref() {
        match (cycle.outcome.map(|o| o.hash), latest) {
            (Some(h), Some(l)) if h != l => break,
            (Some(h), None) => latest = Some(h),
            _ => {}
        }
        count += 1;
        first_at = step.at;
    }
    let t = v.settings.thresholds(DetectorKind::PollNoProgress);
    let stalled = span(first_at, judged_step.at);
    if t.reached(Level::Critical, count as u32) && stalled >= v.settings.min_stall.as_secs() {
        let detail = format!("returned the same output {count} times over {stalled} s");
        return Some(v.finding(
            DetectorKind::PollNoProgress,
            Level::Critical,
            count,
            detail,
            CRIT_ADVICE,
        ));
    }
    t.reached(Level::Warning, count as u32).then(|| {
        let detail = format!("returned the same output {count} times in a row");
        v.finding(
            DetectorKind::PollNoProgress,
            Level::Warning,
            count,
            detail,
            WARN_ADVICE,
        )
    })
}
