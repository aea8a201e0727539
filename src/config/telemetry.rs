//! `[telemetry]`: opt-in OpenTelemetry traces (see [`crate::trace`]), raw
//! and validated. Every key, with its default:
//!
//! ```toml
//! [telemetry]
//! # otlp_endpoint = "http://127.0.0.1:4318"  # none: no traces (the default)
//! service_name = "loopguard"                 # the spans' `service.name`
//! max_queue_spans = 2048                     # finished spans waiting for export; more are dropped
//! export_timeout_ms = 10000                  # one export call, connect included
//! ```

use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::Problems;

/// Raw `[telemetry]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// Base URL of an OTLP/HTTP receiver (`http://host:4318`); none: off.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans' resource.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Most finished spans waiting for export.
    #[serde(default = "default_max_queue_spans")]
    pub max_queue_spans: u64,
    /// Longest time one export call may take, in milliseconds.
    #[serde(default = "default_export_timeout_ms")]
    pub export_timeout_ms: u64,
}

impl Default for RawTelemetry {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: default_service_name(),
            max_queue_spans: default_max_queue_spans(),
            export_timeout_ms: default_export_timeout_ms(),
        }
    }
}

fn default_service_name() -> String {
    "loopguard".to_owned()
}
fn default_max_queue_spans() -> u64 {
    2048
}
fn default_export_timeout_ms() -> u64 {
    10_000
}

/// Largest `telemetry.max_queue_spans`: past it, a typo (a span weighs a
/// few KiB).
const MAX_QUEUE_SPANS: u64 = 1 << 20;

/// Validated `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Where spans are sent: the receiver's `/v1/traces` URL (the
    /// configured base with `/v1/traces` appended); `None`: traces off.
    pub traces_url: Option<Url>,
    /// `service.name`.
    pub service_name: String,
    /// Most finished spans waiting for export.
    pub max_queue_spans: usize,
    /// Longest time one export call may take.
    pub export_timeout: Duration,
}

/// The `/v1/traces` URL of an OTLP/HTTP base URL, as the OpenTelemetry
/// SDKs derive it from `OTEL_EXPORTER_OTLP_ENDPOINT`: `http://c:4318` and
/// `http://c:4318/` → `http://c:4318/v1/traces`, `http://c/otlp` →
/// `http://c/otlp/v1/traces`.
///
/// # Errors
/// A message naming the value when it is not an `http://` or `https://`
/// URL with a host, or carries a query or fragment.
pub fn traces_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("{text:?} is not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!(
            "{text:?} is not an http:// or https:// URL with a host (OTLP over HTTP, e.g. \"http://127.0.0.1:4318\")"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{text:?}: the base URL takes no query or fragment"));
    }
    let mut out = url.clone();
    let path = url.path().trim_end_matches('/');
    out.set_path(&format!("{path}/v1/traces"));
    Ok(out)
}

/// Validates `[telemetry]`.
pub fn validate(raw: &RawTelemetry, problems: &mut Problems) -> TelemetryConfig {
    let traces_url = raw
        .otlp_endpoint
        .as_deref()
        .and_then(|text| match traces_url(text) {
            Ok(url) => Some(url),
            Err(e) => {
                problems.push("telemetry.otlp_endpoint", e);
                None
            }
        });
    if raw.service_name.trim().is_empty() {
        problems.push("telemetry.service_name", "must not be empty");
    }
    if raw.max_queue_spans == 0 || raw.max_queue_spans > MAX_QUEUE_SPANS {
        problems.push(
            "telemetry.max_queue_spans",
            format!(
                "must be between 1 and {MAX_QUEUE_SPANS}, got {}",
                raw.max_queue_spans
            ),
        );
    }
    if raw.export_timeout_ms == 0 {
        problems.push("telemetry.export_timeout_ms", "must be greater than 0, got 0");
    }
    TelemetryConfig {
        traces_url,
        service_name: raw.service_name.clone(),
        max_queue_spans: usize::try_from(raw.max_queue_spans.clamp(1, MAX_QUEUE_SPANS)).unwrap_or(1),
        export_timeout: Duration::from_millis(raw.export_timeout_ms.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_to_the_base_url() {
        let url = |t: &str| traces_url(t).map(|u| u.to_string());
        assert_eq!(url("http://c:4318"), Ok("http://c:4318/v1/traces".to_owned()));
        assert_eq!(url("http://c:4318/"), Ok("http://c:4318/v1/traces".to_owned()));
        assert_eq!(url("https://c/otlp/"), Ok("https://c/otlp/v1/traces".to_owned()));
    }

    #[test]
    fn a_bad_endpoint_is_an_error_naming_it() {
        for bad in [
            "localhost:4318",
            "grpc://c:4317",
            "htp:/x",
            "http://c:4318/?a=b",
            "",
        ] {
            let mut problems = Problems::default();
            let raw = RawTelemetry {
                otlp_endpoint: Some(bad.to_owned()),
                ..RawTelemetry::default()
            };
            let config = validate(&raw, &mut problems);
            assert_eq!(config.traces_url, None, "{bad}");
            assert_eq!(problems.errors.len(), 1, "{bad}");
            assert_eq!(problems.errors[0].path, "telemetry.otlp_endpoint");
            assert!(problems.errors[0].message.contains(&format!("{bad:?}")), "{bad}");
        }
    }

    #[test]
    fn no_endpoint_is_off_and_valid() {
        let mut problems = Problems::default();
        let config = validate(&RawTelemetry::default(), &mut problems);
        assert!(problems.errors.is_empty());
        assert_eq!(config.traces_url, None);
        assert_eq!(config.max_queue_spans, 2048);
    }
}
