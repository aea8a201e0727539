//! Per-session (per-lane) detector state: absorbs requests, judges them and pending calls.
//!
//! The proxy keeps one [`SessionState`] per session lane (DESIGN §5) and, per
//! request: [`SessionState::on_request`] (absorb + request-time verdicts);
//! while the response streams, [`SessionState::judge_pending`] for each batch
//! of complete tool calls (pure, no state change); on a compaction signal,
//! [`SessionState::note_compaction`]. Summarizer requests are not absorbed.
//!
//! Merging: a request carries the whole history again, so its items are
//! aligned with what the session already holds — by position and the keys of
//! the previous request's last items (call id, else signature + outcome;
//! text hash for texts). A request sent twice, or retried, therefore adds
//! nothing; a compacted request whose kept tail matches is aligned by search;
//! a stale retry of an older request adds nothing. Only the items from the
//! alignment point on get their outcomes computed (see `extract`), so a
//! request costs what is new in it. Memory is O(history_size):
//! the steps (each with a 120-character argument preview), a few keys, and a
//! bounded set of 64-bit hashes of user texts. The merging is in `absorb`.

mod absorb;
mod align;

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use super::compaction_storm;
use super::engine;
use super::replay_storm::{self, Repeats};
use super::settings::Settings;
use super::step::{Cycle, Known, Step, StepKind};
use super::verdict::{Verdict, rank};
use super::view::{Guard, View};
use crate::transcript::{ToolCall, Transcript};

/// How many steps of a streamed batch a pending call looks back at beyond
/// the history: at least 256, and at least what the session itself holds
/// (`2 × history_size + 8` steps). A batch up to that long is judged over
/// the whole history and batch; realistic parallel batches are far shorter.
pub(crate) fn pending_lookback(settings: &Settings) -> usize {
    (2 * settings.history_size.max(1) + 8).max(256)
}

/// What absorbing a request changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Absorbed {
    /// New steps (tool cycles, text turns, canned replies) added.
    pub new_steps: usize,
    /// The person spoke in the new part (streaks restarted).
    pub person_spoke: bool,
}

/// One held tool cycle, as the live page shows it (see [`SessionState::calls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallView {
    /// Position in the session (monotonic; see [`SessionState::next_seq`]).
    pub seq: u64,
    /// The tool's name.
    pub tool: String,
    /// The arguments as canonical JSON, at most 120 characters.
    pub arguments: String,
    /// When loopguard first saw the cycle (session clock).
    pub at: Duration,
    /// The result was an error, or the arguments did not parse.
    pub failed: bool,
    /// An earlier held cycle had the same call (tool and arguments) and the
    /// same result (outcome hash): the agent learned nothing new.
    pub repeat: bool,
}

/// Detector state of one session lane.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SessionState {
    steps: VecDeque<Step>,
    cycles: usize,
    next_seq: u64,
    epoch: u32,
    in_epoch: u32,
    turn: u64,
    epoch_turns: u64,
    seen_items: usize,
    tail: Vec<u64>,
    /// The previous request's newest call ids: (id hash, items after it).
    anchors: Vec<(u64, usize)>,
    /// The previous request's item shapes ([`Item::shape`](super::step::Item::shape)).
    shapes: Vec<u64>,
    realign: bool,
    user_texts: HashSet<u64>,
    user_order: VecDeque<u64>,
    declared: Vec<String>,
    compactions_in_row: u32,
    compactions: u32,
    guard: Option<Guard>,
    /// The current run of identical requests (`replay_storm`).
    repeats: Repeats,
    /// The items of the previous request's stable messages, for the next
    /// request with the same turns ([`Known`]); not stored.
    #[serde(skip)]
    known: Known,
}

impl SessionState {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Absorbs a request and returns the request-time verdicts, ranked (the
    /// first decides, see [`super::verdict::rank`]). `now` is the session
    /// clock (any monotonic origin).
    pub fn on_request(
        &mut self,
        transcript: &Transcript,
        now: Duration,
        settings: &Settings,
    ) -> Vec<Verdict> {
        self.absorb(transcript, now, settings);
        self.judge_request(settings)
    }

    /// The request-time verdicts for the current state, ranked. While a
    /// condition holds (the same request again, a retry) they repeat.
    pub fn judge_request(&self, settings: &Settings) -> Vec<Verdict> {
        if !settings.enabled {
            return Vec::new();
        }
        let steps: Vec<&Step> = self.steps.iter().collect();
        let mut judged = Vec::new();
        // The last turn's steps: its tool cycles, or its text turn, plus any
        // canned replies or repeated screens after it (a screen seen before
        // is no news: the turn before it is what is judged).
        let n = steps.len();
        // The person spoke after the last turn (in this request, after the
        // loop's last result): the streaks it ended are over, and the
        // person's words must reach the model, not a verdict on what came
        // before them.
        let person_spoke_last = steps.last().is_some_and(|s| s.epoch < self.epoch);
        let canned = steps
            .iter()
            .rev()
            .take_while(|s| matches!(s.kind, StepKind::Canned | StepKind::Screen(_)))
            .count();
        if person_spoke_last {
            // Only the request-level detectors below.
        } else if let Some(last) = steps.len().checked_sub(canned + 1).map(|i| steps[i]) {
            let first = if last.cycle().is_some() {
                n - canned
                    - steps[..n - canned]
                        .iter()
                        .rev()
                        .take_while(|s| s.turn == last.turn && s.cycle().is_some())
                        .count()
            } else {
                n - canned - 1
            };
            judged.extend(first + 1..=n);
        } else {
            judged.extend(1..=n);
        }
        let mut verdicts = self.judge_at(&steps, &judged, usize::MAX, settings);
        if settings.thresholds(super::DetectorKind::CompactionStorm).enabled {
            if let Some(f) = compaction_storm::check(self.compactions_in_row, settings) {
                verdicts.push(f.into_verdict(settings));
            }
        }
        if let Some(f) = replay_storm::check(&self.repeats, settings) {
            verdicts.push(f.into_verdict(settings));
        }
        rank(&mut verdicts);
        verdicts
    }

    /// Judges a batch of complete, not yet executed calls the model is
    /// streaming: "would these calls continue a streak?" Each call is judged
    /// as if appended after the history and the calls before it in the batch,
    /// looking back at most the history's length plus `pending_lookback`
    /// steps: a batch of n calls costs O(n) detector runs over a bounded
    /// view (an answer may carry 80k parallel calls). A batch of up to
    /// `pending_lookback` calls is judged over the whole history and batch;
    /// in a longer one, a call further in no longer sees the history's
    /// oldest steps (counts that span the epoch, like `poll_no_progress`'s,
    /// then stop at the view). Changes nothing. `now` is the session clock.
    pub fn judge_pending(&self, calls: &[ToolCall], now: Duration, settings: &Settings) -> Vec<Verdict> {
        let lookback = self.steps.len() + pending_lookback(settings);
        self.judge_pending_within(calls, now, lookback, settings)
    }

    /// [`SessionState::judge_pending`] with each call judged over at most
    /// `lookback` steps (`usize::MAX`: the whole history and batch).
    fn judge_pending_within(
        &self,
        calls: &[ToolCall],
        now: Duration,
        lookback: usize,
        settings: &Settings,
    ) -> Vec<Verdict> {
        if !settings.enabled {
            return Vec::new();
        }
        let pending: Vec<Step> = calls
            .iter()
            .filter(|c| !settings.is_exempt(&c.name, &c.arguments))
            .enumerate()
            .map(|(i, call)| Step {
                kind: StepKind::Cycle(Cycle::of(call, None, &self.declared, settings)),
                key: 0,
                epoch: self.epoch,
                in_epoch: self.in_epoch + i as u32 + 1,
                seq: self.next_seq + i as u64,
                turn: self.turn + 1,
                at: now,
            })
            .collect();
        let steps: Vec<&Step> = self.steps.iter().chain(pending.iter()).collect();
        let judged: Vec<usize> = (self.steps.len() + 1..=steps.len()).collect();
        let mut verdicts = self.judge_at(&steps, &judged, lookback, settings);
        rank(&mut verdicts);
        verdicts
    }

    /// Records that the session was compacted (DESIGN §6): arms
    /// `post_compaction` with the pairs seen so far, counts toward
    /// `compaction_storm`, and makes the next request realign by search.
    pub fn note_compaction(&mut self) {
        self.compactions += 1;
        self.compactions_in_row += 1;
        let before = self
            .steps
            .iter()
            .filter_map(|s| s.cycle())
            .filter_map(|c| c.outcome.map(|o| (c.signature, o.hash)))
            .collect();
        self.guard = Some(Guard {
            mark: self.next_seq.saturating_sub(1),
            before,
        });
        if self.next_seq == 0 {
            self.guard = None;
        }
        self.realign = true;
    }

    /// Forgets everything (a fresh start of the same task, DESIGN §6).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Model turns (text turns and tool-call turns) absorbed since the
    /// person last spoke (DESIGN §3 scope); the LLM judge's schedule counts these.
    pub fn turns_since_person(&self) -> u64 {
        self.epoch_turns
    }

    /// Compactions noted so far.
    pub fn compactions(&self) -> u32 {
        self.compactions
    }

    /// Tool cycles held (at most `history_size`).
    pub fn cycles(&self) -> usize {
        self.cycles
    }

    /// The held tool cycles, oldest first (at most `history_size`), each
    /// marked whether its result repeated an earlier identical call's.
    pub fn calls(&self) -> Vec<CallView> {
        let mut seen = HashSet::new();
        self.steps
            .iter()
            .filter_map(|s| s.cycle().map(|c| (s, c)))
            .map(|(step, c)| {
                let repeat = c.outcome.is_some_and(|o| !seen.insert((c.signature, o.hash)));
                CallView {
                    seq: step.seq,
                    tool: c.name.clone(),
                    arguments: c.args.clone(),
                    at: step.at,
                    failed: c.failed(),
                    repeat,
                }
            })
            .collect()
    }

    /// The position the next absorbed step will get: a verdict noted now
    /// followed the steps before it.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// An estimate of the heap bytes this state holds (for memory budgets and benchmarks).
    pub fn heap_size(&self) -> usize {
        let steps: usize = self
            .steps
            .iter()
            .map(|s| match &s.kind {
                StepKind::Cycle(c) => c.name.capacity() + c.args.capacity(),
                _ => 0,
            })
            .sum();
        self.steps.capacity() * std::mem::size_of::<Step>()
            + steps
            + self.tail.capacity() * 8
            + self.anchors.capacity() * 16
            + self.shapes.capacity() * 8
            + self.user_texts.capacity() * 16
            + self.user_order.capacity() * 8
            + self.declared.iter().map(|d| d.capacity() + 24).sum::<usize>()
            + self.guard.as_ref().map_or(0, |g| g.before.capacity() * 48)
    }

    /// The verdicts for the steps ending at each of `ends`, each judged over
    /// at most the `lookback` steps before it.
    fn judge_at(
        &self,
        steps: &[&Step],
        ends: &[usize],
        lookback: usize,
        settings: &Settings,
    ) -> Vec<Verdict> {
        ends.iter()
            .flat_map(|&end| {
                let view = View {
                    steps: &steps[end.saturating_sub(lookback)..end],
                    settings,
                    guard: self.guard.as_ref(),
                };
                engine::judge(&view)
            })
            .map(|f| f.into_verdict(settings))
            .collect()
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod session_tests;
