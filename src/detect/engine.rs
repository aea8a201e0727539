//! The judging core: the detectors run over a [`View`] in table order.

use super::verdict::{DetectorKind, Finding};
use super::view::View;
use super::{
    circuit_breaker, consecutive_failures, cycle, error_repeat, generic_repeat, identical_call, novelty,
    poll_no_progress, post_compaction, repeated_message, tool_budget, unknown_tool,
};

/// Runs every enabled detector on a view, returning its findings.
pub(crate) fn judge(view: &View) -> Vec<Finding> {
    type Check = fn(&View) -> Option<Finding>;
    const CHECKS: [(DetectorKind, Check); 12] = [
        (DetectorKind::IdenticalCall, identical_call::check),
        (DetectorKind::Cycle, cycle::check),
        (DetectorKind::GenericRepeat, generic_repeat::check),
        (DetectorKind::PollNoProgress, poll_no_progress::check),
        (DetectorKind::ErrorRepeat, error_repeat::check),
        (DetectorKind::ConsecutiveFailures, consecutive_failures::check),
        (DetectorKind::ToolBudget, tool_budget::check),
        (DetectorKind::UnknownTool, unknown_tool::check),
        (DetectorKind::RepeatedMessage, repeated_message::check),
        (DetectorKind::PostCompaction, post_compaction::check),
        (DetectorKind::CircuitBreaker, circuit_breaker::check),
        (DetectorKind::Novelty, novelty::check),
    ];
    CHECKS
        .iter()
        .filter(|(kind, _)| view.settings.thresholds(*kind).enabled)
        .filter_map(|(_, check)| check(view))
        .collect()
}
