//! The raw configuration: serde structs that mirror the TOML file exactly.
//!
//! Every struct rejects unknown keys, so a typo is an error naming the key.
//! Defaults live in `default_*` functions; [`super::load_str`] turns this into the
//! validated [`super::Config`].

use serde::Deserialize;

use super::detection_raw::{RawAgent, RawLoopDetection};

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[server]`.
    #[serde(default)]
    pub server: RawServer,
    /// `[[routes]]`.
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    /// `[sessions]`.
    #[serde(default)]
    pub sessions: RawSessions,
    /// `[loop_detection]`.
    #[serde(default)]
    pub loop_detection: RawLoopDetection,
    /// `[state]`.
    #[serde(default)]
    pub state: super::state::RawState,
    /// `[[agents]]`.
    #[serde(default)]
    pub agents: Vec<RawAgent>,
    /// `[recording]`.
    #[serde(default)]
    pub recording: super::recording::RawRecording,
    /// `[telemetry]`.
    #[serde(default)]
    pub telemetry: super::telemetry::RawTelemetry,
}

/// `[server]`: listeners, limits and timeouts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// Proxy listen address, `host:port`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Admin listen address, `host:port`.
    #[serde(default = "default_admin_listen")]
    pub admin_listen: String,
    /// Bearer token for mutating admin endpoints; none disables them.
    #[serde(default)]
    pub admin_token: Option<String>,
    /// `Host` names the admin listener answers `/admin/*` for; none: the
    /// loopback names and the admin listen address.
    #[serde(default)]
    pub admin_allowed_hosts: Option<Vec<String>>,
    /// Largest request body accepted, in bytes.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: u64,
    /// Most bytes of request bodies held at once, all requests together
    /// (as received).
    #[serde(default = "default_max_request_bytes_in_flight")]
    pub max_request_bytes_in_flight: u64,
    /// Request bodies larger than this are parsed and judged off the async
    /// workers, in bytes.
    #[serde(default = "default_offload_body_bytes")]
    pub offload_body_bytes: u64,
    /// Most memory the parsed forms of all request bodies in flight may
    /// hold, in bytes (estimated, see `budget`).
    #[serde(default = "default_parse_budget_bytes")]
    pub parse_budget_bytes: u64,
    /// Most memory the parsed form of one request body may hold, in bytes.
    #[serde(default = "default_parse_budget_request_bytes")]
    pub parse_budget_request_bytes: u64,
    /// Largest non-streaming response body that is judged, in bytes.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// Largest amount of held tool-call events per response, in bytes.
    #[serde(default = "default_max_held_bytes")]
    pub max_held_bytes: u64,
    /// Longest time response headers are held, in milliseconds.
    #[serde(default = "default_header_hold_ms")]
    pub header_hold_ms: u64,
    /// Upstream connect timeout, in seconds.
    #[serde(default = "default_connect_timeout_secs")]
    pub connect_timeout_secs: u64,
    /// Time allowed until the upstream's response headers, in seconds.
    #[serde(default = "default_first_byte_timeout_secs")]
    pub first_byte_timeout_secs: u64,
    /// Longest silence between two body reads from the upstream, in seconds.
    #[serde(default = "default_idle_timeout_secs")]
    pub idle_timeout_secs: u64,
    /// Name of a request header that, when present, skips detection.
    #[serde(default)]
    pub bypass_header: Option<String>,
    /// How long a shutdown waits for in-flight requests, in seconds.
    #[serde(default = "default_drain_timeout_secs")]
    pub drain_timeout_secs: u64,
    /// While a tool call is held after the headers went out, keep-alive
    /// bytes are written this often, in seconds.
    #[serde(default = "default_keepalive_secs")]
    pub keepalive_secs: u64,
    /// Longest time a client may take to send a request's headers, in seconds.
    #[serde(default = "default_client_header_timeout_secs")]
    pub client_header_timeout_secs: u64,
    /// Longest time a client may take to send a request's body, in seconds.
    #[serde(default = "default_client_body_timeout_secs")]
    pub client_body_timeout_secs: u64,
    /// Most client connections served at once; more wait in the backlog.
    #[serde(default = "default_max_connections")]
    pub max_connections: u64,
    /// Listen backlog of the proxy listener (capped by the kernel's `somaxconn`).
    #[serde(default = "default_listen_backlog")]
    pub listen_backlog: u64,
    /// Proxy workers (single-threaded runtimes); 0 = one per core.
    #[serde(default)]
    pub workers: u64,
}

impl Default for RawServer {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            admin_listen: default_admin_listen(),
            admin_token: None,
            admin_allowed_hosts: None,
            max_request_bytes: default_max_request_bytes(),
            max_request_bytes_in_flight: default_max_request_bytes_in_flight(),
            offload_body_bytes: default_offload_body_bytes(),
            parse_budget_bytes: default_parse_budget_bytes(),
            parse_budget_request_bytes: default_parse_budget_request_bytes(),
            max_response_bytes: default_max_response_bytes(),
            max_held_bytes: default_max_held_bytes(),
            header_hold_ms: default_header_hold_ms(),
            connect_timeout_secs: default_connect_timeout_secs(),
            first_byte_timeout_secs: default_first_byte_timeout_secs(),
            idle_timeout_secs: default_idle_timeout_secs(),
            bypass_header: None,
            drain_timeout_secs: default_drain_timeout_secs(),
            keepalive_secs: default_keepalive_secs(),
            client_header_timeout_secs: default_client_header_timeout_secs(),
            client_body_timeout_secs: default_client_body_timeout_secs(),
            max_connections: default_max_connections(),
            listen_backlog: default_listen_backlog(),
            workers: 0,
        }
    }
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// Path prefix, matched on whole segments.
    pub prefix: String,
    /// `openai`, `gemini` or `anthropic`.
    pub provider: String,
    /// Base URL of the upstream.
    pub upstream: String,
    /// Remove the prefix before appending the path to `upstream`.
    #[serde(default)]
    pub strip_prefix: bool,
    /// The model a looping session is sent to by the `escalate` action.
    #[serde(default)]
    pub escalate_model: Option<String>,
    /// The prefix of another route of the same provider that serves
    /// `escalate_model` (default: this route).
    #[serde(default)]
    pub escalate_upstream: Option<String>,
    /// With `escalate_upstream`: the environment variable holding that
    /// upstream's credential (the client's is never sent there).
    #[serde(default)]
    pub escalate_credential_env: Option<String>,
}

/// `[sessions]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    /// Header carrying an explicit session key.
    #[serde(default = "default_session_header")]
    pub header: String,
    /// Most sessions kept at once.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u64,
    /// A session idle this long is forgotten, in seconds.
    #[serde(default = "default_idle_ttl_secs")]
    pub idle_ttl_secs: u64,
    /// Most memory the parsed histories kept for reuse take, in MiB.
    #[serde(default = "default_parse_cache_mib")]
    pub parse_cache_mib: u64,
}

impl Default for RawSessions {
    fn default() -> Self {
        Self {
            header: default_session_header(),
            max_sessions: default_max_sessions(),
            idle_ttl_secs: default_idle_ttl_secs(),
            parse_cache_mib: default_parse_cache_mib(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}
fn default_admin_listen() -> String {
    "127.0.0.1:9090".to_owned()
}
fn default_max_request_bytes() -> u64 {
    64 * 1024 * 1024
}
fn default_max_request_bytes_in_flight() -> u64 {
    128 << 20
}
fn default_max_response_bytes() -> u64 {
    16 * 1024 * 1024
}
fn default_max_held_bytes() -> u64 {
    1024 * 1024
}
fn default_header_hold_ms() -> u64 {
    1500
}
fn default_connect_timeout_secs() -> u64 {
    10
}
fn default_first_byte_timeout_secs() -> u64 {
    300
}
fn default_idle_timeout_secs() -> u64 {
    300
}
fn default_offload_body_bytes() -> u64 {
    256 * 1024
}
fn default_parse_budget_bytes() -> u64 {
    128 << 20
}
fn default_parse_budget_request_bytes() -> u64 {
    96 << 20
}
fn default_keepalive_secs() -> u64 {
    5
}
fn default_client_header_timeout_secs() -> u64 {
    30
}
fn default_client_body_timeout_secs() -> u64 {
    120
}
fn default_max_connections() -> u64 {
    4096
}
fn default_listen_backlog() -> u64 {
    4096
}
fn default_drain_timeout_secs() -> u64 {
    30
}
fn default_session_header() -> String {
    "x-loopguard-session".to_owned()
}
fn default_parse_cache_mib() -> u64 {
    (crate::session::chain::BUDGET_BYTES >> 20) as u64
}
fn default_max_sessions() -> u64 {
    10_000
}
fn default_idle_ttl_secs() -> u64 {
    3600
}
