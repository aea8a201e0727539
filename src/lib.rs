//! loopguard: a streaming reverse proxy between AI agents and LLM APIs that
//! detects agents stuck in loops and acts on them.
//!
//! The request path, stage by stage (see `DESIGN.md` in the shared docs:
//! §2 architecture, data flow and the pure core — dialects, detectors,
//! action planning —, §3 detectors, §4 actions, §5 sessions, §7 wire
//! formats, §8 configuration):
//!
//! - [`cli`]: the command line (`serve`, `check-config`, `mock-upstream`, …).
//! - [`config`]: the TOML file, raw form → validated [`config::Config`]
//!   (with the threshold ladder of the detectors).
//! - [`server`]: binds the listener and builds the axum app.
//! - [`route`]: matches a request path to a route and picks its dialect.
//! - [`proxy`]: one request as stages, one file each: `admit` → `decide` →
//!   `forward` → `reply`; the holder (`hold`) and the side tap (`tap`)
//!   that parses what passes.
//! - [`http_client`]: the upstream HTTP client (also the semantic check's).
//! - [`sse`], [`json_array`], [`ndjson`], [`eventstream`]: framing — split a
//!   response body into events, keeping each event's raw bytes (AWS's binary
//!   event stream for Bedrock's InvokeModel and ConverseStream).
//! - [`dialect`]: one folder per wire protocol (`dialect/<name>/`: `parse`,
//!   `write`, `ending`, `sample`): request body → [`transcript`], response
//!   payloads → [`dialect::StreamEvent`]s, and what loopguard writes in it
//!   (warnings, block answers, aborts, stream endings). `dialect/list.rs` is
//!   the one place that names the dialects.
//! - [`transcript`]: the dialect-neutral history and tool-call signatures.
//! - [`detect`]: the loop detectors (pure, synchronous), each over a
//!   `detect::view::View` of the session's steps.
//! - [`call_record`]: the bounded stored form of a response's tool calls
//!   (the shared store's record, and the lean parse's calls).
//! - [`budget`]: the byte budgets of requests in flight: what their bodies
//!   and parsed forms may hold, per request and all together.
//! - [`session`]: session keys, the bounded store of per-session state
//!   (with the semantic check's schedule), and the hash chains that let a
//!   request's parse follow what is new in it.
//! - [`plan`]: action planning — a verdict becomes what loopguard does
//!   (request-time decision, stream-time decision), in one pure place.
//! - [`guard`]: connects sessions and detectors to the proxy (request-time
//!   verdicts; the stream-time [`guard::stream::StreamReviewer`]).
//! - [`escalate`]: the `escalate` action's per-session state and
//!   retargeting, the experiment's arms and the loop outcome counters.
//! - [`semantic`]: the semantic check, the optional LLM judge
//!   (`semantic_loop`), run in the background on a schedule, never delaying
//!   a request.
//! - [`admin`]: health, metrics and the session API on the admin listener.
//! - [`admin::ui`]: the live page (`/ui`) on the admin listener.
//! - [`recording`]: opt-in recording of sessions (`[recording]`) through a
//!   bounded writer thread, in the form `replay` and `tune` read.
//! - [`redact`]: credential redaction for everything loopguard writes
//!   about tool calls (verdicts, logs, admin, the judge's prompt).
//! - [`reload`]: hot reload of the config file (SIGHUP, `POST /admin/reload`).
//! - [`telemetry`]: logging setup and the fail-open counter.
//! - [`trace`]: opt-in OpenTelemetry traces (`[telemetry] otlp_endpoint`):
//!   one GenAI span per proxied request, verdicts and tool calls as events,
//!   exported over OTLP/HTTP from a bounded queue.
//! - [`task`]: the one way to start a background task (counted).
//! - [`tools`]: apart from the product — `loopguard demo`, the scripted mock
//!   upstream, `loopguard replay` (and its `--summary`).

pub mod admin;
pub mod budget;
pub mod call_record;
pub mod cli;
pub mod config;
pub mod detect;
pub mod dialect;
pub mod escalate;
pub mod eventstream;
pub mod guard;
pub mod http_client;
pub mod json_array;
pub mod listen;
pub mod ndjson;
pub mod plan;
pub mod proxy;
pub mod recording;
pub mod redact;
pub mod reload;
pub mod route;
pub mod semantic;
pub mod server;
pub mod session;
pub mod sse;
pub mod state;
pub mod task;
pub mod telemetry;
pub mod tools;
pub mod trace;
pub mod transcript;
pub mod upstream_pool;
pub mod workers;
