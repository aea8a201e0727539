//! `post_compaction`: the same loop right after a compaction.
//!
//! Idea: OpenClaw's post-compaction guard. After a compaction the session arms
//! a guard holding the (signature, outcome) pairs seen before it. If the first
//! `window_size` (3) tool cycles after the compaction are all one pair that
//! was seen before, and the agent is still on that pair, the verdict is a
//! breaker with error code `compaction_loop_persisted`: summarising did not
//! get the agent out of its loop. Known outcomes only (request time). Does
//! not flag: new work after a compaction, a pair never seen before.
//! Cost: O(history) per judged call.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

const ADVICE: &str = "The loop survived a context compaction; stop the run and let a person look at it.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let guard = v.guard?;
    let judged = v.judged_cycle()?;
    let pair = (judged.signature, judged.outcome?.hash);
    let window = v.settings.post_compaction_window;
    let after: Vec<_> = v
        .steps
        .iter()
        .filter(|s| s.seq > guard.mark)
        .filter_map(|s| s.cycle())
        .collect();
    if window == 0 || after.len() < window || !guard.before.contains(&pair) {
        return None;
    }
    let same = |c: &&super::step::Cycle| c.signature == pair.0 && c.outcome.is_some_and(|o| o.hash == pair.1);
    if !after.iter().all(same) {
        return None;
    }
    let count = after.len();
    let detail = format!("repeated {count} times right after a compaction, as before it");
    Some(v.finding(
        DetectorKind::PostCompaction,
        Level::Breaker,
        count,
        detail,
        ADVICE,
    ))
}
