//! `generic_repeat`: one (signature, outcome) pair N times in the history window, not necessarily in a row.
//!
//! Idea: OpenClaw's generic repeat. Defaults: warning 10, critical 20, within
//! the last `history_size` (30) cycles of the current epoch. Because the pair
//! includes the outcome, edit → test → edit → test with changing results
//! never counts. For a pending call (stream time) the outcome is predicted as
//! the latest known outcome of the same signature. Does not flag: poll tools.
//! Cost: O(history) per judged call.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str =
    "You already made this exact call with this exact result; use that result instead of calling again.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged_cycle()?;
    if judged.poll {
        return None;
    }
    let window = v.settings.history_size;
    let mut cycles = v
        .epoch_rev()
        .filter_map(|s| s.cycle())
        .filter(|c| !c.poll)
        .take(window);
    let _ = cycles.next();
    let predicted = judged.outcome.map(|o| o.hash).or_else(|| {
        v.epoch_rev()
            .filter_map(|s| s.cycle())
            .filter(|c| c.signature == judged.signature)
            .find_map(|c| c.outcome.map(|o| o.hash))
    })?;
    let count = 1 + cycles
        .filter(|c| c.signature == judged.signature && c.outcome.is_some_and(|o| o.hash == predicted))
        .count();
    let t = v.settings.thresholds(DetectorKind::GenericRepeat);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("returned the same result {count} times within the last {window} calls");
    Some(v.finding(DetectorKind::GenericRepeat, level, count, detail, ADVICE))
}
