//! `poll_no_progress`: a poll tool returning the same outcome N times in a row.
//!
//! Idea: OpenClaw's known-poll-no-progress. Polls are calls to poll tools,
//! from `poll_tools` (defaults: `command_status`, `process` with action
//! `poll`/`log`, `BashOutput`, `write_stdin` with empty input,
//! `read_background_output`), and calls that wait and then check, recognised
//! by structure (issue #12 point 3, [`super::Settings::is_wait`]: a shell
//! `sleep`/`timeout`/`watch`/`until` construct, or a wait argument such as
//! OpenClaw's `yieldMs`): waiting is not looping.
//! The streak is the trailing run of calls with the judged call's signature
//! (other calls in between, such as a `sleep`, neither break nor count) whose
//! outcomes are identical; a pending call is assumed to continue it.
//! Defaults: warning 10; critical 20 only if the streak also spans
//! `max_wait_secs` (1800, older name `min_stall_secs`) of wall time: a CI run
//! of 10–30 minutes is normal (OpenHands#762, OpenHands PR#10750), so a
//! 25-minute wait is warned, never stopped. Does not flag: output that
//! changes (a growing log); a streak whose polls are separated by a check
//! that brought back news (issue #38 point 4: `sleep 60`, then a log tail
//! that moved on, see [`super::novelty`]); polls before the last compaction.
//! Cost: O(epoch length) per judged poll.

use super::novelty::{self, Mark};
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
    // Issue #38 point 4: a wait between checks whose results are news is
    // progress (`sleep 60`, then a log tail that moved on), and a compacted
    // agent starts its watch anew: both end the streak.
    let epoch = novelty::epoch(v);
    let mut same = (0..epoch.len())
        .rev()
        .take_while(|&i| novelty::mark(epoch, i) != Some(Mark::New))
        .map(|i| epoch[i])
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
    if t.reached(Level::Critical, count as u32) && stalled >= v.settings.max_wait.as_secs() {
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
