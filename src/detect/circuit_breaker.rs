//! `circuit_breaker`: any no-progress streak (same signature, same outcome) reaching N.
//!
//! Idea: OpenClaw's global circuit breaker. Default: breaker at 30. It uses
//! the same no-progress run as `identical_call`, so a streak whose results
//! change never trips it. Does not flag: poll tools (judged by
//! `poll_no_progress` only), ping-pong patterns (that is `cycle`'s).
//! Cost: O(streak length) per judged call.

use super::verdict::{DetectorKind, Finding, Level};
use super::view::{View, no_progress_run};

const ADVICE: &str =
    "Stop this run and report what blocks you; repeating the same call will not change its result.";

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let streak = v.identical_streak()?;
    let stall = no_progress_run(&streak);
    let t = v.settings.thresholds(DetectorKind::CircuitBreaker);
    t.reached(Level::Breaker, stall as u32).then(|| {
        let detail = format!("returned the same result {stall} times in a row");
        v.finding(
            DetectorKind::CircuitBreaker,
            Level::Breaker,
            stall,
            detail,
            ADVICE,
        )
    })
}
