//! Configuration: the TOML file (raw form) validated into the runtime form.
//!
//! Two phases (see `raw`): the raw structs mirror the file and reject unknown
//! keys; [`load_str`] validates them into [`Config`], reporting every problem
//! at once, each with its key path and the bad value. Environment variables
//! (see [`apply_env`]) override listen addresses and upstream URLs for
//! containers.

pub mod detection;
pub mod detection_raw;
pub mod escalate;
mod ladder;
mod problems;
pub mod raw;
pub mod recording;
pub mod semantic;
mod shape;
pub mod state;
pub mod telemetry;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use url::Url;

pub use detection::LoopDetection;
pub use problems::{ConfigError, Problem, Problems};
use raw::RawConfig;

/// The default configuration, also shipped as `config/loopguard.toml`.
pub const DEFAULT_TOML: &str = include_str!("../../config/loopguard.toml");

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[[routes]]`, longest prefix first.
    pub routes: Vec<Route>,
    /// `[sessions]`.
    pub sessions: SessionsConfig,
    /// `[loop_detection]` with `[[agents]]` overrides.
    pub loop_detection: LoopDetection,
    /// `[recording]` (read at start; a reload does not change it).
    pub recording: recording::RecordingConfig,
    /// `[state]`.
    pub state: state::StateConfig,
    /// `[telemetry]` (read at start; a reload does not change it).
    pub telemetry: telemetry::TelemetryConfig,
}

/// Validated `[server]`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Proxy listener.
    pub listen: SocketAddr,
    /// Admin listener.
    pub admin_listen: SocketAddr,
    /// Bearer token for mutating admin endpoints.
    pub admin_token: Option<String>,
    /// `Host` names (lowercase, no port; `*`: any) the admin listener serves
    /// `/admin/*` for (see [`crate::admin`]); the probes and `/metrics`
    /// answer any `Host`.
    pub admin_allowed_hosts: Vec<String>,
    /// Request body cap, bytes.
    pub max_request_bytes: usize,
    /// Cap on the request bodies held at once, all requests together, bytes
    /// (see [`crate::proxy::body::read_limited`]).
    pub max_request_bytes_in_flight: usize,
    /// Request bodies over this many bytes are parsed and judged off the
    /// async workers (see [`crate::proxy::offload`]).
    pub offload_body_bytes: usize,
    /// The parse-memory budget of all requests in flight, bytes (see
    /// [`crate::session::budget`]).
    pub parse_budget_bytes: usize,
    /// The parse-memory budget of one request, bytes.
    pub parse_budget_request_bytes: usize,
    /// Judged non-streaming response cap, bytes.
    pub max_response_bytes: usize,
    /// Held tool-call events cap per response, bytes.
    pub max_held_bytes: usize,
    /// Longest hold of response headers.
    pub header_hold: Duration,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Time allowed until the upstream's response headers.
    pub first_byte_timeout: Duration,
    /// Longest silence between two upstream body reads.
    pub idle_timeout: Duration,
    /// Header that skips detection when present.
    pub bypass_header: Option<String>,
    /// How long shutdown waits for in-flight requests.
    pub drain_timeout: Duration,
    /// Keep-alive interval while a tool call is held after the headers went out.
    pub keepalive: Duration,
    /// Longest time a client may take to send a request's headers.
    pub client_header_timeout: Duration,
    /// Longest time a client may take to send a request's body.
    pub client_body_timeout: Duration,
    /// Most client connections served at once.
    pub max_connections: usize,
    /// Listen backlog of the proxy listener.
    pub listen_backlog: u32,
    /// Proxy workers: single-threaded runtimes, each accepting on the proxy
    /// socket, each with its own upstream pool; 0 in the file means
    /// one per core, resolved at start by [`ServerConfig::worker_count`].
    pub workers: usize,
}

impl ServerConfig {
    /// The number of proxy workers to start: `workers`, or one per core
    /// when it is 0.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n => n,
        }
    }
}

/// The provider behind a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI or any OpenAI-compatible server.
    Openai,
    /// Google Gemini (AI Studio or Vertex).
    Gemini,
    /// Anthropic Messages.
    Anthropic,
    /// Ollama's native API (`/api/chat`, `/api/generate`).
    Ollama,
    /// Amazon Bedrock's runtime API (Claude through `InvokeModel`).
    Bedrock,
}

impl Provider {
    /// The name used in config, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Gemini => "gemini",
            Self::Anthropic => "anthropic",
            Self::Ollama => "ollama",
            Self::Bedrock => "bedrock",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "openai" => Some(Self::Openai),
            "gemini" => Some(Self::Gemini),
            "anthropic" => Some(Self::Anthropic),
            "ollama" => Some(Self::Ollama),
            "bedrock" => Some(Self::Bedrock),
            _ => None,
        }
    }
}

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix without a trailing slash (`""` for the root).
    pub prefix: String,
    /// Provider of the upstream.
    pub provider: Provider,
    /// Upstream base URL.
    pub upstream: Url,
    /// Remove the prefix before forwarding.
    pub strip_prefix: bool,
    /// Where the `escalate` action sends a looping session (`None`: the
    /// route has no escalation; the action then acts as `warn`).
    pub escalation: Option<escalate::RouteEscalation>,
}

/// Validated `[sessions]`.
#[derive(Debug, Clone)]
pub struct SessionsConfig {
    /// Header carrying an explicit session key (lowercase).
    pub header: String,
    /// Most sessions kept.
    pub max_sessions: u64,
    /// Idle time after which a session is forgotten.
    pub idle_ttl: Duration,
    /// Most bytes the parsed histories kept for reuse take
    /// ([`crate::session::chain`]).
    pub parse_cache_bytes: usize,
}

/// A loaded configuration with the notices produced on load.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated configuration.
    pub config: Config,
    /// Values adjusted on load (to be logged as warnings).
    pub notices: Vec<Problem>,
}

/// Reads and validates a config file.
///
/// # Errors
/// [`ConfigError`] with every problem found; an unreadable file is one
/// problem naming the I/O error.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let (text, source_name) = read_file(path)?;
    load_str(&text, &source_name)
}

/// A config file's text and its name for messages; an unreadable file is
/// one problem naming the I/O error.
fn read_file(path: &Path) -> Result<(String, String), ConfigError> {
    let source_name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((text, source_name)),
        Err(e) => Err(ConfigError {
            source_name,
            errors: vec![Problem {
                path: String::new(),
                message: format!("cannot read file: {e}"),
            }],
        }),
    }
}

/// Reads and validates a config file for the offline tools (`replay`):
/// only `[loop_detection]` and `[[agents]]` matter there, so a file without
/// `[[routes]]` is accepted (every other problem is still an error).
///
/// # Errors
/// As [`load_file`].
pub fn load_detection_file(path: &Path) -> Result<Loaded, ConfigError> {
    let (text, source_name) = read_file(path)?;
    load_text(&text, &source_name, false)
}

/// Validates config text.
///
/// # Errors
/// [`ConfigError`] with every problem found. A TOML syntax error or an
/// unknown key is reported with the parser's own line and column.
pub fn load_str(text: &str, source_name: &str) -> Result<Loaded, ConfigError> {
    load_text(text, source_name, true)
}

fn load_text(text: &str, source_name: &str, need_routes: bool) -> Result<Loaded, ConfigError> {
    let mut problems = Problems::default();
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            // A syntax error: the parser's own message, with line and column.
            let table: toml::Table = toml::from_str(text).map_err(|_| ConfigError {
                source_name: source_name.to_owned(),
                errors: vec![Problem {
                    path: String::new(),
                    message: e.to_string().trim_end().to_owned(),
                }],
            })?;
            // Shape problems: each with its key path, then the value
            // problems of what remains.
            let (shape, rest) = shape::problems(text, table);
            let Some(rest) = rest else {
                return Err(ConfigError {
                    source_name: source_name.to_owned(),
                    errors: shape,
                });
            };
            problems.errors = shape;
            rest
        }
    };
    let config = validate(&raw, &mut problems);
    if !need_routes && raw.routes.is_empty() {
        problems.errors.retain(|p| p.path != "routes");
    }
    if problems.errors.is_empty() {
        Ok(Loaded {
            config,
            notices: problems.notices,
        })
    } else {
        Err(ConfigError {
            source_name: source_name.to_owned(),
            errors: problems.errors,
        })
    }
}

/// Validates a config already parsed into a TOML table (`loopguard tune`
/// changes keys of a parsed file before loading it).
///
/// # Errors
/// [`ConfigError`] with the shape error or every value problem found.
pub fn load_table(table: toml::Table, source_name: &str) -> Result<Loaded, ConfigError> {
    let raw: RawConfig = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError {
            source_name: source_name.to_owned(),
            errors: vec![Problem {
                path: String::new(),
                message: e.to_string().trim_end().to_owned(),
            }],
        })?;
    let mut problems = Problems::default();
    let config = validate(&raw, &mut problems);
    if problems.errors.is_empty() {
        Ok(Loaded {
            config,
            notices: problems.notices,
        })
    } else {
        Err(ConfigError {
            source_name: source_name.to_owned(),
            errors: problems.errors,
        })
    }
}

/// Largest `sessions.parse_cache_mib` (1 TiB): past it, a typo.
const MAX_PARSE_CACHE_MIB: u64 = 1 << 20;

fn validate(raw: &RawConfig, problems: &mut Problems) -> Config {
    let server = validate_server(raw, problems);
    let routes = validate_routes(raw, problems);
    let sessions = SessionsConfig {
        header: raw.sessions.header.to_ascii_lowercase(),
        max_sessions: raw.sessions.max_sessions,
        idle_ttl: Duration::from_secs(raw.sessions.idle_ttl_secs),
        parse_cache_bytes: usize::try_from(raw.sessions.parse_cache_mib.min(MAX_PARSE_CACHE_MIB) << 20)
            .unwrap_or(usize::MAX),
    };
    if raw.sessions.parse_cache_mib > MAX_PARSE_CACHE_MIB {
        problems.push(
            "sessions.parse_cache_mib",
            format!(
                "must be at most {MAX_PARSE_CACHE_MIB} (MiB), got {}",
                raw.sessions.parse_cache_mib
            ),
        );
    }
    if raw.sessions.max_sessions == 0 {
        problems.push("sessions.max_sessions", "must be at least 1, got 0");
    }
    if raw.sessions.idle_ttl_secs == 0 {
        problems.push(
            "sessions.idle_ttl_secs",
            "must be at least 1, got 0 (a session would be forgotten before its next request)",
        );
    }
    if http::HeaderName::from_bytes(raw.sessions.header.as_bytes()).is_err() {
        problems.push(
            "sessions.header",
            format!("{:?} is not a valid header name", raw.sessions.header),
        );
    }
    let loop_detection = detection::validate(&raw.loop_detection, &raw.agents, problems);
    let recording = recording::validate(&raw.recording, problems);
    let state = state::validate(&raw.state, problems);
    let telemetry = telemetry::validate(&raw.telemetry, problems);
    Config {
        server,
        routes,
        sessions,
        loop_detection,
        recording,
        state,
        telemetry,
    }
}

fn parse_addr(text: &str, path: &str, problems: &mut Problems) -> SocketAddr {
    text.parse().unwrap_or_else(|_| {
        problems.push(
            path,
            format!("{text:?} is not a socket address (host:port, e.g. 127.0.0.1:8080)"),
        );
        SocketAddr::from(([127, 0, 0, 1], 0))
    })
}

fn positive(value: u64, path: &str, problems: &mut Problems) -> u64 {
    if value == 0 {
        problems.push(path, "must be greater than 0, got 0");
    }
    value
}

fn validate_server(raw: &RawConfig, problems: &mut Problems) -> ServerConfig {
    let s = &raw.server;
    let listen = parse_addr(&s.listen, "server.listen", problems);
    let admin_listen = parse_addr(&s.admin_listen, "server.admin_listen", problems);
    if listen == admin_listen && listen.port() != 0 {
        problems.push(
            "server.admin_listen",
            format!("\"{admin_listen}\" is also server.listen; the two listeners need different addresses"),
        );
    }
    if let Some(name) = &s.bypass_header {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.push(
                "server.bypass_header",
                format!("{name:?} is not a valid header name"),
            );
        }
    }
    if s.parse_budget_request_bytes > s.parse_budget_bytes {
        problems.push(
            "server.parse_budget_request_bytes",
            format!(
                "{} is over server.parse_budget_bytes ({}): one request's budget must fit in the total",
                s.parse_budget_request_bytes, s.parse_budget_bytes
            ),
        );
    }
    if s.max_request_bytes_in_flight < s.max_request_bytes {
        problems.push(
            "server.max_request_bytes_in_flight",
            format!(
                "{} is under server.max_request_bytes ({}): a body of the largest size accepted must fit",
                s.max_request_bytes_in_flight, s.max_request_bytes
            ),
        );
    }
    if s.keepalive_secs >= s.idle_timeout_secs && s.idle_timeout_secs > 0 {
        problems.notice(
            "server.keepalive_secs",
            format!(
                "{} s is not shorter than server.idle_timeout_secs ({} s): an upstream silent that long is cut before a keep-alive is written while a tool call is held",
                s.keepalive_secs, s.idle_timeout_secs
            ),
        );
    }
    let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    ServerConfig {
        listen,
        admin_listen,
        admin_token: s.admin_token.clone().filter(|t| !t.is_empty()),
        admin_allowed_hosts: admin_allowed_hosts(s.admin_allowed_hosts.as_deref(), admin_listen, problems),
        max_request_bytes: to_usize(positive(
            s.max_request_bytes,
            "server.max_request_bytes",
            problems,
        )),
        max_request_bytes_in_flight: to_usize(s.max_request_bytes_in_flight),
        offload_body_bytes: to_usize(s.offload_body_bytes),
        parse_budget_bytes: to_usize(positive(
            s.parse_budget_bytes,
            "server.parse_budget_bytes",
            problems,
        )),
        parse_budget_request_bytes: to_usize(positive(
            s.parse_budget_request_bytes,
            "server.parse_budget_request_bytes",
            problems,
        )),
        max_response_bytes: to_usize(positive(
            s.max_response_bytes,
            "server.max_response_bytes",
            problems,
        )),
        max_held_bytes: to_usize(positive(s.max_held_bytes, "server.max_held_bytes", problems)),
        header_hold: Duration::from_millis(s.header_hold_ms),
        connect_timeout: Duration::from_secs(positive(
            s.connect_timeout_secs,
            "server.connect_timeout_secs",
            problems,
        )),
        first_byte_timeout: Duration::from_secs(positive(
            s.first_byte_timeout_secs,
            "server.first_byte_timeout_secs",
            problems,
        )),
        idle_timeout: Duration::from_secs(positive(
            s.idle_timeout_secs,
            "server.idle_timeout_secs",
            problems,
        )),
        bypass_header: s.bypass_header.as_ref().map(|h| h.to_ascii_lowercase()),
        drain_timeout: Duration::from_secs(s.drain_timeout_secs),
        keepalive: Duration::from_secs(positive(s.keepalive_secs, "server.keepalive_secs", problems)),
        client_header_timeout: Duration::from_secs(positive(
            s.client_header_timeout_secs,
            "server.client_header_timeout_secs",
            problems,
        )),
        client_body_timeout: Duration::from_secs(positive(
            s.client_body_timeout_secs,
            "server.client_body_timeout_secs",
            problems,
        )),
        max_connections: to_usize(positive(s.max_connections, "server.max_connections", problems)),
        listen_backlog: u32::try_from(positive(s.listen_backlog, "server.listen_backlog", problems))
            .unwrap_or(u32::MAX),
        workers: workers(s.workers, problems),
    }
}

/// `server.workers`: 0 (one per core) to 1024.
fn workers(n: u64, problems: &mut Problems) -> usize {
    if n > 1024 {
        problems.push(
            "server.workers",
            format!("must be between 0 (one per core) and 1024, got {n}"),
        );
        return 0;
    }
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The admin `Host` allow-list: the configured names, lowercased, or the
/// loopback names and the admin listen address.
fn admin_allowed_hosts(
    hosts: Option<&[String]>,
    admin_listen: SocketAddr,
    problems: &mut Problems,
) -> Vec<String> {
    let Some(hosts) = hosts else {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(str::to_owned).into();
        let own = admin_listen.ip().to_string();
        if !hosts.contains(&own) {
            hosts.push(own);
        }
        return hosts;
    };
    let bare = |h: &str| {
        h.trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase()
    };
    for (i, host) in hosts.iter().enumerate() {
        let name = bare(host);
        let port = name.contains(':') && name.parse::<std::net::Ipv6Addr>().is_err();
        if name.is_empty() || name.contains(['/', ' ', '@']) || port {
            problems.push(
                format!("server.admin_allowed_hosts[{i}]"),
                format!("{host:?} is not a host name or IP address without a port (or \"*\")"),
            );
        }
    }
    hosts.iter().map(|h| bare(h)).collect()
}

fn validate_routes(raw: &RawConfig, problems: &mut Problems) -> Vec<Route> {
    if raw.routes.is_empty() {
        problems.push("routes", "at least one [[routes]] entry is needed");
    }
    let mut routes: Vec<Route> = Vec::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let base = format!("routes[{i}]");
        let provider = Provider::parse(&r.provider).unwrap_or_else(|| {
            problems.push(
                format!("{base}.provider"),
                format!(
                    "{:?} is not one of \"openai\", \"gemini\", \"anthropic\", \"ollama\", \"bedrock\"",
                    r.provider
                ),
            );
            Provider::Openai
        });
        if !r.prefix.is_empty() && !r.prefix.starts_with('/') {
            problems.push(
                format!("{base}.prefix"),
                format!("{:?} must start with '/'", r.prefix),
            );
        }
        let prefix = r.prefix.trim_end_matches('/').to_owned();
        let upstream = match Url::parse(&r.upstream) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Some(url),
            Ok(url) if url.host().is_some() => {
                problems.push(
                    format!("{base}.upstream"),
                    format!("{:?} is not an http:// or https:// URL", r.upstream),
                );
                None
            }
            _ => {
                problems.push(
                    format!("{base}.upstream"),
                    format!("{:?} is not a valid URL", r.upstream),
                );
                None
            }
        };
        // The request path is appended to the upstream's: an upstream that
        // already ends with the prefix it keeps doubles it.
        if let Some(url) = &upstream {
            let path = url.path().trim_end_matches('/');
            if !r.strip_prefix && !prefix.is_empty() && path.ends_with(&prefix) {
                problems.notice(
                    format!("{base}.upstream"),
                    format!(
                        "its path ends with the route's prefix {prefix:?} and strip_prefix is false: a request for {prefix}/chat/completions goes to {path}{prefix}/chat/completions (drop the prefix from the upstream, or set strip_prefix = true)"
                    ),
                );
            }
        }
        if routes.iter().any(|other| other.prefix == prefix) {
            problems.push(
                format!("{base}.prefix"),
                format!("{:?} is used by an earlier route", r.prefix),
            );
        }
        if provider == Provider::Bedrock && r.escalate_model.is_some() {
            // Escalating rewrites the request, which the client signed.
            problems.push(
                format!("{base}.escalate_model"),
                "a bedrock route cannot escalate: its requests are SigV4-signed by the client",
            );
        }
        if let Some(upstream) = upstream {
            routes.push(Route {
                prefix,
                provider,
                upstream,
                strip_prefix: r.strip_prefix,
                escalation: escalate::RouteEscalation::validate(r, &base, problems),
            });
        }
    }
    escalate::check_targets(&routes, &raw.routes, problems);
    routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
    routes
}

/// Environment variables that override the file, for containers.
///
/// - `LOOPGUARD_LISTEN`: `server.listen`
/// - `LOOPGUARD_ADMIN_LISTEN`: `server.admin_listen`
/// - `LOOPGUARD_ADMIN_TOKEN`: `server.admin_token`
/// - `LOOPGUARD_STATE_URL`: `state.url` (its password is never shown)
/// - `LOOPGUARD_OPENAI_UPSTREAM`, `LOOPGUARD_GEMINI_UPSTREAM`,
///   `LOOPGUARD_ANTHROPIC_UPSTREAM`: the `upstream` of every route of that
///   provider.
///
/// # Errors
/// A [`ConfigError`] naming the variable when its value is invalid.
pub fn apply_env(config: &mut Config, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let mut problems = Problems::default();
    if let Some(v) = get("LOOPGUARD_LISTEN") {
        config.server.listen = parse_addr(&v, "env LOOPGUARD_LISTEN", &mut problems);
    }
    if let Some(v) = get("LOOPGUARD_ADMIN_LISTEN") {
        config.server.admin_listen = parse_addr(&v, "env LOOPGUARD_ADMIN_LISTEN", &mut problems);
    }
    if let Some(v) = get("LOOPGUARD_ADMIN_TOKEN") {
        config.server.admin_token = Some(v).filter(|t| !t.is_empty());
    }
    if let Some(v) = get("LOOPGUARD_STATE_URL") {
        match state::parse_url(&v) {
            Ok(url) => config.state.url = Some(url),
            Err(e) => problems.push("env LOOPGUARD_STATE_URL", e),
        }
    }
    for provider in [Provider::Openai, Provider::Gemini, Provider::Anthropic] {
        let var = format!("LOOPGUARD_{}_UPSTREAM", provider.name().to_ascii_uppercase());
        if let Some(v) = get(&var) {
            match Url::parse(&v) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {
                    for route in config.routes.iter_mut().filter(|r| r.provider == provider) {
                        route.upstream = url.clone();
                    }
                }
                _ => problems.push(format!("env {var}"), format!("{v:?} is not a valid URL")),
            }
        }
    }
    if problems.errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigError {
            source_name: "environment".to_owned(),
            errors: problems.errors,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
