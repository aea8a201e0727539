//! Carrying out `escalate` at request time: the session's
//! [`EscalationState`](crate::escalate::EscalationState) says whether this
//! request goes to the escalation model; the body then names that model,
//! and signed reasoning produced by a model other than the one it is sent
//! to is dropped or neutralised (in both directions: on the way to the
//! escalation model and on the way back). A lane that never escalated is
//! untouched.

use std::sync::PoisonError;

use bytes::Bytes;

use super::{Echoes, RequestView};
use crate::config::Config;
use crate::detect::Settings;
use crate::escalate::{Request, Retarget, Step};
use crate::plan::RequestDecision;
use crate::session::SharedSession;

/// What request-time detection saw, as the escalation needs it.
pub(super) struct Seen<'a> {
    /// The session.
    pub(super) session: &'a SharedSession,
    /// The lane.
    pub(super) lane: u64,
    /// The session key (logs).
    pub(super) key: &'a str,
    /// The decisive verdict asks for `escalate`.
    pub(super) wants: bool,
    /// The person spoke in what is new.
    pub(super) person_spoke: bool,
}

/// The decision with the escalation applied: a forwarded request of an
/// escalated lane names the escalation model (and goes to its upstream);
/// any forwarded request of a lane that escalated loses the signed
/// reasoning of the other model. Answers (blocks, aborts) pass unchanged:
/// the ladder holds while escalated. The escalation's log line and counter
/// go to `told` (`None`: a re-run after a shared-state conflict, which
/// tells nothing).
pub(super) fn apply(
    config: &Config,
    request: &RequestView<'_>,
    seen: &Seen<'_>,
    settings: &Settings,
    model: &str,
    decision: RequestDecision,
    told: Option<&mut Echoes>,
) -> RequestDecision {
    let RequestDecision::Forward {
        body,
        judge,
        verdict,
        retarget: _,
    } = decision
    else {
        return decision;
    };
    match rewrite(config, request, seen, settings, model, body.as_ref(), told) {
        Some((body, retarget)) => RequestDecision::Forward {
            body: Some(body),
            judge,
            verdict,
            retarget,
        },
        None => RequestDecision::Forward {
            body,
            judge,
            verdict,
            retarget: None,
        },
    }
}

/// The rewritten body and the retarget, or `None` to send `body` (the
/// decided one, else the received one) as it is.
fn rewrite(
    config: &Config,
    request: &RequestView<'_>,
    seen: &Seen<'_>,
    settings: &Settings,
    model: &str,
    body: Option<&Bytes>,
    mut told: Option<&mut Echoes>,
) -> Option<(Bytes, Option<Retarget>)> {
    let mut session = seen.session.lock().unwrap_or_else(PoisonError::into_inner);
    let state = &mut session.escalation;
    if state.original.is_none() && !seen.wants {
        return None;
    }
    let source = body.unwrap_or(request.decoded);
    let mut value = serde_json::from_slice::<serde_json::Value>(source).ok()?;
    let dialect = request.dialect;
    let signed = dialect.strip_foreign_signatures(&mut value, &|_| false).total;
    let target = request
        .route
        .escalation
        .as_ref()
        .and_then(|e| Retarget::of(e, &config.routes));
    let step = state.step(
        &Request {
            lane: seen.lane,
            model,
            wants: seen.wants,
            person_spoke: seen.person_spoke,
            signed,
        },
        target.as_ref().map(|t| t.model.as_str()),
        &settings.escalate,
    );
    let escalated = matches!(step, Step::Began | Step::Continued);
    let sent_to = match (&target, escalated) {
        (Some(t), true) => t.model.clone(),
        _ => model.to_owned(),
    };
    let stripped = dialect
        .strip_foreign_signatures(&mut value, &|i| state.foreign(i, &sent_to))
        .stripped;
    drop(session);
    if let (true, Some(told)) = (step != Step::Stay, told.as_deref_mut()) {
        let (session, sent_to, asked) = (seen.key.to_owned(), sent_to.clone(), model.to_owned());
        told.push(move || {
            tracing::info!(
                session,
                step = ?step,
                model = %sent_to,
                asked,
                signed_parts_stripped = stripped,
                "escalation"
            );
        });
    }
    if !escalated && stripped == 0 {
        return None;
    }
    if escalated {
        if let Some(told) = told {
            told.push(|| metrics::counter!("loopguard_escalated_requests_total").increment(1));
        }
        let _ = dialect.set_model(&mut value, request.path, &sent_to);
    }
    let bytes = serde_json::to_vec(&value).ok()?;
    Some((Bytes::from(bytes), target.filter(|_| escalated)))
}
