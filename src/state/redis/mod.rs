//! The Redis client of the shared state: multiplexed connections (redis-rs
//! `ConnectionManager`, which reconnects on its own), three Lua scripts
//! (load, compare-and-set save, delete), every call bounded by `timeout_ms`.
//!
//! Connections: one made on the runtime that started the store (the admin
//! API, and any caller without a connection of its own), and one per proxy
//! worker, made on that worker's runtime ([`Shared::connect_worker`]), so a
//! request's round trip is driven on the thread that serves it: no hand-off
//! to another runtime's thread and back (two cross-thread wake-ups a round
//! trip, issue #15's latency goal). A worker whose connection is not up yet
//! uses the first one.
//!
//! Keys (all with the session TTL, `sessions.idle_ttl_secs`):
//! - `<prefix>s:<session key>`: hash `v` (version, bumped by every write),
//!   `b` (the version the history started at, drawn at random: see
//!   [`first_version`]), `d` (the session, JSON; empty: deleted through the
//!   admin API), `t` (the token of the delete that left it empty);
//! - `<prefix>r:<response id>`: hash `t` (tenant hash), `s` (session key),
//!   `c` (the calls the response carried, JSON);
//! - `<prefix>l:<tenant>:<lane>`: the lane's latest fingerprinted session;
//! - `<prefix>_`: never written; the scripts get it for a key they are not
//!   to touch, so every key a call names is under the prefix (what a Redis
//!   ACL restricting the user to `~<prefix>*` allows).
//!
//! The load script builds the session key of a chained response from its
//! record, so the store must be one Redis (or a Valkey/Redis-compatible
//! server), not a Redis Cluster.
//!
//! Here: [`Shared`] and what its calls answer; `conn`: the connections and
//! the one way of calling (timeouts, the pause while the store is down);
//! `scripts`: the Lua; `session`: a session's round trips (load, save,
//! the process copy written, Responses records); `copy`: the process copy
//! and the stored form; `admin`: the admin API's calls.

mod admin;
mod conn;
mod copy;
mod scripts;
mod session;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::Script;
use redis::aio::ConnectionManager;

use crate::config::state::StateConfig;
use crate::transcript::ToolCall;
pub(crate) use copy::install;
#[cfg(test)]
pub(crate) use copy::snapshot;

/// Lock stripes serialising one session's load → detect → save on this
/// replica (other replicas are kept apart by the version check).
const STRIPES: usize = 64;

/// Proxy workers with a connection of their own; workers past this many
/// share the first connection.
const WORKER_SLOTS: usize = 64;

/// The shared store: its connections (once made) and the scripts.
pub struct Shared {
    client: redis::Client,
    /// The first connection, made on the runtime that started the store.
    conn: ArcSwapOption<ConnectionManager>,
    /// Each proxy worker's connection, made on its runtime (by worker index).
    workers: Vec<ArcSwapOption<ConnectionManager>>,
    shown_url: String,
    /// What a script gets for a key it is not to read or write:
    /// `<prefix>_`, a key under the prefix (a Redis user restricted by an
    /// ACL to the prefix's keys may name it; an empty key name was refused)
    /// that is never written.
    unused: String,
    prefix: String,
    timeout: Duration,
    ttl_secs: u64,
    password: Option<String>,
    load: Script,
    save: Script,
    delete: Script,
    stripes: Vec<tokio::sync::Mutex<()>>,
    /// Calls that failed in a row, and until when (ms since `epoch`) calls
    /// are not made after `DOWN_AFTER` of them (see `Shared::call`).
    failures: std::sync::atomic::AtomicU32,
    down_until_ms: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("prefix", &self.prefix)
            .field("connected", &self.conn.load().is_some())
            .field(
                "worker_connections",
                &self.workers.iter().filter(|c| c.load().is_some()).count(),
            )
            .finish()
    }
}

/// What [`Shared::load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The chained response's session key and calls (same tenant only).
    pub response: Option<(String, Vec<ToolCall>)>,
    /// The session: (version, blob). An empty blob: deleted, or the
    /// version is the one the caller said it knew (then left out).
    pub session: Option<(u64, Vec<u8>)>,
    /// No session under the key: the lane's latest session (key, version, blob).
    pub lane: Option<(String, u64, Vec<u8>)>,
}

/// The answer of a compare-and-set write.
#[derive(Debug)]
pub enum Saved {
    /// Written as this version.
    Written(u64),
    /// Another write came first: the stored version and blob.
    Conflict(u64, Option<Vec<u8>>),
}

/// What [`Shared::write_copy`] did with the process copy of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrote {
    /// Written as this version.
    Written(u64),
    /// Another version was stored (another replica's write, an admin
    /// `DELETE`) and is now the process copy: what changed the copy must
    /// run again on it.
    Replaced,
    /// Nothing stored (flushed, expired): the copy stands at version 0, to
    /// be written as the first version.
    Gone,
    /// Not written: the copy is past [`MAX_STATE_BYTES`](crate::state::MAX_STATE_BYTES).
    Oversize,
    /// Not written: the store failed (the write is noted as unanswered, see
    /// [`Session::unacked`](crate::session::Session::unacked)).
    Failed,
}

/// A Responses response record as written: tenant hash, session key and
/// the calls in their bounded stored form ([`super::record`]).
#[derive(Debug, Clone)]
pub struct StoredRecord {
    /// Hash of the credential of the request that produced it.
    pub tenant: String,
    /// The session key.
    pub session: String,
    /// [`super::record::encode`]'s JSON.
    pub calls: Vec<u8>,
}

impl Shared {
    /// The store for `[state]`; connects in the background (retrying from
    /// every half second to every 10 s until the first connection; after that the connection
    /// manager reconnects by itself). Store calls before the first
    /// connection fail fast and are counted.
    pub fn start(config: &StateConfig, idle_ttl: Duration) -> Option<Arc<Self>> {
        let url = config.url.as_ref()?;
        // The counters an alert watches exist from the start, at 0.
        for op in ["connect", "load", "save", "response", "delete", "get", "list"] {
            metrics::counter!("loopguard_state_errors_total", "op" => op).increment(0);
        }
        metrics::counter!("loopguard_state_conflicts_total").increment(0);
        metrics::counter!("loopguard_state_skipped_total").increment(0);
        let password = url::Url::parse(url.secret())
            .ok()
            .and_then(|u| u.password().map(str::to_owned));
        let client = match redis::Client::open(url.secret()) {
            Ok(c) => c,
            Err(e) => {
                let text = conn::scrub(&e, password.as_deref());
                tracing::error!(url = %url, error = %text, "state store URL rejected; sessions stay in the process");
                return None;
            }
        };
        let shared = Arc::new(Self {
            client,
            conn: ArcSwapOption::empty(),
            workers: (0..WORKER_SLOTS).map(|_| ArcSwapOption::empty()).collect(),
            shown_url: url.to_string(),
            unused: format!("{}_", config.key_prefix),
            prefix: config.key_prefix.clone(),
            timeout: config.timeout,
            ttl_secs: idle_ttl.as_secs().max(1),
            password,
            load: Script::new(scripts::LOAD),
            save: Script::new(scripts::SAVE),
            delete: Script::new(scripts::DELETE),
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            failures: std::sync::atomic::AtomicU32::new(0),
            down_until_ms: std::sync::atomic::AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            shared.connect(&runtime, None);
        }
        Some(shared)
    }

    fn session_key(&self, key: &str) -> String {
        format!("{}s:{key}", self.prefix)
    }

    fn lane_key(&self, tenant: &str, lane: u64) -> String {
        format!("{}l:{tenant}:{lane:016x}", self.prefix)
    }

    /// The lock serialising this replica's work on one session.
    pub async fn lock(&self, key: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let i = crate::detect::outcome::hash64(key.as_bytes()) as usize % STRIPES;
        self.stripes[i].lock().await
    }
}
