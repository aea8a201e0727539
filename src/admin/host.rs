//! The admin listener's `Host` check: a page on another site that resolves
//! its own name to loopback (DNS rebinding) must not read `/admin/*` from a
//! browser, so those answer only for `server.admin_allowed_hosts`. The
//! probes and `/metrics` answer any `Host` (kubelet and Prometheus use the
//! pod IP).

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;

use super::AdminState;

/// Paths served whatever the `Host`.
const OPEN_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Middleware: answers 421 Misdirected Request when the request's `Host`
/// (or HTTP/2 authority) is missing or not allowed, except on [`OPEN_PATHS`].
pub(super) async fn check(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    if OPEN_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(http::uri::Authority::as_str))
        .map(str::to_owned);
    let config = state.config.load();
    if allowed(host.as_deref(), &config.server.admin_allowed_hosts) {
        return next.run(request).await;
    }
    let shown = host.as_deref().unwrap_or("(none)");
    tracing::warn!(
        host = shown,
        path = request.uri().path(),
        "admin request refused: Host not allowed"
    );
    (
        StatusCode::MISDIRECTED_REQUEST,
        axum::Json(json!({
            "error": format!("Host {shown:?} is not allowed on the admin listener; add it to server.admin_allowed_hosts")
        })),
    )
        .into_response()
}

/// The host name of a `Host` value, without its port or IPv6 brackets, lowercase.
fn name(host: &str) -> String {
    let host = host.trim();
    let bare = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(name, _port)| name)
    };
    bare.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` (a `Host` header value) is in `allowed` (`*` allows any;
/// a missing `Host` only then).
fn allowed(host: Option<&str>, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*") {
        return true;
    }
    host.is_some_and(|h| {
        let name = name(h);
        allowed.contains(&name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Vec<String> {
        ["localhost", "127.0.0.1", "::1"].map(str::to_owned).into()
    }

    #[test]
    fn loopback_names_with_and_without_ports_are_allowed() {
        for host in [
            "localhost",
            "LOCALHOST:9090",
            "127.0.0.1:9090",
            "[::1]:9090",
            "[::1]",
            "localhost.",
        ] {
            assert!(allowed(Some(host), &defaults()), "{host}");
        }
    }

    #[test]
    fn foreign_and_missing_hosts_are_refused() {
        for host in [
            "evil.example",
            "evil.example:9090",
            "127.0.0.1.evil.example",
            "localhost.evil.example:80",
            "",
        ] {
            assert!(!allowed(Some(host), &defaults()), "{host}");
        }
        assert!(!allowed(None, &defaults()));
    }

    #[test]
    fn a_star_allows_any_host() {
        assert!(allowed(Some("10.1.2.3:9090"), &["*".to_owned()]));
        assert!(allowed(None, &["*".to_owned()]));
    }
}
