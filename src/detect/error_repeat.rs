//! `error_repeat`: the same tool returning the same error fingerprint N times in a row, whatever the arguments.
//!
//! Idea: OpenHands' action/error loop, Goose, OpenClaw's typed errors, Cline's
//! mistake tracker. Defaults: warning 3, critical 5. The streak is the
//! trailing run of consecutive cycles (poll tools skipped) of the judged tool
//! that failed with the same fingerprint — any other call in between ends it,
//! so edit → build → edit → build is never an error streak (a read/edit
//! ping-pong with a failing edit is `cycle`'s) — where the fingerprint (see [`super::outcome`]: the first line
//! is the first line matching an error pattern, digits and hex masked — not a
//! banner line (see [`super::outcome`]).
//! Judged at request time only: a pending call's error is not known yet.
//! Does not flag: different errors, successes in between, poll tools.
//! Cost: O(epoch length) per judged call.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str = "The same error keeps coming back; read it and change the argument or input it names instead of retrying.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged_cycle()?;
    let outcome = judged.outcome?;
    if judged.poll || !outcome.is_error {
        return None;
    }
    let streak: Vec<&str> = v
        .run_rev(false)
        .take_while(|(_, c)| {
            c.name == judged.name
                && c.outcome
                    .is_some_and(|o| o.is_error && o.fingerprint == outcome.fingerprint)
        })
        .map(|(_, c)| c.args.as_str())
        .collect();
    let count = streak.len();
    let t = v.settings.thresholds(DetectorKind::ErrorRepeat);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    // The message names the judged call's arguments: when the streak's calls
    // had others, it says so rather than that this one call failed N times.
    let other = streak.iter().filter(|a| **a != judged.args).count();
    let detail = if other == 0 {
        format!("failed {count} times in a row with the same error")
    } else {
        format!(
            "and the {} calls before it ({other} of them with other arguments) failed with the same error, {count} in a row",
            count - 1
        )
    };
    Some(v.finding(DetectorKind::ErrorRepeat, level, count, detail, ADVICE))
}
