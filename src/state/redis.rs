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

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::ConnectionManager;
use redis::{Script, Value};

use super::{MAX_RETRIES, MAX_STATE_BYTES, count_error};
use crate::config::state::StateConfig;
use crate::session::{Session, Store};
use crate::transcript::ToolCall;

const LOAD: &str = r"
local out = {false, false, false, false, false, false, false}
local skey = KEYS[1]
if KEYS[2] ~= ARGV[4] then
  local r = redis.call('HMGET', KEYS[2], 't', 's', 'c')
  if r[1] == ARGV[2] and r[2] then
    out[1] = r[2]
    out[2] = r[3]
    skey = ARGV[1] .. r[2]
  end
end
local s = redis.call('HMGET', skey, 'v', 'd')
out[3] = s[1]
if skey == KEYS[1] and s[1] and s[1] == ARGV[3] then
  out[4] = ''
else
  out[4] = s[2]
end
if KEYS[3] ~= ARGV[4] and not s[1] then
  local lk = redis.call('GET', KEYS[3])
  if lk then
    local l = redis.call('HMGET', ARGV[1] .. lk, 'v', 'd')
    if l[1] then
      out[5] = lk
      out[6] = l[1]
      out[7] = l[2]
    end
  end
end
return out
";

const SAVE: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then
  return {0, v, redis.call('HGET', KEYS[1], 'd')}
end
local nv = v + 1
if v == 0 then
  nv = tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'v', ARGV[5], 'd', ARGV[2], 'b', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'v', string.format('%d', nv), 'd', ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
if KEYS[2] ~= ARGV[6] then
  redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[3])
end
return {1, nv}
";

const DELETE: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local d = redis.call('HGET', KEYS[1], 'd')
if v == 0 or d == '' then
  if d == '' and redis.call('HGET', KEYS[1], 't') == ARGV[2] then
    return 1
  end
  return 0
end
redis.call('HSET', KEYS[1], 'v', string.format('%d', v + 1), 'd', '', 't', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
";

/// The longest wait between two attempts at the first connection.
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);

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
    /// are not made after [`DOWN_AFTER`] of them (see [`Shared::call`]).
    failures: std::sync::atomic::AtomicU32,
    down_until_ms: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
}

/// Failed calls in a row after which the store is taken for down.
const DOWN_AFTER: u32 = 3;
/// How long calls are not made once the store is taken for down: then one
/// call tries again (a success ends it, a failure starts another pause).
const DOWN_FOR: Duration = Duration::from_millis(500);

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
    /// Not written: the copy is past [`MAX_STATE_BYTES`].
    Oversize,
    /// Not written: the store failed (the write is noted as unanswered, see
    /// [`Session::unacked`]).
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
                let text = scrub(&e, password.as_deref());
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
            load: Script::new(LOAD),
            save: Script::new(SAVE),
            delete: Script::new(DELETE),
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

    /// Makes proxy worker `index`'s own connection, on the runtime this is
    /// called from (the worker's), in the background. Until it is up, and
    /// for a worker index past the slots, the worker uses the first
    /// connection.
    pub fn connect_worker(self: &Arc<Self>, index: usize) {
        if index >= self.workers.len() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.connect(&runtime, Some(index));
        }
    }

    /// Connects in the background on `runtime` (retrying, half a second
    /// apart doubling to 10 s, until the first connection; after that the connection manager
    /// reconnects by itself) into the first slot or worker `slot`'s.
    fn connect(self: &Arc<Self>, runtime: &tokio::runtime::Handle, slot: Option<usize>) {
        let connecting = Arc::clone(self);
        crate::task::spawn_on(runtime, async move {
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(Some(Duration::from_secs(2)))
                .set_max_delay(Duration::from_secs(1))
                // One retry inside the client: this loop retries the first
                // connection and says why at once (six, the default, kept a
                // wrong password or a closed port unreported for five
                // seconds); after a connection is lost, a call that fails
                // starts the next reconnection.
                .set_number_of_retries(1);
            let target = match slot {
                Some(i) => &connecting.workers[i],
                None => &connecting.conn,
            };
            // Half a second after the first failure, doubling up to
            // `CONNECT_BACKOFF_MAX`: a store that is down for long (or a
            // wrong password) is logged a few hundred times an hour, not
            // thousands.
            let mut backoff = Duration::from_millis(500);
            loop {
                match ConnectionManager::new_with_config(connecting.client.clone(), config.clone()).await {
                    Ok(conn) => {
                        if slot.is_none() {
                            tracing::info!(url = %connecting.shown_url, "state store connected");
                        }
                        target.store(Some(Arc::new(conn)));
                        return;
                    }
                    Err(e) => {
                        // Each worker retries too; the first connection speaks for all.
                        if slot.is_none() {
                            tracing::warn!(
                                url = %connecting.shown_url,
                                error = %connecting.clean(&e),
                                retry_in_ms = backoff.as_millis() as u64,
                                "cannot connect to the state store (down, unreachable, a wrong password or database, TLS on one side only); sessions stay on this replica until it connects"
                            );
                            count_error("connect");
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(CONNECT_BACKOFF_MAX);
                    }
                }
            }
        });
    }

    /// The connection for a call made here: the calling proxy worker's own
    /// when it is up, else the first one.
    fn connection(&self) -> Option<Arc<ConnectionManager>> {
        crate::workers::current()
            .and_then(|i| self.workers.get(i))
            .and_then(ArcSwapOption::load_full)
            .or_else(|| self.conn.load_full())
    }

    /// An error's text with the URL password, if any, blanked out.
    fn clean(&self, e: &redis::RedisError) -> String {
        scrub(e, self.password.as_deref())
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

    /// Runs one store call within `timeout_ms`; a failure is logged and
    /// counted under `op`. After [`DOWN_AFTER`] failures in a row the store
    /// is taken for down: for [`DOWN_FOR`] calls fail at once (counted under
    /// `op` and in `loopguard_state_skipped_total`), so that a request does
    /// not wait `timeout_ms` for a store that is not answering; then one
    /// call tries again. The admin API's calls (`get`, `list`, `delete`)
    /// are always made. A call that answers records its wall time in
    /// `loopguard_state_call_seconds{op}`.
    async fn call<T, F>(&self, op: &'static str, run: impl Fn(ConnectionManager) -> F) -> Option<T>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        use std::sync::atomic::Ordering::Relaxed;
        let now_ms = || u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        // The admin API's calls are not on a request's path: an operator
        // gets Redis's answer (or its failure), not the pause's.
        let admin = matches!(op, "delete" | "get" | "list");
        if !admin && now_ms() < self.down_until_ms.load(Relaxed) {
            count_error(op);
            metrics::counter!("loopguard_state_skipped_total").increment(1);
            return None;
        }
        let Some(conn) = self.connection() else {
            count_error(op);
            tracing::debug!(
                op,
                "state store not connected yet; judged on this replica's state"
            );
            return None;
        };
        let started = std::time::Instant::now();
        let attempts = async {
            match run(ConnectionManager::clone(&conn)).await {
                // A connection lost since the last call (Redis restarted, a
                // reconnection that failed while it was down): the client
                // reconnects on this error, and the call waits for that
                // connection, within the same `timeout_ms`. Every call is
                // safe to make twice: reads, and writes that set the same
                // values; a compare-and-set write that was applied before
                // its answer was lost finds its own blob stored and counts
                // as written ([`Shared::save`]; only another replica's write
                // landing between the two attempts would have this request
                // judged again on a state that holds it); a delete made
                // twice finds its own tombstone by its token.
                Err(e) if e.is_connection_dropped() => {
                    tracing::debug!(op, error = %self.clean(&e), "state store connection lost; calling again on a new one");
                    run(ConnectionManager::clone(&conn)).await
                }
                answer => answer,
            }
        };
        let result = tokio::time::timeout(self.timeout, attempts).await;
        if matches!(result, Ok(Ok(_))) {
            metrics::histogram!("loopguard_state_call_seconds", "op" => op)
                .record(started.elapsed().as_secs_f64());
            if self.failures.swap(0, Relaxed) >= DOWN_AFTER {
                tracing::info!(op, "state store answering again; sessions are shared again");
            }
        } else {
            let failed = self.failures.fetch_add(1, Relaxed) + 1;
            if failed >= DOWN_AFTER {
                let pause = u64::try_from(DOWN_FOR.as_millis()).unwrap_or(u64::MAX);
                self.down_until_ms.store(now_ms().saturating_add(pause), Relaxed);
                if failed == DOWN_AFTER {
                    tracing::warn!(
                        failed,
                        pause_ms = pause,
                        "state store failing: called again only every pause until it answers; requests judged on this replica's state"
                    );
                }
            }
        }
        match result {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                count_error(op);
                tracing::warn!(op, error = %self.clean(&e), "state store error; judged on this replica's state");
                None
            }
            Err(_) => {
                count_error(op);
                tracing::warn!(
                    op,
                    timeout_ms = self.timeout.as_millis() as u64,
                    "state store did not answer within timeout_ms (down, unreachable or slow); judged on this replica's state"
                );
                None
            }
        }
    }

    /// One round trip: the session under `key`, or — when `response_id`
    /// names a response of `tenant` — the session that response belongs to
    /// (and its calls), and, when no session is stored under the key, the
    /// latest session of the fingerprinted `lane`. `known`: the version of
    /// `key` this replica holds (read or written before); when the store
    /// holds that same version its blob may be left out (empty).
    ///
    /// A request that chains no response, for a session this replica has
    /// seen stored, is read with one plain `HMGET` (a script costs the
    /// server several times as much; issue #15's latency goal). When that
    /// finds nothing stored (expired, flushed) it is the whole answer,
    /// unless a fingerprinted lane's latest session is wanted: then the
    /// script's load follows, a second trip, asking for whole blobs.
    pub async fn load(
        &self,
        key: &str,
        known: Option<u64>,
        tenant: &str,
        response_id: Option<&str>,
        lane: Option<u64>,
    ) -> Option<Loaded> {
        let skey = self.session_key(key);
        let mut known = known;
        if let (None, Some(_)) = (response_id, known) {
            match self.load_plain(&skey).await? {
                Some(session) => {
                    return Some(Loaded {
                        session: Some(session),
                        ..Loaded::default()
                    });
                }
                None if lane.is_none() => return Some(Loaded::default()),
                // The history this replica knew is gone from the store.
                None => known = None,
            }
        }
        let keys = [
            skey,
            response_id.map_or_else(|| self.unused.clone(), |id| format!("{}r:{id}", self.prefix)),
            lane.map_or_else(|| self.unused.clone(), |l| self.lane_key(tenant, l)),
        ];
        let prefix = format!("{}s:", self.prefix);
        let (keys, prefix) = (&keys, &prefix);
        let value: Value = self
            .call("load", move |mut conn| async move {
                self.load
                    .key(&keys[0])
                    .key(&keys[1])
                    .key(&keys[2])
                    .arg(prefix)
                    .arg(tenant)
                    .arg(known.map_or_else(String::new, |v| v.to_string()))
                    .arg(&self.unused)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        let Value::Array(items) = value else {
            count_error("decode");
            return None;
        };
        let get = |i: usize| items.get(i).and_then(bytes);
        let version = |i: usize| get(i).and_then(|b| std::str::from_utf8(&b).ok()?.parse().ok());
        let mut loaded = Loaded::default();
        if let (Some(session), Some(calls)) = (get(0), get(1)) {
            loaded.response = Some((
                String::from_utf8_lossy(&session).into_owned(),
                super::record::decode(&calls),
            ));
        }
        if let Some(v) = version(2) {
            loaded.session = Some((v, get(3).unwrap_or_default()));
        }
        if let (Some(k), Some(v)) = (get(4), version(5)) {
            loaded.lane = Some((
                String::from_utf8_lossy(&k).into_owned(),
                v,
                get(6).unwrap_or_default(),
            ));
        }
        Some(loaded)
    }

    /// The session stored under `skey` (version, blob), by a plain
    /// `HMGET`. `Some(None)`: nothing stored; `None`: the store failed or
    /// answered a version that is no number (counted).
    async fn load_plain(&self, skey: &str) -> Option<Option<(u64, Vec<u8>)>> {
        let (version, blob): (Option<u64>, Option<Vec<u8>>) = self
            .call("load", move |mut conn| async move {
                redis::cmd("HMGET")
                    .arg(skey)
                    .arg("v")
                    .arg("d")
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Some(version.map(|v| (v, blob.unwrap_or_default())))
    }

    /// Compare-and-set: writes `blob` as the session `key` if the stored
    /// version is still `expected` (also noting it as the latest session of
    /// `lane_index` = (tenant, lane), for fingerprinted sessions). A stored
    /// blob equal to `blob` under another version is this write, applied
    /// before its answer was lost: [`Saved::Written`] with that version.
    pub async fn save(
        &self,
        key: &str,
        lane_index: Option<(&str, u64)>,
        expected: u64,
        blob: &[u8],
    ) -> Option<Saved> {
        let skey = self.session_key(key);
        let lkey = lane_index.map_or_else(|| self.unused.clone(), |(t, l)| self.lane_key(t, l));
        let (skey, lkey) = (&skey, &lkey);
        let value: Value = self
            .call("save", move |mut conn| async move {
                self.save
                    .key(skey)
                    .key(lkey)
                    .arg(expected)
                    .arg(blob)
                    .arg(self.ttl_secs)
                    .arg(key)
                    // Read only when a history starts (expected 0): a write
                    // expecting a version of a missing history is a conflict.
                    .arg(if expected == 0 { first_version(key) } else { 0 })
                    .arg(&self.unused)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        let Value::Array(items) = value else {
            count_error("decode");
            return None;
        };
        let version = items.get(1).and_then(int).unwrap_or(0);
        match items.first().and_then(int) {
            Some(1) => Some(Saved::Written(version)),
            Some(0) => {
                let stored = items.get(2).and_then(bytes);
                // This write, applied before its answer was lost (the call
                // was made again on a new connection, see `call`): written.
                if stored.as_deref() == Some(blob) {
                    return Some(Saved::Written(version));
                }
                // Nothing stored (flushed, expired) is no other replica's write.
                if version > 0 {
                    metrics::counter!("loopguard_state_conflicts_total").increment(1);
                }
                Some(Saved::Conflict(version, stored))
            }
            _ => {
                count_error("decode");
                None
            }
        }
    }

    /// One compare-and-set write of the process copy of session `key` on
    /// its version (see [`Shared::save`]), and what follows in the process
    /// store: the version written, the stored state installed, the version
    /// reset to 0, or the write noted as unanswered. A stored state that is
    /// this replica's own write whose answer never came (it landed late) is
    /// not installed: the copy is its successor and is written again on it.
    pub async fn write_copy(&self, store: &Store, key: &str, lane_index: Option<(&str, u64)>) -> Wrote {
        // A second attempt only after this replica's own late write (which
        // clears the unanswered writes, so it cannot match twice).
        for _ in 0..2 {
            let Some((expected, blob)) = snapshot(store, key) else {
                return Wrote::Oversize;
            };
            match self.save(key, lane_index, expected, &blob).await {
                Some(Saved::Written(version)) => {
                    set_version(store, key, version);
                    return Wrote::Written(version);
                }
                Some(Saved::Conflict(0, _)) => {
                    let _ = install(store, key, 0, &[]);
                    return Wrote::Gone;
                }
                Some(Saved::Conflict(version, fresh)) => {
                    if install(store, key, version, fresh.as_deref().unwrap_or_default()) {
                        return Wrote::Replaced;
                    }
                }
                None => {
                    note_unacked(store, key, &blob);
                    return Wrote::Failed;
                }
            }
        }
        Wrote::Failed
    }

    /// Writes the process copy of session `key` ([`Shared::write_copy`]);
    /// when another version was stored, applies `redo` to it and tries
    /// again (at most [`MAX_RETRIES`] times). `true` when written.
    pub async fn save_with(
        &self,
        store: &Store,
        key: &str,
        lane_index: Option<(&str, u64)>,
        mut redo: impl FnMut(&mut Session),
    ) -> bool {
        let _held = self.lock(key).await;
        for _ in 0..=MAX_RETRIES {
            match self.write_copy(store, key, lane_index).await {
                Wrote::Written(_) => return true,
                Wrote::Replaced => {
                    if let Some(session) = store.get(key) {
                        redo(&mut session.lock().unwrap_or_else(PoisonError::into_inner));
                    }
                }
                Wrote::Gone => {}
                Wrote::Oversize | Wrote::Failed => return false,
            }
        }
        count_error("conflict");
        false
    }

    /// Records Responses responses (id → tenant, session, calls).
    pub async fn put_responses(&self, responses: &[(String, StoredRecord)]) {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (id, r) in responses {
            let calls = &r.calls;
            let key = format!("{}r:{id}", self.prefix);
            pipe.hset_multiple(
                &key,
                &[
                    ("t", r.tenant.as_bytes()),
                    ("s", r.session.as_bytes()),
                    ("c", calls.as_slice()),
                ],
            )
            .ignore()
            .expire(&key, i64::try_from(self.ttl_secs).unwrap_or(i64::MAX))
            .ignore();
        }
        let _: Option<()> = self
            .call("response", |mut conn| {
                let pipe = &pipe;
                async move { pipe.query_async(&mut conn).await }
            })
            .await;
    }

    /// Deletes session `key` for every replica (a tombstone the others see
    /// on their next load). `Some(true)` when there was one to delete.
    pub async fn delete(&self, key: &str) -> Option<bool> {
        let skey = self.session_key(key);
        let skey = &skey;
        // Names this delete's tombstone: made again after a lost answer,
        // the call finds its own and still says there was a session.
        let token = format!("{:016x}", rand::random::<u64>());
        let token = &token;
        let n: i64 = self
            .call("delete", move |mut conn| async move {
                self.delete
                    .key(skey)
                    .arg(self.ttl_secs)
                    .arg(token)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Some(n == 1)
    }

    /// The session stored under `key`, for the admin API: `Some(None)` when
    /// none is (or it was deleted), `None` when the store failed.
    pub async fn get(&self, key: &str) -> Option<Option<Session>> {
        let skey = self.session_key(key);
        let skey = &skey;
        let blob: Option<Vec<u8>> = self
            .call("get", move |mut conn| async move {
                redis::cmd("HGET").arg(skey).arg("d").query_async(&mut conn).await
            })
            .await?;
        Some(blob.and_then(|b| super::decode_session(&b).ok()))
    }

    /// Up to `limit` stored sessions (key, session), for the admin API.
    pub async fn list(&self, limit: usize) -> Option<Vec<Session>> {
        let pattern = format!("{}s:*", self.prefix);
        let pattern = &pattern;
        let keys: Vec<String> = self
            .call("list", move |mut conn| async move {
                let mut out = Vec::new();
                let mut cursor: u64 = 0;
                loop {
                    let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(200)
                        .query_async(&mut conn)
                        .await?;
                    out.extend(batch);
                    cursor = next;
                    if cursor == 0 || out.len() >= limit {
                        break;
                    }
                }
                out.truncate(limit);
                Ok(out)
            })
            .await?;
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let keys = &keys;
        let blobs: Vec<Option<Vec<u8>>> = self
            .call("list", move |mut conn| async move {
                let mut pipe = redis::pipe();
                for k in keys {
                    pipe.hget(k, "d");
                }
                pipe.query_async(&mut conn).await
            })
            .await?;
        Some(
            blobs
                .into_iter()
                .flatten()
                .filter_map(|b| super::decode_session(&b).ok())
                .collect(),
        )
    }
}

/// The version a session's history starts at in the store: a number
/// drawn per history (1 to 2^40; versions then count up by one), so that a
/// history written again after the store lost one (flushed, restarted
/// empty, expired) never repeats its versions: a replica still holding a
/// copy of the lost history would take a repeated version for its own and
/// keep its copy, and its next write would replace the new history's.
fn first_version(key: &str) -> u64 {
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = DRAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = format!("{key}:{nanos}:{n}:{}", std::process::id());
    (crate::detect::outcome::hash64(seed.as_bytes()) & ((1 << 40) - 1)).max(1)
}

/// An error's text with `password`, if any, blanked out.
fn scrub(e: &redis::RedisError, password: Option<&str>) -> String {
    let text = e.to_string();
    match password {
        Some(p) if !p.is_empty() => text.replace(p, "***"),
        _ => text,
    }
}

/// A reply element as bytes (`None` for nil).
fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => std::str::from_utf8(&bytes(other)?).ok()?.parse().ok(),
    }
}

/// The process copy's version and JSON, `None` when there is no session or
/// it is past [`MAX_STATE_BYTES`] (then it stays on this replica).
pub(crate) fn snapshot(store: &Store, key: &str) -> Option<(u64, Vec<u8>)> {
    let session = store.get(key)?;
    let guard = session.lock().unwrap_or_else(PoisonError::into_inner);
    let blob = serde_json::to_vec(&*guard).ok()?;
    if blob.len() > MAX_STATE_BYTES {
        count_error("oversize");
        tracing::warn!(
            session = key,
            bytes = blob.len(),
            "session state past the store's cap; kept on this replica only"
        );
        return None;
    }
    Some((guard.version, blob))
}

/// Notes that session `key`'s copy was written as `version` (no write of
/// it is left unanswered).
fn set_version(store: &Store, key: &str, version: u64) {
    if let Some(session) = store.get(key) {
        let mut local = session.lock().unwrap_or_else(PoisonError::into_inner);
        local.version = version;
        local.unacked.clear();
    }
}

/// Notes that the write of `blob` for session `key` was never answered
/// (see [`Session::unacked`]).
fn note_unacked(store: &Store, key: &str, blob: &[u8]) {
    if let Some(session) = store.get(key) {
        let mut local = session.lock().unwrap_or_else(PoisonError::into_inner);
        if local.unacked.len() >= super::MAX_UNACKED {
            local.unacked.remove(0);
        }
        local.unacked.push(crate::detect::outcome::hash64(blob));
    }
}

/// Puts the stored state of session `key` (version `version`; an empty
/// blob: deleted) in the process store, unless the process copy already is
/// that version, or is the successor of what is stored: this replica's
/// own write whose answer never came, landed late (then the copy takes the
/// version). `true` when the copy was replaced.
pub(crate) fn install(store: &Store, key: &str, version: u64, blob: &[u8]) -> bool {
    let (session, _) = store.get_or_create(key);
    let mut local = session.lock().unwrap_or_else(PoisonError::into_inner);
    if version == 0 {
        // Nothing stored (expired, or the store lost its data): the process
        // copy stands and is written as the first version.
        local.version = 0;
        return false;
    }
    if local.version == version {
        return false;
    }
    if !local.unacked.is_empty()
        && !blob.is_empty()
        && local.unacked.contains(&crate::detect::outcome::hash64(blob))
    {
        local.version = version;
        local.unacked.clear();
        return false;
    }
    let fresh = if blob.is_empty() {
        None
    } else {
        match super::decode_session(blob) {
            Ok(s) => Some(s),
            Err(e) => {
                count_error("decode");
                tracing::warn!(session = key, error = %e, "stored session unreadable; starting it afresh");
                None
            }
        }
    };
    *local = fresh.unwrap_or_else(|| Session::empty(key));
    local.key = key.to_owned();
    local.version = version;
    true
}
