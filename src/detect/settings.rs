//! Validated loop-detection settings: thresholds, actions, tool matchers and patterns.
//!
//! Built by [`crate::config::detection`] from `[loop_detection]` (and per agent
//! from `[[agents]]`); every detector reads only this form. Defaults live in
//! the `DEFAULT_*` constants below and in `config/loopguard.toml`.

use std::time::Duration;

use regex::Regex;
use serde_json::Value;
use url::Url;

use super::verdict::{Action, DetectorKind, Level};
use crate::transcript::Arguments;

/// Default volatile JSON keys, removed at any depth before hashing an outcome.
pub const DEFAULT_VOLATILE_KEYS: &[&str] = &[
    "id",
    "timestamp",
    "ts",
    "created_at",
    "duration",
    "duration_ms",
    "elapsed",
    "pid",
    "request_id",
];

/// Default masks applied to result text before hashing (regex, matches removed):
/// Codex's `Chunk ID:` and `Wall time: … seconds` header lines, Gemini CLI's
/// `Process Group PGID:` line.
pub const DEFAULT_OUTCOME_MASKS: &[&str] = &[
    r"(?m)^Chunk ID: .*$",
    r"(?m)^Wall time: .*seconds?$",
    r"(?m)^Process Group PGID: .*$",
];

/// Default deduplication notices (regex, matched at the start of the trimmed
/// result): Claude Code's notice that replaces a repeated unchanged read.
pub const DEFAULT_DEDUP_NOTICES: &[&str] = &[r"(?i)^Wasted call\b.{0,8}file unchanged since your last Read"];

/// Default error patterns, each matched at the start of a line.
pub const DEFAULT_ERROR_PATTERNS: &[&str] = &[
    r"Error\b",
    r"error(\[[A-Za-z0-9_]+\])?:",
    r"ERROR\b",
    r"[A-Za-z_][A-Za-z0-9_.]*(Error|Exception)\b:?",
    r"Exception\b",
    r"Traceback \(most recent call last\)",
    r"fatal:",
    r"FATAL\b",
    r"panic(ked)?\b",
    r"FAILED\b",
    r"Failed to\b",
    r"npm ERR!",
    r"E\s+[A-Za-z]+(Error|Exception)\b",
];

/// Default canned user messages: framework reminders an agent repeats on its own.
pub const DEFAULT_CANNED_PATTERNS: &[&str] = &[
    r"(?i)^no tool calls? (was |were )?found",
    r"(?i)^\[ERROR\] You did not use a tool",
    r"(?i)^please (continue|use a tool|call a tool)\b",
];

/// Default summarizer-prompt patterns (DESIGN §6): Gemini CLI, Codex, Claude
/// Code and Cline, OpenCode, OpenClaw (pi), Aider. Matched anywhere in the
/// last user message or the system text.
pub const DEFAULT_SUMMARIZER_PATTERNS: &[&str] = &[
    r"component that summarizes internal chat history",
    r"CONTEXT CHECKPOINT COMPACTION",
    r"create a detailed summary of the conversation so far",
    r#"<explicit_instructions type="summarize_task">"#,
    r"Provide a detailed prompt for continuing our conversation",
    r"[Cc]reate a structured context checkpoint summary",
    r"Briefly summarize this partial conversation",
];

/// Default post-compaction prefixes (matched at the start of a user message):
/// Gemini CLI, Cline, Claude Code / Cline, Codex, OpenClaw (pi), Aider.
pub const DEFAULT_SUMMARY_PREFIXES: &[&str] = &[
    r"^\s*<state_snapshot>",
    r"^Context summary:",
    r"^This session is being continued from a previous conversation",
    r"^Another language model started to solve this problem",
    r"^The conversation history before this point was compacted",
    r"^I spoke to you previously about a number of things",
];

/// Thresholds of one detector. A threshold of 0 switches that level off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// The detector runs at all.
    pub enabled: bool,
    /// Counts per level, indexed by [`Level::index`]; 0 = off.
    pub at: [u32; 3],
    /// Per-detector action overrides (`action_warning`, …).
    pub actions: [Option<Action>; 3],
}

impl Thresholds {
    /// Thresholds with no action overrides.
    pub const fn new(warning: u32, critical: u32, breaker: u32) -> Self {
        Self {
            enabled: true,
            at: [warning, critical, breaker],
            actions: [None; 3],
        }
    }

    /// The threshold of a level (0 = off).
    pub fn get(&self, level: Level) -> u32 {
        self.at[level.index()]
    }

    /// Whether `count` reaches `level` (on and at or above its threshold).
    pub fn reached(&self, level: Level, count: u32) -> bool {
        let t = self.get(level);
        self.enabled && t > 0 && count >= t
    }
}

/// A tool picked by name, optionally only when some arguments have given values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMatcher {
    /// Exact tool name.
    pub name: String,
    /// Argument key → accepted values (strings as written, other JSON values
    /// as serialised). An absent argument matches the empty string.
    pub args: Vec<(String, Vec<String>)>,
}

impl ToolMatcher {
    /// Whether a call matches.
    pub fn matches(&self, name: &str, arguments: &Arguments) -> bool {
        if name != self.name {
            return false;
        }
        self.args.iter().all(|(key, values)| {
            let actual = match arguments {
                Arguments::Json(Value::Object(map)) => match map.get(key) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                },
                _ => String::new(),
            };
            values.contains(&actual)
        })
    }
}

/// `content_chanting` parameters (DESIGN §3, after Gemini CLI's content loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChantingParams {
    /// Window length in bytes (`chunk_size`, 50).
    pub chunk_size: usize,
    /// Recurrences of one window that count as chanting (`min_repeats`, 10).
    pub min_repeats: usize,
    /// Largest mean gap between recurrences, bytes (`max_mean_gap`, 250).
    pub max_mean_gap: usize,
    /// Most distinct gaps (periods) between recurrences (`max_periods`, 5).
    pub max_periods: usize,
    /// Text kept for tracking, bytes (`buffer_chars`, 5000).
    pub buffer_chars: usize,
    /// Same normalised line this many times in one response (`max_line_repeats`, 30; 0 = off).
    pub max_line_repeats: usize,
}

/// Compaction recognition patterns (DESIGN §6), `[loop_detection.compaction]`.
#[derive(Debug, Clone)]
pub struct CompactionPatterns {
    /// Summarizer prompts (last user message or system text).
    pub summarizer: Vec<Regex>,
    /// Post-compaction prefixes (start of a user message).
    pub summary_prefixes: Vec<Regex>,
}

/// Validated settings for one agent (or the defaults).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Master switch.
    pub enabled: bool,
    /// Tool cycles kept per session (at least the largest count threshold).
    pub history_size: usize,
    /// JSON keys removed at any depth before hashing outcomes.
    pub volatile_keys: Vec<String>,
    /// Regexes whose matches are removed from result text.
    pub outcome_masks: Vec<Regex>,
    /// Regexes recognising a dedup notice at the start of a result.
    pub dedup_notices: Vec<Regex>,
    /// All error patterns, combined and anchored at a line start.
    pub error_pattern: Option<Regex>,
    /// Poll tools (judged by `poll_no_progress` only).
    pub poll_tools: Vec<ToolMatcher>,
    /// Tools never counted.
    pub exempt_tools: Vec<ToolMatcher>,
    /// User texts that are the agent's canned messages, not the person.
    pub canned_patterns: Vec<Regex>,
    /// Per detector thresholds, indexed by [`DetectorKind::index`].
    pub detectors: [Thresholds; 14],
    /// Default action per level, indexed by [`Level::index`].
    pub actions: [Action; 3],
    /// `cycle.max_period`: longest block (2..=5).
    pub cycle_max_period: usize,
    /// `poll_no_progress.min_stall_secs`: wall time a stalled poll streak must span for critical.
    pub min_stall: Duration,
    /// `post_compaction.window_size`.
    pub post_compaction_window: usize,
    /// `content_chanting` parameters.
    pub chanting: ChantingParams,
    /// `[loop_detection.compaction]` patterns.
    pub compaction: CompactionPatterns,
    /// `[loop_detection.semantic_check]`: the LLM judge (off by default).
    pub semantic_check: SemanticCheck,
}

impl Settings {
    /// Thresholds of a detector.
    pub fn thresholds(&self, kind: DetectorKind) -> &Thresholds {
        &self.detectors[kind.index()]
    }

    /// The action for a detector's level: its `action_<level>` or the default.
    pub fn action_for(&self, kind: DetectorKind, level: Level) -> Action {
        self.thresholds(kind).actions[level.index()].unwrap_or(self.actions[level.index()])
    }

    /// Whether a call is to a poll tool.
    pub fn is_poll(&self, name: &str, arguments: &Arguments) -> bool {
        self.poll_tools.iter().any(|m| m.matches(name, arguments))
    }

    /// Whether a call is exempt from counting.
    pub fn is_exempt(&self, name: &str, arguments: &Arguments) -> bool {
        self.exempt_tools.iter().any(|m| m.matches(name, arguments))
    }
}

/// Validated `[loop_detection.semantic_check]` (validation:
/// `config::semantic`): the settings of the semantic check, the LLM judge.
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticCheck {
    /// The judge runs.
    pub enabled: bool,
    /// Base URL; the call goes to `{upstream}/chat/completions`. `None` only when disabled.
    pub upstream: Option<Url>,
    /// Judge model.
    pub model: String,
    /// Environment variable holding the key (sent as `Authorization: Bearer`); `None`: no key.
    pub api_key_env: Option<String>,
    /// A second model that must reach `confidence` too.
    pub double_check_model: Option<String>,
    /// First check once this many model turns passed since the person spoke (30).
    pub after_turns: u64,
    /// Turns between checks before an answer adapts it, and after a failed call (10).
    pub interval: u64,
    /// Adapted interval at confidence 1 (5).
    pub min_interval: u64,
    /// Adapted interval at confidence 0 (15).
    pub max_interval: u64,
    /// An answer at or above this confidence is a verdict (0.9).
    pub confidence: f64,
    /// Transcript entries in the judge's window (20).
    pub history: usize,
    /// Longest result / argument / text sent per entry, characters (1000).
    pub max_result_chars: usize,
    /// Timeout of one judge call, the double check included (30 s).
    pub timeout: Duration,
    /// Judge calls in flight, process-wide (4); read from the defaults only.
    pub max_concurrent: usize,
}

impl Default for SemanticCheck {
    fn default() -> Self {
        Self {
            enabled: false,
            upstream: None,
            model: String::new(),
            api_key_env: None,
            double_check_model: None,
            after_turns: 30,
            interval: 10,
            min_interval: 5,
            max_interval: 15,
            confidence: 0.9,
            history: 20,
            max_result_chars: 1000,
            timeout: Duration::from_secs(30),
            max_concurrent: 4,
        }
    }
}
