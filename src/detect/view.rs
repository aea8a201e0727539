//! What every detector sees: a view of the session's steps ending at the
//! judged one, and the rules they share (the no-progress run, time spans).

use std::time::Duration;

use super::outcome::Outcome;
use super::settings::Settings;
use super::step::{Cycle, Step, StepKind};
use super::verdict::{DetectorKind, Finding};
use crate::transcript::Signature;

/// The armed `post_compaction` guard: where the compaction happened and the
/// (signature, outcome) pairs seen before it.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Guard {
    /// Steps with `seq` above this came after the compaction.
    pub mark: u64,
    /// Pairs seen before the compaction (bounded by the history).
    pub before: Vec<(Signature, u128)>,
}

/// The steps a detector may look at, ending at the judged step.
pub(crate) struct View<'a> {
    /// History (and pending calls) up to and including the judged step.
    pub steps: &'a [&'a Step],
    /// Settings of this session's agent.
    pub settings: &'a Settings,
    /// The armed post-compaction guard, if any.
    pub guard: Option<&'a Guard>,
}

impl<'a> View<'a> {
    /// The judged step.
    pub fn judged(&self) -> Option<&'a Step> {
        self.steps.last().copied()
    }

    /// The judged cycle, when the judged step is one.
    pub fn judged_cycle(&self) -> Option<&'a Cycle> {
        self.judged().and_then(Step::cycle)
    }

    /// Steps of the judged step's epoch, newest first.
    pub fn epoch_rev(&self) -> impl Iterator<Item = &'a Step> + 'a {
        let epoch = self.judged().map_or(0, |s| s.epoch);
        self.steps
            .iter()
            .rev()
            .copied()
            .take_while(move |s| s.epoch == epoch)
    }

    /// Cycles of the epoch, newest first, up to the first assistant text turn
    /// (which ends a run of calls); `polls` selects poll or non-poll cycles,
    /// the others are skipped.
    pub fn run_rev(&self, polls: bool) -> impl Iterator<Item = (&'a Step, &'a Cycle)> + 'a {
        self.epoch_rev()
            .take_while(|s| !matches!(s.kind, StepKind::Said(_)))
            .filter_map(|s| s.cycle().map(|c| (s, c)))
            .filter(move |(_, c)| c.poll == polls)
    }

    /// Outcomes of the run of identical calls that ends with the judged
    /// (non-poll) cycle, oldest first; `None` when the judged step is not a
    /// call or is a poll. Shared by `identical_call` and `circuit_breaker`.
    pub fn identical_streak(&self) -> Option<Vec<Option<Outcome>>> {
        let judged = self.judged_cycle()?;
        if judged.poll {
            return None;
        }
        let mut streak: Vec<_> = self
            .run_rev(false)
            .take_while(|(_, c)| c.signature == judged.signature)
            .map(|(_, c)| c.outcome)
            .collect();
        streak.reverse();
        Some(streak)
    }

    /// A finding about the judged cycle's tool.
    pub fn finding(
        &self,
        detector: DetectorKind,
        level: super::Level,
        count: usize,
        detail: String,
        advice: &'static str,
    ) -> Finding {
        let cycle = self.judged_cycle();
        Finding {
            detector,
            level,
            count: u32::try_from(count).unwrap_or(u32::MAX),
            tool: cycle.map(|c| c.name.clone()),
            arguments: cycle.map(|c| c.args.clone()),
            detail,
            advice,
            observe_only: false,
        }
    }
}

/// The no-progress run of a streak given its outcomes in order (None for a
/// pending call): how many trailing entries show no progress. Trailing
/// entries count while their known outcome equals the latest known one; the
/// streak's very first entry is forgiven a different outcome (a dedup notice
/// replaces the second read on, DESIGN §3). A run needs at least two known
/// outcomes, else it is 0 (no evidence).
pub(crate) fn no_progress_run(outcomes: &[Option<Outcome>]) -> usize {
    let Some(latest) = outcomes.iter().rev().flatten().next().map(|o| o.hash) else {
        return 0;
    };
    let mut run = 0;
    let mut known = 0;
    for (i, o) in outcomes.iter().enumerate().rev() {
        match o {
            Some(o) if o.hash != latest && i != 0 => break,
            Some(_) => known += 1,
            None => {}
        }
        run += 1;
    }
    if known >= 2 { run } else { 0 }
}

/// Seconds between two session-clock instants, for messages.
pub(crate) fn span(from: Duration, to: Duration) -> u64 {
    to.saturating_sub(from).as_secs()
}

/// No-progress evidence in a streak: some known normalised result occurs at
/// least twice (issue #12 point 2: a warning needs it; results that all
/// differ are progress).
pub(crate) fn repeated_result(outcomes: &[Option<Outcome>]) -> bool {
    let known: Vec<u128> = outcomes.iter().flatten().map(|o| o.hash).collect();
    known.iter().enumerate().any(|(i, h)| known[i + 1..].contains(h))
}
