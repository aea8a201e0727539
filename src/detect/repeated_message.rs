//! `repeated_message`: the assistant sends the same text (no tool calls) N turns in a row.
//!
//! Idea: OpenHands' monologue check. Defaults: warning 3, critical 5. Canned
//! user replies in between (e.g. a format reminder) are skipped; a tool cycle
//! or a different text ends the run. Judged at request time (the text is
//! forwarded as it streams, so the next request carries it). Does not flag:
//! texts that differ in any character after trimming. Cost: O(run length).

use super::step::StepKind;
use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str =
    "You keep sending the same reply; make the tool call you intend, or ask the user for what you need.";

/// Checks the judged step.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let StepKind::Said(key) = v.judged()?.kind else {
        return None;
    };
    let count = v
        .epoch_rev()
        .filter(|s| !matches!(s.kind, StepKind::Canned))
        .take_while(|s| s.kind == StepKind::Said(key))
        .count();
    let t = v.settings.thresholds(DetectorKind::RepeatedMessage);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("the same reply {count} turns in a row");
    Some(v.finding(DetectorKind::RepeatedMessage, level, count, detail, ADVICE))
}
