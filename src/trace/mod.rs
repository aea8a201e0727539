//! OpenTelemetry traces (opt-in, `[telemetry] otlp_endpoint`): one CLIENT
//! span per proxied request, after the GenAI semantic conventions, with the
//! answer's tool calls and every verdict as span events.
//!
//! A request's [`Trace`] is begun once it is routed ([`begin`], `None`
//! while traces are off: the proxy's only cost then is that branch), is
//! told its session and verdicts as they happen ([`Trace::session`],
//! [`Trace::verdict`]), and is finished exactly once when the request's log
//! line is written ([`Trace::finish`], with an [`End`]). The finished span
//! goes to a bounded export queue ([`export`]); the request never waits for
//! it. README "Traces" lists every attribute and event as emitted.

pub mod export;
pub mod genai;

use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

pub use export::{flush, install};

use crate::detect::Verdict;
use crate::dialect::Dialect;

/// One request's span while it is open.
#[derive(Debug)]
pub struct Trace {
    open: Mutex<Option<Open>>,
}

#[derive(Debug)]
struct Open {
    start: SystemTime,
    /// The request's method: the span's name where no GenAI operation applies.
    method: String,
    parent: Option<SpanContext>,
    operation: Option<&'static str>,
    request_model: Option<String>,
    attributes: Vec<KeyValue>,
    events: Vec<opentelemetry::trace::Event>,
}

/// What is known of a request once it is routed.
#[derive(Debug, Clone, Copy)]
pub struct Begin<'a> {
    /// When the request arrived.
    pub started: Instant,
    /// The request's method.
    pub method: &'a http::Method,
    /// Its headers (a W3C `traceparent` makes the span its child).
    pub headers: &'a http::HeaderMap,
    /// The route's prefix.
    pub route: &'a str,
    /// The route's provider.
    pub provider: crate::config::Provider,
    /// The dialect, `None` for paths proxied without detection.
    pub dialect: Option<Dialect>,
    /// The upstream URL the request goes to (its host and port are
    /// `server.address` / `server.port`; path and query are not recorded).
    pub upstream: &'a url::Url,
    /// The model asked for (the body's `model`, or Gemini's path segment).
    pub model: Option<&'a str>,
}

/// How a request ended, for its span.
#[derive(Debug, Clone, Copy, Default)]
pub struct End<'a> {
    /// The HTTP status the client got (0 when none was sent).
    pub status: u16,
    /// The request log's `outcome` (`complete`, `blocked`, `aborted`,
    /// `upstream_broke_off`, `answered_by_loopguard`, …).
    pub outcome: &'a str,
    /// The `x-loopguard-verdict` of the verdict that changed the answer.
    pub verdict: Option<&'a str>,
    /// The model the answer names.
    pub response_model: Option<&'a str>,
    /// Input and output tokens the answer reports.
    pub tokens: (Option<u64>, Option<u64>),
    /// The answer's finish reasons, in order.
    pub finish_reasons: &'a [String],
    /// The answer's complete tool calls: name, call id, when seen.
    pub tool_calls: &'a [Call],
}

/// One tool call of the answer, for its span event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The tool's name.
    pub name: String,
    /// The call's id, when the dialect has one.
    pub id: Option<String>,
    /// When the call was complete in the stream.
    pub at: SystemTime,
}

/// Begins a routed request's span, or `None` while traces are off.
pub fn begin(request: &Begin<'_>) -> Option<std::sync::Arc<Trace>> {
    export::enabled().then(|| std::sync::Arc::new(opened(request)))
}

/// A request's span, opened.
fn opened(request: &Begin<'_>) -> Trace {
    let start = SystemTime::now()
        .checked_sub(request.started.elapsed())
        .unwrap_or_else(SystemTime::now);
    let operation = request.dialect.map(genai::operation);
    let mut attributes = vec![
        KeyValue::new("http.request.method", request.method.as_str().to_owned()),
        KeyValue::new("loopguard.route", route_label(request.route)),
        KeyValue::new("loopguard.dialect", request.dialect.map_or("-", Dialect::name)),
    ];
    if let Some(host) = request.upstream.host_str() {
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    if let Some(port) = request.upstream.port_or_known_default() {
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
    if let Some(op) = operation {
        attributes.push(KeyValue::new("gen_ai.operation.name", op));
        attributes.push(KeyValue::new(
            "gen_ai.provider.name",
            genai::provider(request.provider, request.upstream.host_str()),
        ));
    }
    let request_model = request.model.filter(|m| !m.is_empty()).map(str::to_owned);
    if let (Some(model), Some(_)) = (&request_model, operation) {
        attributes.push(KeyValue::new("gen_ai.request.model", model.clone()));
    }
    Trace {
        open: Mutex::new(Some(Open {
            start,
            method: request.method.as_str().to_owned(),
            parent: parent(request.headers),
            operation,
            request_model,
            attributes,
            events: Vec::new(),
        })),
    }
}

/// The root route's prefix is `""`: shown as `/`.
fn route_label(prefix: &str) -> String {
    if prefix.is_empty() {
        "/".to_owned()
    } else {
        prefix.to_owned()
    }
}

/// The remote parent named by a W3C `traceparent` header
/// (`00-<trace id>-<span id>-<flags>`), if it is well formed.
fn parent(headers: &http::HeaderMap) -> Option<SpanContext> {
    let text = headers.get("traceparent")?.to_str().ok()?;
    let mut parts = text.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(SpanContext::new(
        trace,
        span,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

impl Trace {
    fn with(&self, f: impl FnOnce(&mut Open)) {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = open.as_mut() {
            f(open);
        }
    }

    /// The request's session key (loopguard's hash, never a credential):
    /// `gen_ai.conversation.id`.
    pub fn session(&self, key: &str) {
        self.with(|open| {
            open.attributes
                .push(KeyValue::new("gen_ai.conversation.id", key.to_owned()));
        });
    }

    /// A verdict given for this request (`at`: `request` or `stream`): a
    /// `loopguard.verdict` event.
    pub fn verdict(&self, verdict: &Verdict, at: &'static str) {
        let mut attributes = vec![
            KeyValue::new("loopguard.detector", verdict.detector.name()),
            KeyValue::new("loopguard.level", verdict.level.name()),
            KeyValue::new("loopguard.action", verdict.action.name()),
            KeyValue::new("loopguard.count", i64::from(verdict.count)),
            KeyValue::new("loopguard.at", at),
        ];
        if let Some(tool) = &verdict.tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
        }
        let event = opentelemetry::trace::Event::new("loopguard.verdict", SystemTime::now(), attributes, 0);
        self.with(|open| open.events.push(event));
    }

    /// Ends the span and queues it for export; only the first call counts
    /// (a request's log line may be reached on more than one path).
    pub fn finish(&self, end: &End<'_>) {
        if let Some(span) = self.finished(end) {
            export::submit(span);
        }
    }

    /// The finished span, the first time only.
    fn finished(&self, end: &End<'_>) -> Option<SpanData> {
        let open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        open.map(|open| span(open, end))
    }
}

/// A request whose span nobody finished (a client that went away while a
/// whole answer was read, which writes no log line): ended here, when its
/// last holder lets go, as `client_disconnected`.
impl Drop for Trace {
    fn drop(&mut self) {
        if let Some(span) = self.unfinished() {
            export::submit(span);
        }
    }
}

impl Trace {
    /// What dropping the trace exports: its span as `client_disconnected`
    /// when nobody finished it, else nothing.
    fn unfinished(&self) -> Option<SpanData> {
        self.finished(&End {
            outcome: "client_disconnected",
            ..End::default()
        })
    }
}

/// The finished span of a request.
fn span(open: Open, end: &End<'_>) -> SpanData {
    let Open {
        start,
        method,
        parent,
        operation,
        request_model,
        mut attributes,
        mut events,
    } = open;
    end_attributes(&mut attributes, end, operation.is_some());
    for call in end.tool_calls {
        let mut call_attributes = vec![KeyValue::new("gen_ai.tool.name", call.name.clone())];
        if let Some(id) = &call.id {
            call_attributes.push(KeyValue::new("gen_ai.tool.call.id", id.clone()));
        }
        events.push(opentelemetry::trace::Event::new(
            "gen_ai.tool.call",
            call.at,
            call_attributes,
            0,
        ));
    }
    events.sort_by_key(|e| e.timestamp);
    let error = error_type(end);
    let status = match error {
        Some(kind) => {
            attributes.push(KeyValue::new("error.type", kind.clone()));
            Status::error(kind)
        }
        None => Status::Unset,
    };
    let name = match (operation, &request_model) {
        (Some(op), Some(model)) => format!("{op} {model}"),
        (Some(op), None) => op.to_owned(),
        (None, _) => method,
    };
    let trace_id = parent.as_ref().map_or_else(random_trace_id, |p| p.trace_id());
    let mut span_events = SpanEvents::default();
    span_events.events = events;
    SpanData {
        span_context: SpanContext::new(
            trace_id,
            random_span_id(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: parent.as_ref().map_or(SpanId::INVALID, SpanContext::span_id),
        parent_span_is_remote: parent.is_some(),
        span_kind: SpanKind::Client,
        name: name.into(),
        start_time: start,
        end_time: SystemTime::now().max(start),
        attributes,
        dropped_attributes_count: 0,
        events: span_events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: opentelemetry::InstrumentationScope::builder("loopguard")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

/// The attributes a request's end adds to its span: the response status,
/// loopguard's outcome and verdict and, for a GenAI operation
/// (`gen_ai_operation`), the response model, token usage and finish reasons.
fn end_attributes(attributes: &mut Vec<KeyValue>, end: &End<'_>, gen_ai_operation: bool) {
    if end.status != 0 {
        attributes.push(KeyValue::new("http.response.status_code", i64::from(end.status)));
    }
    attributes.push(KeyValue::new("loopguard.outcome", end.outcome.to_owned()));
    if let Some(verdict) = end.verdict {
        attributes.push(KeyValue::new("loopguard.verdict", verdict.to_owned()));
    }
    if !gen_ai_operation {
        return;
    }
    if let Some(model) = end.response_model {
        attributes.push(KeyValue::new("gen_ai.response.model", model.to_owned()));
    }
    if let Some(n) = end.tokens.0 {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", saturating(n)));
    }
    if let Some(n) = end.tokens.1 {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", saturating(n)));
    }
    if !end.finish_reasons.is_empty() {
        let reasons: Vec<StringValue> = end.finish_reasons.iter().map(|r| r.clone().into()).collect();
        attributes.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(Array::String(reasons)),
        ));
    }
}

/// `error.type` of a request that failed: loopguard aborted it
/// (`loop_detected`), the upstream's body broke off, went silent or was
/// truncated (the outcome), or the status is an error (its code, as the
/// HTTP client conventions record it). `None` for a success, a block
/// included (it is a well-formed answer).
fn error_type(end: &End<'_>) -> Option<String> {
    match end.outcome {
        "aborted" | "aborted_in_stream" => return Some("loop_detected".to_owned()),
        "upstream_broke_off" | "upstream_idle_timeout" | "upstream_truncated" => {
            return Some(end.outcome.to_owned());
        }
        _ => {}
    }
    if end.verdict.is_some_and(|v| v.starts_with("abort")) {
        return Some("loop_detected".to_owned());
    }
    (end.status >= 400).then(|| end.status.to_string())
}

fn saturating(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn random_trace_id() -> TraceId {
    loop {
        let id = TraceId::from_bytes(rand::random::<u128>().to_be_bytes());
        if id != TraceId::INVALID {
            return id;
        }
    }
}

fn random_span_id() -> SpanId {
    loop {
        let id = SpanId::from_bytes(rand::random::<u64>().to_be_bytes());
        if id != SpanId::INVALID {
            return id;
        }
    }
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
