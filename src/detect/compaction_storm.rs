//! `compaction_storm`: N compactions in a row with no tool cycle between them.
//!
//! Idea: OpenHands' condensation loop and the compaction spirals seen in
//! agents that summarise, overflow and summarise again. Default: breaker at
//! 3. The session counts compactions signalled by the caller and resets the
//! count on every new tool cycle. Does not flag: compactions with work in
//! between. Cost: O(1).

use super::settings::Settings;
use super::verdict::{DetectorKind, Finding, Level};

const ADVICE: &str =
    "The agent keeps compacting its context without doing any work; stop the run and start a fresh session.";

/// Checks the session's count of compactions in a row.
pub(crate) fn check(in_a_row: u32, settings: &Settings) -> Option<Finding> {
    let t = settings.thresholds(DetectorKind::CompactionStorm);
    t.reached(Level::Breaker, in_a_row).then(|| Finding {
        detector: DetectorKind::CompactionStorm,
        level: Level::Breaker,
        count: in_a_row,
        tool: None,
        arguments: None,
        detail: format!("{in_a_row} compactions in a row with no tool call between them"),
        advice: ADVICE,
        observe_only: false,
    })
}
