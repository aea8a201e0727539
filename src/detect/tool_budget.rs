//! `tool_budget`: N tool cycles since the person last spoke.
//!
//! Idea: Cline's maxIterations reminder, LangGraph's recursion limit. Off by
//! default (both thresholds 0). The count is kept per epoch, so it is exact
//! even past `history_size`. Does not flag: anything while off; polls count
//! like other cycles. Cost: O(1).

use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str = "You have used many tool calls since the user's last message; summarise progress and ask the user before continuing.";

/// Checks the judged step.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged()?;
    judged.cycle()?;
    let count = judged.in_epoch as usize;
    let t = v.settings.thresholds(DetectorKind::ToolBudget);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("{count} tool calls since the user's last message");
    Some(v.finding(DetectorKind::ToolBudget, level, count, detail, ADVICE))
}
