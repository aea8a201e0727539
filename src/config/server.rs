//! `[server]`: the listeners, the size caps and the timeouts, validated
//! into [`ServerConfig`].

use std::net::SocketAddr;
use std::time::Duration;

use super::problems::Problems;
use super::raw::{RawConfig, RawServer};

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
    /// [`crate::budget`]).
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

/// A socket address, or a problem at `path` (and a placeholder).
pub(super) fn parse_addr(text: &str, path: &str, problems: &mut Problems) -> SocketAddr {
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

/// `[server]` validated: each key's own range, then the keys that must
/// agree with each other ([`check_pairs`]).
pub(super) fn validate_server(raw: &RawConfig, problems: &mut Problems) -> ServerConfig {
    let s = &raw.server;
    let listen = parse_addr(&s.listen, "server.listen", problems);
    let admin_listen = parse_addr(&s.admin_listen, "server.admin_listen", problems);
    check_pairs(s, listen, admin_listen, problems);
    let admin_allowed_hosts = admin_allowed_hosts(s.admin_allowed_hosts.as_deref(), admin_listen, problems);
    let mut keys = Positive(problems);
    ServerConfig {
        listen,
        admin_listen,
        admin_token: s.admin_token.clone().filter(|t| !t.is_empty()),
        admin_allowed_hosts,
        max_request_bytes: keys.size(s.max_request_bytes, "server.max_request_bytes"),
        max_request_bytes_in_flight: to_usize(s.max_request_bytes_in_flight),
        offload_body_bytes: to_usize(s.offload_body_bytes),
        parse_budget_bytes: keys.size(s.parse_budget_bytes, "server.parse_budget_bytes"),
        parse_budget_request_bytes: keys
            .size(s.parse_budget_request_bytes, "server.parse_budget_request_bytes"),
        max_response_bytes: keys.size(s.max_response_bytes, "server.max_response_bytes"),
        max_held_bytes: keys.size(s.max_held_bytes, "server.max_held_bytes"),
        header_hold: Duration::from_millis(s.header_hold_ms),
        connect_timeout: keys.secs(s.connect_timeout_secs, "server.connect_timeout_secs"),
        first_byte_timeout: keys.secs(s.first_byte_timeout_secs, "server.first_byte_timeout_secs"),
        idle_timeout: keys.secs(s.idle_timeout_secs, "server.idle_timeout_secs"),
        bypass_header: s.bypass_header.as_ref().map(|h| h.to_ascii_lowercase()),
        drain_timeout: Duration::from_secs(s.drain_timeout_secs),
        keepalive: keys.secs(s.keepalive_secs, "server.keepalive_secs"),
        client_header_timeout: keys.secs(s.client_header_timeout_secs, "server.client_header_timeout_secs"),
        client_body_timeout: keys.secs(s.client_body_timeout_secs, "server.client_body_timeout_secs"),
        max_connections: keys.size(s.max_connections, "server.max_connections"),
        listen_backlog: u32::try_from(keys.count(s.listen_backlog, "server.listen_backlog"))
            .unwrap_or(u32::MAX),
        workers: workers(s.workers, keys.0),
    }
}

/// The `[server]` keys that must agree with each other: the two listeners
/// apart, a valid bypass header name, one request's parse budget within
/// the total, the largest body within the in-flight cap, and (a notice) a
/// keep-alive shorter than the idle timeout.
fn check_pairs(s: &RawServer, listen: SocketAddr, admin_listen: SocketAddr, problems: &mut Problems) {
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
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Keys that must be greater than 0, each checked with its path.
struct Positive<'p>(&'p mut Problems);

impl Positive<'_> {
    fn count(&mut self, value: u64, path: &str) -> u64 {
        positive(value, path, self.0)
    }

    /// A size or count, as `usize`.
    fn size(&mut self, value: u64, path: &str) -> usize {
        to_usize(self.count(value, path))
    }

    /// Whole seconds.
    fn secs(&mut self, value: u64, path: &str) -> Duration {
        Duration::from_secs(self.count(value, path))
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
