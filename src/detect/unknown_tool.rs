//! `unknown_tool`: calls to tools the request did not declare, N in a row.
//!
//! Idea: OpenClaw's unknown-tool threshold. Defaults: warning 3, critical 10.
//! A request that declares no tools at all never fires it (a client that
//! sends tools out of band, or a text-tool protocol, would otherwise trip it
//! on every call). Does not flag: declared tools, including calls that fail.
//! Cost: O(run length) per judged call.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str = "That tool does not exist in this session; call one of the declared tools instead.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged_cycle()?;
    if !judged.unknown_tool {
        return None;
    }
    let count = v
        .epoch_rev()
        .filter_map(|s| s.cycle())
        .take_while(|c| c.unknown_tool)
        .count();
    let t = v.settings.thresholds(DetectorKind::UnknownTool);
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    let detail = format!("is not a declared tool; {count} undeclared calls in a row");
    Some(v.finding(DetectorKind::UnknownTool, level, count, detail, ADVICE))
}
