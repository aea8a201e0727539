//! Verdicts: what a detector found, at which level, and what loopguard does about it.

use serde::{Deserialize, Serialize};

use super::settings::Settings;

/// How serious a finding is. Ordered: `Warning < Critical < Breaker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The agent may be looping; tell it.
    Warning,
    /// The agent is looping with no-progress evidence; stop the call.
    Critical,
    /// Circuit breaker: stop the run.
    Breaker,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Self; 3] = [Self::Warning, Self::Critical, Self::Breaker];

    /// The name used in config, logs and verdict lines.
    pub fn name(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Critical => "critical",
            Self::Breaker => "breaker",
        }
    }

    /// Position in [`Level::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parses a level name (`warning`, `critical`, `breaker`).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == text)
    }
}

/// What loopguard does about a verdict (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Log and count only.
    Observe,
    /// Forward, with the warning added to the request.
    Warn,
    /// Answer the agent with an explanation instead of calling upstream.
    Block,
    /// Answer with an HTTP 400 in the dialect's error shape.
    Abort,
    /// Forward to the route's `escalate_model` for a few requests, with the
    /// warning added as for [`Action::Warn`] (see [`crate::escalate`]).
    /// Where no escalation is possible it acts as `Warn`.
    Escalate,
}

impl Action {
    /// Every action, mildest first.
    pub const ALL: [Self; 5] = [
        Self::Observe,
        Self::Warn,
        Self::Block,
        Self::Abort,
        Self::Escalate,
    ];

    /// The name used in config and headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Observe => "observe",
            Self::Warn => "warn",
            Self::Block => "block",
            Self::Abort => "abort",
            Self::Escalate => "escalate",
        }
    }

    /// The accepted names, quoted, for error messages.
    pub const NAMES: &'static str = "\"observe\", \"warn\", \"block\", \"abort\", \"escalate\"";

    /// Parses an action name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == text)
    }
}

/// The detectors, in DESIGN §3's table order (which breaks ties between
/// verdicts of the same level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DetectorKind {
    /// Same signature N times in a row.
    IdenticalCall,
    /// A block of 2–5 signatures repeated.
    Cycle,
    /// One (signature, outcome) pair N times in the history window.
    GenericRepeat,
    /// A poll tool returning the same outcome.
    PollNoProgress,
    /// A tool returning the same error fingerprint.
    ErrorRepeat,
    /// Failed cycles in a row.
    ConsecutiveFailures,
    /// Tool cycles since the person last spoke.
    ToolBudget,
    /// Calls to undeclared tools.
    UnknownTool,
    /// Repetitive generated text.
    ContentChanting,
    /// The assistant repeating the same text turn.
    RepeatedMessage,
    /// The same loop right after a compaction.
    PostCompaction,
    /// Compactions in a row without tool work.
    CompactionStorm,
    /// Any no-progress streak reaching the global limit.
    CircuitBreaker,
    /// The same request resent again and again (see
    /// [`crate::detect::replay_storm`]).
    ReplayStorm,
    /// An LLM judge found the recent turns unproductive (Gemini CLI's LLM
    /// loop check; see [`crate::semantic`]). Not in DESIGN §3's table: it
    /// comes after it, so any detector of the table wins a tie.
    SemanticLoop,
    /// A run of calls that brought back only results already received
    /// (issue #38, see [`crate::detect::novelty`]). After every other
    /// detector: the most general rule, it loses every tie.
    Novelty,
}

impl DetectorKind {
    /// Every detector, in table order.
    pub const ALL: [Self; 16] = [
        Self::IdenticalCall,
        Self::Cycle,
        Self::GenericRepeat,
        Self::PollNoProgress,
        Self::ErrorRepeat,
        Self::ConsecutiveFailures,
        Self::ToolBudget,
        Self::UnknownTool,
        Self::ContentChanting,
        Self::RepeatedMessage,
        Self::PostCompaction,
        Self::CompactionStorm,
        Self::CircuitBreaker,
        Self::ReplayStorm,
        Self::SemanticLoop,
        Self::Novelty,
    ];

    /// The config / log name (`identical_call`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::IdenticalCall => "identical_call",
            Self::Cycle => "cycle",
            Self::GenericRepeat => "generic_repeat",
            Self::PollNoProgress => "poll_no_progress",
            Self::ErrorRepeat => "error_repeat",
            Self::ConsecutiveFailures => "consecutive_failures",
            Self::ToolBudget => "tool_budget",
            Self::UnknownTool => "unknown_tool",
            Self::ContentChanting => "content_chanting",
            Self::RepeatedMessage => "repeated_message",
            Self::PostCompaction => "post_compaction",
            Self::CompactionStorm => "compaction_storm",
            Self::CircuitBreaker => "circuit_breaker",
            Self::ReplayStorm => "replay_storm",
            Self::SemanticLoop => "semantic_loop",
            Self::Novelty => "novelty",
        }
    }

    /// Position in [`DetectorKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The levels this detector can reach (DESIGN §3's table).
    pub fn levels(self) -> &'static [Level] {
        match self {
            Self::ContentChanting => &[Level::Critical],
            Self::PostCompaction | Self::CompactionStorm | Self::CircuitBreaker | Self::ReplayStorm => {
                &[Level::Breaker]
            }
            _ => &[Level::Warning, Level::Critical],
        }
    }

    /// The error code an `abort` carries: `compaction_loop_persisted` for
    /// [`DetectorKind::PostCompaction`], `loop_detected` otherwise.
    pub fn error_code(self) -> &'static str {
        match self {
            Self::PostCompaction => "compaction_loop_persisted",
            _ => "loop_detected",
        }
    }
}

/// A detector's finding, with the action configured for it and a message a
/// person (or the agent) can read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Which detector fired.
    pub detector: DetectorKind,
    /// How serious.
    pub level: Level,
    /// What to do (from `[loop_detection.actions]` or the detector's `action_<level>`).
    pub action: Action,
    /// The count that reached the threshold (calls, repeats, cycles, …).
    pub count: u32,
    /// The tool involved, when there is one.
    pub tool: Option<String>,
    /// The tool's arguments as canonical JSON, truncated for reading.
    pub arguments: Option<String>,
    /// `[loopguard] …`: detector, tool, arguments, count and one suggestion.
    pub message: String,
}

impl Verdict {
    /// The error code for an abort (see [`DetectorKind::error_code`]).
    pub fn error_code(&self) -> &'static str {
        self.detector.error_code()
    }

    /// The `x-loopguard-verdict` header value: `<action>; detector=<name>; count=<n>`.
    pub fn header_value(&self) -> String {
        format!(
            "{}; detector={}; count={}",
            self.action.name(),
            self.detector.name(),
            self.count
        )
    }
}

/// Sorts verdicts so the one that decides comes first: highest level, ties
/// broken by acting before observe-only, then table order; keeps one verdict
/// per detector (its highest).
pub fn rank(verdicts: &mut Vec<Verdict>) {
    verdicts.sort_by(order);
    let mut seen = [false; DetectorKind::ALL.len()];
    verdicts.retain(|v| !std::mem::replace(&mut seen[v.detector.index()], true));
}

/// The verdict that picks the action, if any (the first after [`rank`]).
pub fn decisive(verdicts: &[Verdict]) -> Option<&Verdict> {
    verdicts.iter().min_by(|a, b| order(a, b))
}

/// The deciding order: level (highest first), then acting verdicts before
/// observe-only ones, then table order.
fn order(a: &Verdict, b: &Verdict) -> std::cmp::Ordering {
    let observes = |v: &Verdict| v.action == Action::Observe;
    b.level
        .cmp(&a.level)
        .then(observes(a).cmp(&observes(b)))
        .then(a.detector.cmp(&b.detector))
}

/// The prefix of every message loopguard writes.
pub const PREFIX: &str = "[loopguard]";

/// What a detector found, before actions and wording are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub detector: DetectorKind,
    pub level: Level,
    pub count: u32,
    pub tool: Option<String>,
    pub arguments: Option<String>,
    /// What was seen, e.g. "was called 5 times in a row with the same result".
    pub detail: String,
    /// One concrete alternative for the agent.
    pub advice: &'static str,
    /// Logged only, whatever the configured action (a streak whose results
    /// change: progress, issue #12 point 2).
    pub observe_only: bool,
}

impl Finding {
    /// Applies the configured action and words the message.
    pub(crate) fn into_verdict(self, settings: &Settings) -> Verdict {
        let action = if self.observe_only {
            Action::Observe
        } else {
            settings.action_for(self.detector, self.level)
        };
        self.with_action(action)
    }

    /// Words the message with a given action.
    pub(crate) fn with_action(self, action: Action) -> Verdict {
        let subject = match (&self.tool, &self.arguments) {
            (Some(tool), Some(args)) => format!("`{tool}` with {args} "),
            (Some(tool), None) => format!("`{tool}` "),
            _ => String::new(),
        };
        let message = format!(
            "{PREFIX} {} ({}, count {}): {subject}{}. {}",
            self.detector.name(),
            self.level.name(),
            self.count,
            self.detail,
            self.advice
        );
        Verdict {
            detector: self.detector,
            level: self.level,
            action,
            count: self.count,
            tool: self.tool,
            arguments: self.arguments,
            message,
        }
    }
}
