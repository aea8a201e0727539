//! loopguard: a streaming reverse proxy between AI agents and LLM APIs that
//! detects agents stuck in loops and acts on them.
//!
//! The request path, stage by stage (see `DESIGN.md` in the shared docs):
//!
//! - [`cli`]: the command line (`serve`, `check-config`, `mock-upstream`, …).
//! - [`config`]: the TOML file, raw form → validated [`config::Config`].
//! - [`server`]: binds the listener and builds the axum app.
//! - [`route`]: matches a request path to a route and picks its dialect.
//! - [`proxy`]: forwards to the upstream and streams the answer back, with a
//!   side tap that parses what passes.
//! - [`sse`], [`json_array`]: framing — split a response body into events,
//!   keeping each event's raw bytes.
//! - [`dialect`]: one folder per wire protocol (`dialect/<name>/`):
//!   request body → [`transcript`], response payloads →
//!   [`dialect::StreamEvent`]s, and what loopguard writes in it (warnings,
//!   block answers, aborts, stream endings). `dialect/list.rs` is the one
//!   place that names the dialects.
//! - [`transcript`]: the dialect-neutral history and tool-call signatures.
//! - [`detect`]: the loop detectors (pure, synchronous).
//! - [`session`]: session keys, the bounded store of per-session state, and
//!   the hash chains that let a request's parse follow what is new in it.
//! - [`plan`]: action planning — a verdict becomes what loopguard does
//!   (request-time decision, stream-time decision), in one pure place.
//! - [`guard`]: connects sessions and detectors to the proxy (request-time
//!   verdicts, the stream-time judge).
//! - [`judge`]: the optional LLM judge (`semantic_loop`), run in the
//!   background on a schedule, never delaying a request.
//! - [`replay`]: `loopguard replay`, the detectors over recorded traffic.
//! - [`demo`]: `loopguard demo`, a scripted loop stopped in ten seconds.
//! - [`mock`]: a scripted upstream for tests, benchmarks and demos.
//! - [`admin`]: health, metrics and the session API on the admin listener.
//! - [`reload`]: hot reload of the config file (SIGHUP, `POST /admin/reload`).
//! - [`telemetry`]: logging setup and the fail-open counter.

pub mod admin;
pub mod cli;
pub mod config;
pub mod demo;
pub mod detect;
pub mod dialect;
pub mod guard;
pub mod json_array;
pub mod judge;
pub mod mock;
pub mod plan;
pub mod proxy;
pub mod reload;
pub mod replay;
pub mod route;
pub mod server;
pub mod session;
pub mod sse;
pub mod state;
pub mod telemetry;
pub mod transcript;
