//! The threshold ladder: per-detector levels, action overrides and own keys,
//! validated with their key paths; `warning < critical < breaker` repaired
//! with a notice (OpenClaw's rule, DESIGN §3).

use std::time::Duration;

use super::detection_raw::RawDetector;
use super::problems::Problems;
use crate::detect::settings::{ChantingParams, Settings, Thresholds};
use crate::detect::verdict::{Action, DetectorKind, Level};

/// Built-in thresholds (warning, critical, breaker) per detector, in table
/// order. `content_chanting` and `post_compaction` have no counts: 1 means on.
/// `semantic_loop` counts the judge's positive answers since the person last
/// spoke (first a warning, then critical); it has no table of its own and is
/// configured by `[loop_detection.semantic_check]`.
pub const DETECTOR_DEFAULTS: [[u32; 3]; DetectorKind::ALL.len()] = [
    [3, 5, 0],   // identical_call
    [6, 8, 0],   // cycle (calls)
    [10, 20, 0], // generic_repeat
    [10, 20, 0], // poll_no_progress
    [3, 5, 0],   // error_repeat
    [3, 6, 0],   // consecutive_failures
    [0, 0, 0],   // tool_budget (off)
    [3, 10, 0],  // unknown_tool
    [0, 1, 0],   // content_chanting
    [3, 5, 0],   // repeated_message
    [0, 0, 1],   // post_compaction
    [0, 0, 3],   // compaction_storm
    [0, 0, 30],  // circuit_breaker
    [0, 0, 30],  // replay_storm: identical requests in a row within window_secs
    [1, 2, 0],   // semantic_loop: positive judge answers in one stretch
    [6, 10, 0],  // novelty: stale cycles in a run spanning 3 turns at least
];

/// Validates one detector's levels and action overrides.
pub(crate) fn thresholds(
    kind: DetectorKind,
    raw: &RawDetector,
    path: &str,
    defaults: &[Action; 3],
    problems: &mut Problems,
) -> Thresholds {
    let mut at = levels(kind, raw, path, problems);
    let actions = action_overrides(kind, raw, path, problems);
    let _ = defaults;
    repair_ladder(&mut at, path, problems);
    Thresholds {
        enabled: raw.enabled.unwrap_or(true),
        at,
        actions,
    }
}

/// The detector's levels: its built-in ones, with the levels it has set
/// from `warning` / `critical` / `breaker` (a flag-only detector has none).
fn levels(kind: DetectorKind, raw: &RawDetector, path: &str, problems: &mut Problems) -> [u32; 3] {
    let reachable = kind.levels();
    let flag_only = matches!(kind, DetectorKind::ContentChanting | DetectorKind::PostCompaction);
    let mut at = DETECTOR_DEFAULTS[kind.index()];
    let given = [raw.warning, raw.critical, raw.breaker];
    for level in Level::ALL {
        let Some(value) = given[level.index()] else {
            continue;
        };
        let key = format!("{path}.{}", level.name());
        if flag_only {
            problems.push(
                key,
                format!(
                    "{} has no thresholds (it fires on detection); use `enabled`",
                    kind.name()
                ),
            );
        } else if !reachable.contains(&level) {
            problems.push(key, format!("{} has no {} level", kind.name(), level.name()));
        } else {
            at[level.index()] = value;
        }
    }
    at
}

/// `action_warning` / `_critical` / `_breaker`, on the levels the detector
/// has (`content_chanting` blocks at critical unless told otherwise).
fn action_overrides(
    kind: DetectorKind,
    raw: &RawDetector,
    path: &str,
    problems: &mut Problems,
) -> [Option<Action>; 3] {
    let reachable = kind.levels();
    let mut actions = [None; 3];
    if kind == DetectorKind::ContentChanting {
        actions[Level::Critical.index()] = Some(Action::Block);
    }
    let overrides = [&raw.action_warning, &raw.action_critical, &raw.action_breaker];
    for level in Level::ALL {
        let Some(text) = overrides[level.index()] else {
            continue;
        };
        let key = format!("{path}.action_{}", level.name());
        if !reachable.contains(&level) {
            problems.push(key, format!("{} has no {} level", kind.name(), level.name()));
            continue;
        }
        match Action::parse(text) {
            Some(a) => actions[level.index()] = Some(a),
            None => problems.push(key, format!("{text:?} is not one of {}", Action::NAMES)),
        }
    }
    actions
}

/// The ladder: among the levels that are on, each must exceed the one
/// below; one that does not is raised, with a notice.
fn repair_ladder(at: &mut [u32; 3], path: &str, problems: &mut Problems) {
    let mut below: Option<(Level, u32)> = None;
    for level in Level::ALL {
        let value = at[level.index()];
        if value == 0 {
            continue;
        }
        if let Some((lower, floor)) = below {
            if value <= floor {
                let raised = floor + 1;
                problems.notice(
                    format!("{path}.{}", level.name()),
                    format!(
                        "raised from {value} to {raised}: must exceed {} = {floor}",
                        lower.name()
                    ),
                );
                at[level.index()] = raised;
            }
        }
        below = Some((level, at[level.index()]));
    }
}

/// Validates a detector's own keys (and rejects other detectors' keys).
pub(crate) fn extras(
    kind: DetectorKind,
    raw: &RawDetector,
    s: &mut Settings,
    path: &str,
    problems: &mut Problems,
) {
    reject_foreign_keys(kind, raw, path, problems);
    let mut keys = Ranges { path, problems };
    match kind {
        DetectorKind::Cycle => keys.range("max_period", raw.max_period, 2, 5, &mut s.cycle_max_period),
        DetectorKind::PostCompaction => keys.range(
            "window_size",
            raw.window_size,
            1,
            100,
            &mut s.post_compaction_window,
        ),
        DetectorKind::ContentChanting => keys.chanting(raw, &mut s.chanting),
        DetectorKind::PollNoProgress => {
            if let Some(secs) = raw.max_wait_secs.or(raw.min_stall_secs) {
                s.max_wait = Duration::from_secs(secs);
            }
        }
        DetectorKind::ReplayStorm => match raw.window_secs {
            Some(secs @ 1..=86_400) => s.replay_storm_window = Duration::from_secs(secs),
            Some(secs) => keys.problems.push(
                format!("{path}.window_secs"),
                format!("must be between 1 and 86400, got {secs}"),
            ),
            None => {}
        },
        _ => {}
    }
}

/// The detector-specific keys each detector takes.
fn own_keys(kind: DetectorKind) -> &'static [&'static str] {
    match kind {
        DetectorKind::Cycle => &["max_period"],
        DetectorKind::PollNoProgress => &["min_stall_secs", "max_wait_secs"],
        DetectorKind::PostCompaction => &["window_size"],
        DetectorKind::ReplayStorm => &["window_secs"],
        DetectorKind::ContentChanting => &[
            "chunk_size",
            "min_repeats",
            "max_mean_gap",
            "max_periods",
            "buffer_chars",
            "max_line_repeats",
            "low_entropy_repeats",
        ],
        _ => &[],
    }
}

/// A problem for each detector-specific key set on a detector it is not a key of.
fn reject_foreign_keys(kind: DetectorKind, raw: &RawDetector, path: &str, problems: &mut Problems) {
    let own = own_keys(kind);
    let present = [
        ("max_period", raw.max_period.is_some()),
        ("min_stall_secs", raw.min_stall_secs.is_some()),
        ("max_wait_secs", raw.max_wait_secs.is_some()),
        ("window_size", raw.window_size.is_some()),
        ("window_secs", raw.window_secs.is_some()),
        ("chunk_size", raw.chunk_size.is_some()),
        ("min_repeats", raw.min_repeats.is_some()),
        ("max_mean_gap", raw.max_mean_gap.is_some()),
        ("max_periods", raw.max_periods.is_some()),
        ("buffer_chars", raw.buffer_chars.is_some()),
        ("max_line_repeats", raw.max_line_repeats.is_some()),
        ("low_entropy_repeats", raw.low_entropy_repeats.is_some()),
    ];
    for (key, set) in present {
        if set && !own.contains(&key) {
            problems.push(format!("{path}.{key}"), format!("not a key of {}", kind.name()));
        }
    }
}

/// Range checks of one detector's keys: each problem under `{path}.{key}`.
struct Ranges<'a> {
    path: &'a str,
    problems: &'a mut Problems,
}

impl Ranges<'_> {
    /// Sets `target` to `value` when it is within `lo..=hi`; a problem otherwise.
    fn range(&mut self, key: &str, value: Option<usize>, lo: usize, hi: usize, target: &mut usize) {
        if let Some(v) = value {
            if (lo..=hi).contains(&v) {
                *target = v;
            } else {
                self.problems.push(
                    format!("{}.{key}", self.path),
                    format!("must be between {lo} and {hi}, got {v}"),
                );
            }
        }
    }

    /// `content_chanting`'s keys.
    fn chanting(&mut self, raw: &RawDetector, c: &mut ChantingParams) {
        self.range("chunk_size", raw.chunk_size, 8, 1000, &mut c.chunk_size);
        self.range("min_repeats", raw.min_repeats, 2, 10_000, &mut c.min_repeats);
        self.range("max_mean_gap", raw.max_mean_gap, 1, 100_000, &mut c.max_mean_gap);
        self.range("max_periods", raw.max_periods, 1, 1000, &mut c.max_periods);
        self.range(
            "buffer_chars",
            raw.buffer_chars,
            100,
            1_000_000,
            &mut c.buffer_chars,
        );
        self.range(
            "max_line_repeats",
            raw.max_line_repeats,
            0,
            1_000_000,
            &mut c.max_line_repeats,
        );
        self.range(
            "low_entropy_repeats",
            raw.low_entropy_repeats,
            0,
            1_000_000,
            &mut c.low_entropy_repeats,
        );
    }
}

/// Raises `history_size` to the largest count a history-bound detector needs.
pub(crate) fn raise_history(s: &mut Settings, path: &str, problems: &mut Problems) {
    let bound = [
        DetectorKind::IdenticalCall,
        DetectorKind::GenericRepeat,
        DetectorKind::PollNoProgress,
        DetectorKind::ErrorRepeat,
        DetectorKind::ConsecutiveFailures,
        DetectorKind::UnknownTool,
        DetectorKind::RepeatedMessage,
        DetectorKind::CircuitBreaker,
    ];
    let mut needed = bound
        .iter()
        .map(|k| s.thresholds(*k))
        .filter(|t| t.enabled)
        .flat_map(|t| t.at)
        .max()
        .unwrap_or(0) as usize;
    let cycle = s.thresholds(DetectorKind::Cycle);
    if cycle.enabled {
        needed =
            needed.max((cycle.at.iter().copied().max().unwrap_or(0) as usize).max(3 * s.cycle_max_period));
    }
    let post = s.thresholds(DetectorKind::PostCompaction);
    if post.enabled {
        needed = needed.max(s.post_compaction_window);
    }
    if s.history_size < needed {
        problems.notice(
            format!("{path}.history_size"),
            format!(
                "raised from {} to {needed}: the largest count threshold needs that much history",
                s.history_size
            ),
        );
        s.history_size = needed;
    }
}
