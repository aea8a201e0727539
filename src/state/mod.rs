//! Shared session state (`[state] backend = "redis"`): several replicas
//! behind a plain round-robin balancer judge one conversation as one
//! instance would.
//!
//! The seam: with `backend = "memory"` (the default) the guard keeps
//! sessions in the process only ([`crate::session::Store`]) and nothing here
//! runs. With `"redis"` the process store becomes a cache of what Redis
//! holds ([`Shared`]):
//!
//! - write first: when the store's last answer found this replica's copy
//!   current ([`crate::session::Session::confirmed`]) and the request
//!   chains no response, nothing is read; detection runs on the copy with
//!   its telling deferred and the state it leaves is written compare-and-set
//!   before the verdict goes out, the request's one round trip (see
//!   [`crate::guard::shared`]). Another version stored: installed, and the
//!   request goes on as after the read below;
//! - otherwise, before the verdict, ONE round trip ([`Shared::load`]) reads the
//!   session: a plain `HMGET` when this replica has seen the session stored
//!   and the request chains no response (the common case), else one Lua
//!   script that also resolves a Responses `previous_response_id` to its
//!   session and calls and finds a fingerprinted lane's latest session;
//!   what it read replaces the process copy when the versions differ (a
//!   session the plain read finds missing is read again by the script);
//! - after request-time detection, [`Shared::save`] writes the session with
//!   compare-and-set on its version (a second Lua script); on a conflict the
//!   fresh state is installed and detection runs again on it (at most
//!   [`MAX_RETRIES`] times, then the request is judged on the process copy,
//!   counted as `loopguard_state_errors_total{op="conflict"}`). The write runs
//!   beside the upstream request and the reading and judging of its answer
//!   (the verdict is out; a re-run after a conflict changes the state only
//!   and logs nothing twice) and is acknowledged before the response goes
//!   to the client, so it costs no round trip of its own on the request
//!   path;
//! - what the response adds (the Responses id → session and calls index, the
//!   stream-time verdicts for the admin API) is collected in an [`Outbox`]
//!   and written before the response's end ([`Outbox::flush`]);
//! - no store call while a call is held: stream-time judgement works on the
//!   state read at request time.
//!
//! Failure: Redis unreachable, slower than `timeout_ms` or answering an
//! error → the request is judged on the process copy and passes normally;
//! logged without URL credentials, counted in
//! `loopguard_state_errors_total{op}`; the connection manager reconnects on
//! its own; `/readyz` does not look at the store.
//!
//! What is stored: the detector state (hashes, counters, tool names, the
//! 120-character argument previews), the verdict history, the loop stretch
//! and the session's escalation state; Responses records with bounded,
//! redacted calls ([`record`]); never credentials (session keys and
//! tenants are hashes) nor raw tool results. A session's blob is capped at
//! [`MAX_STATE_BYTES`]: past it the session is judged on the replica's copy
//! only (counted as `op="oversize"`).

mod redis;

/// The stored form of a response record's calls, kept at its old path
/// (`state::record`) for the Redis record fuzz target; it lives apart from
/// the store so that the lean parse ([`crate::session::lean`]) can use it
/// without `session` and `state` importing each other.
pub use crate::call_record as record;

pub(crate) use redis::install;
#[cfg(test)]
use redis::snapshot;
pub use redis::{Loaded, Saved, Shared, StoredRecord, Wrote};

use std::sync::{Arc, Mutex, PoisonError};

use crate::detect::Verdict;
use crate::session::StoredResponse;

/// CAS retries after a version conflict before the process copy decides.
pub const MAX_RETRIES: usize = 3;
/// Unanswered writes remembered per session (see
/// [`crate::session::Session::unacked`]).
pub const MAX_UNACKED: usize = 16;
/// Largest serialised session written to the store, bytes.
pub const MAX_STATE_BYTES: usize = 1 << 20;

/// Counts a store failure (`op`: load, save, response, delete, list,
/// conflict, oversize, decode).
pub fn count_error(op: &'static str) {
    metrics::counter!("loopguard_state_errors_total", "op" => op).increment(1);
}

/// A session as the store holds it (the `d` field of `<prefix>s:<key>`),
/// read back. The blob is input like any other (another replica's write,
/// an operator's, a damaged store): an unreadable one is an error, never a
/// panic (fuzzed: `fuzz/fuzz_targets/redis_record.rs`).
///
/// # Errors
/// The blob is not a stored session.
pub fn decode_session(blob: &[u8]) -> Result<crate::session::Session, serde_json::Error> {
    serde_json::from_slice(blob)
}

/// What one response adds to the shared state, written before its end.
#[derive(Debug)]
pub struct Outbox {
    shared: Arc<Shared>,
    store: Arc<crate::session::Store>,
    session: std::sync::OnceLock<String>,
    items: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    responses: Vec<(String, StoredRecord)>,
    verdicts: Vec<(u64, Verdict)>,
    /// The loop stretch each lane was left with at stream time (the
    /// outcome counters' state), the last one per lane.
    stretches: Vec<(u64, Option<crate::escalate::outcome::Stretch>)>,
}

impl Outbox {
    /// An empty outbox for one response.
    pub fn new(shared: Arc<Shared>, store: Arc<crate::session::Store>) -> Arc<Self> {
        Arc::new(Self {
            shared,
            store,
            session: std::sync::OnceLock::new(),
            items: Mutex::new(Pending::default()),
        })
    }

    /// Names the session the response belongs to (the first name stands).
    pub fn set_session(&self, key: &str) {
        let _ = self.session.set(key.to_owned());
    }

    /// A Responses response a later request may chain to (the last record
    /// for one id wins), its calls in their bounded stored form
    /// ([`record`], identities under `settings`).
    pub fn note_response(&self, id: &str, response: &StoredResponse, settings: &crate::detect::Settings) {
        let stored = StoredRecord {
            tenant: response.tenant.clone(),
            session: response.session.clone(),
            calls: record::encode(&response.calls, settings),
        };
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.responses.retain(|(known, _)| known != id);
        items.responses.push((id.to_owned(), stored));
    }

    /// A stream-time verdict the session's lane `lane` remembered.
    pub fn note_verdict(&self, lane: u64, verdict: &Verdict) {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.verdicts.push((lane, verdict.clone()));
    }

    /// The loop stretch lane `lane` was left with after a stream-time verdict.
    pub fn note_stretch(&self, lane: u64, stretch: Option<crate::escalate::outcome::Stretch>) {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.stretches.retain(|(known, _)| *known != lane);
        items.stretches.push((lane, stretch));
    }

    /// Writes what the response added. Never fails: a store problem is
    /// logged and counted, the response goes on.
    pub async fn flush(&self) {
        let pending = std::mem::take(&mut *self.items.lock().unwrap_or_else(PoisonError::into_inner));
        if !pending.responses.is_empty() {
            self.shared.put_responses(&pending.responses).await;
        }
        let changed = !pending.verdicts.is_empty() || !pending.stretches.is_empty();
        if let (true, Some(session)) = (changed, self.session.get()) {
            let (verdicts, stretches) = (pending.verdicts, pending.stretches);
            self.shared
                .save_with(&self.store, session, None, |session| {
                    for (lane, v) in &verdicts {
                        session.lane(*lane).remember(v);
                    }
                    for (lane, stretch) in &stretches {
                        session.lane(*lane).stretch.clone_from(stretch);
                    }
                })
                .await;
        }
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
