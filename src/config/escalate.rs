//! `[loop_detection.escalate]` and `[loop_detection.experiment]`: raw
//! form and validation; a route's validated escalation target (its
//! `escalate_*` keys are validated with the route, in `super::route`). The
//! `escalate` action itself is [`crate::escalate`].

use serde::Deserialize;

use super::problems::Problems;
use crate::detect::settings::{EscalateSettings, Experiment};

/// Raw `[loop_detection.escalate]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEscalate {
    /// Requests sent to the escalation model before going back (10).
    pub requests: Option<u32>,
    /// Escalations a session may have in its lifetime (1).
    pub max_escalations_per_session: Option<u32>,
}

impl RawEscalate {
    /// `over`'s keys over `base`'s.
    pub fn merged(base: Option<&Self>, over: Option<&Self>) -> Option<Self> {
        match (base, over) {
            (Some(a), Some(b)) => Some(Self {
                requests: b.requests.or(a.requests),
                max_escalations_per_session: b.max_escalations_per_session.or(a.max_escalations_per_session),
            }),
            (a, b) => b.or(a).cloned(),
        }
    }
}

/// Validates `[loop_detection.escalate]` at `path`.
pub fn escalate_settings(raw: Option<&RawEscalate>, path: &str, problems: &mut Problems) -> EscalateSettings {
    let mut s = EscalateSettings::default();
    let Some(raw) = raw else { return s };
    if let Some(n) = raw.requests {
        if n == 0 {
            problems.push(format!("{path}.requests"), "must be at least 1, got 0");
        } else {
            s.requests = n;
        }
    }
    if let Some(n) = raw.max_escalations_per_session {
        s.max_per_session = n;
    }
    s
}

/// Raw `[loop_detection.experiment]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExperiment {
    /// Share of sessions in the holdout arm, 0.0..=0.5 (0 = no experiment).
    pub holdout: Option<f64>,
}

/// Validates `[loop_detection.experiment]` at `path`.
pub fn experiment(raw: Option<&RawExperiment>, path: &str, problems: &mut Problems) -> Experiment {
    let holdout = raw.and_then(|r| r.holdout).unwrap_or(0.0);
    if !(0.0..=0.5).contains(&holdout) {
        problems.push(
            format!("{path}.holdout"),
            format!("must be between 0.0 and 0.5, got {holdout}"),
        );
        return Experiment::default();
    }
    Experiment { holdout }
}

/// A route's escalation target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEscalation {
    /// The model a looping session is sent to.
    pub model: String,
    /// Prefix of the route whose upstream serves it (`None`: this route's).
    pub upstream: Option<String>,
    /// The environment variable holding that upstream's credential.
    pub credential_env: Option<String>,
}
