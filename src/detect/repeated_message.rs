//! `repeated_message`: the assistant sends the same text (no tool calls) N turns in a row without progress.
//!
//! Idea: OpenHands' monologue check. Defaults: warning 3, critical 5. Canned
//! user replies in between (e.g. a format reminder) are skipped; repeated
//! screens in between (a text-protocol agent's terminal output seen before)
//! are skipped only while they are the same screen every time — the same
//! reply answered by the same screen is no progress, while the same short
//! reply after steps whose screens differ ("command ran, no output" after
//! each successful step) is an agent at work (issue #12 point 7). A tool
//! cycle, the person, or a different text ends the run. Judged at request
//! time (the text is forwarded as it streams, so the next request carries
//! it). Does not flag: texts that differ in any character after trimming.
//! Cost: O(run length).

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
    let mut screen: Option<u64> = None;
    let mut count = 0usize;
    for s in v.epoch_rev() {
        match s.kind {
            StepKind::Canned => {}
            StepKind::Screen(h) if screen.is_none_or(|x| x == h) => screen = Some(h),
            StepKind::Said(k) if k == key => count += 1,
            _ => break,
        }
    }
    let t = v.settings.thresholds(DetectorKind::RepeatedMessage);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("the same reply {count} turns in a row");
    Some(v.finding(DetectorKind::RepeatedMessage, level, count, detail, ADVICE))
}
