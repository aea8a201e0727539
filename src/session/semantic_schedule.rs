//! When the judge looks, per session lane: a pure state machine over model
//! turns since the person last spoke (DESIGN §3 scope), after Gemini CLI's
//! LLM loop check schedule (first check after 30 turns, then an interval that
//! shrinks as the judge grows suspicious).

use crate::detect::settings::SemanticCheck;

/// A positive answer: the judge (and the double check, when configured)
/// reached the confidence bar.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoopFound {
    /// The judge's analysis (already truncated for reading).
    pub analysis: String,
    /// The first model's confidence, 0..1.
    pub confidence: f64,
    /// The double-check model's confidence, when one ran.
    pub second: Option<f64>,
}

/// What a finished check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// A loop, to be reported on the next request.
    Loop(LoopFound),
    /// No loop; the confidence that adapts the next interval (the double
    /// check's when it ran).
    NoLoop(f64),
    /// The call failed (timeout, HTTP error, unparsable answer): no verdict,
    /// the next check comes after `interval` turns.
    Failed,
}

/// What the schedule says for one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// A loop found by an earlier check, with its count in this stretch
    /// (1: warning, 2 or more: critical by default).
    pub found: Option<(LoopFound, u32)>,
    /// A check is due and none is in flight.
    pub due: bool,
}

/// Judge state of one session lane.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct CheckState {
    /// Bumped whenever the person speaks or the lane is reset: the answer of
    /// a check started under an older generation is dropped.
    generation: u64,
    /// Turn count at the last check's start (`None`: no check in this stretch).
    last_check: Option<u64>,
    /// Turns between checks; `None`: the configured `interval`.
    interval: Option<u64>,
    /// A check is in flight.
    in_flight: bool,
    /// A loop waiting to be reported on the next request.
    pending: Option<LoopFound>,
    /// Loops reported in this stretch.
    reported: u32,
}

/// The adapted interval after an answer: `round(min + (max − min) · (1 − c))`,
/// `c` clamped to 0..1 — more suspicion, sooner re-check.
pub fn adapted_interval(confidence: f64, cfg: &SemanticCheck) -> u64 {
    let c = if confidence.is_finite() {
        confidence.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let (min, max) = (cfg.min_interval as f64, cfg.max_interval as f64);
    (min + (max - min) * (1.0 - c)).round() as u64
}

impl CheckState {
    /// Called for every request of the lane, after the detectors absorbed
    /// it: `person_spoke` when its new part carries the person's message,
    /// `turns` the model turns since then. Takes a pending loop (reported
    /// now) and says whether a check is due.
    pub fn on_request(&mut self, person_spoke: bool, turns: u64, cfg: &SemanticCheck) -> Plan {
        if person_spoke {
            self.new_stretch();
        }
        let found = self.pending.take().map(|f| {
            self.reported += 1;
            (f, self.reported)
        });
        let interval = self.interval.unwrap_or(cfg.interval);
        let since = turns.saturating_sub(self.last_check.unwrap_or(0));
        let due = !self.in_flight && turns >= cfg.after_turns && since >= interval;
        Plan { found, due }
    }

    /// A check starts at `turns`: returns its generation (to hand back to
    /// [`CheckState::finish`]).
    pub fn start(&mut self, turns: u64) -> u64 {
        self.in_flight = true;
        self.last_check = Some(turns);
        self.generation
    }

    /// A check of `generation` finished. An answer from an older stretch is
    /// dropped (the person spoke meanwhile); otherwise a loop waits for the
    /// next request and the interval adapts to the confidence.
    pub fn finish(&mut self, generation: u64, finished: Finished, cfg: &SemanticCheck) {
        self.in_flight = false;
        if generation != self.generation {
            return;
        }
        self.interval = Some(match &finished {
            Finished::Loop(found) => adapted_interval(found.second.unwrap_or(found.confidence), cfg),
            Finished::NoLoop(c) => adapted_interval(*c, cfg),
            Finished::Failed => cfg.interval,
        });
        if let Finished::Loop(found) = finished {
            self.pending = Some(found);
        }
    }

    /// Forgets the stretch (the person spoke, or the task started afresh).
    /// A check in flight stays in flight; its answer will be dropped.
    pub fn new_stretch(&mut self) {
        self.generation += 1;
        self.last_check = None;
        self.interval = None;
        self.pending = None;
        self.reported = 0;
    }

    /// A check is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The current interval in turns (`None`: the configured one).
    pub fn interval(&self) -> Option<u64> {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SemanticCheck {
        SemanticCheck {
            enabled: true,
            ..SemanticCheck::default()
        }
    }

    fn found(c: f64) -> Finished {
        Finished::Loop(LoopFound {
            analysis: "same read".into(),
            confidence: c,
            second: None,
        })
    }

    /// Walks turns 1..=up_to, answering every check with `answer(turn)`
    /// at once; returns the turns at which checks started.
    fn checks(up_to: u64, answer: impl Fn(u64) -> Finished) -> Vec<u64> {
        let cfg = cfg();
        let mut s = CheckState::default();
        let mut at = Vec::new();
        for turn in 1..=up_to {
            let plan = s.on_request(turn == 1, turn, &cfg);
            if plan.due {
                let g = s.start(turn);
                at.push(turn);
                s.finish(g, answer(turn), &cfg);
            }
        }
        at
    }

    #[test]
    fn the_interval_follows_the_formula() {
        let cfg = cfg();
        assert_eq!(adapted_interval(1.0, &cfg), 5);
        assert_eq!(adapted_interval(0.0, &cfg), 15);
        assert_eq!(adapted_interval(0.5, &cfg), 10);
        assert_eq!(adapted_interval(0.95, &cfg), 6); // 5.5 rounds up
        assert_eq!(adapted_interval(0.2, &cfg), 13);
        assert_eq!(adapted_interval(f64::NAN, &cfg), 15);
        assert_eq!(adapted_interval(7.0, &cfg), 5);
    }

    #[test]
    fn the_first_check_is_at_after_turns_then_at_adapted_intervals() {
        assert_eq!(checks(70, |_| Finished::NoLoop(0.2)), [30, 43, 56, 69]);
        assert_eq!(checks(50, |_| Finished::NoLoop(0.0)), [30, 45]);
        assert_eq!(checks(45, |_| Finished::Failed), [30, 40]);
        assert_eq!(checks(45, |_| found(1.0)), [30, 35, 40, 45]);
    }

    #[test]
    fn a_loop_is_reported_once_on_the_next_request_and_counts_up_within_the_stretch() {
        let cfg = cfg();
        let mut s = CheckState::default();
        assert!(!s.on_request(true, 0, &cfg).due);
        let g = s.start(30);
        s.finish(g, found(0.95), &cfg);
        assert_eq!(s.on_request(false, 31, &cfg).found.map(|f| f.1), Some(1));
        assert_eq!(s.on_request(false, 32, &cfg).found, None);
        let g = s.start(36);
        s.finish(g, found(0.95), &cfg);
        assert_eq!(s.on_request(false, 37, &cfg).found.map(|f| f.1), Some(2));
        // The person speaks: the count starts over.
        let g = s.start(40);
        s.finish(g, found(0.95), &cfg);
        let plan = s.on_request(true, 0, &cfg);
        assert_eq!(plan.found, None, "a loop of the old stretch is dropped");
    }

    #[test]
    fn one_check_in_flight_and_a_stale_answer_is_dropped() {
        let cfg = cfg();
        let mut s = CheckState::default();
        assert!(s.on_request(false, 30, &cfg).due);
        let g = s.start(30);
        assert!(!s.on_request(false, 45, &cfg).due, "one in flight at a time");
        assert!(!s.on_request(true, 0, &cfg).due);
        s.finish(g, found(0.99), &cfg);
        assert!(!s.in_flight());
        assert_eq!(s.on_request(false, 1, &cfg).found, None);
        assert_eq!(
            s.interval(),
            None,
            "the new stretch keeps the configured interval"
        );
    }
}
