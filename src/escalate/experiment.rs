//! `[loop_detection.experiment]`: a fixed share of sessions (`holdout`)
//! gets `observe` instead of the configured action for warning-level
//! verdicts, so the outcome counters ([`super::outcome`]) compare acting
//! with not acting on the same traffic.
//!
//! The arm is chosen by hashing the session key (SHA-256, first 8 bytes as
//! a fraction of 2^64): the same key always lands in the same arm, in every
//! process and across restarts.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::detect::settings::Experiment;
use crate::detect::{Action, Level, Verdict};

/// The arm of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// No experiment runs.
    Off,
    /// The configured actions apply.
    Treatment,
    /// Warning-level verdicts are only observed.
    Holdout,
}

impl Arm {
    /// The name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Treatment => "treatment",
            Self::Holdout => "holdout",
        }
    }
}

/// The arm of the session `key` under `experiment`.
pub fn arm(experiment: &Experiment, key: &str) -> Arm {
    if experiment.holdout <= 0.0 {
        return Arm::Off;
    }
    if fraction(key) < experiment.holdout {
        Arm::Holdout
    } else {
        Arm::Treatment
    }
}

/// In the holdout arm, warning-level verdicts become `observe`.
pub fn apply(arm: Arm, verdicts: &mut [Verdict]) {
    if arm == Arm::Holdout {
        for v in verdicts.iter_mut().filter(|v| v.level == Level::Warning) {
            v.action = Action::Observe;
        }
    }
}

/// The key's place in [0, 1).
fn fraction(key: &str) -> f64 {
    let digest = Sha256::digest([b"loopguard-experiment\0", key.as_bytes()].concat());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    #[expect(
        clippy::cast_precision_loss,
        reason = "53 bits of the hash are plenty for a share"
    )]
    let f = (u64::from_be_bytes(first) >> 11) as f64 / (1u64 << 53) as f64;
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arm is a function of the key, and the holdout share over 10,000
    /// keys is within ±1.5 points of the configured 10 %.
    #[test]
    fn the_holdout_arm_is_deterministic_and_near_its_share() {
        let e = Experiment { holdout: 0.1 };
        let keys: Vec<String> = (0..10_000).map(|i| format!("session-{i}")).collect();
        let held = keys.iter().filter(|k| arm(&e, k) == Arm::Holdout).count();
        assert!((850..=1150).contains(&held), "{held} of 10000 held out");
        for k in keys.iter().take(200) {
            assert_eq!(arm(&e, k), arm(&e, k));
            assert_eq!(arm(&e, k), arm(&Experiment { holdout: 0.1 }, k));
        }
        assert_eq!(arm(&Experiment::default(), "session-1"), Arm::Off);
    }

    /// A larger holdout keeps every session held out at a smaller one.
    #[test]
    fn raising_the_holdout_only_adds_sessions() {
        let small = Experiment { holdout: 0.05 };
        let large = Experiment { holdout: 0.2 };
        for i in 0..2000 {
            let k = format!("k{i}");
            if arm(&small, &k) == Arm::Holdout {
                assert_eq!(arm(&large, &k), Arm::Holdout);
            }
        }
    }

    fn verdicts() -> Vec<Verdict> {
        let v = |level, action| Verdict {
            detector: crate::detect::DetectorKind::IdenticalCall,
            level,
            action,
            count: 3,
            tool: None,
            arguments: None,
            message: String::new(),
        };
        vec![
            v(Level::Warning, Action::Escalate),
            v(Level::Critical, Action::Block),
        ]
    }

    #[test]
    fn only_warnings_are_observed_in_the_holdout() {
        let mut v = verdicts();
        apply(Arm::Holdout, &mut v);
        assert_eq!(v[0].action, Action::Observe);
        assert_eq!(v[1].action, Action::Block);
        let mut w = verdicts();
        apply(Arm::Treatment, &mut w);
        assert_eq!(w[0].action, Action::Escalate);
    }
}
