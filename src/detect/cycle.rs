//! `cycle`: the last k·N calls are one block of k signatures repeated N times.
//!
//! Idea: Gemini CLI's cycle check, OpenClaw's ping-pong, OpenHands'
//! alternation. Defaults: k = 2..=5 (`max_period`), warning at N = 3 repeats,
//! critical at N = 5 when, for every position of the block, the outcomes
//! across repeats show no progress (same rule as `identical_call`). The block
//! must be primitive — not itself a repetition of a shorter block — so
//! A‑A‑A‑A belongs to `identical_call`, never here. Does not flag: poll
//! tools (skipped), blocks broken by an assistant text turn or by the person.
//! Cost: O(max_period · run length) per judged call.

use super::step::Cycle;
use super::verdict::{DetectorKind, Finding, Level};
use super::view::{View, no_progress_run};

const ADVICE: &str = "You are alternating between the same calls; use the results you already have and try a different approach.";

/// Whether `block` is a repetition of a shorter block.
fn is_primitive<T: PartialEq>(block: &[T]) -> bool {
    let k = block.len();
    !(1..k).any(|d| k % d == 0 && (d..k).all(|i| block[i] == block[i - d]))
}

/// Checks the judged call.
pub(crate) fn check(v: &View) -> Option<Finding> {
    let judged = v.judged_cycle()?;
    if judged.poll {
        return None;
    }
    let mut run: Vec<&Cycle> = v.run_rev(false).map(|(_, c)| c).collect();
    run.reverse();
    let n = run.len();
    let max_period = v.settings.cycle_max_period;
    let mut best: Option<(usize, usize)> = None; // (repeats, k)
    for k in 2..=max_period {
        if n < 2 * k {
            break;
        }
        let block: Vec<_> = run[n - k..].iter().map(|c| c.signature).collect();
        if !is_primitive(&block) {
            continue;
        }
        let mut m = k;
        while m < n && run[n - 1 - m].signature == run[n - 1 - m + k].signature {
            m += 1;
        }
        let repeats = m / k;
        if best.is_none_or(|(r, _)| repeats > r) {
            best = Some((repeats, k));
        }
    }
    let (repeats, k) = best?;
    let t = v.settings.thresholds(DetectorKind::Cycle);
    let names: Vec<&str> = run[n - k..].iter().map(|c| c.name.as_str()).collect();
    let stall = (0..k)
        .map(|j| {
            let mut outcomes: Vec<_> = (0..repeats).map(|r| run[n - 1 - j - r * k].outcome).collect();
            outcomes.reverse();
            no_progress_run(&outcomes)
        })
        .min()
        .unwrap_or(0);
    if t.reached(Level::Critical, stall as u32) {
        let detail = format!(
            "the block [{}] repeated {stall} times with the same results",
            names.join(" → ")
        );
        return Some(v.finding(DetectorKind::Cycle, Level::Critical, stall, detail, ADVICE));
    }
    t.reached(Level::Warning, repeats as u32).then(|| {
        let detail = format!("the block [{}] repeated {repeats} times", names.join(" → "));
        v.finding(DetectorKind::Cycle, Level::Warning, repeats, detail, ADVICE)
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
