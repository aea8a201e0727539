//! `identical_call`: the same tool-call signature N times in a row.
//!
//! Idea: Cline's soft/hard mistake limits and Gemini CLI's five identical
//! calls. "The same" is the call's identity (`super::step::Cycle::signature`):
//! the tool and its arguments without the ones that do not identify it
//! (`call_identity`, issue #12 point 5a) and after neutral rewrites
//! (whitespace, comments, quoting, flag order or bundling, a trailing slash,
//! tracking parameters; point 5b) — so a near-duplicate counts, a differing
//! path never does. Defaults: warning at 3 calls in a row, and only with
//! no-progress evidence (some result of the streak repeats, point 2);
//! a streak of twice that whose results all differ is only logged (action
//! `observe`, whatever is configured: it is progress, never told to the
//! agent); critical at 5 when the streak's no-progress run (see
//! `super::view::no_progress_run`) is 5 long, i.e. the results are
//! identical too. Does not flag: poll tools and calls that wait (judged by
//! `poll_no_progress`), the same call returning a different result every
//! time, calls separated by an assistant text turn or by the person speaking.
//! Cost: O(streak length) per judged call.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::{View, no_progress_run, repeated_result};

const ADVICE: &str =
    "Use the result you already received instead of repeating the call, or change the arguments.";
/// For a streak whose results still change (e.g. a build rerun while the
/// code changes): repeating is not wrong by itself, so the advice says when
/// to stop.
const ADVICE_CHANGING: &str = "If you are waiting for the result to change, say what you expect and check less often; otherwise change the arguments or try a different approach.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let streak = v.identical_streak()?;
    let t = v.settings.thresholds(DetectorKind::IdenticalCall);
    let stall = no_progress_run(&streak);
    if t.reached(Level::Critical, stall as u32) {
        let detail = format!("was called {stall} times in a row with the same result");
        return Some(v.finding(
            DetectorKind::IdenticalCall,
            Level::Critical,
            stall,
            detail,
            ADVICE,
        ));
    }
    let count = streak.len();
    let evidence = repeated_result(&streak);
    if !evidence {
        // Results that all change are progress: logged (observe only) once
        // the streak is twice the warning threshold, never told to the agent.
        let long = t.get(Level::Warning).saturating_mul(2);
        if !t.reached(Level::Warning, count as u32) || (count as u32) < long {
            return None;
        }
        let detail = format!("was called {count} times in a row, with a different result every time");
        let mut f = v.finding(
            DetectorKind::IdenticalCall,
            Level::Warning,
            count,
            detail,
            ADVICE_CHANGING,
        );
        f.observe_only = true;
        return Some(f);
    }
    t.reached(Level::Warning, count as u32).then(|| {
        let detail = format!("was called {count} times in a row");
        // The same result every time (as far as known), or results that change.
        let advice = if stall + 1 >= count || stall == 0 && count <= 2 {
            ADVICE
        } else {
            ADVICE_CHANGING
        };
        v.finding(DetectorKind::IdenticalCall, Level::Warning, count, detail, advice)
    })
}
