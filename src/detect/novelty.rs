//! `novelty`: a run of calls that brought back nothing new, however they were spelled.
//!
//! Issue #38 (detection v3): no progress is no new information. The streak
//! detectors need the same call (or block of calls) again; an agent that
//! respells one command every time (`ls -la src`, `ls -al ./src/`,
//! `ls src | cat`, …), retries a failure with another URL or token, or
//! alternates between two or three commands whose outputs never change
//! forms no streak, yet learns nothing. This detector asks only what came
//! back: within the *epoch* (since the person last spoke, and since the last
//! compaction: a compacted agent lost what it had read), each tool cycle is
//!
//! - **new** when its result was not received before in the epoch (a
//!   success by its normalised outcome hash, a failure by its error
//!   fingerprint: which error, not the echoed URL or token, see
//!   `detect::echo`), or
//! - **stale** when it was, and it is a failure (whatever the arguments)
//!   or the call respells one already made (its spelling-free key,
//!   `detect::identity::loose`, was seen), or
//! - **neutral** when it was, from a call to another target (`git add
//!   a.py`, `git add b.py` → the same empty output; eight `__init__.py`
//!   files with the same licence header: batch work, not a loop). A
//!   neutral cycle ends a run, as a new one does.
//!
//! The run is the trailing sequence of stale cycles ending at the judged
//! one; polls and waits are skipped (they are `poll_no_progress`'s), and
//! so are assistant text turns ("let me try again" is no news either). Defaults: warning at 6 stale cycles,
//! critical at 10, each only when the run spans at least [`MIN_TURNS`]
//! assistant turns (parallel calls of one turn that all fail alike are one
//! exploration, not a loop). The set of results "received" is the session's
//! history window (`history_size` cycles), so it is bounded.
//!
//! Legitimate twins left alone: re-reading a file after an edit (its text
//! changed: new), a test run after each edit (the edit targets another
//! change each time: neutral, or its output changed: new), `git status`
//! between commits, paginated reads (each page new), a watch whose output
//! grows, batch work on different targets.
//! Judged at request time only: a pending call's result is not known yet.
//! Cost: per judged call, one backward scan of the epoch per stale cycle
//! counted (at most the critical threshold of them): O(10 × window), no
//! allocation but the message's.

use super::outcome::Outcome;
use super::step::{Step, StepKind};
use super::verdict::{DetectorKind, Finding, Level};
use super::view::View;

/// Fewest assistant turns a run must span for either level.
pub const MIN_TURNS: usize = 3;

const ADVICE: &str = "Every result of these calls repeats one you already received: rephrasing or retrying the command will not change it. Use what you already have, try a genuinely different approach, or ask the user.";

/// How a cycle of the epoch stands (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Its result had not come back before.
    New,
    /// Its result had, from the same call respelled or as the same failure.
    Stale,
    /// Its result had, from a call to another target.
    Neutral,
    /// An assistant text turn (neither counts nor ends a run).
    Said,
}

/// What counts as "the same result received": a failure by its
/// fingerprint, a success by its normalised hash (the top bit tells them apart).
fn received(o: &Outcome) -> u128 {
    const FAILURE: u128 = 1 << 127;
    if o.is_error {
        FAILURE | u128::from(o.fingerprint)
    } else {
        o.hash & !FAILURE
    }
}

/// The judged step's epoch within the view (since the person spoke and
/// since the last compaction), oldest first.
pub(crate) fn epoch<'a>(v: &View<'a>) -> &'a [&'a Step] {
    let Some(judged) = v.judged() else {
        return &[];
    };
    let since = v.guard.map(|g| g.mark);
    let within = v
        .steps
        .iter()
        .rev()
        .take_while(|s| s.epoch == judged.epoch && since.is_none_or(|mark| s.seq > mark))
        .count();
    &v.steps[v.steps.len() - within..]
}

/// The mark of `epoch[i]`: `None` for a step that has none (a poll, a call
/// whose result is unknown, a canned reply, a screen). One backward scan
/// over the steps before it, stopping once the result and the call were
/// both found: O(i), no allocation.
pub(crate) fn mark(epoch: &[&Step], i: usize) -> Option<Mark> {
    let c = match &epoch.get(i)?.kind {
        StepKind::Said(_) => return Some(Mark::Said),
        StepKind::Cycle(c) if !c.poll => c,
        _ => return None,
    };
    let o = c.outcome?;
    let key = received(&o);
    let (mut seen, mut respelled) = (o.dedup, false);
    for earlier in epoch[..i].iter().rev().filter_map(|s| s.cycle()) {
        if seen && respelled {
            break;
        }
        if earlier.poll {
            continue;
        }
        seen |= earlier.outcome.is_some_and(|e| received(&e) == key);
        respelled |= earlier.loose == c.loose;
    }
    // A failure again, or the same result from a respelled call: stale;
    // a result already seen from a call to another target (an
    // acknowledgement, a boilerplate file): batch work.
    Some(match (seen, o.is_error || respelled) {
        (false, _) => Mark::New,
        (true, true) => Mark::Stale,
        (true, false) => Mark::Neutral,
    })
}

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged_cycle()?;
    if judged.poll || judged.outcome.is_none() {
        return None;
    }
    let t = v.settings.thresholds(DetectorKind::Novelty);
    // Counting stops where the highest level on is reached.
    let cap = [Level::Critical, Level::Warning]
        .into_iter()
        .map(|l| t.get(l))
        .find(|n| *n > 0)? as usize;
    let epoch = epoch(v);
    let mut count = 0;
    let mut turns = 0;
    let mut last_turn = None;
    let mut tools: Vec<&str> = Vec::new();
    for i in (0..epoch.len()).rev() {
        match mark(epoch, i) {
            // A text turn ("let me try again") is no news either.
            None | Some(Mark::Said) => continue,
            Some(Mark::Stale) => {}
            Some(_) => break,
        }
        count += 1;
        if last_turn != Some(epoch[i].turn) {
            turns += 1;
            last_turn = Some(epoch[i].turn);
        }
        if let Some(c) = epoch[i].cycle() {
            if !tools.contains(&c.name.as_str()) {
                tools.push(&c.name);
            }
        }
        if count >= cap && turns >= MIN_TURNS {
            break;
        }
    }
    if count == 0 || turns < MIN_TURNS {
        return None;
    }
    let level = [Level::Critical, Level::Warning]
        .into_iter()
        .find(|l| t.reached(*l, count as u32))?;
    tools.sort_unstable();
    let compacted = v.guard.is_some_and(|g| v.epoch_rev().any(|s| s.seq <= g.mark));
    let since = if compacted {
        "the last compaction"
    } else {
        "the person last spoke"
    };
    let detail = format!(
        "and the {} calls before it ({}) brought back only results already received since {since}",
        count - 1,
        tools
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Some(v.finding(DetectorKind::Novelty, level, count, detail, ADVICE))
}
