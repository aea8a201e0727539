//! `[loop_detection.escalate]`, `[loop_detection.experiment]` and the
//! routes' `escalate_*` keys: raw form and validation (the `escalate`
//! action itself is [`crate::escalate`]).

use serde::Deserialize;

use super::Problems;
use super::raw::RawRoute;
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

impl RouteEscalation {
    /// Validates a route's `escalate_*` keys (`base` is its key path).
    pub fn validate(raw: &RawRoute, base: &str, problems: &mut Problems) -> Option<Self> {
        let Some(model) = raw.escalate_model.as_ref() else {
            for (key, set) in [
                ("escalate_upstream", raw.escalate_upstream.is_some()),
                ("escalate_credential_env", raw.escalate_credential_env.is_some()),
            ] {
                if set {
                    problems.push(format!("{base}.{key}"), "needs escalate_model");
                }
            }
            return None;
        };
        if model.trim().is_empty() || model.contains(['/', ':', '?', '#']) {
            problems.push(
                format!("{base}.escalate_model"),
                format!("{model:?} is not a model name"),
            );
        }
        match (&raw.escalate_upstream, &raw.escalate_credential_env) {
            (Some(_), None) => problems.push(
                format!("{base}.escalate_credential_env"),
                "escalate_upstream needs its own credential: name the environment variable holding it",
            ),
            (None, Some(_)) => problems.push(
                format!("{base}.escalate_credential_env"),
                "only with escalate_upstream (on the same route the client's credential is used)",
            ),
            _ => {}
        }
        Some(Self {
            model: model.clone(),
            upstream: raw
                .escalate_upstream
                .as_ref()
                .map(|p| p.trim_end_matches('/').to_owned()),
            credential_env: raw.escalate_credential_env.clone(),
        })
    }
}

/// Checks that every `escalate_upstream` names another route of the same
/// provider; an unset credential variable is a notice (escalation then acts
/// as `warn` until it is set).
pub fn check_targets(routes: &[crate::config::Route], raw: &[RawRoute], problems: &mut Problems) {
    for (i, r) in raw.iter().enumerate() {
        let Some(prefix) = r.escalate_upstream.as_deref().map(|p| p.trim_end_matches('/')) else {
            continue;
        };
        let own = r.prefix.trim_end_matches('/');
        let path = format!("routes[{i}].escalate_upstream");
        match routes.iter().find(|t| t.prefix == prefix) {
            None => problems.push(path, format!("{prefix:?} is not the prefix of a route")),
            Some(_) if prefix == own => problems.push(path, "names this route itself; leave it out"),
            Some(t) if Some(t.provider) != routes.iter().find(|x| x.prefix == own).map(|x| x.provider) => {
                problems.push(
                    path,
                    format!(
                        "{prefix:?} is a route of another provider ({})",
                        t.provider.name()
                    ),
                );
            }
            Some(_) => {}
        }
        if let Some(var) = &r.escalate_credential_env {
            if std::env::var_os(var).is_none() {
                problems.notice(
                    format!("routes[{i}].escalate_credential_env"),
                    format!(
                        "the environment variable {var} is not set: escalation on this route acts as warn"
                    ),
                );
            }
        }
    }
}
