//! Merging a request into a [`SessionState`] (see the parent module's
//! "Merging"): alignment against the previous request, one step per new
//! item, and what is kept for aligning the next request.

use std::time::Duration;

use super::{Absorbed, SessionState};
use crate::detect::settings::Settings;
use crate::detect::step::{Cycle, Extracted, Item, Kind, Known, Step, StepKind, UserText, extract};
use crate::transcript::Transcript;

/// Previous-request keys kept for alignment.
const TAIL_KEYS: usize = 4;
/// Newest call ids of the previous request kept as alignment anchors.
const ANCHORS: usize = 16;
/// User-text hashes remembered per session (canned-message recognition).
const USER_TEXTS: usize = 512;

/// A request's identity for `replay_storm`: its items' keys, in order.
fn request_identity(keys: &[u64]) -> u64 {
    let mut bytes = Vec::with_capacity(keys.len() * 8);
    for k in keys {
        bytes.extend_from_slice(&k.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// How much of the history a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carries {
    /// The whole history (or a compacted / pruned form of it): aligned
    /// against the previous request to find what is new.
    Whole,
    /// Only what is new since the previous request.
    New,
}

impl SessionState {
    /// Merges a request's history into the session (see the module doc).
    pub fn absorb(&mut self, transcript: &Transcript, now: Duration, settings: &Settings) -> Absorbed {
        self.absorb_from(transcript, now, settings, Carries::Whole)
    }

    /// Merges a request that carries only what is new since the previous
    /// one: an OpenAI Responses request chained with `previous_response_id`
    /// (the server holds the rest). Nothing in it is aligned against the
    /// previous request, so an identical cycle counts again rather than
    /// reading as the previous request's tail resent.
    pub fn absorb_new(&mut self, transcript: &Transcript, now: Duration, settings: &Settings) -> Absorbed {
        self.absorb_from(transcript, now, settings, Carries::New)
    }

    fn absorb_from(
        &mut self,
        transcript: &Transcript,
        now: Duration,
        settings: &Settings,
        carries: Carries,
    ) -> Absorbed {
        self.declared.clone_from(&transcript.tools);
        let mut identity = None;
        let known = match carries {
            Carries::Whole => std::mem::take(&mut self.known),
            Carries::New => Known::default(),
        };
        let extracted = extract(transcript, settings, known, |keys| {
            identity = Some(request_identity(keys.keys));
            match carries {
                Carries::Whole => self.align(keys),
                Carries::New => 0,
            }
        });
        let Extracted {
            ref keys,
            ref kinds,
            ref fresh,
            first_fresh,
            start,
            ..
        } = extracted;
        // A first prompt (no model turn yet) sent n times is sampling
        // (best-of-n, pass@k), not a client resending a conversation.
        let conversation = kinds.iter().any(|k| !matches!(k, Kind::User(_)));
        if let (Carries::Whole, Some(identity), true) = (carries, identity, conversation) {
            self.count_repeat(identity, now, settings);
        }
        let mut absorbed = Absorbed::default();
        let mut prev_canned = false;
        for (i, (kind, key)) in kinds.iter().zip(keys).enumerate() {
            if i < start {
                prev_canned = self.resent(*kind, *key);
                continue;
            }
            // A canned reply answers a model turn: right after the assistant,
            // or right after another canned reply (recordings and some agents
            // drop the empty model turns between a run of format reminders).
            let after_assistant = (i > 0 && !matches!(kinds[i - 1], Kind::User(_))) || prev_canned;
            let item = &fresh[i - first_fresh];
            let (kind, canned) = self.step_of(item, after_assistant, &mut absorbed);
            if let Some(kind) = kind {
                self.push(kind, item.key(), now, settings);
                absorbed.new_steps += 1;
            }
            prev_canned = canned;
        }
        self.remember_items(&extracted);
        self.known = match carries {
            Carries::Whole => extracted.into_known(),
            Carries::New => Known::default(),
        };
        absorbed
    }

    /// Counts a whole request's identity into the current run of identical
    /// requests (`replay_storm`), keeping as many arrivals as its breaker
    /// needs: one while it is switched off (nothing reads them, and every
    /// arrival kept is written with the session to the shared store).
    fn count_repeat(&mut self, identity: u64, now: Duration, settings: &Settings) {
        let thresholds = settings.thresholds(crate::detect::DetectorKind::ReplayStorm);
        let keep = if thresholds.enabled {
            thresholds.get(crate::detect::Level::Breaker)
        } else {
            1
        };
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        self.repeats
            .observe(identity, now, settings.replay_storm_window, keep);
    }

    /// An item before the alignment point (already absorbed), of `kind`
    /// and merge key `key`: only the person's own text is remembered again.
    /// Returns whether it is a canned reply.
    fn resent(&mut self, kind: Kind, key: u64) -> bool {
        if kind == Kind::User(UserText::Own) {
            self.remember_user(key);
        }
        kind == Kind::User(UserText::Canned)
    }

    /// The step a new item makes, if any, and whether it is a canned reply.
    fn step_of(
        &mut self,
        item: &Item,
        after_assistant: bool,
        absorbed: &mut Absorbed,
    ) -> (Option<StepKind>, bool) {
        match item {
            Item::User {
                text: UserText::Synthetic,
                ..
            } => (None, false),
            Item::User { key, text } => self.user_step(*key, *text, after_assistant, absorbed),
            Item::Said { key } => {
                self.turn += 1;
                self.epoch_turns += 1;
                (Some(StepKind::Said(*key)), false)
            }
            // Cycles from the alignment point on are always materialised.
            Item::Cycle { cycle: None, .. } => (None, false),
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
                (Some(StepKind::Cycle(self.resolve_dedup(cycle.clone()))), false)
            }
        }
    }

    /// A user text: a new one is the person speaking (a new epoch); a
    /// canned one after a model turn is a canned reminder; any other
    /// repeated text a repeated screen. Returns the step and whether it is
    /// a canned reply.
    fn user_step(
        &mut self,
        key: u64,
        text: UserText,
        after_assistant: bool,
        absorbed: &mut Absorbed,
    ) -> (Option<StepKind>, bool) {
        let repeated = text == UserText::Canned || self.user_texts.contains(&key);
        if !repeated {
            self.epoch += 1;
            self.in_epoch = 0;
            self.epoch_turns = 0;
            absorbed.person_spoke = true;
        }
        self.remember_user(key);
        // Only a text that matches `canned_patterns` is a canned
        // reminder (a failure); any other repeated text is a
        // repeated screen (issue #12 point 7).
        let canned = text == UserText::Canned && after_assistant;
        let kind = if canned {
            Some(StepKind::Canned)
        } else if repeated {
            Some(StepKind::Screen(key))
        } else {
            None
        };
        (kind, canned)
    }

    /// Remembers the request's items for aligning the next one: their
    /// count, tail keys, anchors and shapes.
    fn remember_items(&mut self, items: &Extracted) {
        let n = items.keys.len();
        self.seen_items = n;
        self.tail.clear();
        self.tail
            .extend_from_slice(&items.keys[n.saturating_sub(TAIL_KEYS)..]);
        self.anchors = items
            .idents
            .iter()
            .enumerate()
            .rev()
            .filter_map(|(i, ident)| ident.map(|id| (id, n - 1 - i)))
            .take(ANCHORS)
            .collect();
        self.shapes.clone_from(&items.shapes);
        self.realign = false;
    }

    pub(super) fn knows(&self, key: u64) -> bool {
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

    /// Appends a step, dropping the oldest beyond the history bounds.
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
