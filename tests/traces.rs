//! OpenTelemetry traces end to end: the built binary exports its spans over
//! OTLP/HTTP (protobuf) to a receiver started by the test, which decodes
//! them with the OpenTelemetry protocol's own message types. A blocked loop
//! shows up as one span per request with the GenAI attributes and its
//! verdicts as events; without an endpoint nothing is exported; a collector
//! that is down or hangs costs requests nothing.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use common::{client, config_for, loopguard, loopguard_with_env, metric_value, metrics, mock};

const CHAT: &str = "/v1/chat/completions";
const READ_LOOP: &str =
    r#"{"turns":[{"tool_calls":[{"name":"read_file","arguments":{"path":"src/main.rs"}}]}]}"#;

/// What the receiver got: each span with its resource's `service.name`,
/// and the content types of the export requests.
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    content_types: Vec<String>,
    headers: Vec<http::HeaderMap>,
}

/// A minimal OTLP/HTTP trace receiver on an ephemeral loopback port.
struct Receiver {
    url: String,
    got: Arc<Mutex<Received>>,
}

impl Receiver {
    async fn start() -> Self {
        let got = Arc::new(Mutex::new(Received::default()));
        let state = Arc::clone(&got);
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: http::HeaderMap, body: Bytes| {
                let state = Arc::clone(&state);
                async move {
                    let request = ExportTraceServiceRequest::decode(body)
                        .unwrap_or_else(|e| panic!("not OTLP protobuf: {e}"));
                    let mut got = state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let content_type = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    got.content_types.push(content_type.to_owned());
                    got.headers.push(headers.clone());
                    for resource_spans in request.resource_spans {
                        let service = resource_spans
                            .resource
                            .as_ref()
                            .and_then(|r| text_of(&r.attributes, "service.name"))
                            .unwrap_or_default();
                        for scope in resource_spans.scope_spans {
                            for span in scope.spans {
                                got.spans.push((service.clone(), span));
                            }
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        loopguard::task::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}"),
            got,
        }
    }

    fn spans(&self) -> Vec<Span> {
        let got = self.got.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        got.spans.iter().map(|(_, s)| s.clone()).collect()
    }

    /// Waits (up to 10 s) until `n` spans arrived.
    async fn wait_spans(&self, n: usize) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans = self.spans();
            if spans.len() >= n || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn value_of<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    match value_of(attributes, key) {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

fn int_of(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match value_of(attributes, key) {
        Some(any_value::Value::IntValue(n)) => Some(*n),
        _ => None,
    }
}

fn with_telemetry(upstream: &str, telemetry: &str) -> String {
    format!("{}\n[telemetry]\n{telemetry}\n", config_for(upstream, ""))
}

/// An OpenAI chat request whose history holds `cycles` identical
/// `read_file` calls with the same result.
fn history(cycles: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "fix the parser"})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/main.rs\"}"}}
        ]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "fn main() {}"}));
    }
    json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true}, "messages": messages, "tools": [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]})
}

async fn send(lg: &common::Proc, body: &Value) -> (u16, String) {
    let response = client()
        .post(format!("{}{CHAT}", lg.url()))
        .header("content-type", "application/json")
        .header("x-mock-script", READ_LOOP)
        .header("x-loopguard-session", "traced-loop")
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// The `loopguard.verdict` events of a span as (detector, level, action, count, at).
fn verdicts(span: &Span) -> Vec<(String, String, String, i64, String)> {
    span.events
        .iter()
        .filter(|e| e.name == "loopguard.verdict")
        .map(|e| {
            let t = |k| text_of(&e.attributes, k).unwrap_or_default();
            (
                t("loopguard.detector"),
                t("loopguard.level"),
                t("loopguard.action"),
                int_of(&e.attributes, "loopguard.count").unwrap_or(-1),
                t("loopguard.at"),
            )
        })
        .collect()
}

const SPAN_KIND_CLIENT: i32 = 3;
const STATUS_CODE_ERROR: i32 = 2;

/// The trace of a loop loopguard blocks: five requests of one session, one
/// span each, named `chat gpt-test`, kind CLIENT, with the GenAI attributes,
/// the model's tool call as an event (name and id, never its arguments),
/// the warnings as they came and the block at the model's 5th identical call.
#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_loop_is_traced_with_its_verdicts() {
    let receiver = Receiver::start().await;
    let mock = mock();
    let lg = loopguard(&with_telemetry(
        &mock.url(),
        &format!(
            "otlp_endpoint = \"{}\"\nservice_name = \"lg-under-test\"",
            receiver.url
        ),
    ));
    for n in 0..5 {
        let (status, body) = send(&lg, &history(n)).await;
        assert_eq!(status, 200);
        assert_eq!(body.contains("[loopguard]"), n == 4, "request {n}: {body}");
    }
    let spans = receiver.wait_spans(5).await;
    assert_eq!(spans.len(), 5, "one span per request");
    let mut spans = spans;
    spans.sort_by_key(|s| s.start_time_unix_nano);
    let upstream_port = i64::from(
        mock.url()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(0),
    );
    let session = text_of(&spans[0].attributes, "gen_ai.conversation.id").unwrap_or_default();
    assert!(
        !session.is_empty() && !session.contains("traced-loop"),
        "the session's key, hashed: {session:?}"
    );
    for span in &spans {
        let t = |k| text_of(&span.attributes, k);
        assert_eq!(span.name, "chat gpt-test");
        assert_eq!(span.kind, SPAN_KIND_CLIENT);
        assert_eq!(t("gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(t("gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(t("gen_ai.request.model").as_deref(), Some("gpt-test"));
        assert_eq!(t("gen_ai.response.model").as_deref(), Some("gpt-test"));
        assert_eq!(t("gen_ai.conversation.id"), Some(session.clone()), "one session");
        assert_eq!(t("server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(int_of(&span.attributes, "server.port"), Some(upstream_port));
        assert_eq!(int_of(&span.attributes, "http.response.status_code"), Some(200));
        assert_eq!(t("http.request.method").as_deref(), Some("POST"));
        assert_eq!(t("loopguard.route").as_deref(), Some("/v1"));
        assert_eq!(t("loopguard.dialect").as_deref(), Some("openai-chat"));
        assert_eq!(int_of(&span.attributes, "gen_ai.usage.input_tokens"), Some(10));
        assert_eq!(int_of(&span.attributes, "gen_ai.usage.output_tokens"), Some(5));
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
        // Every answer carried one read_file call: an event with its id, no arguments.
        let calls: Vec<&opentelemetry_proto::tonic::trace::v1::span::Event> = span
            .events
            .iter()
            .filter(|e| e.name == "gen_ai.tool.call")
            .collect();
        assert_eq!(calls.len(), 1, "{:?}", span.events);
        assert_eq!(
            text_of(&calls[0].attributes, "gen_ai.tool.name").as_deref(),
            Some("read_file")
        );
        assert!(
            text_of(&calls[0].attributes, "gen_ai.tool.call.id").is_some_and(|id| id.starts_with("call_"))
        );
        assert!(calls[0].attributes.iter().all(|kv| !kv.key.contains("argument")));
        // A block is a well-formed answer: no error status.
        assert_ne!(span.status.as_ref().map_or(0, |s| s.code), STATUS_CODE_ERROR);
    }
    let warn = |count: i64, at: &str| {
        (
            "identical_call".to_owned(),
            "warning".to_owned(),
            "warn".to_owned(),
            count,
            at.to_owned(),
        )
    };
    assert_eq!(verdicts(&spans[0]), []);
    assert_eq!(verdicts(&spans[1]), []);
    // The model's 3rd identical call is warned as it streams; from the 4th
    // request on the history itself shows the streak.
    assert_eq!(verdicts(&spans[2]), [warn(3, "stream")]);
    assert_eq!(verdicts(&spans[3]), [warn(3, "request"), warn(4, "stream")]);
    assert_eq!(
        verdicts(&spans[4]),
        [
            warn(4, "request"),
            (
                "identical_call".to_owned(),
                "critical".to_owned(),
                "block".to_owned(),
                5,
                "stream".to_owned()
            )
        ]
    );
    assert_eq!(
        text_of(&spans[4].attributes, "loopguard.outcome").as_deref(),
        Some("blocked")
    );
    assert!(
        text_of(&spans[4].attributes, "loopguard.verdict")
            .is_some_and(|v| v.starts_with("block; detector=identical_call")),
        "{:?}",
        spans[4].attributes
    );
    let got = receiver
        .got
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(got.spans.iter().all(|(service, _)| service == "lg-under-test"));
    assert!(
        got.content_types.iter().all(|c| c == "application/x-protobuf"),
        "{:?}",
        got.content_types
    );
}

/// A loop configured to abort: the HTTP 400 loopguard answers in the
/// upstream's place is an error span (`error.type = loop_detected`).
#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_loop_is_an_error_span() {
    let receiver = Receiver::start().await;
    let mock = mock();
    let config = with_telemetry(&mock.url(), &format!("otlp_endpoint = \"{}\"", receiver.url))
        + "\n[loop_detection.actions]\ncritical = \"abort\"\n";
    let lg = loopguard(&config);
    for n in 0..5 {
        let (status, _) = send(&lg, &history(n)).await;
        assert_eq!(status, if n == 4 { 400 } else { 200 }, "request {n}");
    }
    let mut spans = receiver.wait_spans(5).await;
    spans.sort_by_key(|s| s.start_time_unix_nano);
    let last = &spans[4];
    assert_eq!(int_of(&last.attributes, "http.response.status_code"), Some(400));
    assert_eq!(
        text_of(&last.attributes, "error.type").as_deref(),
        Some("loop_detected")
    );
    assert_eq!(last.status.as_ref().map(|s| s.code), Some(STATUS_CODE_ERROR));
    assert!(
        verdicts(last).iter().any(|v| v.2 == "abort" && v.1 == "critical"),
        "{:?}",
        last.events
    );
    assert!(
        spans[..4]
            .iter()
            .all(|s| s.status.as_ref().map_or(0, |st| st.code) != STATUS_CODE_ERROR)
    );
}

/// Without `otlp_endpoint` nothing is exported, even with the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT` variable pointing at a receiver, and no
/// trace metric exists.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_exported() {
    let receiver = Receiver::start().await;
    let mock = mock();
    let lg = loopguard_with_env(
        &config_for(&mock.url(), ""),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
            ("OTEL_TRACES_EXPORTER", "otlp"),
        ],
    );
    for n in 0..3 {
        let (status, _) = send(&lg, &history(n)).await;
        assert_eq!(status, 200);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(receiver.spans().is_empty());
    assert!(!metrics(&lg).await.contains("loopguard_trace_"));
}

/// A collector that accepts connections and never answers: requests are as
/// quick as ever and all succeed; the failed exports are logged and
/// counted, and with a queue of one span the rest are dropped and counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_collector_costs_requests_nothing() {
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = hang.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    loopguard::task::spawn(async move {
        while let Ok((socket, _)) = hang.accept().await {
            keep.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(socket);
        }
    });
    let mock = mock();
    let lg = loopguard(&with_telemetry(
        &mock.url(),
        &format!("otlp_endpoint = \"http://{addr}\"\nmax_queue_spans = 1\nexport_timeout_ms = 3000"),
    ));
    // The first span's batch goes out after 1 s and hangs for 3 s; the
    // requests sent meanwhile fill the queue of one.
    let (status, _) = send(&lg, &history(0)).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..19 {
        let started = Instant::now();
        let (status, _) = send(&lg, &history(0)).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(status, 200);
    }
    // An export blocking a request would take it past the 3 s export timeout.
    assert!(
        slowest < Duration::from_millis(1000),
        "a request took {slowest:?}"
    );
    lg.wait_for_log("traces: export failed");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = metrics(&lg).await;
        let failed = metric_value(
            &text,
            "loopguard_trace_spans_dropped_total{reason=\"export_failed\"}",
        );
        let full = metric_value(
            &text,
            "loopguard_trace_spans_dropped_total{reason=\"queue_full\"}",
        );
        if failed + full >= 20.0 || Instant::now() > deadline {
            assert_eq!(
                failed + full,
                20.0,
                "every span dropped, each counted once: {text}"
            );
            assert!(failed >= 1.0, "{text}");
            assert!(full >= 1.0, "a queue of one span overflows: {text}");
            assert!(metric_value(&text, "loopguard_trace_exports_total{result=\"error\"}") >= 1.0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A collector that is down (connection refused): requests succeed, the
/// failure is logged once and counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_is_down_fails_open() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
    };
    let mock = mock();
    let lg = loopguard(&with_telemetry(
        &mock.url(),
        &format!("otlp_endpoint = \"http://127.0.0.1:{port}\""),
    ));
    for _ in 0..3 {
        let (status, body) = send(&lg, &history(0)).await;
        assert_eq!(status, 200);
        assert!(body.contains("read_file"));
    }
    lg.wait_for_log("traces: export failed");
    let text = metrics(&lg).await;
    assert!(
        metric_value(
            &text,
            "loopguard_trace_spans_dropped_total{reason=\"export_failed\"}"
        ) >= 1.0,
        "{text}"
    );
}

/// SIGTERM flushes: a span finished just before the signal reaches the
/// receiver before the process exits (the batch delay is 1 s).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_flushes_the_queued_spans() {
    let receiver = Receiver::start().await;
    let mock = mock();
    let mut lg = loopguard(&with_telemetry(
        &mock.url(),
        &format!("otlp_endpoint = \"{}\"", receiver.url),
    ));
    let (status, _) = send(&lg, &history(0)).await;
    assert_eq!(status, 200);
    lg.signal("TERM");
    let exit = tokio::task::spawn_blocking(move || lg.wait())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(exit.success(), "{exit:?}");
    assert_eq!(receiver.spans().len(), 1, "the span went out before the exit");
}

/// Headers a hosted backend needs (an API key) come from the standard
/// `OTEL_EXPORTER_OTLP_HEADERS` variable and go with every export.
#[tokio::test(flavor = "multi_thread")]
async fn export_headers_come_from_the_standard_variable() {
    let receiver = Receiver::start().await;
    let mock = mock();
    let lg = loopguard_with_env(
        &with_telemetry(&mock.url(), &format!("otlp_endpoint = \"{}\"", receiver.url)),
        &[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-otlp-token=s3cret,x-tenant=team-a",
        )],
    );
    let (status, _) = send(&lg, &history(0)).await;
    assert_eq!(status, 200);
    assert_eq!(receiver.wait_spans(1).await.len(), 1);
    let got = receiver
        .got
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for headers in &got.headers {
        assert_eq!(
            headers.get("x-otlp-token").and_then(|v| v.to_str().ok()),
            Some("s3cret")
        );
        assert_eq!(
            headers.get("x-tenant").and_then(|v| v.to_str().ok()),
            Some("team-a")
        );
    }
    drop(got);
    assert!(
        !lg.logs().contains("s3cret"),
        "the header's value is never logged"
    );
}

/// A history that already shows the loop is blocked at request time,
/// answered by loopguard without calling the upstream: its span says so,
/// with the request-time verdict as its event.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_time_block_is_traced() {
    let receiver = Receiver::start().await;
    let mock = mock();
    let lg = loopguard(&with_telemetry(
        &mock.url(),
        &format!("otlp_endpoint = \"{}\"", receiver.url),
    ));
    let (status, body) = send(&lg, &history(6)).await;
    assert_eq!(status, 200);
    assert!(body.contains("[loopguard]"), "{body}");
    assert!(
        common::mock_requests(&mock).await.is_empty(),
        "the upstream was not called"
    );
    let spans = receiver.wait_spans(1).await;
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.name, "chat gpt-test");
    assert_eq!(
        text_of(&span.attributes, "loopguard.outcome").as_deref(),
        Some("answered_by_loopguard")
    );
    assert!(text_of(&span.attributes, "loopguard.verdict").is_some_and(|v| v.starts_with("block;")));
    assert_eq!(int_of(&span.attributes, "http.response.status_code"), Some(200));
    let found = verdicts(span);
    assert!(
        found
            .iter()
            .any(|v| v.0 == "identical_call" && v.2 == "block" && v.4 == "request"),
        "{found:?}"
    );
    assert_ne!(span.status.as_ref().map_or(0, |s| s.code), STATUS_CODE_ERROR);
}
