//! How loop stretches end, per experiment arm (issue #17): a stretch opens
//! with the first decisive verdict of a session lane and ends as
//! `recovered` (a request with no verdict: the streak stopped without a
//! block), `blocked`, `aborted`, `breaker` (a breaker-level verdict) or
//! `idle` (the session was forgotten with the stretch open). Counted in
//! `loopguard_loop_outcomes_total{arm,detector,outcome}`, in
//! `GET /admin/experiment`, and logged as one `loop outcome` event each.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::experiment::Arm;
use crate::detect::{Action, Level, Verdict};

/// How a stretch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The streak stopped without a block.
    Recovered,
    /// A call was blocked.
    Blocked,
    /// The request was aborted (below breaker level).
    Aborted,
    /// A breaker-level verdict fired.
    Breaker,
    /// The session went idle and was forgotten.
    Idle,
}

impl Outcome {
    /// The name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Recovered => "recovered",
            Self::Blocked => "blocked",
            Self::Aborted => "aborted",
            Self::Breaker => "breaker",
            Self::Idle => "idle",
        }
    }
}

/// An open stretch of a lane: a plain serde struct.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stretch {
    /// The detector of the verdict that opened it.
    pub detector: String,
    /// The session's arm.
    pub arm: Arm,
}

/// Follows a lane's stretch through one decisive verdict (after the arm's
/// actions are applied); `None` at request time means the request had no
/// verdict. Returns the stretch that ended and how.
pub fn follow(
    open: &mut Option<Stretch>,
    verdict: Option<&Verdict>,
    arm: Arm,
    at_stream: bool,
) -> Option<(Stretch, Outcome)> {
    let Some(v) = verdict else {
        if at_stream {
            return None;
        }
        return open.take().map(|s| (s, Outcome::Recovered));
    };
    let ended = if v.level == Level::Breaker {
        Some(Outcome::Breaker)
    } else {
        match v.action {
            Action::Block => Some(Outcome::Blocked),
            Action::Abort => Some(Outcome::Aborted),
            Action::Observe | Action::Warn | Action::Escalate => None,
        }
    };
    let stretch = open.take().unwrap_or_else(|| Stretch {
        detector: v.detector.name().to_owned(),
        arm,
    });
    match ended {
        Some(outcome) => Some((stretch, outcome)),
        None => {
            if !at_stream {
                *open = Some(stretch);
            }
            None
        }
    }
}

/// The outcome counters of the process, by (arm, detector, outcome).
#[derive(Debug, Default)]
pub struct Tally {
    counts: Mutex<BTreeMap<(Arm, String, Outcome), u64>>,
}

impl Tally {
    /// Counts an ended stretch: metric, table and one log event.
    pub fn count(&self, session: &str, stretch: &Stretch, outcome: Outcome) {
        tracing::info!(
            session,
            arm = stretch.arm.name(),
            detector = %stretch.detector,
            outcome = outcome.name(),
            "loop outcome"
        );
        metrics::counter!(
            "loopguard_loop_outcomes_total",
            "arm" => stretch.arm.name(),
            "detector" => stretch.detector.clone(),
            "outcome" => outcome.name()
        )
        .increment(1);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        *counts
            .entry((stretch.arm, stretch.detector.clone(), outcome))
            .or_insert(0) += 1;
    }

    /// Every counter, sorted: `{arm, detector, outcome, count}`.
    pub fn rows(&self) -> Vec<serde_json::Value> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts
            .iter()
            .map(|((arm, detector, outcome), n)| {
                serde_json::json!({"arm": arm.name(), "detector": detector, "outcome": outcome.name(), "count": n})
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::DetectorKind;

    fn verdict(level: Level, action: Action) -> Verdict {
        Verdict {
            detector: DetectorKind::IdenticalCall,
            level,
            action,
            count: 3,
            tool: None,
            arguments: None,
            message: String::new(),
        }
    }

    #[test]
    fn a_warning_then_a_quiet_request_is_a_recovery() {
        let mut open = None;
        assert_eq!(
            follow(
                &mut open,
                Some(&verdict(Level::Warning, Action::Warn)),
                Arm::Treatment,
                false
            ),
            None
        );
        assert!(open.is_some());
        // The same warning again (a retry) keeps the stretch open.
        assert_eq!(
            follow(
                &mut open,
                Some(&verdict(Level::Warning, Action::Warn)),
                Arm::Treatment,
                false
            ),
            None
        );
        let (s, o) = follow(&mut open, None, Arm::Treatment, false).unwrap_or_else(|| panic!("ended"));
        assert_eq!(
            (s.detector.as_str(), s.arm, o),
            ("identical_call", Arm::Treatment, Outcome::Recovered)
        );
        assert!(open.is_none());
        assert_eq!(
            follow(&mut open, None, Arm::Treatment, false),
            None,
            "nothing open, nothing ends"
        );
    }

    #[test]
    fn blocks_aborts_and_breakers_end_a_stretch() {
        for (level, action, outcome) in [
            (Level::Critical, Action::Block, Outcome::Blocked),
            (Level::Critical, Action::Abort, Outcome::Aborted),
            (Level::Breaker, Action::Abort, Outcome::Breaker),
        ] {
            let mut open = None;
            let _ = follow(
                &mut open,
                Some(&verdict(Level::Warning, Action::Observe)),
                Arm::Holdout,
                false,
            );
            let ended = follow(&mut open, Some(&verdict(level, action)), Arm::Holdout, true);
            assert_eq!(ended.map(|(s, o)| (s.arm, o)), Some((Arm::Holdout, outcome)));
            assert!(open.is_none());
        }
    }

    #[test]
    fn a_quiet_stream_ends_nothing() {
        let mut open = None;
        let _ = follow(
            &mut open,
            Some(&verdict(Level::Warning, Action::Warn)),
            Arm::Off,
            false,
        );
        assert_eq!(follow(&mut open, None, Arm::Off, true), None);
        assert!(open.is_some());
    }
}
