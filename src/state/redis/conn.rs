//! The store's connections and its one way of calling: the first
//! connection and each worker's, made in the background, and
//! [`Shared::call`], every call bounded by `timeout_ms` and paused while
//! the store is down.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::Value;
use redis::aio::ConnectionManager;

use super::Shared;
use crate::state::count_error;

/// The longest wait between two attempts at the first connection.
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Failed calls in a row after which the store is taken for down.
const DOWN_AFTER: u32 = 3;
/// How long calls are not made once the store is taken for down: then one
/// call tries again (a success ends it, a failure starts another pause).
const DOWN_FOR: Duration = Duration::from_millis(500);

impl Shared {
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
    pub(super) fn connect(self: &Arc<Self>, runtime: &tokio::runtime::Handle, slot: Option<usize>) {
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
    pub(super) fn clean(&self, e: &redis::RedisError) -> String {
        scrub(e, self.password.as_deref())
    }

    /// Runs one store call within `timeout_ms`; a failure is logged and
    /// counted under `op`. After [`DOWN_AFTER`] failures in a row the store
    /// is taken for down: for [`DOWN_FOR`] calls fail at once (counted under
    /// `op` and in `loopguard_state_skipped_total`), so that a request does
    /// not wait `timeout_ms` for a store that is not answering; then one
    /// call tries again. The admin API's calls (`get`, `list`, `delete`)
    /// are always made. A call that answers records its wall time in
    /// `loopguard_state_call_seconds{op}`.
    pub(super) async fn call<T, F>(&self, op: &'static str, run: impl Fn(ConnectionManager) -> F) -> Option<T>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        // The admin API's calls are not on a request's path: an operator
        // gets Redis's answer (or its failure), not the pause's.
        let admin = matches!(op, "delete" | "get" | "list");
        if !admin && self.paused() {
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
        self.tally(op, matches!(result, Ok(Ok(_))), started);
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

    /// Milliseconds since the store started (the clock of the pause).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The store is taken for down (see [`Shared::call`]): no call is made.
    fn paused(&self) -> bool {
        self.now_ms() < self.down_until_ms.load(Relaxed)
    }

    /// Counts a call's outcome: an answer records its time and ends a
    /// pause; the [`DOWN_AFTER`]th failure in a row (and each after it)
    /// starts one of [`DOWN_FOR`].
    fn tally(&self, op: &'static str, answered: bool, started: std::time::Instant) {
        if answered {
            metrics::histogram!("loopguard_state_call_seconds", "op" => op)
                .record(started.elapsed().as_secs_f64());
            if self.failures.swap(0, Relaxed) >= DOWN_AFTER {
                tracing::info!(op, "state store answering again; sessions are shared again");
            }
            return;
        }
        let failed = self.failures.fetch_add(1, Relaxed) + 1;
        if failed >= DOWN_AFTER {
            let pause = u64::try_from(DOWN_FOR.as_millis()).unwrap_or(u64::MAX);
            self.down_until_ms
                .store(self.now_ms().saturating_add(pause), Relaxed);
            if failed == DOWN_AFTER {
                tracing::warn!(
                    failed,
                    pause_ms = pause,
                    "state store failing: called again only every pause until it answers; requests judged on this replica's state"
                );
            }
        }
    }
}

/// An error's text with `password`, if any, blanked out.
pub(super) fn scrub(e: &redis::RedisError, password: Option<&str>) -> String {
    let text = e.to_string();
    match password {
        Some(p) if !p.is_empty() => text.replace(p, "***"),
        _ => text,
    }
}

/// A reply element as bytes (`None` for nil).
pub(super) fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

/// A reply element as a number.
pub(super) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => std::str::from_utf8(&bytes(other)?).ok()?.parse().ok(),
    }
}
