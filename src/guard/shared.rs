//! Request-time detection over the shared state ([`crate::state`]), async
//! around a synchronous core: [`Guard::shared_probe`] (sync) names the keys,
//! [`Guard::shared_begin`] (async, one round trip) loads them into the
//! process copy, detection runs synchronously on it
//! ([`Guard::on_request_with`], on the offload pool for a large body), and
//! [`Guard::shared_commit`] (async, beside the upstream request) writes it
//! compare-and-set, asking for detection again ([`Guard::redo_request`],
//! state changes only) on the fresh state after a conflict. Write first:
//! when the store last found this replica's copy current, no load is made,
//! detection runs on the copy with its telling deferred
//! ([`Guard::on_request_deferred`]) and [`Guard::shared_speculate`] writes
//! before the verdict goes out. Any store failure leaves the request judged
//! on this replica's copy.

use std::sync::{Arc, PoisonError};

use super::{Guard, RequestView, Resolved};
use crate::config::Config;
use crate::session::StoredResponse;
use crate::session::key;
use crate::state::{MAX_RETRIES, Outbox, Shared, Wrote, count_error};

/// Where a request's session is looked for in the store (computed
/// synchronously, see [`Guard::shared_probe`]).
#[derive(Debug)]
pub struct Probe {
    resolved: Resolved,
    response_id: Option<String>,
}

impl Probe {
    fn key(&self) -> &str {
        &self.resolved.key.key
    }

    fn tenant(&self) -> &str {
        &self.resolved.key.tenant
    }

    fn fingerprint(&self) -> bool {
        self.resolved.key.source == key::KeySource::Fingerprint
    }
}

/// A request between its load and its write (see [`Guard::shared_begin`]).
pub struct Begun<'a> {
    shared: &'a Arc<Shared>,
    probe: Probe,
    outbox: Arc<Outbox>,
    attempts: usize,
    /// The store answered (the load, or the write-first path's write that
    /// left something to write): [`Guard::shared_commit`] writes.
    reachable: bool,
    /// No load was made: the write-first path ([`Guard::shared_speculate`]).
    speculative: bool,
    _held: Option<tokio::sync::MutexGuard<'a, ()>>,
}

impl<'a> Begun<'a> {
    fn new(
        shared: &'a Arc<Shared>,
        probe: Probe,
        outbox: Arc<Outbox>,
        reachable: bool,
        held: Option<tokio::sync::MutexGuard<'a, ()>>,
    ) -> Self {
        Self {
            shared,
            probe,
            outbox,
            attempts: 0,
            reachable,
            speculative: false,
            _held: held,
        }
    }

    /// The write-first path: no load was made.
    fn speculating(self) -> Self {
        Self {
            speculative: true,
            ..self
        }
    }

    /// The outbox the response's additions go to (write it with
    /// [`Outbox::flush`] before the response ends).
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The request's summary, lane and key as the probe computed them:
    /// detection takes them from here ([`RequestView::resolved`]) instead
    /// of computing them again.
    pub fn resolved(&self) -> &Resolved {
        &self.probe.resolved
    }

    /// No load was made: detection runs on the process copy with its
    /// telling deferred ([`Guard::on_request_deferred`]), then
    /// [`Guard::shared_speculate`] writes before the verdict goes out.
    pub fn speculative(&self) -> bool {
        self.speculative
    }
}

/// What a load found for a request's session (see [`Guard::shared_begin`]).
struct Found<'l> {
    /// The session's key: the request's, or its chained response's.
    key: &'l str,
    /// The version of it this replica held when it asked.
    known: Option<u64>,
    /// The stored (version, blob); an empty blob left out as known.
    session: Option<&'l (u64, Vec<u8>)>,
}

/// What a write tried before the verdict found (see [`Guard::shared_speculate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speculated {
    /// The speculative decision goes out: written (nothing left to
    /// write); nothing stored (flushed, expired: the copy stands, as after a
    /// read finding nothing, and [`Guard::shared_commit`] writes it as the
    /// first version); nothing to write, or a session past the store's cap;
    /// or the store failed (judged on this replica's copy, as when a load
    /// fails).
    Stands,
    /// The store held another version, now installed: run detection again,
    /// told ([`Guard::on_request_with`]), and write it with
    /// [`Guard::shared_commit`] as after a load.
    Again,
}

/// What follows a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Written, or nothing to write, or the store failed (counted).
    Done,
    /// Version conflict: run detection again on the installed state.
    Again,
}

impl Guard {
    /// The shared store, with `[state] backend = "redis"`.
    pub fn shared(&self) -> Option<&Arc<Shared>> {
        self.shared.as_ref()
    }

    /// The first phase over the shared state, asynchronous: reads what the
    /// store holds for `probe` (one round trip; see [`Shared::load`] for
    /// the rare second) and installs it in the process copy, unless this
    /// replica's copy is that version or newer. `None` without a shared
    /// store (a request detection does not run for has no probe to begin
    /// with, see [`Guard::shared_probe`]). The session's process lock is held until
    /// the returned value is dropped, so that requests of one session on
    /// this replica are judged one after another.
    ///
    /// No read is made when the store's last answer found this replica's
    /// copy current ([`Session::confirmed`](crate::session::Session::confirmed): one replica serves the
    /// conversation, a sidecar or a sticky balancer) and the request chains
    /// no response: the returned value is then [`Begun::speculative`], and
    /// the write of the state detection leaves, made before the verdict
    /// goes out, is the request's one round trip ([`Guard::shared_speculate`]).
    pub async fn shared_begin(&self, probe: Probe) -> Option<Begun<'_>> {
        let shared = self.shared.as_ref()?;
        let outbox = Outbox::new(Arc::clone(shared), Arc::clone(&self.store));
        if let Some(held) = self.confirmed_hold(shared, &probe).await {
            return Some(Begun::new(shared, probe, outbox, true, Some(held)).speculating());
        }
        // A version 0 copy was never written (or the store lost it): ask for the blob.
        let known = self
            .store
            .get(probe.key())
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).version)
            .filter(|v| *v > 0);
        let Some(loaded) = shared
            .load(
                probe.key(),
                known,
                probe.tenant(),
                probe.response_id.as_deref(),
                probe.fingerprint().then_some(probe.resolved.lane),
            )
            .await
        else {
            // Store down or slow: this replica's copy decides (nothing is
            // written back for this request).
            return Some(Begun::new(shared, probe, outbox, false, None));
        };
        let effective = loaded
            .response
            .as_ref()
            .map_or_else(|| probe.key().to_owned(), |(session, _)| session.clone());
        let held = shared.lock(&effective).await;
        if let (Some((session, calls)), Some(id)) = (loaded.response, &probe.response_id) {
            self.store.note_response(
                id,
                StoredResponse {
                    tenant: probe.tenant().to_owned(),
                    session,
                    calls,
                },
            );
        }
        let found = Found {
            key: &effective,
            known,
            session: loaded.session.as_ref(),
        };
        self.adopt(shared, &probe, found).await;
        if let Some((lane_key, version, blob)) = &loaded.lane {
            let _ = crate::state::install(&self.store, lane_key, *version, blob);
            self.store
                .note_lane(probe.tenant(), probe.resolved.lane, lane_key);
        }
        Some(Begun::new(shared, probe, outbox, true, Some(held)))
    }

    /// The write-first path's condition ([`Begun::speculative`]): the
    /// request chains no response and this replica's copy of its session
    /// is current by the store's last answer. Then the session's lock,
    /// held; else `None` (and the lock is let go).
    async fn confirmed_hold<'a>(
        &self,
        shared: &'a Shared,
        probe: &Probe,
    ) -> Option<tokio::sync::MutexGuard<'a, ()>> {
        if probe.response_id.is_some() {
            return None;
        }
        let session = self.store.get(probe.key())?;
        let held = shared.lock(probe.key()).await;
        let local = session.lock().unwrap_or_else(PoisonError::into_inner);
        (local.confirmed && local.version > 0).then_some(held)
    }

    /// Installs what the load found for the session `found.key` in the
    /// process store, or keeps the process copy where it is as new.
    async fn adopt(&self, shared: &Shared, probe: &Probe, found: Found<'_>) {
        let Found {
            key: effective,
            known,
            session: loaded,
        } = found;
        // A request of this session that ran here while this one's load
        // was answered wrote (or read) a version at least as new as the one
        // loaded: the process copy stands, so no request judges on an older
        // state than this replica's own last write.
        let own = effective == probe.key();
        let now = self
            .store
            .get(effective)
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).version);
        let newer_here =
            own && now.is_some_and(|n| n != known.unwrap_or(0) && loaded.is_none_or(|(v, _)| n >= *v));
        match loaded {
            _ if newer_here => {}
            // The store holds the version this replica knew and still holds:
            // the process copy stands, and the next request may write first.
            Some((version, _)) if own && known == Some(*version) && now == known => {
                if let Some(session) = self.store.get(effective) {
                    session.lock().unwrap_or_else(PoisonError::into_inner).confirmed = true;
                }
            }
            // The blob was left out as known, but the process copy went
            // meanwhile (evicted, deleted through the admin API): read it
            // whole (a second trip, rare).
            Some((version, blob)) if own && known == Some(*version) && blob.is_empty() => {
                let whole = shared.load(effective, None, probe.tenant(), None, None).await;
                if let Some((version, blob)) = whole.and_then(|w| w.session) {
                    let _ = crate::state::install(&self.store, effective, version, &blob);
                }
            }
            Some((version, blob)) => {
                let _ = crate::state::install(&self.store, effective, *version, blob);
            }
            None if now.is_some() => {
                let _ = crate::state::install(&self.store, effective, 0, &[]);
            }
            None => {}
        }
    }

    /// The speculative path's write ([`Begun::speculative`]), made before
    /// the verdict goes out: the state detection left on the process copy
    /// of session `key`, compare-and-set on the version the copy was read
    /// or written at. Written: the copy was current, so the decision is
    /// the one a read would have given. Another version stored: it is
    /// installed (the speculative run's changes are dropped with it) and
    /// [`Speculated::Again`] asks for detection on it; nothing stored
    /// (expired, the store lost its data): the copy stands, as after a read
    /// that finds nothing, and is written as the first version beside the
    /// upstream request ([`Guard::shared_commit`]).
    ///
    /// A stored version that is this replica's own earlier write, whose
    /// answer never came (it landed late, after a timeout): the copy is its
    /// successor, and is written again on that version.
    pub async fn shared_speculate(&self, begun: &mut Begun<'_>, key: Option<&str>) -> Speculated {
        let Some(key) = key else { return Speculated::Stands };
        begun.outbox.set_session(key);
        let lane_index = begun
            .probe
            .fingerprint()
            .then_some((begun.probe.tenant(), begun.probe.resolved.lane));
        let wrote = begun.shared.write_copy(&self.store, key, lane_index).await;
        let confirmed = match wrote {
            // Nothing left for `shared_commit` to write.
            Wrote::Written(_) => {
                begun.reachable = false;
                true
            }
            Wrote::Replaced => {
                tracing::debug!(session = %key, "state written elsewhere; detection runs on the stored state");
                return Speculated::Again;
            }
            Wrote::Failed => {
                begun.reachable = false;
                return Speculated::Stands;
            }
            // Past the store's cap the copy is read again next time
            // (another replica may write a smaller one).
            Wrote::Gone | Wrote::Oversize => false,
        };
        if let Some(session) = self.store.get(key) {
            session.lock().unwrap_or_else(PoisonError::into_inner).confirmed = confirmed;
        }
        Speculated::Stands
    }

    /// The last phase, asynchronous: writes the session `key` that the
    /// synchronous detection ([`Guard::on_request_with`]) just changed,
    /// compare-and-set on the version it was read at. [`Commit::Again`]:
    /// another replica wrote first; its state is installed and detection
    /// must run again ([`Guard::redo_request`]; at most [`MAX_RETRIES`] times, then the process copy
    /// decides, counted as `op="conflict"`).
    pub async fn shared_commit(&self, begun: &mut Begun<'_>, key: Option<&str>) -> Commit {
        let Some(key) = key else { return Commit::Done };
        begun.outbox.set_session(key);
        if !begun.reachable {
            return Commit::Done;
        }
        let lane_index = begun
            .probe
            .fingerprint()
            .then_some((begun.probe.tenant(), begun.probe.resolved.lane));
        while begun.attempts <= MAX_RETRIES {
            match begun.shared.write_copy(&self.store, key, lane_index).await {
                Wrote::Written(_) | Wrote::Oversize | Wrote::Failed => return Commit::Done,
                Wrote::Replaced => {
                    begun.attempts += 1;
                    if begun.attempts <= MAX_RETRIES {
                        tracing::debug!(session = %key, attempts = begun.attempts, "state version conflict; detection runs again on the stored state");
                        return Commit::Again;
                    }
                }
                // Written as the first version on the next attempt.
                Wrote::Gone => begun.attempts += 1,
            }
        }
        count_error("conflict");
        Commit::Done
    }

    /// The store keys for a request, `None` when detection does not run
    /// for it (disabled, bypassed). Mirrors `Guard::locate`'s key choice
    /// before a chained response is resolved (the load script does that).
    /// Synchronous (run it where the request's parse ran: it hashes the
    /// system text and tool set). `None` without a shared store.
    pub fn shared_probe(&self, config: &Config, request: &RequestView<'_>) -> Option<Probe> {
        self.shared.as_ref()?;
        let (_, settings) = super::detection_for(config, request.headers)?;
        Some(Probe {
            resolved: Resolved::of(
                request,
                &request.parsed.transcript,
                request.tenant.to_owned(),
                config.sessions.header.as_str(),
                settings,
            ),
            response_id: request.previous_response_id().map(str::to_owned),
        })
    }
}
