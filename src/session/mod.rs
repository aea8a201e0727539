//! Sessions (DESIGN §5): per-conversation detector state, kept in a bounded
//! store with an idle TTL.
//!
//! - [`key`]: which conversation a request belongs to.
//! - [`Store`]: the bounded map from session key to [`Session`]; a
//!   session has lanes (one per system text + tool set, so side requests such
//!   as title generation keep their own state), each with its
//!   [`SessionState`] and the summary of its previous request (for
//!   compaction recognition). Updates to one session are serialised by its
//!   mutex; detection is synchronous, so no lock is held across an await.
//! - [`chain`]: the hash chains of recent histories, so that a request's
//!   parse reuses what earlier requests of the conversation already parsed.
//! - `size`: what a parsed history item weighs, for the chains' store and
//!   the parse-memory budget.
//! - [`lean`]: the form a request is judged in past its parse-memory
//!   budget ([`crate::budget`]): calls by their hashes (past that it passes
//!   unjudged).

pub mod chain;
pub mod frequency;
pub mod key;
pub mod lean;
pub mod semantic_schedule;
mod size;
pub mod slice;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::detect::compaction::RequestSummary;
use crate::detect::{SessionState, Verdict};

/// Most lanes kept per session (oldest dropped first).
pub const MAX_LANES: usize = 8;
/// Recent verdicts kept per lane, for the admin API.
pub const RECENT_VERDICTS: usize = 10;

/// One lane of a session: requests with one system text and tool set.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Lane {
    /// Hash of the system text and tool set.
    pub id: u64,
    /// The detectors' state.
    pub state: SessionState,
    /// Summary of the lane's previous request (compaction recognition).
    pub prev: Option<RequestSummary>,
    /// The last verdicts, newest last.
    pub recent: VecDeque<Verdict>,
    /// When each of `recent` was noted, in the same order (the live page's timeline).
    pub noted: VecDeque<Noted>,
    /// When the lane last saw a request (this replica's clock; not stored).
    #[serde(skip, default = "Instant::now")]
    pub last_seen: Instant,
    /// The LLM judge's schedule and pending result (see [`semantic_schedule`]).
    pub judge: semantic_schedule::CheckState,
    /// The loop stretch in progress, for the outcome counters.
    pub stretch: Option<crate::escalate::outcome::Stretch>,
}

/// One conversation.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Session {
    /// The session key (hashes only).
    pub key: String,
    /// The agent id from `[[agents]]`, if one matched.
    pub agent: Option<String>,
    /// When the session last saw a request (wall clock, for the admin API).
    pub last_seen: SystemTime,
    /// The lanes, most recently used last.
    pub lanes: Vec<Lane>,
    /// The `escalate` action's state (see [`crate::escalate`]).
    pub escalation: crate::escalate::EscalationState,
    /// The version of the shared copy this one was read from or last
    /// written as (see [`crate::state`]); 0: never shared.
    #[serde(skip)]
    pub version: u64,
    /// The store's last answer about this session found this copy current
    /// (a read that kept it, or a write-first write that landed; not the
    /// write beside the upstream request, which every replica of a
    /// round-robin balancer makes): the next request tries its write first, with no read (see
    /// [`crate::guard::shared`]). Never stored; false on a copy read from
    /// the store.
    #[serde(skip)]
    pub confirmed: bool,
    /// Hashes of the states this replica sent for this session whose
    /// writes were never answered (timed out, connection lost) since its
    /// last acknowledged write, oldest first, at most
    /// [`crate::state::MAX_UNACKED`]: a store found holding one shows that
    /// write landed late, and this copy, which moved on from it on this
    /// replica, is its successor (see [`crate::state`]). Never stored.
    #[serde(skip)]
    pub unacked: Vec<u64>,
}

impl Session {
    /// A session with no lanes yet.
    pub fn empty(key: &str) -> Self {
        Self::new(key)
    }

    pub(crate) fn new(key: &str) -> Self {
        Self {
            key: key.to_owned(),
            agent: None,
            last_seen: SystemTime::now(),
            lanes: Vec::new(),
            escalation: crate::escalate::EscalationState::default(),
            version: 0,
            confirmed: false,
            unacked: Vec::new(),
        }
    }

    /// The lane `id`, created if needed (the least recently used lane is
    /// dropped past [`MAX_LANES`]).
    pub fn lane(&mut self, id: u64) -> &mut Lane {
        let now = Instant::now();
        let index = match self.lanes.iter().position(|l| l.id == id) {
            Some(i) => i,
            None => {
                if self.lanes.len() >= MAX_LANES {
                    if let Some(oldest) = (0..self.lanes.len()).min_by_key(|&i| self.lanes[i].last_seen) {
                        self.lanes.remove(oldest);
                    }
                }
                self.lanes.push(Lane {
                    id,
                    state: SessionState::new(),
                    prev: None,
                    recent: VecDeque::new(),
                    noted: VecDeque::new(),
                    last_seen: now,
                    judge: semantic_schedule::CheckState::default(),
                    stretch: None,
                });
                self.lanes.len() - 1
            }
        };
        let lane = &mut self.lanes[index];
        lane.last_seen = now;
        lane
    }

    /// Tool cycles across lanes.
    pub fn cycles(&self) -> usize {
        self.lanes.iter().map(|l| l.state.cycles()).sum()
    }
}

impl Lane {
    /// Remembers a verdict for the admin API.
    pub fn remember(&mut self, verdict: &Verdict) {
        if self.recent.len() >= RECENT_VERDICTS {
            self.recent.pop_front();
            self.noted.pop_front();
        }
        self.recent.push_back(verdict.clone());
        self.noted.push_back(Noted {
            unix_ms: SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            after_seq: self.state.next_seq(),
        });
    }
}

/// When a verdict of [`Lane::recent`] was noted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Noted {
    /// Wall clock, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// [`SessionState::next_seq`] at the time: the verdict followed the
    /// steps before this position (the calls it judged, or the ones before
    /// the call it withheld at stream time).
    pub after_seq: u64,
}

/// A shared, lockable session.
pub type SharedSession = Arc<Mutex<Session>>;

/// The store's hasher: foldhash, seeded per process. Keys are hashes
/// already (session keys, credential hashes) or ids the upstream issued,
/// so SipHash's stronger guarantee buys nothing here, and it cost a few
/// per cent of a small request's CPU (issue #14).
type Hasher = foldhash::fast::RandomState;

/// The bounded session store.
pub struct Store {
    sessions: moka::sync::Cache<String, SharedSession, Hasher>,
    /// (tenant, lane id) → key of the most recently active session of that
    /// lane: finds a fingerprinted session again after a compaction replaced
    /// the first message its fingerprint was made of.
    lanes: moka::sync::Cache<(String, u64), String, Hasher>,
    /// OpenAI Responses `response.id` → the response it names, so a request
    /// chaining to it with `previous_response_id` (which carries only the
    /// items new since) finds its session and the calls it answers.
    responses: moka::sync::Cache<String, Arc<StoredResponse>, Hasher>,
    epoch: Instant,
    epoch_wall: Duration,
    /// How loop stretches ended (see [`crate::escalate::outcome`]).
    outcomes: Arc<crate::escalate::outcome::Tally>,
}

/// A Responses response a later request may chain to.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    /// Hash of the credential of the request that produced it: only the same
    /// tenant may chain to it.
    pub tenant: String,
    /// The session key.
    pub session: String,
    /// The client calls the response carried (the next request answers them).
    pub calls: Vec<crate::transcript::ToolCall>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("sessions", &self.sessions.entry_count())
            .finish()
    }
}

impl Store {
    /// A store keeping at most `max_sessions`, forgetting a session idle for `idle_ttl`.
    pub fn new(max_sessions: u64, idle_ttl: Duration) -> Self {
        let outcomes = Arc::new(crate::escalate::outcome::Tally::default());
        let tally = Arc::clone(&outcomes);
        Self {
            sessions: moka::sync::Cache::builder()
                .max_capacity(max_sessions)
                .time_to_idle(idle_ttl)
                .eviction_listener(move |_key, session: SharedSession, cause| {
                    if cause.was_evicted() {
                        went_idle(&session, &tally);
                    }
                })
                .build_with_hasher(Hasher::default()),
            lanes: moka::sync::Cache::builder()
                .max_capacity(max_sessions)
                .time_to_idle(idle_ttl)
                .build_with_hasher(Hasher::default()),
            responses: moka::sync::Cache::builder()
                .max_capacity(max_sessions)
                .time_to_idle(idle_ttl)
                .build_with_hasher(Hasher::default()),
            epoch: Instant::now(),
            epoch_wall: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
            outcomes,
        }
    }

    /// How loop stretches ended so far.
    pub fn outcomes(&self) -> &crate::escalate::outcome::Tally {
        &self.outcomes
    }

    /// The detectors' clock: wall-clock time since the Unix epoch, so that
    /// replicas sharing sessions ([`crate::state`]) read one clock. Never
    /// goes backwards within this process (a wall clock stepped back reads
    /// as the last value plus the monotonic time since).
    pub fn now(&self) -> Duration {
        self.epoch_wall + self.epoch.elapsed()
    }

    /// The session for `key`, and whether it was just created.
    pub fn get_or_create(&self, key: &str) -> (SharedSession, bool) {
        let mut created = false;
        let session = self.sessions.get_with_by_ref(key, || {
            created = true;
            Arc::new(Mutex::new(Session::new(key)))
        });
        (session, created)
    }

    /// The session for `key`, if it exists.
    pub fn get(&self, key: &str) -> Option<SharedSession> {
        self.sessions.get(key)
    }

    /// Forgets a session.
    pub fn remove(&self, key: &str) -> bool {
        self.sessions.remove(key).is_some()
    }

    /// The most recently active session of a lane of a tenant.
    pub fn by_lane(&self, tenant: &str, lane: u64) -> Option<SharedSession> {
        let key = self.lanes.get(&(tenant.to_owned(), lane))?;
        self.sessions.get(&key)
    }

    /// Records that `key` is the most recently active session of a lane.
    /// Already so (a conversation's every request says it again): the read
    /// keeps the entry from going idle, and the cache's costlier write is
    /// left out.
    pub fn note_lane(&self, tenant: &str, lane: u64, key: &str) {
        let entry = (tenant.to_owned(), lane);
        if self.lanes.get(&entry).as_deref() != Some(key) {
            self.lanes.insert(entry, key.to_owned());
        }
    }

    /// Remembers a Responses response by its id.
    pub fn note_response(&self, id: &str, response: StoredResponse) {
        self.responses.insert(id.to_owned(), Arc::new(response));
    }

    /// The response `id` names, if the same tenant produced it.
    pub fn response(&self, tenant: &str, id: &str) -> Option<Arc<StoredResponse>> {
        self.responses.get(id).filter(|r| r.tenant == tenant)
    }

    /// Sessions kept (after pending evictions are applied).
    pub fn len(&self) -> u64 {
        self.sessions.run_pending_tasks();
        self.sessions.entry_count()
    }

    /// No session is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every session (for the admin API), in no particular order.
    pub fn all(&self) -> Vec<SharedSession> {
        self.sessions.iter().map(|(_, v)| v).collect()
    }
}

/// A forgotten session's open stretches ended `idle`.
fn went_idle(session: &SharedSession, tally: &crate::escalate::outcome::Tally) {
    let mut s = session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = s.key.clone();
    for lane in &mut s.lanes {
        if let Some(stretch) = lane.stretch.take() {
            tally.count(&key, &stretch, crate::escalate::outcome::Outcome::Idle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session forgotten with a loop stretch open counts it `idle`.
    #[test]
    fn a_forgotten_session_ends_its_stretch_idle() {
        let store = Store::new(10, Duration::from_millis(50));
        let (session, _) = store.get_or_create("k");
        {
            let mut s = session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            s.lane(1).stretch = Some(crate::escalate::outcome::Stretch {
                detector: "identical_call".to_owned(),
                arm: crate::escalate::experiment::Arm::Holdout,
            });
        }
        drop(session);
        std::thread::sleep(Duration::from_millis(120));
        assert!(store.get("k").is_none());
        let _ = store.len();
        let rows = store.outcomes().rows();
        assert_eq!(
            rows,
            vec![
                serde_json::json!({"arm": "holdout", "detector": "identical_call", "outcome": "idle", "count": 1})
            ]
        );
    }

    /// A lane's latest session stays known while its conversation goes on
    /// (every request notes it again, read only when unchanged), and the
    /// next conversation of the lane takes its place.
    #[test]
    fn a_lane_keeps_its_latest_session_while_it_is_active() {
        let store = Store::new(10, Duration::from_secs(1));
        let (_session, _) = store.get_or_create("a");
        for _ in 0..8 {
            assert!(store.get("a").is_some());
            store.note_lane("t", 7, "a");
            std::thread::sleep(Duration::from_millis(250));
        }
        assert!(
            store
                .by_lane("t", 7)
                .is_some_and(|s| s.lock().is_ok_and(|s| s.key == "a"))
        );
        let (_other, _) = store.get_or_create("b");
        store.note_lane("t", 7, "b");
        assert!(
            store
                .by_lane("t", 7)
                .is_some_and(|s| s.lock().is_ok_and(|s| s.key == "b"))
        );
        assert!(store.by_lane("u", 7).is_none(), "lanes are per tenant");
    }

    #[test]
    fn the_store_stays_within_its_capacity() {
        let store = Store::new(100, Duration::from_secs(60));
        for i in 0..1_000 {
            let _ = store.get_or_create(&format!("k{i}"));
        }
        assert!(store.len() <= 100, "{}", store.len());
    }

    #[test]
    fn a_session_is_found_again_and_lanes_are_bounded() {
        let store = Store::new(10, Duration::from_secs(60));
        let (a, created) = store.get_or_create("k");
        assert!(created);
        let (b, created) = store.get_or_create("k");
        assert!(!created && Arc::ptr_eq(&a, &b));
        let mut s = a.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in 0..20 {
            let _ = s.lane(id);
        }
        assert_eq!(s.lanes.len(), MAX_LANES);
    }
}
