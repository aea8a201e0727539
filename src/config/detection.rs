//! `[loop_detection]` and `[[agents]]`: raw and validated forms.
//!
//! Placeholder owned by the detection engine (issue "Detection engine"):
//! only the top-level switches exist so far.

use serde::Deserialize;

use super::Problems;

/// Raw `[loop_detection]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLoopDetection {
    /// Master switch for every detector.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Tool cycles kept per session.
    #[serde(default = "default_history_size")]
    pub history_size: usize,
}

impl Default for RawLoopDetection {
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            history_size: default_history_size(),
        }
    }
}

fn default_enabled() -> bool {
    true
}
fn default_history_size() -> usize {
    30
}

/// Raw `[[agents]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    /// The agent's name in logs and metrics.
    pub id: String,
}

/// Validated loop-detection settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopDetection {
    /// Master switch.
    pub enabled: bool,
    /// Tool cycles kept per session.
    pub history_size: usize,
}

/// Validates `[loop_detection]` and `[[agents]]`, recording every problem.
pub fn validate(raw: &RawLoopDetection, _agents: &[RawAgent], problems: &mut Problems) -> LoopDetection {
    if raw.history_size == 0 {
        problems.push("loop_detection.history_size", "must be at least 1");
    }
    LoopDetection {
        enabled: raw.enabled,
        history_size: raw.history_size.max(1),
    }
}
