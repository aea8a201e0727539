//! The `escalate` action (issue #17): a looping session lane is sent to the
//! route's `escalate_model` for a few requests, then back.
//!
//! - [`EscalateSettings`] (`[loop_detection.escalate]`: `requests`,
//!   `max_escalations_per_session`) and [`RouteEscalation`] (per route:
//!   `escalate_model`, `escalate_upstream`, `escalate_credential_env`).
//! - [`EscalationState`]: per session, a plain serde struct (shareable by a
//!   store other than memory): the escalations started, the one in force and
//!   which signed reasoning parts of the history each model produced.
//! - [`Retarget`]: what the forward stage changes for an escalated request.
//! - [`experiment`]: the holdout arm; [`outcome`]: how loop stretches end.
//!
//! The body rewriting itself (model, signed reasoning, credential) is
//! dialect writing: [`crate::dialect::Dialect::set_model`],
//! [`crate::dialect::Dialect::strip_foreign_signatures`],
//! [`crate::dialect::Dialect::set_credential`].

pub mod experiment;
pub mod outcome;

use serde::{Deserialize, Serialize};

use crate::config::Problems;
use crate::config::raw::RawRoute;

/// Default `requests`: how many requests an escalation lasts.
pub const DEFAULT_REQUESTS: u32 = 10;
/// Default `max_escalations_per_session`.
pub const DEFAULT_MAX_PER_SESSION: u32 = 1;

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

/// Validated `[loop_detection.escalate]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscalateSettings {
    /// Requests sent to the escalation model (counting the one that carries
    /// the warning); the person speaking ends it sooner.
    pub requests: u32,
    /// Escalations a session may start; past it `escalate` acts as `warn`.
    pub max_per_session: u32,
}

impl Default for EscalateSettings {
    fn default() -> Self {
        Self {
            requests: DEFAULT_REQUESTS,
            max_per_session: DEFAULT_MAX_PER_SESSION,
        }
    }
}

impl EscalateSettings {
    /// Validates the raw table at `path`.
    pub fn validate(raw: Option<&RawEscalate>, path: &str, problems: &mut Problems) -> Self {
        let mut s = Self::default();
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

/// What the forward stage changes for an escalated request (the body is
/// already rewritten).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retarget {
    /// The model the request now names (Gemini: in its path).
    pub model: String,
    /// The upstream base URL of the `escalate_upstream` route, if any.
    pub upstream: Option<url::Url>,
    /// That upstream's credential (read from the named environment variable).
    pub credential: Option<String>,
}

impl Retarget {
    /// The target of `escalation` for a request on a route: `None` when its
    /// upstream route or credential is missing (then no escalation).
    pub fn of(escalation: &RouteEscalation, routes: &[crate::config::Route]) -> Option<Self> {
        let Some(prefix) = &escalation.upstream else {
            return Some(Self {
                model: escalation.model.clone(),
                upstream: None,
                credential: None,
            });
        };
        let route = routes.iter().find(|r| &r.prefix == prefix)?;
        let credential = std::env::var(escalation.credential_env.as_deref()?).ok()?;
        Some(Self {
            model: escalation.model.clone(),
            upstream: Some(route.upstream.clone()),
            credential: Some(credential),
        })
    }
}

/// Signed reasoning parts of a history (in order) produced by one model
/// other than the lane's own: from ordinal `from` up to `to` (open while
/// the escalation lasts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// The model that produced them.
    pub model: String,
    /// First ordinal.
    pub from: usize,
    /// One past the last ordinal; `None` while the escalation lasts.
    pub to: Option<usize>,
}

/// The escalation in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Active {
    /// The session lane it applies to.
    pub lane: u64,
    /// Requests left (the current one included).
    pub remaining: u32,
}

/// A session's escalations: a plain serde struct.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscalationState {
    /// Escalations started in this session.
    pub started: u32,
    /// The one in force.
    pub active: Option<Active>,
    /// The lane's own model (as the agent asks for it), once escalated.
    pub original: Option<String>,
    /// Signed parts produced by other models, oldest first.
    pub spans: Vec<Span>,
}

/// What the escalation state says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Not escalated (and no escalation began).
    Stay,
    /// This request starts an escalation.
    Began,
    /// This request continues one.
    Continued,
    /// The escalation ended with this request (the person spoke, or its
    /// requests ran out): it goes to the lane's own model.
    Ended,
}

/// One request of a lane as the escalation state sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The lane.
    pub lane: u64,
    /// The model the agent asked for.
    pub model: &'a str,
    /// The decisive verdict asks for `escalate`.
    pub wants: bool,
    /// The person spoke in what is new in this request.
    pub person_spoke: bool,
    /// Signed reasoning parts in the request's history.
    pub signed: usize,
}

impl EscalationState {
    /// Advances the state for one request and says what it is; `target` is
    /// the escalation model, `None` when the route cannot escalate.
    pub fn step(&mut self, request: &Request<'_>, target: Option<&str>, settings: &EscalateSettings) -> Step {
        let mut ended = false;
        if let Some(active) = self.active.as_ref().filter(|a| a.lane == request.lane) {
            if request.person_spoke || active.remaining == 0 {
                self.active = None;
                if let Some(span) = self.spans.last_mut().filter(|s| s.to.is_none()) {
                    span.to = Some(request.signed.max(span.from));
                }
                ended = true;
            }
        }
        if let Some(active) = self.active.as_mut().filter(|a| a.lane == request.lane) {
            active.remaining = active.remaining.saturating_sub(1);
            return Step::Continued;
        }
        let can = self.active.is_none()
            && request.wants
            && self.started < settings.max_per_session
            && target.is_some_and(|t| t != request.model);
        if let (true, Some(target)) = (can, target) {
            self.started += 1;
            self.original = Some(request.model.to_owned());
            self.active = Some(Active {
                lane: request.lane,
                remaining: settings.requests.saturating_sub(1),
            });
            self.spans.push(Span {
                model: target.to_owned(),
                from: request.signed,
                to: None,
            });
            return Step::Began;
        }
        if ended { Step::Ended } else { Step::Stay }
    }

    /// The model that produced signed part `ordinal` of the history: the
    /// model of the span holding it, else the lane's own (`None` before any
    /// escalation).
    pub fn producer(&self, ordinal: usize) -> Option<&str> {
        let original = self.original.as_deref()?;
        Some(
            self.spans
                .iter()
                .find(|s| s.from <= ordinal && s.to.is_none_or(|to| ordinal < to))
                .map_or(original, |s| s.model.as_str()),
        )
    }

    /// Whether a request sent to `model` must lose signed part `ordinal`.
    pub fn foreign(&self, ordinal: usize, model: &str) -> bool {
        self.producer(ordinal).is_some_and(|p| p != model)
    }
}

#[cfg(test)]
mod tests;

/// Points the upstream request of an escalated request at its target: the
/// model in the path where the dialect carries it there (Gemini), the
/// `escalate_upstream` route's base URL in place of `route_base` (the
/// route's own upstream; the path below it unchanged) and its own
/// credential in place of the client's.
pub fn retarget_url(
    retarget: &Retarget,
    dialect: crate::dialect::Dialect,
    route_base: &url::Url,
    url: &mut url::Url,
    headers: &mut http::HeaderMap,
) {
    let mut scratch = serde_json::Value::Null;
    if let Some(path) = dialect.set_model(&mut scratch, url.path(), &retarget.model) {
        url.set_path(&path);
    }
    if let Some(base) = &retarget.upstream {
        let own = route_base.path().trim_end_matches('/');
        let below = url.path().strip_prefix(own).unwrap_or(url.path()).to_owned();
        let query = url.query().map(str::to_owned);
        let mut moved = base.clone();
        let joined = format!("{}{below}", moved.path().trim_end_matches('/'));
        moved.set_path(&joined);
        moved.set_query(query.as_deref());
        *url = moved;
    }
    if let Some(secret) = &retarget.credential {
        dialect.set_credential(headers, url, secret);
    }
}
