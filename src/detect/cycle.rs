//! `cycle`: the last calls are one block of k call identities repeated (ping-pong).
//!
//! Idea: Gemini CLI's cycle check, OpenClaw's ping-pong, OpenHands'
//! alternation. Thresholds count *calls*, not block repeats (issue #12
//! point 4), so a ping-pong is stopped about as early as a single repeated
//! call: defaults k = 2..=5 (`max_period`), warning at 6 calls, critical at
//! 8 calls, and each level also needs three whole repeats of the block — a
//! period-2 ping-pong with identical results is critical at its 8th call, a
//! period-3 one at its 9th, period 4 at its 12th, period 5 at its 15th. The
//! calls counted are the trailing whole blocks. Critical needs, for every
//! position of the block, no progress across the repeats (same rule as
//! `identical_call`); a warning needs no-progress evidence — some position
//! whose result repeats (point 2). The block must be primitive — not itself
//! a repetition of a shorter block — so A‑A‑A‑A belongs to `identical_call`,
//! never here. Does not flag: poll and wait calls (skipped), blocks whose
//! results all change (edit → test with changing test output), blocks broken
//! by an assistant text turn or by the person.
//! Cost: O(max_period · run length) per judged call.

use super::step::Cycle;
use super::verdict::{DetectorKind, Finding, Level};
use super::view::{View, no_progress_run, repeated_result};

const ADVICE: &str = "You are alternating between the same calls; use the results you already have and try a different approach.";

/// Whole repeats of the block a level needs besides its call threshold.
const MIN_REPEATS: usize = 3;

/// Whether `block` is a repetition of a shorter block.
#[cfg(test)]
fn is_primitive<T: PartialEq>(block: &[T]) -> bool {
    is_primitive_by(block.len(), |i, j| block[i] == block[j])
}

/// [`is_primitive`] of a block of `k` items compared by `same(i, j)`.
fn is_primitive_by(k: usize, same: impl Fn(usize, usize) -> bool) -> bool {
    !(1..k).any(|d| k % d == 0 && (d..k).all(|i| same(i, i - d)))
}

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged_cycle()?;
    if judged.poll {
        return None;
    }
    // The run newest first, pulled only as far as a block's repeats reach:
    // without a loop that is a few calls, whatever the history's length.
    let mut run_rev = v.run_rev(false).map(|(_, c)| c);
    let mut rev: Vec<&Cycle> = Vec::new();
    let mut pull = |rev: &mut Vec<_>, len: usize| {
        while rev.len() < len {
            match run_rev.next() {
                Some(c) => rev.push(c),
                None => return false,
            }
        }
        true
    };
    let max_period = v.settings.cycle_max_period;
    let mut best: Option<(usize, usize)> = None; // (whole repeats, k)
    for k in 2..=max_period {
        if !pull(&mut rev, MIN_REPEATS * k) {
            break;
        }
        // The block is the newest k calls (`rev[k - 1]` its oldest).
        if !is_primitive_by(k, |i, j| rev[k - 1 - i].signature == rev[k - 1 - j].signature) {
            continue;
        }
        let mut m = k;
        while pull(&mut rev, m + 1) && rev[m].signature == rev[m - k].signature {
            m += 1;
        }
        let repeats = m / k;
        if repeats >= MIN_REPEATS && best.is_none_or(|(r, bk)| repeats * k > r * bk) {
            best = Some((repeats, k));
        }
    }
    let (repeats, k) = best?;
    let t = v.settings.thresholds(DetectorKind::Cycle);
    let names: Vec<&str> = rev[..k].iter().rev().map(|c| c.name.as_str()).collect();
    let per_position: Vec<Vec<_>> = (0..k)
        .map(|j| {
            let mut outcomes: Vec<_> = (0..repeats).map(|r| rev[j + r * k].outcome).collect();
            outcomes.reverse();
            outcomes
        })
        .collect();
    let stall = per_position.iter().map(|o| no_progress_run(o)).min().unwrap_or(0);
    let stalled_calls = stall * k;
    if stall >= MIN_REPEATS && t.reached(Level::Critical, stalled_calls as u32) {
        let detail = format!(
            "the block [{}] repeated {stall} times ({stalled_calls} calls) with the same results",
            names.join(" → ")
        );
        return Some(v.finding(
            DetectorKind::Cycle,
            Level::Critical,
            stalled_calls,
            detail,
            ADVICE,
        ));
    }
    let calls = repeats * k;
    let evidence = per_position.iter().any(|o| repeated_result(o));
    (evidence && t.reached(Level::Warning, calls as u32)).then(|| {
        let detail = format!(
            "the block [{}] repeated {repeats} times ({calls} calls)",
            names.join(" → ")
        );
        v.finding(DetectorKind::Cycle, Level::Warning, calls, detail, ADVICE)
    })
}

#[cfg(test)]
mod tests {
    use super::is_primitive;

    #[test]
    fn primitive_blocks_are_not_repetitions_of_shorter_ones() {
        assert!(is_primitive(&[1, 2]));
        assert!(is_primitive(&[1, 1, 2]));
        assert!(!is_primitive(&[1, 1]));
        assert!(!is_primitive(&[1, 2, 1, 2]));
        assert!(is_primitive(&[1, 2, 1, 3]));
    }
}
