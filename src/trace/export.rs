//! The export side of traces: a bounded queue of finished spans, drained by
//! one background task that sends them in batches to the OTLP/HTTP
//! receiver (protobuf, through `opentelemetry-otlp` over the project's own
//! `reqwest` client and rustls stack).
//!
//! Why not the SDK's `BatchSpanProcessor`: it drives its exporter from a
//! thread of its own with a blocking executor, where the async `reqwest`
//! client has no runtime, and it counts the spans it drops only in a log
//! line at shutdown. Here a full queue drops the span at once and counts it
//! (`loopguard_trace_spans_dropped_total{reason="queue_full"}`), the request
//! never waits, and a failed export is logged (once per failing streak) and
//! counted (`loopguard_trace_spans_dropped_total{reason="export_failed"}`,
//! `loopguard_trace_exports_total{result}`).

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{mpsc, oneshot};

use crate::config::telemetry::TelemetryConfig;

/// Spans sent in one export call at most.
const MAX_BATCH: usize = 512;
/// How long a finished span waits at most before its batch goes out.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// What the queue carries.
enum Item {
    Span(Box<SpanData>),
    /// Export everything queued, then answer (shutdown).
    Flush(oneshot::Sender<()>),
}

/// The queue into the export task, once [`install`] ran with an endpoint.
static QUEUE: OnceLock<mpsc::Sender<Item>> = OnceLock::new();

/// Traces are on: [`install`] ran with an endpoint configured.
pub(super) fn enabled() -> bool {
    QUEUE.get().is_some()
}

/// Queues a finished span for export; a full queue drops it (counted),
/// never waits.
pub(super) fn submit(span: SpanData) {
    let Some(queue) = QUEUE.get() else { return };
    if queue.try_send(Item::Span(Box::new(span))).is_err() {
        metrics::counter!("loopguard_trace_spans_dropped_total", "reason" => "queue_full").increment(1);
    }
}

/// Why traces could not be switched on.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The HTTP client or the exporter could not be built.
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    /// [`install`] ran before in this process.
    #[error("traces are already installed")]
    Twice,
}

/// Switches traces on when `[telemetry] otlp_endpoint` is set: builds the
/// exporter and starts the export task on the current runtime. Without an
/// endpoint it does nothing, and every request's trace hook stays a branch.
///
/// # Errors
/// [`InstallError`] when the exporter cannot be built or traces were
/// installed already.
pub fn install(config: &TelemetryConfig) -> Result<(), InstallError> {
    let Some(url) = &config.traces_url else {
        return Ok(());
    };
    crate::http_client::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(config.export_timeout)
        .connect_timeout(config.export_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| InstallError::Exporter(e.to_string()))?;
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.as_str())
        .with_timeout(config.export_timeout)
        .with_http_client(client)
        .build()
        .map_err(|e| InstallError::Exporter(e.to_string()))?;
    exporter.set_resource(
        &Resource::builder_empty()
            .with_service_name(config.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build(),
    );
    let (tx, rx) = mpsc::channel(config.max_queue_spans);
    QUEUE.set(tx).map_err(|_| InstallError::Twice)?;
    describe();
    crate::task::spawn(run(exporter, rx));
    tracing::info!(endpoint = %url, "traces: exporting spans over OTLP/HTTP");
    Ok(())
}

/// At shutdown: exports every span queued so far, waiting at most `timeout`.
pub async fn flush(timeout: Duration) {
    let Some(queue) = QUEUE.get() else { return };
    let (tx, rx) = oneshot::channel();
    let flushed = async {
        if queue.send(Item::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    };
    if tokio::time::timeout(timeout, flushed).await.is_err() {
        tracing::warn!(
            timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            "traces: shutdown flush timed out; spans still queued are lost"
        );
    }
}

/// The export task: collects spans until a batch is full or
/// [`BATCH_DELAY`] passed since its first span, then exports it.
async fn run(exporter: opentelemetry_otlp::SpanExporter, mut rx: mpsc::Receiver<Item>) {
    let mut batch: Vec<SpanData> = Vec::new();
    let mut failing = false;
    // When the batch's first span came plus the delay.
    let mut due = tokio::time::Instant::now();
    loop {
        let item = if batch.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout_at(due, rx.recv()).await {
                Ok(item) => item,
                Err(_) => {
                    export(&exporter, &mut batch, &mut failing).await;
                    continue;
                }
            }
        };
        match item {
            Some(Item::Span(span)) => {
                if batch.is_empty() {
                    due = tokio::time::Instant::now() + BATCH_DELAY;
                }
                batch.push(*span);
                if batch.len() >= MAX_BATCH {
                    export(&exporter, &mut batch, &mut failing).await;
                }
            }
            Some(Item::Flush(done)) => {
                // Everything queued before the flush came before it.
                while let Ok(Item::Span(span)) = rx.try_recv() {
                    batch.push(*span);
                    if batch.len() >= MAX_BATCH {
                        export(&exporter, &mut batch, &mut failing).await;
                    }
                }
                export(&exporter, &mut batch, &mut failing).await;
                let _ = done.send(());
            }
            None => {
                export(&exporter, &mut batch, &mut failing).await;
                return;
            }
        }
    }
}

/// Exports one batch (emptied either way): a failure is counted, and logged
/// when it starts a failing streak (a collector that is down fails every
/// export; one line says so, another when exports succeed again).
async fn export(exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>, failing: &mut bool) {
    if batch.is_empty() {
        return;
    }
    let spans = batch.len() as u64;
    match exporter.export(std::mem::take(batch)).await {
        Ok(()) => {
            metrics::counter!("loopguard_trace_exports_total", "result" => "ok").increment(1);
            metrics::counter!("loopguard_trace_spans_exported_total").increment(spans);
            if std::mem::take(failing) {
                tracing::info!("traces: the OTLP receiver accepts spans again");
            }
        }
        Err(e) => {
            metrics::counter!("loopguard_trace_exports_total", "result" => "error").increment(1);
            metrics::counter!("loopguard_trace_spans_dropped_total", "reason" => "export_failed")
                .increment(spans);
            if !std::mem::replace(failing, true) {
                tracing::warn!(error = %e, spans, "traces: export failed; spans dropped (logged once until an export succeeds)");
            }
        }
    }
}

fn describe() {
    metrics::describe_counter!(
        "loopguard_trace_spans_dropped_total",
        "Spans not exported, by reason: queue_full (the export queue was full when the request ended), export_failed (the OTLP receiver did not take them)."
    );
    metrics::describe_counter!(
        "loopguard_trace_spans_exported_total",
        "Spans the OTLP receiver accepted."
    );
    metrics::describe_counter!(
        "loopguard_trace_exports_total",
        "OTLP export calls, by result (ok, error)."
    );
    for reason in ["queue_full", "export_failed"] {
        metrics::counter!("loopguard_trace_spans_dropped_total", "reason" => reason).increment(0);
    }
    metrics::counter!("loopguard_trace_spans_exported_total").increment(0);
}
