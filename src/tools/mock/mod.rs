//! A scripted upstream speaking every dialect (`openai-chat`,
//! `openai-responses`, `gemini`, `anthropic`), for tests, benchmarks and
//! demos (`loopguard mock-upstream`).
//!
//! It answers every `POST …/chat/completions`, `…/responses`, `…/messages`,
//! `…:generateContent`, `…:streamGenerateContent` (also Gemini on Vertex AI,
//! `…/publishers/google/models/{m}:…`), Claude on Vertex AI
//! (`…/publishers/anthropic/models/{m}:rawPredict`, and `:streamRawPredict`,
//! which streams whatever the body's `stream` says), Claude on Bedrock
//! (`…/model/{id}/invoke`, and `…/invoke-with-response-stream`, whose
//! Anthropic events — scripted, or an `anthropic/*.sse` fixture — are sent as
//! AWS event-stream `chunk`s, one per event), Bedrock's `…/converse` and
//! `…/converse-stream` (see [`converse`]) and Ollama's `…/api/chat`
//! and `…/api/generate` (NDJSON unless `stream: false`, see [`ollama`]) with either a recorded
//! fixture or a scripted turn (see [`script`]), in the mode the request
//! asked for (SSE — named events for Responses and Anthropic —, streamed
//! JSON array, or one JSON document). Per-request behaviour is set by
//! headers, so one mock serves many tests:
//!
//! | header | meaning |
//! |---|---|
//! | `x-mock-fixture: gemini/text.sse` | serve that recorded stream below `--fixtures` as `text/event-stream`, even to a non-streaming request (re-framed as a JSON array for Gemini without `alt=sse`) |
//! | `x-mock-script: {"turns":[…]}` | the script for this request (default: `--script` or the built-in loop); format and turn choice (JSON-constrained side calls, tool-less requests, a turn limit) in [`script`] |
//! | `x-mock-pace-ms: 50` | delay between events |
//! | `x-mock-chunk: event\|random\|bytes\|whole` | write sizes: one event per write (default), random 1–97 bytes, one byte, or the whole body at once |
//! | `x-mock-seed: 7` | seed for `random` writes |
//! | `x-mock-fault: …` | `die-after:N` (break the connection after N events), `stall-after:N` (go silent after N events), `truncate-after:N` (end the body cleanly after N events), `delay-headers-ms:N`, `status:CODE` (an error answer), `no-terminator` (no `[DONE]`), `gzip` (gzip the body when the request accepts it), `corrupt` (flip a bit of the first event's last byte: a Bedrock message with a bad CRC) |
//! | `x-mock-id: ID` | name under which the send log is kept |
//! | `x-mock-signatures: strict` | reject (HTTP 400) a history carrying reasoning signed by another model than the one asked for; `x-mock-signer: MODEL` names the producer of signatures the mock did not make (see [`signatures`]) |
//!
//! Two models in one script: a script's `models` maps a model name to the
//! script that model plays, so a request for `strong` can answer in text
//! where the default model keeps looping, given the same history.
//!
//! Playing an LLM judge (`--judge-script FILE`, for `[loop_detection.semantic_check]`
//! tests): the file maps a model name to a list of scripted answers,
//! `{"judge-a": [{"json": {"analysis": "…", "confidence": 0.95}}, {"text": "not JSON"},
//! {"status": 500}, {"delay_ms": 2000, "json": {…}}]}`. A `POST …/chat/completions`
//! whose `model` is in the file gets that model's next answer (a counter per
//! model, the last answer repeating) as a non-streaming `chat.completion`
//! whose message content is `text`, or `json` serialised; `status` answers
//! with that error status; `delay_ms` waits before the headers. Requests for
//! other models are answered as above, so one mock serves the agent and its judge.
//!
//! Control endpoints: `GET /_mock/requests` (every request received, with
//! headers and body), `DELETE /_mock/requests`, `GET /_mock/log/{id}` (when
//! each event was sent, in µs since the Unix epoch, and whether the body
//! completed or was dropped by the client), `GET /_mock/stats`.

mod asked;
mod body;
pub mod converse;
pub mod fixture;
mod judge;
pub mod ollama;
mod pieces;
pub mod script;
pub mod signatures;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use asked::Asked;
use body::{Controls, paced_body};
use pieces::{named_pieces, scripted_pieces};
use script::Script;

/// `loopguard mock-upstream` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct MockArgs {
    /// Address to listen on (port 0 picks a free port; the actual address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// Directory of recorded fixtures (default: $LOOPGUARD_FIXTURES, else ../shared/fixtures).
    #[arg(long)]
    pub fixtures: Option<PathBuf>,
    /// Script file (JSON: {"turns": [{"text", "reasoning", "tool_calls": [{"name", "arguments"}]}], "no_tools", "json", "stop_after", "final"}; see `loopguard::tools::mock::script`).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Default delay between events, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub pace_ms: u64,
    /// Judge script file (JSON: {"MODEL": [{"json", "text", "status", "delay_ms"}, …]}; see the module docs).
    #[arg(long)]
    pub judge_script: Option<PathBuf>,
}

/// One scripted judge answer (see the module docs).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeAnswer {
    /// Sent serialised as the message content.
    #[serde(default)]
    pub json: Option<Value>,
    /// Sent as the message content (wins over `json`).
    #[serde(default)]
    pub text: Option<String>,
    /// Answer with this error status instead.
    #[serde(default)]
    pub status: Option<u16>,
    /// Wait this long before answering, milliseconds.
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

/// A judge script: model name → its answers in order.
pub type JudgeScript = HashMap<String, Vec<JudgeAnswer>>;

#[derive(Debug, Default, Clone, serde::Serialize)]
struct SendLog {
    sent_at_us: Vec<u64>,
    completed: bool,
    dropped: bool,
}

#[derive(Debug, Default, serde::Serialize)]
struct Stats {
    requests: AtomicU64,
    responses_completed: AtomicU64,
    responses_dropped: AtomicU64,
    handlers_cancelled: AtomicU64,
}

#[derive(Debug)]
struct MockState {
    fixtures: PathBuf,
    script: Script,
    pace_ms: u64,
    requests: Mutex<Vec<Value>>,
    logs: Mutex<HashMap<String, SendLog>>,
    stats: Stats,
    seq: AtomicU64,
    judge: JudgeScript,
    judge_calls: Mutex<HashMap<String, usize>>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Runs the mock until the process is stopped.
///
/// # Errors
/// When the script cannot be read or the address cannot be bound.
pub async fn run(args: MockArgs) -> Result<(), String> {
    let script = match &args.script {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("invalid script {}: {e}", path.display()))?
        }
        None => Script::default_loop(),
    };
    let fixtures = args
        .fixtures
        .or_else(|| std::env::var_os("LOOPGUARD_FIXTURES").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("../shared/fixtures"));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let judge = match &args.judge_script {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            serde_json::from_str(&text)
                .map_err(|e| format!("invalid judge script {}: {e}", path.display()))?
        }
        None => JudgeScript::new(),
    };
    let app = app_with_judge(fixtures, script, args.pace_ms, judge);
    println!("mock-upstream listening on {addr}");
    tracing::info!(%addr, "mock upstream listening");
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

/// The mock's router (exposed for in-process use).
pub fn app(fixtures: PathBuf, script: Script, pace_ms: u64) -> Router {
    app_with_judge(fixtures, script, pace_ms, JudgeScript::new())
}

/// The mock's router, also playing a judge for the models of `judge`.
pub fn app_with_judge(fixtures: PathBuf, script: Script, pace_ms: u64, judge: JudgeScript) -> Router {
    let state = Arc::new(MockState {
        fixtures,
        script,
        pace_ms,
        requests: Mutex::new(Vec::new()),
        logs: Mutex::new(HashMap::new()),
        stats: Stats::default(),
        seq: AtomicU64::new(0),
        judge,
        judge_calls: Mutex::new(HashMap::new()),
    });
    Router::new()
        .route("/_mock/requests", get(list_requests).delete(clear_requests))
        .route("/_mock/log/{id}", get(send_log))
        .route("/_mock/stats", get(stats))
        .fallback(answer)
        .with_state(state)
}

async fn list_requests(State(st): State<Arc<MockState>>) -> Response {
    let list = st.requests.lock().map(|r| r.clone()).unwrap_or_default();
    axum::Json(list).into_response()
}

async fn clear_requests(State(st): State<Arc<MockState>>) -> StatusCode {
    if let Ok(mut r) = st.requests.lock() {
        r.clear();
    }
    StatusCode::NO_CONTENT
}

async fn send_log(State(st): State<Arc<MockState>>, UrlPath(id): UrlPath<String>) -> Response {
    let log = st.logs.lock().ok().and_then(|l| l.get(&id).cloned());
    match log {
        Some(log) => axum::Json(log).into_response(),
        None => (StatusCode::NOT_FOUND, "no such id\n").into_response(),
    }
}

async fn stats(State(st): State<Arc<MockState>>) -> Response {
    axum::Json(json!({
        "requests": st.stats.requests.load(Ordering::SeqCst),
        "responses_completed": st.stats.responses_completed.load(Ordering::SeqCst),
        "responses_dropped": st.stats.responses_dropped.load(Ordering::SeqCst),
        "handlers_cancelled": st.stats.handlers_cancelled.load(Ordering::SeqCst),
    }))
    .into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sse,
    Array,
    Whole,
    /// Ollama's newline-delimited JSON.
    Lines,
}

struct CancelGuard<'a> {
    stats: &'a Stats,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.stats.handlers_cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Answers a request to the mock upstream: a scripted judge's answer, a
/// fault, a recorded fixture or a scripted turn, in the dialect the path
/// (and body) ask for, paced and broken as the `x-mock-*` headers say.
async fn answer(State(st): State<Arc<MockState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    note_request(&st, &parts, &body);
    if let Some(answer) = judge::judge_answer(&st, &json_body) {
        return judge::play_judge(answer, &json_body).await;
    }
    let controls = Controls::read(&parts.headers, st.pace_ms);
    if let Some(refused) = delay_or_fail(&st, &controls).await {
        return refused;
    }

    let asked = Asked::read(&parts.uri, &json_body);
    let pieces = match header_str(&parts.headers, "x-mock-fixture") {
        Some(name) => recorded(&st, name, asked.mode, asked.path),
        None => scripted(&st, &parts.headers, &asked, &json_body, &controls),
    };
    let pieces = match pieces {
        Ok(pieces) => pieces,
        Err(refused) => return *refused,
    };
    let converse_stream = converse::streams(asked.path);
    framed(
        &st,
        &parts.headers,
        pieces,
        asked.mode,
        (asked.bedrock_stream, converse_stream),
        controls,
    )
}

/// Counts a request and keeps it for `GET /mock/requests`.
fn note_request(st: &MockState, parts: &http::request::Parts, body: &Bytes) {
    st.stats.requests.fetch_add(1, Ordering::SeqCst);
    let headers_json: serde_json::Map<String, Value> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                json!(String::from_utf8_lossy(v.as_bytes())),
            )
        })
        .collect();
    if let Ok(mut r) = st.requests.lock() {
        r.push(json!({
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "query": parts.uri.query(),
            "headers": headers_json,
            "body": String::from_utf8_lossy(body),
            "body_len": body.len(),
            "body_sha256": sha256_hex(body),
        }));
    }
}

/// The `delay-headers-ms` and `status` faults: the answer waits (a handler
/// cancelled meanwhile is counted), or is an error.
async fn delay_or_fail(st: &MockState, controls: &Controls) -> Option<Response> {
    if let Some(delay) = controls.delay_headers {
        let mut guard = CancelGuard {
            stats: &st.stats,
            armed: true,
        };
        tokio::time::sleep(delay).await;
        guard.armed = false;
    }
    if let Some(code) = controls.status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body =
            json!({"error": {"message": format!("mock error {code}"), "type": "server_error", "code": code}});
        return Some(
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response(),
        );
    }
    None
}

/// The pieces of recorded fixture `name` (a JSON array's elements for a
/// Gemini array stream, NDJSON lines, or SSE events); a fixture that cannot
/// be read is answered with HTTP 404.
fn recorded(st: &MockState, name: &str, mode: Mode, path: &str) -> Result<Vec<Vec<u8>>, Box<Response>> {
    match fixture::read(&st.fixtures, name) {
        Ok(bytes) if mode == Mode::Array => Ok(fixture::json_array_pieces(&fixture::sse_payloads(&bytes))),
        Ok(bytes) if name.ends_with(".ndjson") => Ok(ollama::fixture_lines(&bytes)),
        Ok(bytes) if converse::streams(path) => Ok(converse::recorded(&bytes)),
        Ok(bytes) => Ok(fixture::sse_events(&bytes)),
        Err(e) => Err(Box::new((StatusCode::NOT_FOUND, e).into_response())),
    }
}

/// The pieces of a scripted turn (the `x-mock-script` header's script, or
/// the mock's own) for the request's model, in the dialect asked for; an
/// invalid script, or a body that `x-mock-signatures: strict` rejects, is
/// answered instead.
fn scripted(
    st: &MockState,
    headers: &HeaderMap,
    asked: &Asked<'_>,
    json_body: &Value,
    controls: &Controls,
) -> Result<Vec<Vec<u8>>, Box<Response>> {
    let script = match header_str(headers, "x-mock-script") {
        Some(text) => match serde_json::from_str::<Script>(text) {
            Ok(s) => s,
            Err(e) => {
                return Err(Box::new(
                    (StatusCode::BAD_REQUEST, format!("invalid x-mock-script: {e}")).into_response(),
                ));
            }
        },
        None => st.script.clone(),
    };
    let model = asked.model(json_body);
    if header_str(headers, "x-mock-signatures") == Some("strict") {
        let signer = header_str(headers, "x-mock-signer");
        if let Some(why) = signatures::rejection(json_body, &model, signer) {
            let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": why, "code": 400}});
            return Err(Box::new(
                (
                    StatusCode::BAD_REQUEST,
                    [(header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response(),
            ));
        }
    }
    let script = script.models.get(&model).cloned().unwrap_or(script);
    let turn = script.answer(json_body);
    let seq = st.seq.fetch_add(1, Ordering::SeqCst);
    let mode = asked.mode;
    Ok(match asked.named {
        _ if asked.ollama && mode == Mode::Lines => ollama::stream(&turn, &model, asked.ollama_generate),
        _ if asked.ollama => vec![ollama::whole(&turn, &model, asked.ollama_generate)],
        _ if converse::is_converse(asked.path) => converse::scripted(&turn, seq, asked.path),
        Some(named) => named_pieces(named, &turn, &model, seq, mode),
        None => scripted_pieces(
            &turn,
            &model,
            seq,
            mode,
            asked.gemini,
            json_body,
            controls.no_terminator,
        ),
    })
}

/// The response carrying `pieces`: its content type, the bodies re-framed
/// for Bedrock's event stream, and the `corrupt` and `gzip` faults.
/// `streams`: an `InvokeModelWithResponseStream` answer (pieces to re-frame
/// as `chunk`s), a `ConverseStream` one (framed already); either is served
/// as an event stream.
fn framed(
    st: &Arc<MockState>,
    request_headers: &HeaderMap,
    pieces: Vec<Vec<u8>>,
    mode: Mode,
    streams: (bool, bool),
    controls: Controls,
) -> Response {
    let (bedrock_stream, converse_stream) = streams;
    // A recorded stream is served as the stream it is, whatever the request asked.
    let recorded_stream = mode != Mode::Array && header_str(request_headers, "x-mock-fixture").is_some();
    let ndjson = mode == Mode::Lines
        || header_str(request_headers, "x-mock-fixture").is_some_and(|n| n.ends_with(".ndjson"));
    let pieces = if bedrock_stream {
        pieces
            .iter()
            .map(|p| crate::dialect::bedrock::frames_from_sse(p))
            .collect()
    } else {
        pieces
    };
    let content_type = if bedrock_stream || converse_stream {
        crate::dialect::bedrock::EVENT_STREAM
    } else if ndjson {
        "application/x-ndjson"
    } else if mode == Mode::Sse || recorded_stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let accepts_gzip = header_str(request_headers, "accept-encoding").is_some_and(|v| v.contains("gzip"));
    let mut pieces = pieces;
    if controls.corrupt {
        if let Some(last) = pieces.first_mut().and_then(|p| p.last_mut()) {
            *last ^= 1;
        }
    }
    let pieces = if controls.gzip && accepts_gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = gz.write_all(&pieces.concat());
        vec![gz.finish().unwrap_or_default()]
    } else {
        pieces
    };
    let mut response = Response::new(paced_body(pieces, controls, Arc::clone(st)));
    *response.headers_mut() = headers;
    response
}
