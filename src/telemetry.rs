//! Logging setup (tracing) and the counters every module shares.
//!
//! Logs go to stderr, `pretty` or `json`, filtered by `LOOPGUARD_LOG`
//! (`RUST_LOG` syntax, default `info`); pretty logs are coloured only on a
//! terminal and without `NO_COLOR`. Metrics use the `metrics` facade;
//! [`install_metrics`] installs the Prometheus recorder served by the admin
//! listener.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber; `default` is the filter used when
/// `LOOPGUARD_LOG` is not set (e.g. `info`). Safe to call once per process.
/// A `LOOPGUARD_LOG` that does not parse is reported on stderr (and logs
/// then use `default`), not dropped without a word.
pub fn init_logging(format: LogFormat, default: &str) {
    let filter = match std::env::var("LOOPGUARD_LOG") {
        Ok(text) => EnvFilter::try_new(&text).unwrap_or_else(|e| {
            eprintln!(
                "loopguard: LOOPGUARD_LOG={text:?} is not a log filter ({e}); logging at {default:?} instead"
            );
            EnvFilter::new(default)
        }),
        Err(_) => EnvFilter::new(default),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Err(e) = result {
        eprintln!("loopguard: logging already initialised: {e}");
    }
}

/// Whether pretty logs use ANSI colours: only on a terminal, and never when
/// `NO_COLOR` is set to anything but the empty string (<https://no-color.org>).
pub fn colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// Installs the Prometheus recorder and returns the handle that renders it.
///
/// # Errors
/// When a recorder is already installed.
pub fn install_metrics() -> Result<PrometheusHandle, String> {
    let overhead_buckets = [
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    ];
    let upstream_buckets = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("loopguard_overhead_seconds".to_owned()),
            &overhead_buckets,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("loopguard_upstream_duration_seconds".to_owned()),
                &upstream_buckets,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("loopguard_state_call_seconds".to_owned()),
                &overhead_buckets,
            )
        })
        .map_err(|e| format!("cannot configure histogram buckets: {e}"))?
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    describe();
    Ok(handle)
}

fn describe() {
    metrics::describe_counter!(
        "loopguard_requests_total",
        "Requests proxied, by route, dialect and upstream status."
    );
    metrics::describe_counter!(
        "loopguard_fail_open_total",
        "Times loopguard could not parse or judge traffic and passed it through unchanged, by reason."
    );
    metrics::describe_histogram!(
        "loopguard_overhead_seconds",
        "Time loopguard itself adds per request: parsing, detection and actions, excluding upstream time."
    );
    metrics::describe_counter!(
        "loopguard_verdicts_total",
        "Verdicts, by detector, level, action and where they were given (at=\"request\" when a request arrives, at=\"stream\" while a response streams: a finding can be reported at both)."
    );
    metrics::describe_counter!(
        "loopguard_upstream_requests_avoided_total",
        "Requests answered by loopguard (block or abort) without calling the upstream."
    );
    metrics::describe_counter!(
        "loopguard_generation_cut_total",
        "Streams loopguard cut (a chanting block or an abort): the upstream request was dropped."
    );
    metrics::describe_gauge!("loopguard_sessions", "Sessions kept in the store.");
    metrics::describe_counter!(
        "loopguard_parse_resumed_total",
        "Request bodies split after the bytes of the kept history they repeat (the rest were scanned whole)."
    );
    metrics::describe_counter!(
        "loopguard_parse_cache_rejected_total",
        "Parsed histories not kept: the parse cache was full of conversations seen more often lately."
    );
    // Counters a dashboard alerts on exist from the start, at 0.
    metrics::counter!("loopguard_upstream_requests_avoided_total").increment(0);
    metrics::counter!("loopguard_generation_cut_total").increment(0);
    metrics::describe_histogram!(
        "loopguard_state_call_seconds",
        "Wall time of a shared-state store call that answered (Redis backend), by op: from sending it to its answer, waits for the connection included."
    );
    metrics::describe_histogram!(
        "loopguard_upstream_duration_seconds",
        "Time from sending the request upstream to the upstream's response headers."
    );
}

/// Counts (and logs) a fail-open: traffic passed through unjudged.
///
/// `reason` is a short label (`request_not_json`, `response_too_large`, …).
pub fn fail_open(reason: &'static str) {
    tracing::warn!(reason, "fail open: passing traffic through without detection");
    metrics::counter!("loopguard_fail_open_total", "reason" => reason).increment(1);
}
