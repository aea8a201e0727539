//! The guard: connects sessions and detectors to the proxy.
//!
//! At request time ([`Guard::on_request`]) it finds the request's session and
//! lane, recognises compaction, runs the detectors over the history, and
//! decides: forward unchanged, forward with a warning injected, answer with a
//! block, or answer with an abort. At stream time the [`stream::StreamReviewer`]
//! it returns judges the tool calls the model is emitting and scans the text
//! for chanting. Every verdict is one structured log event and a metric.
//! Detector faults fail open: logged, counted, traffic passes.

mod echo;
mod escalation;
mod judge;
mod request;
pub mod shared;
pub mod stream;

use std::sync::Arc;

use http::HeaderMap;

use crate::budget::{ByteBudget, Reservation};
use crate::config::Config;
use crate::detect::compaction::RequestSummary;
use crate::detect::outcome::hash64;
use crate::detect::{Settings, Verdict};
use crate::dialect::{Dialect, ParsedRequest};
pub use crate::plan::{RequestDecision, abort_instead_of_block, abort_message};
use crate::session::Store;
use crate::session::chain::{ChainStore, Parsed};
use crate::session::key;
use echo::Echo;
pub use echo::Echoes;
pub use request::{RequestView, Resolved};

/// Header that makes the detectors panic, honoured only when the process was
/// started with `LOOPGUARD_FAULT_INJECTION=1` (tests of the fail-open path).
pub const TEST_PANIC_HEADER: &str = "x-loopguard-test-panic";

/// Whose body [`Guard::parse_request_within`] parses: its dialect, route
/// prefix, headers and query (the tenant scope of the hash chains and the
/// settings of the lean form come from them).
#[derive(Debug, Clone, Copy)]
pub struct BodyOf<'a> {
    /// The route's dialect.
    pub dialect: Dialect,
    /// The route's prefix.
    pub route: &'a str,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// Query string.
    pub query: Option<&'a str>,
    /// The caller's credential hash, [`key::tenant`] of `headers` and
    /// `query` (computed once per request by its caller).
    pub tenant: &'a str,
}

/// Sessions plus the detectors.
#[derive(Debug)]
pub struct Guard {
    store: Arc<Store>,
    chains: ChainStore,
    /// The parse-memory budget of all requests (see [`crate::budget`]).
    parse_budget: Arc<ByteBudget>,
    /// The request bodies held by all requests in flight (see
    /// [`crate::proxy::body::read_limited`]).
    body_budget: Arc<ByteBudget>,
    judge: crate::semantic::Checker,
    fault_injection: bool,
    /// `[recording]`, when on.
    recorder: Option<crate::recording::Recorder>,
    /// The shared store (`[state] backend = "redis"`), see [`crate::state`].
    shared: Option<Arc<crate::state::Shared>>,
}

/// Logs a verdict, counts it, and adds it to the request's span (while
/// traces are on).
pub fn record(
    verdict: &Verdict,
    session: &str,
    agent: Option<&str>,
    at: &'static str,
    trace: Option<&crate::trace::Trace>,
) {
    if let Some(trace) = trace {
        trace.verdict(verdict, at);
    }
    tracing::warn!(
        session,
        agent = agent.unwrap_or(""),
        at,
        detector = verdict.detector.name(),
        level = verdict.level.name(),
        action = verdict.action.name(),
        tool = verdict.tool.as_deref().unwrap_or(""),
        count = verdict.count,
        text = %verdict.message,
        "verdict"
    );
    metrics::counter!(
        "loopguard_verdicts_total",
        "detector" => verdict.detector.name(),
        "level" => verdict.level.name(),
        "action" => verdict.action.name(),
        "at" => at
    )
    .increment(1);
    crate::admin::ui::activity::note(verdict.detector.name());
}

/// The agent (`[[agents]]` entry) and detection settings a request is
/// judged with, or `None` when detection does not run for it: disabled for
/// that agent, or the bypass header sent.
fn detection_for<'c>(
    config: &'c Config,
    headers: &HeaderMap,
) -> Option<(Option<&'c str>, &'c Arc<Settings>)> {
    let header_pairs = headers
        .iter()
        .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)));
    let (agent, settings) = config.loop_detection.select(header_pairs);
    let bypass = config
        .server
        .bypass_header
        .as_deref()
        .is_some_and(|h| headers.contains_key(h));
    (settings.enabled && !bypass).then_some((agent, settings))
}

/// A lane: one route, system text and tool set.
fn lane_id(route: &str, summary: &RequestSummary) -> u64 {
    hash64(
        &[
            route.as_bytes(),
            &summary.system.to_le_bytes(),
            &summary.tools.to_le_bytes(),
        ]
        .concat(),
    )
}

impl Guard {
    /// A guard over a fresh store sized by `[sessions]`.
    pub fn new(config: &Config) -> Self {
        Self {
            store: Arc::new(Store::new(config.sessions.max_sessions, config.sessions.idle_ttl)),
            chains: ChainStore::with_limits(
                config.sessions.parse_cache_bytes,
                crate::session::chain::MAX_CHAINS,
                config.sessions.idle_ttl,
            ),
            parse_budget: Arc::new(ByteBudget::default()),
            body_budget: Arc::new(ByteBudget::default()),
            judge: crate::semantic::Checker::new(config),
            fault_injection: std::env::var("LOOPGUARD_FAULT_INJECTION").is_ok_and(|v| v == "1"),
            recorder: start_recorder(config),
            shared: match config.state.backend {
                crate::config::state::Backend::Memory => None,
                crate::config::state::Backend::Redis => {
                    crate::state::Shared::start(&config.state, config.sessions.idle_ttl)
                }
            },
        }
    }

    /// The session store (admin API, metrics).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Parses a request body, fully parsing only the history items this
    /// caller (credential hash) has not sent on this route before (see
    /// [`crate::session::chain`]). Same result as [`Dialect::parse_request`].
    ///
    /// # Errors
    /// As [`Dialect::parse_request`].
    pub fn parse_request(
        &self,
        dialect: Dialect,
        route: &str,
        headers: &HeaderMap,
        query: Option<&str>,
        body: &[u8],
    ) -> Result<ParsedRequest, crate::dialect::DialectError> {
        let scope = [key::tenant(headers, query).as_bytes(), b"\0", route.as_bytes()].concat();
        self.chains.parse(dialect, &scope, body)
    }

    /// A request's share of the parse-memory budget, within
    /// `server.parse_budget_request_bytes` and, all requests together,
    /// `server.parse_budget_bytes`.
    pub fn reserve_parse(&self, config: &Config) -> Reservation {
        self.parse_budget.reserve(
            config.server.parse_budget_request_bytes,
            config.server.parse_budget_bytes,
        )
    }

    /// A request's share of the bytes of request bodies held at once, within
    /// `server.max_request_bytes` and, all requests together,
    /// `server.max_request_bytes_in_flight`.
    pub fn reserve_body(&self, config: &Config) -> Reservation {
        self.body_budget.reserve(
            config.server.max_request_bytes,
            config.server.max_request_bytes_in_flight,
        )
    }

    /// Bytes of request bodies held now, all requests together.
    pub fn bodies_in_flight(&self) -> usize {
        self.body_budget.in_use()
    }

    /// [`Guard::parse_request`] within `budget`: the full form, else the
    /// lean form (calls by their hashes, identities under the settings
    /// `headers` select), else [`Parsed::OverBudget`] (see
    /// [`ChainStore::parse_within`]).
    ///
    /// # Errors
    /// As [`Dialect::parse_request`].
    pub fn parse_request_within(
        &self,
        config: &Config,
        of: &BodyOf<'_>,
        body: &[u8],
        budget: &Reservation,
    ) -> Result<Parsed, crate::dialect::DialectError> {
        let scope = [of.tenant.as_bytes(), b"\0", of.route.as_bytes()].concat();
        let pairs = of
            .headers
            .iter()
            .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)));
        let (_, settings) = config.loop_detection.select(pairs);
        self.chains
            .parse_within(of.dialect, &scope, body, budget, settings)
    }

    fn wants_panic(&self, headers: &HeaderMap, at: &str) -> bool {
        self.fault_injection
            && headers
                .get(TEST_PANIC_HEADER)
                .is_some_and(|v| v.as_bytes() == at.as_bytes())
    }

    /// Request-time detection: the decision and the session key (a hash, for
    /// logs). Never fails: a detector fault is logged, counted as fail-open
    /// and the request forwarded unchanged.
    pub fn on_request(
        &self,
        config: &Config,
        request: &RequestView<'_>,
    ) -> (RequestDecision, Option<String>) {
        self.on_request_with(config, request, None)
    }

    /// [`Guard::on_request`], the response's additions to shared state also
    /// noted in `outbox` (see [`shared`]).
    pub fn on_request_with(
        &self,
        config: &Config,
        request: &RequestView<'_>,
        outbox: Option<Arc<crate::state::Outbox>>,
    ) -> (RequestDecision, Option<String>) {
        let (decision, key, echoes) = self.on_request_as(config, request, outbox, Echo::Told);
        echoes.tell();
        (decision, key)
    }

    /// [`Guard::on_request_with`] run speculatively over the shared state
    /// (see [`shared`]): its state changes are made, but what it would log,
    /// count and record is handed back, to be told ([`Echoes::tell`]) only
    /// if its decision goes out, and dropped otherwise.
    pub fn on_request_deferred(
        &self,
        config: &Config,
        request: &RequestView<'_>,
        outbox: Option<Arc<crate::state::Outbox>>,
    ) -> (RequestDecision, Option<String>, Echoes) {
        self.on_request_as(config, request, outbox, Echo::Deferred)
    }

    /// Request-time detection run again after a shared-state conflict
    /// ([`shared`]), for its state changes only: the decision already went
    /// out, so nothing is logged, counted or recorded a second time. The
    /// session key, `None` when detection does not run for the request.
    pub fn redo_request(
        &self,
        config: &Config,
        request: &RequestView<'_>,
        outbox: Option<Arc<crate::state::Outbox>>,
    ) -> Option<String> {
        self.on_request_as(config, request, outbox, Echo::Quiet).1
    }
}

/// The recorder for `[recording]`, when it is on (a directory that cannot
/// be created is logged, and nothing is recorded).
fn start_recorder(config: &Config) -> Option<crate::recording::Recorder> {
    let recording = &config.recording;
    if !recording.enabled {
        return None;
    }
    let cap = config.server.max_response_bytes;
    match crate::recording::Recorder::start(recording, crate::recording::CHANNEL, cap) {
        Ok(recorder) => {
            tracing::info!(dir = %recording.dir.display(), "recording sessions");
            Some(recorder)
        }
        Err(e) => {
            tracing::error!(dir = %recording.dir.display(), error = %e, "recording: cannot use the directory; not recording");
            None
        }
    }
}
