//! The live page on the admin listener (`GET /ui`): sessions, a session's
//! timeline of tool calls and verdicts, and verdicts per detector over the
//! last hour, polled from the admin JSON API. Read-only; its routes join the
//! admin router, so the admin listener's address and checks apply to them.
//!
//! - [`timeline`]: `GET /admin/sessions/{key}/timeline`.
//! - [`activity`]: the per-minute verdict tally behind `GET /admin/verdicts/recent`.
//!
//! The assets are embedded in the binary (`assets/`): the page, its script
//! and style, and one vendored chart library, uPlot 1.6.32 (MIT,
//! <https://github.com/leeoniya/uPlot>, `dist/uPlot.iife.min.js` from the npm
//! package `uplot@1.6.32`; its `dist/uPlot.min.css` is appended to `style.css`).

pub mod activity;
pub mod timeline;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::header;

use crate::admin::AdminState;

const INDEX: &str = include_str!("assets/index.html");
const APP: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");
const UPLOT: &str = include_str!("assets/uplot-1.6.32.iife.min.js");

/// The page's routes and the two admin JSON endpoints it reads besides
/// `/admin/sessions`.
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/ui", get(|| asset("text/html; charset=utf-8", INDEX)))
        .route("/ui/app.js", get(|| asset("text/javascript; charset=utf-8", APP)))
        .route("/ui/style.css", get(|| asset("text/css; charset=utf-8", STYLE)))
        .route(
            "/ui/uplot.js",
            get(|| asset("text/javascript; charset=utf-8", UPLOT)),
        )
        .route("/admin/sessions/{key}/timeline", get(session_timeline))
        .route("/admin/verdicts/recent", get(recent_verdicts))
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn session_timeline(State(state): State<AdminState>, Path(key): Path<String>) -> Response {
    let now = state.store.now();
    crate::admin::rendered(&state, &key, |s| timeline::timeline(s, now)).await
}

/// `GET /admin/verdicts/recent`: `{"minutes": [unix seconds × 60],
/// "detectors": {"name": [count × 60]}, "total": n}`.
async fn recent_verdicts() -> Response {
    axum::Json(activity::series()).into_response()
}
