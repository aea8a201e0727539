//! A session's round trips: the load (a plain read or the load script),
//! the compare-and-set save, the process copy written on its version, and
//! the Responses records a response adds.

use std::sync::PoisonError;

use redis::Value;

use super::conn::{bytes, int};
use super::copy::{install, note_unacked, set_version, snapshot};
use super::{Loaded, Saved, Shared, StoredRecord, Wrote};
use crate::session::{Session, Store};
use crate::state::{MAX_RETRIES, count_error};

impl Shared {
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
                crate::state::record::decode(&calls),
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
