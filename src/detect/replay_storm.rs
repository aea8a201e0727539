//! `replay_storm`: the same request sent again and again within a window.
//!
//! Idea: a client that resends one request body for hours, each copy billed
//! (claude-code#35166: one session, $500+): every copy merges as a retry of
//! the previous one, so no other detector sees anything new. Default:
//! breaker at 30 identical requests in a row within `window_secs` (900 s).
//! Ordinary retries after an error or a timeout (the official SDKs retry 2
//! times, agents up to 10) stay far below it; a load test that resends one
//! body trips it (switch it off with `enabled = false`). "Identical" is the
//! history as the detectors read it (every item's key), so a request that
//! adds anything, even one user message, starts the count again. Not
//! counted: a first prompt with no model turn in it yet (sampling one prompt
//! n times, best-of-n or pass@k, is legitimate), and requests chained with
//! `previous_response_id` (they carry only what is new). Cost: O(1) per request beyond hashing the item keys the
//! alignment computes anyway; at most `breaker` times are kept.

use std::collections::VecDeque;
use std::time::Duration;

use super::settings::Settings;
use super::verdict::{DetectorKind, Finding, Level};

const ADVICE: &str =
    "The client keeps resending the same request unchanged; stop the run and check its retry loop.";

/// The current run of identical requests of one lane.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Repeats {
    /// Hash of the request (its items' keys, in order).
    request: u64,
    /// When each request of the run arrived (session clock), oldest first,
    /// only those within the window.
    times: VecDeque<Duration>,
}

impl Repeats {
    /// Notes a request with identity `request` at `now`: a different one
    /// starts a new run; arrivals older than `window` are dropped. At most
    /// `keep` arrivals are kept (the breaker threshold; at least 1).
    pub fn observe(&mut self, request: u64, now: Duration, window: Duration, keep: usize) {
        if request != self.request {
            self.request = request;
            self.times.clear();
        }
        self.times.push_back(now);
        while self
            .times
            .front()
            .is_some_and(|first| now.saturating_sub(*first) > window)
        {
            self.times.pop_front();
        }
        while self.times.len() > keep.max(1) {
            self.times.pop_front();
        }
    }

    /// Identical requests in a row within the window, the latest included.
    pub fn count(&self) -> u32 {
        u32::try_from(self.times.len()).unwrap_or(u32::MAX)
    }

    /// Forgets the run (a fresh start of the session).
    pub fn clear(&mut self) {
        self.times.clear();
    }
}

/// Checks the lane's run of identical requests.
pub(crate) fn check(repeats: &Repeats, settings: &Settings) -> Option<Finding> {
    let count = repeats.count();
    let t = settings.thresholds(DetectorKind::ReplayStorm);
    t.reached(Level::Breaker, count).then(|| Finding {
        detector: DetectorKind::ReplayStorm,
        level: Level::Breaker,
        count,
        tool: None,
        arguments: None,
        detail: format!(
            "the same request was sent {count} times in a row within {} s",
            settings.replay_storm_window.as_secs()
        ),
        advice: ADVICE,
        observe_only: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(900);

    fn run(times: &[u64], request: impl Fn(usize) -> u64) -> u32 {
        let mut r = Repeats::default();
        for (i, t) in times.iter().enumerate() {
            r.observe(request(i), Duration::from_secs(*t), WINDOW, 30);
        }
        r.count()
    }

    #[test]
    fn identical_requests_in_a_row_count_up_to_the_threshold_kept() {
        let times: Vec<u64> = (0..40).collect();
        assert_eq!(run(&times, |_| 7), 30);
        assert_eq!(run(&times[..12], |_| 7), 12);
    }

    #[test]
    fn a_different_request_starts_again() {
        let times: Vec<u64> = (0..20).collect();
        assert_eq!(run(&times, |i| if i < 15 { 7 } else { 8 }), 5);
    }

    #[test]
    fn arrivals_older_than_the_window_drop_out() {
        // One copy a minute for an hour: 16 within any 15 minutes.
        let times: Vec<u64> = (0..60).map(|m| m * 60).collect();
        assert_eq!(run(&times, |_| 7), 16);
    }
}
