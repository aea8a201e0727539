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
//! alignment point on get their outcomes computed (see [`extract`]), so a
//! request costs what is new in it. Memory is O(history_size):
//! the steps (each with a 120-character argument preview), a few keys, and a
//! bounded set of 64-bit hashes of user texts.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use super::compaction_storm;
use super::engine;
use super::settings::Settings;
use super::step::{Cycle, Item, Step, StepKind, UserText, extract};
use super::verdict::{Verdict, rank};
use super::view::{Guard, View};
use crate::transcript::{ToolCall, Transcript};

/// Previous-request keys kept for alignment.
const TAIL_KEYS: usize = 4;
/// User-text hashes remembered per session (canned-message recognition).
const USER_TEXTS: usize = 512;

/// What absorbing a request changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Absorbed {
    /// New steps (tool cycles, text turns, canned replies) added.
    pub new_steps: usize,
    /// The person spoke in the new part (streaks restarted).
    pub person_spoke: bool,
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
    realign: bool,
    user_texts: HashSet<u64>,
    user_order: VecDeque<u64>,
    declared: Vec<String>,
    compactions_in_row: u32,
    compactions: u32,
    guard: Option<Guard>,
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

    /// Merges a request's history into the session (see the module doc).
    pub fn absorb(&mut self, transcript: &Transcript, now: Duration, settings: &Settings) -> Absorbed {
        self.declared.clone_from(&transcript.tools);
        let (items, start) = extract(transcript, settings, |keys| self.align(keys));
        let mut absorbed = Absorbed::default();
        let mut prev_canned = false;
        for (i, item) in items.iter().enumerate() {
            let mut next_canned = false;
            if i < start {
                if let Item::User {
                    key,
                    text: UserText::Own,
                } = item
                {
                    self.remember_user(*key);
                }
                prev_canned = matches!(
                    item,
                    Item::User {
                        text: UserText::Canned,
                        ..
                    }
                );
                continue;
            }
            // A canned reply answers a model turn: right after the assistant,
            // or right after another canned reply (recordings and some agents
            // drop the empty model turns between a run of format reminders).
            let after_assistant = (i > 0 && !matches!(items[i - 1], Item::User { .. })) || prev_canned;
            let kind = match item {
                Item::User {
                    text: UserText::Synthetic,
                    ..
                } => None,
                Item::User { key, text } => {
                    let repeated = *text == UserText::Canned || self.user_texts.contains(key);
                    if !repeated {
                        self.epoch += 1;
                        self.in_epoch = 0;
                        self.epoch_turns = 0;
                        absorbed.person_spoke = true;
                    }
                    self.remember_user(*key);
                    let canned = (repeated && after_assistant).then_some(StepKind::Canned);
                    next_canned = canned.is_some();
                    canned
                }
                Item::Said { key } => {
                    self.turn += 1;
                    self.epoch_turns += 1;
                    Some(StepKind::Said(*key))
                }
                // Cycles from the alignment point on are always materialised.
                Item::Cycle { cycle: None, .. } => None,
                Item::Cycle {
                    cycle: Some(cycle),
                    turn_start,
                    ..
                } => {
                    if *turn_start {
                        self.turn += 1;
                        self.epoch_turns += 1;
                    }
                    self.in_epoch += 1;
                    self.compactions_in_row = 0;
                    Some(StepKind::Cycle(self.resolve_dedup(cycle.clone())))
                }
            };
            if let Some(kind) = kind {
                self.push(kind, item.key(), now, settings);
                absorbed.new_steps += 1;
            }
            prev_canned = next_canned;
        }
        self.seen_items = items.len();
        self.tail = items.iter().rev().take(TAIL_KEYS).rev().map(Item::key).collect();
        self.realign = false;
        absorbed
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
        // canned replies after it.
        let n = steps.len();
        let canned = steps
            .iter()
            .rev()
            .take_while(|s| s.kind == StepKind::Canned)
            .count();
        if let Some(last) = steps.len().checked_sub(canned + 1).map(|i| steps[i]) {
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
        let mut verdicts = self.judge_at(&steps, &judged, settings);
        if settings.thresholds(super::DetectorKind::CompactionStorm).enabled {
            if let Some(f) = compaction_storm::check(self.compactions_in_row, settings) {
                verdicts.push(f.into_verdict(settings));
            }
        }
        rank(&mut verdicts);
        verdicts
    }

    /// Judges a batch of complete, not yet executed calls the model is
    /// streaming: "would these calls continue a streak?" Each call is judged
    /// as if appended after the history and the calls before it in the batch.
    /// Changes nothing. `now` is the session clock.
    pub fn judge_pending(&self, calls: &[ToolCall], now: Duration, settings: &Settings) -> Vec<Verdict> {
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
        let mut verdicts = self.judge_at(&steps, &judged, settings);
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
            + self.user_texts.capacity() * 16
            + self.user_order.capacity() * 8
            + self.declared.iter().map(|d| d.capacity() + 24).sum::<usize>()
            + self.guard.as_ref().map_or(0, |g| g.before.capacity() * 48)
    }

    fn judge_at(&self, steps: &[&Step], ends: &[usize], settings: &Settings) -> Vec<Verdict> {
        ends.iter()
            .flat_map(|&end| {
                let view = View {
                    steps: &steps[..end],
                    settings,
                    guard: self.guard.as_ref(),
                };
                engine::judge(&view)
            })
            .map(|f| f.into_verdict(settings))
            .collect()
    }

    /// Index of the first item not absorbed yet, from the items' merge keys.
    fn align(&self, keys: &[u64]) -> usize {
        if self.tail.is_empty() {
            return 0;
        }
        let seen = self.seen_items;
        let k = self.tail.len();
        if !self.realign && keys.len() >= seen && seen >= k && keys[seen - k..seen] == self.tail[..] {
            return seen;
        }
        for width in (1..=k).rev() {
            let tail = &self.tail[k - width..];
            if let Some(end) = (width..=keys.len())
                .rev()
                .find(|&end| keys[end - width..end] == *tail)
            {
                return end;
            }
        }
        match keys.last() {
            Some(last) if self.knows(*last) => keys.len(),
            _ => 0,
        }
    }

    fn knows(&self, key: u64) -> bool {
        self.user_texts.contains(&key) || self.steps.iter().any(|s| s.key == key)
    }

    fn remember_user(&mut self, key: u64) {
        if self.user_texts.insert(key) {
            self.user_order.push_back(key);
            if self.user_order.len() > USER_TEXTS {
                if let Some(old) = self.user_order.pop_front() {
                    self.user_texts.remove(&old);
                }
            }
        }
    }

    /// A dedup notice reads as "same as the previous outcome" of that call.
    fn resolve_dedup(&self, mut cycle: Cycle) -> Cycle {
        if let Some(outcome) = cycle.outcome.as_mut().filter(|o| o.dedup) {
            let previous = self
                .steps
                .iter()
                .rev()
                .filter_map(|s| s.cycle())
                .filter(|c| c.signature == cycle.signature)
                .find_map(|c| c.outcome);
            if let Some(previous) = previous {
                *outcome = previous;
            }
        }
        cycle
    }

    fn push(&mut self, kind: StepKind, key: u64, now: Duration, settings: &Settings) {
        if matches!(kind, StepKind::Cycle(_)) {
            self.cycles += 1;
        }
        self.steps.push_back(Step {
            kind,
            key,
            epoch: self.epoch,
            in_epoch: self.in_epoch,
            seq: self.next_seq,
            turn: self.turn,
            at: now,
        });
        self.next_seq += 1;
        let limit = settings.history_size.max(1);
        while self.cycles > limit || self.steps.len() > 2 * limit + 8 {
            match self.steps.pop_front() {
                Some(old) if old.cycle().is_some() => self.cycles -= 1,
                Some(_) => {}
                None => break,
            }
        }
    }
}
