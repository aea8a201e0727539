//! Errors at the proxy boundary, each turned into a response in one place, in
//! the error shape of the route's provider, so the agent shows a clear message.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::json;

use crate::config::Provider;

/// Why loopguard answered with an error instead of the upstream's answer.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No route's prefix matches the path.
    #[error("loopguard: no route for path {path}; configured prefixes: {prefixes}")]
    NoRoute {
        /// The request path.
        path: String,
        /// The configured prefixes, comma-separated.
        prefixes: String,
    },
    /// The request belongs to another provider than its route's.
    #[error(
        "loopguard: this request belongs to the {wanted} API but arrived on the {route} route ({prefix}); point the client's base URL at loopguard's {wanted} route{hint}"
    )]
    Misrouted {
        /// Provider the request belongs to.
        wanted: &'static str,
        /// Provider of the route it arrived on.
        route: &'static str,
        /// Prefix of the route it arrived on.
        prefix: String,
        /// Where to point it, e.g. ` (prefix /anthropic)`, or empty.
        hint: String,
    },
    /// The path has `.` or `..` segments (also percent-encoded), a
    /// backslash or an encoded slash, which could escape a route or reach
    /// the upstream as another path than the one judged (see [`super::path`]).
    #[error("loopguard: the path {path} has {what}; send a normalised path")]
    UnsafePath {
        /// The request path.
        path: String,
        /// What is wrong with it.
        what: &'static str,
    },
    /// The request body exceeded `server.max_request_bytes`.
    #[error("loopguard: request body exceeds server.max_request_bytes ({limit} bytes)")]
    BodyTooLarge {
        /// The configured limit.
        limit: usize,
    },
    /// The request bodies held at once would pass
    /// `server.max_request_bytes_in_flight`: answered with `Retry-After`.
    #[error(
        "loopguard: too many request bodies are being received at once (server.max_request_bytes_in_flight, {limit} bytes); retry shortly"
    )]
    BodiesInFlight {
        /// The configured limit.
        limit: usize,
    },
    /// The client did not send its whole body within `client_body_timeout_secs`.
    #[error("loopguard: the request body did not arrive within {secs} s (server.client_body_timeout_secs)")]
    BodyTimeout {
        /// The timeout.
        secs: u64,
    },
    /// The request body could not be read from the client.
    #[error("loopguard: could not read the request body: {0}")]
    BodyRead(String),
    /// The upstream could not be reached (DNS, connect, TLS).
    #[error("loopguard: upstream {upstream} unreachable: {detail}")]
    UpstreamUnreachable {
        /// Upstream origin.
        upstream: String,
        /// What failed.
        detail: String,
    },
    /// The upstream sent no response headers within `first_byte_timeout_secs`.
    #[error(
        "loopguard: upstream {upstream} sent no response within {secs} s (server.first_byte_timeout_secs)"
    )]
    UpstreamTimeout {
        /// Upstream origin.
        upstream: String,
        /// The timeout.
        secs: u64,
    },
}

impl ProxyError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoRoute { .. } => StatusCode::NOT_FOUND,
            Self::Misrouted { .. } | Self::UnsafePath { .. } => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodiesInFlight { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::BodyRead(_) => StatusCode::BAD_REQUEST,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::UpstreamUnreachable { .. } => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// A short machine-readable code (`loopguard_no_route`, …).
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoRoute { .. } => "loopguard_no_route",
            Self::Misrouted { .. } => "loopguard_misrouted",
            Self::UnsafePath { .. } => "loopguard_unsafe_path",
            Self::BodyTooLarge { .. } => "loopguard_body_too_large",
            Self::BodiesInFlight { .. } => "loopguard_request_bytes_in_flight",
            Self::BodyRead(_) => "loopguard_body_read",
            Self::BodyTimeout { .. } => "loopguard_body_timeout",
            Self::UpstreamUnreachable { .. } => "loopguard_upstream_unreachable",
            Self::UpstreamTimeout { .. } => "loopguard_upstream_timeout",
        }
    }

    /// The error as a response in `provider`'s error shape (OpenAI's when
    /// there is no route).
    pub fn into_response_for(self, provider: Option<Provider>) -> Response {
        let mut response = error_response(self.status(), provider, self.code(), &self.to_string());
        if let Self::BodiesInFlight { .. } = self {
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
            // The rest of the body is not read: the connection cannot carry
            // another request.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The `Retry-After` of [`ProxyError::BodiesInFlight`], seconds: an upload
/// in flight takes about this long to finish or time out in the common case.
const RETRY_AFTER_SECS: &str = "1";

/// Builds an error response in a provider's JSON error shape.
///
/// - OpenAI: `{"error":{"message","type","code","param":null}}`
/// - Gemini: `{"error":{"code":<int>,"message","status"}}`
/// - Anthropic: `{"type":"error","error":{"type","message"}}`
/// - Ollama: `{"error":"…"}`
/// - Bedrock: `{"message":"…"}`
pub fn error_response(status: StatusCode, provider: Option<Provider>, code: &str, message: &str) -> Response {
    let body = match provider.unwrap_or(Provider::Openai) {
        Provider::Openai => json!({
            "error": {
                "message": message,
                "type": openai_type(status),
                "code": code,
                "param": null,
            }
        }),
        Provider::Gemini => json!({
            "error": {
                "code": status.as_u16(),
                "message": message,
                "status": google_status(status),
            }
        }),
        Provider::Ollama => json!({"error": format!("{code}: {message}")}),
        Provider::Bedrock => json!({"message": format!("{code}: {message}")}),
        Provider::Anthropic => json!({
            "type": "error",
            "error": {
                "type": anthropic_type(status),
                "message": message,
            }
        }),
    };
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 404 | 413 => "invalid_request_error",
        _ => "api_error",
    }
}

fn google_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 => "INVALID_ARGUMENT",
        404 => "NOT_FOUND",
        504 => "DEADLINE_EXCEEDED",
        502 | 503 => "UNAVAILABLE",
        _ => "INTERNAL",
    }
}

fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request_error",
        404 => "not_found_error",
        413 => "request_too_large",
        503 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}
