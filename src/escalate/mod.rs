//! The `escalate` action (issue #17): a looping session lane is sent to the
//! route's `escalate_model` for a few requests, then back.
//!
//! - Settings: `[loop_detection.escalate]` (`requests`,
//!   `max_escalations_per_session`, validated in [`crate::config::escalate`])
//!   and per route [`RouteEscalation`] (`escalate_model`,
//!   `escalate_upstream`, `escalate_credential_env`).
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

pub use crate::config::escalate::RouteEscalation;

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
    pub fn step(
        &mut self,
        request: &Request<'_>,
        target: Option<&str>,
        settings: &crate::detect::settings::EscalateSettings,
    ) -> Step {
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
#[path = "escalate_tests.rs"]
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
