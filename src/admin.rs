//! The admin listener (DESIGN §9): health, readiness, Prometheus metrics and
//! the session API. It is separate from the proxy listener and defaults to
//! loopback. In a sidecar the agent shares that loopback, so the mutating
//! endpoints need `admin_token` (bearer) and are refused when none is
//! configured; the read-only ones are open. Session keys are hashes; no
//! credential or body text is ever shown (tool-call arguments are shown
//! truncated and redacted). Everything but the probes and `/metrics`
//! answers only for an allowed `Host` (`host`).

mod host;
pub mod ui;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::UNIX_EPOCH;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};

use crate::reload::{Reloader, SharedConfig};
use crate::session::{Session, Store};

/// What the admin endpoints read.
#[derive(Clone)]
pub struct AdminState {
    /// Renders `/metrics`; `None` when no recorder is installed.
    pub metrics: Option<PrometheusHandle>,
    /// Set once the config is loaded and the proxy listener is bound.
    pub ready: Arc<AtomicBool>,
    /// The session store.
    pub store: Arc<Store>,
    /// The shared store (`[state] backend = "redis"`): the session list and
    /// `DELETE` cover every replica.
    pub shared: Option<Arc<crate::state::Shared>>,
    /// The configuration in force (the admin token is read from it).
    pub config: SharedConfig,
    /// Re-reads the config file.
    pub reloader: Reloader,
}

/// The admin router.
pub fn app(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/admin/sessions", get(sessions))
        .route("/admin/sessions/{key}", get(session).delete(forget))
        .route("/admin/reload", post(reload))
        .route("/admin/experiment", get(experiment))
        .merge(ui::routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), host::check))
        .with_state(state)
}

/// `GET /admin/experiment`: the holdout share in force and how loop
/// stretches ended, per arm and detector (see [`crate::escalate::outcome`]).
async fn experiment(State(state): State<AdminState>) -> Response {
    let holdout = state.config.load().loop_detection.defaults.experiment.holdout;
    axum::Json(json!({
        "holdout": holdout,
        "outcomes": state.store.outcomes().rows(),
    }))
    .into_response()
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let Some(handle) = &state.metrics else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n",
        )
            .into_response();
    };
    #[expect(clippy::cast_precision_loss, reason = "a session count fits a gauge")]
    metrics::gauge!("loopguard_sessions").set(state.store.len() as f64);
    (
        StatusCode::OK,
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

fn summary(s: &Session) -> Value {
    let last_verdict = s
        .lanes
        .iter()
        .filter_map(|l| l.recent.back().map(|v| (l.last_seen, v)))
        .max_by_key(|(seen, _)| *seen)
        .map(|(_, v)| json!({"detector": v.detector.name(), "level": v.level.name(), "action": v.action.name(), "count": v.count}));
    json!({
        "key": s.key,
        "agent": s.agent,
        "last_seen_unix": s.last_seen.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "lanes": s.lanes.len(),
        "tool_cycles": s.cycles(),
        "last_verdict": last_verdict,
    })
}

/// Most sessions the list reads from the shared store.
const SHARED_LIST_LIMIT: usize = 1_000;

async fn sessions(State(state): State<AdminState>) -> Response {
    let mut list: Vec<Value> = state
        .store
        .all()
        .iter()
        .map(|s| summary(&s.lock().unwrap_or_else(PoisonError::into_inner)))
        .collect();
    if let Some(shared) = &state.shared {
        // Every replica's sessions, as stored; this replica's copies are a
        // cache of them (shown alone only while the store is unreachable,
        // and then said so).
        match shared.list(SHARED_LIST_LIMIT).await {
            Some(stored) => list = stored.iter().map(summary).collect(),
            None => {
                return axum::Json(json!({
                    "sessions": list,
                    "warning": "the shared state store did not answer: these are this replica's sessions only",
                }))
                .into_response();
            }
        }
    }
    axum::Json(json!({"sessions": list})).into_response()
}

async fn session(State(state): State<AdminState>, Path(key): Path<String>) -> Response {
    rendered(&state, &key, detail).await
}

/// The answer showing session `key` as `render` renders it (a JSON
/// object). With a shared store, as stored: every replica's latest write,
/// also of a session this replica never served (404 when it is not stored
/// or was deleted). While the store does not answer, this replica's copy,
/// with a `warning` saying so (it may lack other replicas' latest
/// requests), or 503 when this replica holds none (the session may exist
/// on the others). Without a shared store, this replica's copy or 404.
pub(crate) async fn rendered(
    state: &AdminState,
    key: &str,
    render: impl Fn(&crate::session::Session) -> Value,
) -> Response {
    let local = || {
        state
            .store
            .get(key)
            .map(|s| render(&s.lock().unwrap_or_else(PoisonError::into_inner)))
    };
    let Some(shared) = &state.shared else {
        return local().map_or_else(no_such_session, |out| axum::Json(out).into_response());
    };
    match shared.get(key).await {
        Some(Some(session)) => axum::Json(render(&session)).into_response(),
        Some(None) => no_such_session(),
        None => match local() {
            Some(mut out) => {
                out["warning"] = json!(
                    "the shared state store did not answer: this is this replica's copy, which may lack the other replicas' latest requests"
                );
                axum::Json(out).into_response()
            }
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({
                    "error": "the shared state store did not answer and this replica holds no copy of the session; try again"
                })),
            )
                .into_response(),
        },
    }
}

/// The answer for a session that is not there.
pub(crate) fn no_such_session() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": "no such session"})),
    )
        .into_response()
}

/// A session's summary and, per lane, its counts and recent verdicts.
fn detail(s: &crate::session::Session) -> Value {
    let mut out = summary(s);
    out["lanes_detail"] = s
        .lanes
        .iter()
        .map(|l| {
            json!({
                "lane": format!("{:016x}", l.id),
                "compactions": l.state.compactions(),
                "tool_cycles": l.state.cycles(),
                "recent_verdicts": l.recent.iter().map(|v| json!({
                    "detector": v.detector.name(), "level": v.level.name(), "action": v.action.name(),
                    "count": v.count, "tool": v.tool, "arguments": v.arguments,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    out
}

/// Checks the bearer token of a mutating request: the refusal, if any.
fn refusal(state: &AdminState, headers: &HeaderMap) -> Option<Response> {
    let config = state.config.load();
    let Some(expected) = &config.server.admin_token else {
        return Some(
            (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"error": "mutating admin endpoints are disabled: set server.admin_token"})),
            )
                .into_response(),
        );
    };
    let given = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), expected.as_bytes())) {
        None
    } else {
        Some(
            (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "missing or wrong bearer token"})),
            )
                .into_response(),
        )
    }
}

/// The credential of a `Bearer` authorization value (the scheme is
/// case-insensitive, RFC 9110 §11.1).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn forget(State(state): State<AdminState>, headers: HeaderMap, Path(key): Path<String>) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    // A copy that Redis never held (version 0: judged while Redis did not
    // answer, or past the stored-state cap) exists on this replica only.
    let local_only = state
        .store
        .get(&key)
        .is_some_and(|s| s.lock().unwrap_or_else(PoisonError::into_inner).version == 0);
    let removed = state.store.remove(&key);
    let removed_shared = match &state.shared {
        Some(shared) => match shared.delete(&key).await {
            Some(deleted) => deleted,
            // The other replicas still hold it (and this one reads it back
            // on the session's next request): not deleted, and said so.
            None => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({
                        "error": "the shared state store did not take the delete (see the log's state store error); the session is kept for the other replicas, try again"
                    })),
                )
                    .into_response();
            }
        },
        None => false,
    };
    // With a shared store, Redis says whether there was a session (a copy
    // left on this replica of a session deleted through another is stale),
    // unless this replica's copy never was in Redis.
    let existed = if state.shared.is_some() {
        removed_shared || (removed && local_only)
    } else {
        removed
    };
    if existed {
        StatusCode::NO_CONTENT.into_response()
    } else {
        no_such_session()
    }
}

async fn reload(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    match state.reloader.reload() {
        Ok(notices) => axum::Json(json!({
            "status": "reloaded",
            "notices": notices.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }))
        .into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "status": "rejected: the running configuration is kept",
                "errors": e.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })),
        )
            .into_response(),
    }
}
