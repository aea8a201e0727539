//! The raw form of `[loop_detection]` and `[[agents]]`: serde structs that
//! mirror the TOML exactly (every key optional, `None` = inherit; unknown
//! keys rejected). [`super::detection`] merges and validates them.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::detect::DetectorKind;

/// Raw `[loop_detection]` (also an agent's `loop_detection`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLoopDetection {
    /// Master switch.
    pub enabled: Option<bool>,
    /// Tool cycles kept per session.
    pub history_size: Option<usize>,
    /// JSON keys removed from results before hashing.
    pub volatile_keys: Option<Vec<String>>,
    /// Regexes removed from result text.
    pub outcome_masks: Option<Vec<String>>,
    /// Regexes recognising dedup notices.
    pub dedup_notices: Option<Vec<String>>,
    /// Error patterns, anchored at a line start.
    pub error_patterns: Option<Vec<String>>,
    /// Poll tools.
    pub poll_tools: Option<Vec<RawToolMatcher>>,
    /// Tools never counted.
    pub exempt_tools: Option<Vec<RawToolMatcher>>,
    /// Canned user messages.
    pub canned_patterns: Option<Vec<String>>,
    /// `[loop_detection.call_identity]`: tool → arguments that do not identify a call.
    pub call_identity: Option<BTreeMap<String, Vec<String>>>,
    /// Injected user texts (not the person).
    pub injected_patterns: Option<Vec<String>>,
    /// `[loop_detection.actions]`.
    pub actions: Option<RawActions>,
    /// `[loop_detection.compaction]`.
    pub compaction: Option<RawCompaction>,
    /// `[loop_detection.semantic_check]`: the LLM judge.
    pub semantic_check: Option<super::semantic::RawSemanticCheck>,
    /// `[loop_detection.escalate]`: how long the `escalate` action lasts.
    pub escalate: Option<super::escalate::RawEscalate>,
    /// `[loop_detection.experiment]`: the holdout arm.
    pub experiment: Option<super::escalate::RawExperiment>,
    /// Per-detector tables.
    #[serde(flatten)]
    pub detectors: RawDetectors,
}

/// The `[loop_detection.<detector>]` tables (all but `semantic_loop`, which `semantic_check` configures).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(missing_docs, reason = "one field per detector, named as in DESIGN §3")]
pub struct RawDetectors {
    pub identical_call: Option<RawDetector>,
    pub cycle: Option<RawDetector>,
    pub generic_repeat: Option<RawDetector>,
    pub poll_no_progress: Option<RawDetector>,
    pub error_repeat: Option<RawDetector>,
    pub consecutive_failures: Option<RawDetector>,
    pub tool_budget: Option<RawDetector>,
    pub unknown_tool: Option<RawDetector>,
    pub content_chanting: Option<RawDetector>,
    pub repeated_message: Option<RawDetector>,
    pub post_compaction: Option<RawDetector>,
    pub compaction_storm: Option<RawDetector>,
    pub circuit_breaker: Option<RawDetector>,
    pub replay_storm: Option<RawDetector>,
    pub novelty: Option<RawDetector>,
}

impl RawDetectors {
    /// The table of one detector.
    pub(super) fn get(&self, kind: DetectorKind) -> Option<&RawDetector> {
        let table = match kind {
            DetectorKind::IdenticalCall => &self.identical_call,
            DetectorKind::Cycle => &self.cycle,
            DetectorKind::GenericRepeat => &self.generic_repeat,
            DetectorKind::PollNoProgress => &self.poll_no_progress,
            DetectorKind::ErrorRepeat => &self.error_repeat,
            DetectorKind::ConsecutiveFailures => &self.consecutive_failures,
            DetectorKind::ToolBudget => &self.tool_budget,
            DetectorKind::UnknownTool => &self.unknown_tool,
            DetectorKind::ContentChanting => &self.content_chanting,
            DetectorKind::RepeatedMessage => &self.repeated_message,
            DetectorKind::PostCompaction => &self.post_compaction,
            DetectorKind::CompactionStorm => &self.compaction_storm,
            DetectorKind::CircuitBreaker => &self.circuit_breaker,
            DetectorKind::ReplayStorm => &self.replay_storm,
            DetectorKind::Novelty => &self.novelty,
            // Configured by `[loop_detection.semantic_check]`.
            DetectorKind::SemanticLoop => return None,
        };
        table.as_ref()
    }

    /// `over`'s tables, key by key, over these.
    pub(super) fn merged(&self, over: &Self) -> Self {
        let m = |a: &Option<RawDetector>, b: &Option<RawDetector>| match (a, b) {
            (Some(a), Some(b)) => Some(a.merged(b)),
            (a, b) => b.clone().or_else(|| a.clone()),
        };
        Self {
            identical_call: m(&self.identical_call, &over.identical_call),
            cycle: m(&self.cycle, &over.cycle),
            generic_repeat: m(&self.generic_repeat, &over.generic_repeat),
            poll_no_progress: m(&self.poll_no_progress, &over.poll_no_progress),
            error_repeat: m(&self.error_repeat, &over.error_repeat),
            consecutive_failures: m(&self.consecutive_failures, &over.consecutive_failures),
            tool_budget: m(&self.tool_budget, &over.tool_budget),
            unknown_tool: m(&self.unknown_tool, &over.unknown_tool),
            content_chanting: m(&self.content_chanting, &over.content_chanting),
            repeated_message: m(&self.repeated_message, &over.repeated_message),
            post_compaction: m(&self.post_compaction, &over.post_compaction),
            compaction_storm: m(&self.compaction_storm, &over.compaction_storm),
            circuit_breaker: m(&self.circuit_breaker, &over.circuit_breaker),
            replay_storm: m(&self.replay_storm, &over.replay_storm),
            novelty: m(&self.novelty, &over.novelty),
        }
    }
}

macro_rules! raw_detector {
    ($($field:ident: $ty:ty, $doc:literal;)*) => {
        /// Raw `[loop_detection.<detector>]`: levels, action overrides and
        /// the detector's own keys (a key of another detector is an error).
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawDetector {
            $(#[doc = $doc] pub $field: Option<$ty>,)*
        }

        impl RawDetector {
            /// `over`'s keys over these.
            pub(super) fn merged(&self, over: &Self) -> Self {
                Self { $($field: over.$field.clone().or_else(|| self.$field.clone()),)* }
            }
        }
    };
}

raw_detector! {
    enabled: bool, "The detector runs.";
    warning: u32, "Warning threshold (0 = off).";
    critical: u32, "Critical threshold (0 = off).";
    breaker: u32, "Breaker threshold (0 = off).";
    action_warning: String, "Action for a warning.";
    action_critical: String, "Action for a critical verdict.";
    action_breaker: String, "Action for a breaker verdict.";
    max_period: usize, "`cycle`: longest block (2..=5).";
    min_stall_secs: u64, "`poll_no_progress`: older name of `max_wait_secs`.";
    max_wait_secs: u64, "`poll_no_progress`: wall time a stalled poll or wait must span for critical.";
    window_size: usize, "`post_compaction`: cycles watched after a compaction.";
    window_secs: u64, "`replay_storm`: seconds identical requests are counted in.";
    chunk_size: usize, "`content_chanting`: window bytes.";
    min_repeats: usize, "`content_chanting`: recurrences.";
    max_mean_gap: usize, "`content_chanting`: largest mean gap.";
    max_periods: usize, "`content_chanting`: most distinct gaps.";
    buffer_chars: usize, "`content_chanting`: tracked bytes.";
    max_line_repeats: usize, "`content_chanting`: same line ceiling.";
    low_entropy_repeats: usize, "`content_chanting`: repeats of a short unit in low-entropy text.";
}

/// A tool matcher: a bare name, or `{ name, args = { key = value | [values] } }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawToolMatcher {
    /// Any call of this tool.
    Name(String),
    /// Calls with matching arguments.
    Spec(RawToolSpec),
}

/// The table form of a tool matcher.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolSpec {
    /// Tool name.
    pub name: String,
    /// Argument key → accepted value(s).
    #[serde(default)]
    pub args: BTreeMap<String, OneOrMany>,
}

/// One string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A single value.
    One(String),
    /// Several values.
    Many(Vec<String>),
}

/// Raw `[loop_detection.actions]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawActions {
    /// Action for warnings (`warn`).
    pub warning: Option<String>,
    /// Action for critical verdicts (`block`).
    pub critical: Option<String>,
    /// Action for breakers (`abort`).
    pub breaker: Option<String>,
}

/// Raw `[loop_detection.compaction]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompaction {
    /// Summarizer prompt regexes.
    pub summarizer_patterns: Option<Vec<String>>,
    /// Post-compaction prefix regexes.
    pub summary_prefixes: Option<Vec<String>>,
}

/// Raw `[[agents]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    /// The agent's name in logs and metrics.
    pub id: String,
    /// How requests are recognised as this agent's.
    #[serde(rename = "match")]
    pub matcher: RawAgentMatch,
    /// Overrides of `[loop_detection]` for this agent.
    #[serde(default)]
    pub loop_detection: RawLoopDetection,
}

/// Raw `match` of an agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgentMatch {
    /// Header name (case-insensitive).
    pub header: Option<String>,
    /// Exact header value.
    pub value: Option<String>,
    /// Prefix of the `user-agent` header.
    pub user_agent_prefix: Option<String>,
}
