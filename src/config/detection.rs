//! `[loop_detection]` and `[[agents]]`: validation of the raw form
//! ([`super::detection_raw`], re-exported here) into [`LoopDetection`].
//!
//! Raw form: every key optional (`None` = inherit), unknown keys rejected.
//! The effective settings of the defaults are the built-in defaults (the
//! `DEFAULT_*` constants in [`crate::detect::settings`] and [`DETECTOR_DEFAULTS`])
//! overlaid with `[loop_detection]`; those of an agent are these overlaid with
//! the agent's `loop_detection` sub-table, which has the same keys:
//!
//! ```toml
//! [[agents]]
//! id = "codex"
//! match = { header = "originator", value = "codex_cli_rs" }   # or { user_agent_prefix = "codex" }
//! [agents.loop_detection.identical_call]
//! warning = 4
//! ```
//!
//! Lists (`volatile_keys`, `poll_tools`, …) replace the inherited list whole.
//! Validation reports every problem with its key path; the threshold ladder
//! is repaired with a notice naming the key (DESIGN §3).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use regex::Regex;

pub use super::detection_raw::{
    OneOrMany, RawActions, RawAgent, RawAgentMatch, RawCompaction, RawDetector, RawDetectors,
    RawLoopDetection, RawToolMatcher, RawToolSpec,
};
pub use super::ladder::DETECTOR_DEFAULTS;
use super::problems::Problems;
use crate::detect::settings::{
    ChantingParams, CompactionPatterns, DEFAULT_CALL_IDENTITY, DEFAULT_CANNED_PATTERNS,
    DEFAULT_DEDUP_NOTICES, DEFAULT_ERROR_PATTERNS, DEFAULT_INJECTED_PATTERNS, DEFAULT_OUTCOME_MASKS,
    DEFAULT_SUMMARIZER_PATTERNS, DEFAULT_SUMMARY_PREFIXES, DEFAULT_VOLATILE_KEYS, Settings, Thresholds,
    ToolMatcher,
};
use crate::detect::{Action, DetectorKind};

/// How an agent's requests are recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentMatch {
    /// A header (lowercase name) with an exact value.
    Header {
        /// Lowercase header name.
        name: String,
        /// Exact value.
        value: String,
    },
    /// A `user-agent` starting with this prefix.
    UserAgentPrefix(String),
}

/// One validated `[[agents]]` entry.
#[derive(Debug, Clone)]
pub struct Agent {
    /// Name in logs and metrics.
    pub id: String,
    /// How its requests are recognised.
    pub rule: AgentMatch,
    /// Its effective settings.
    pub settings: Arc<Settings>,
}

/// Validated loop-detection settings: the defaults and per-agent overrides.
#[derive(Debug, Clone)]
pub struct LoopDetection {
    /// Settings for requests of no configured agent.
    pub defaults: Arc<Settings>,
    /// Agents in file order; the first match wins.
    pub agents: Vec<Agent>,
}

impl LoopDetection {
    /// Picks the settings for a request from its headers (`(name, value)`
    /// pairs, names in any case): the first agent whose rule matches, else
    /// the defaults. Returns the agent id too.
    pub fn select<'a, 'h>(
        &'a self,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    ) -> (Option<&'a str>, &'a Arc<Settings>) {
        // No `[[agents]]`: the headers are not read at all (this runs twice
        // for every request).
        if self.agents.is_empty() {
            return (None, &self.defaults);
        }
        let headers: Vec<(&str, &str)> = headers.into_iter().collect();
        let agent = self.agents.iter().find(|a| match &a.rule {
            AgentMatch::Header { name, value } => headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value),
            AgentMatch::UserAgentPrefix(prefix) => headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case("user-agent") && v.starts_with(prefix.as_str())),
        });
        match agent {
            Some(a) => (Some(a.id.as_str()), &a.settings),
            None => (None, &self.defaults),
        }
    }
}

impl Default for Settings {
    /// The built-in defaults (the same as the shipped `config/loopguard.toml`).
    fn default() -> Self {
        default_settings()
    }
}

/// The built-in default settings.
pub fn default_settings() -> Settings {
    build(
        &RawLoopDetection::default(),
        "loop_detection",
        &mut Problems::default(),
    )
}

/// Validates `[loop_detection]` and `[[agents]]`, recording every problem.
pub fn validate(raw: &RawLoopDetection, agents: &[RawAgent], problems: &mut Problems) -> LoopDetection {
    let defaults = Arc::new(build(raw, "loop_detection", problems));
    let base_ok = problems.errors.is_empty();
    let mut validated = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let base = format!("agents[{i}]");
        if agent.id.trim().is_empty() {
            problems.push(format!("{base}.id"), "must not be empty");
        }
        let rule = match &agent.matcher {
            RawAgentMatch {
                header: Some(h),
                value: Some(v),
                user_agent_prefix: None,
            } => Some(AgentMatch::Header {
                name: h.to_ascii_lowercase(),
                value: v.clone(),
            }),
            RawAgentMatch {
                header: None,
                value: None,
                user_agent_prefix: Some(p),
            } => Some(AgentMatch::UserAgentPrefix(p.clone())),
            _ => {
                problems.push(
                    format!("{base}.match"),
                    "needs either `header` and `value`, or `user_agent_prefix` alone",
                );
                None
            }
        };
        if agent
            .loop_detection
            .semantic_check
            .as_ref()
            .is_some_and(|c| c.max_concurrent.is_some())
        {
            problems.push(
                format!("{base}.loop_detection.semantic_check.max_concurrent"),
                "a process-wide limit: set it in [loop_detection.semantic_check] only",
            );
        }
        let merged = merge(raw, &agent.loop_detection);
        let mut own = Problems::default();
        let settings = build(&merged, &format!("{base}.loop_detection"), &mut own);
        if base_ok {
            problems.errors.extend(own.errors);
        }
        for n in own.notices {
            let inherited = problems.notices.iter().any(|p| {
                p.message == n.message
                    && p.path.strip_prefix("loop_detection")
                        == n.path.strip_prefix(&format!("{base}.loop_detection"))
            });
            if !inherited {
                problems.notices.push(n);
            }
        }
        if let Some(rule) = rule {
            validated.push(Agent {
                id: agent.id.clone(),
                rule,
                settings: Arc::new(settings),
            });
        }
    }
    LoopDetection {
        defaults,
        agents: validated,
    }
}

fn merge(base: &RawLoopDetection, over: &RawLoopDetection) -> RawLoopDetection {
    RawLoopDetection {
        enabled: over.enabled.or(base.enabled),
        history_size: over.history_size.or(base.history_size),
        volatile_keys: over.volatile_keys.clone().or_else(|| base.volatile_keys.clone()),
        outcome_masks: over.outcome_masks.clone().or_else(|| base.outcome_masks.clone()),
        dedup_notices: over.dedup_notices.clone().or_else(|| base.dedup_notices.clone()),
        error_patterns: over
            .error_patterns
            .clone()
            .or_else(|| base.error_patterns.clone()),
        poll_tools: over.poll_tools.clone().or_else(|| base.poll_tools.clone()),
        exempt_tools: over.exempt_tools.clone().or_else(|| base.exempt_tools.clone()),
        canned_patterns: over
            .canned_patterns
            .clone()
            .or_else(|| base.canned_patterns.clone()),
        call_identity: over.call_identity.clone().or_else(|| base.call_identity.clone()),
        injected_patterns: over
            .injected_patterns
            .clone()
            .or_else(|| base.injected_patterns.clone()),
        actions: match (&base.actions, &over.actions) {
            (Some(a), Some(b)) => Some(RawActions {
                warning: b.warning.clone().or_else(|| a.warning.clone()),
                critical: b.critical.clone().or_else(|| a.critical.clone()),
                breaker: b.breaker.clone().or_else(|| a.breaker.clone()),
            }),
            (a, b) => b.clone().or_else(|| a.clone()),
        },
        compaction: match (&base.compaction, &over.compaction) {
            (Some(a), Some(b)) => Some(RawCompaction {
                summarizer_patterns: b
                    .summarizer_patterns
                    .clone()
                    .or_else(|| a.summarizer_patterns.clone()),
                summary_prefixes: b.summary_prefixes.clone().or_else(|| a.summary_prefixes.clone()),
            }),
            (a, b) => b.clone().or_else(|| a.clone()),
        },
        semantic_check: super::semantic::merged(base.semantic_check.as_ref(), over.semantic_check.as_ref()),
        escalate: super::escalate::RawEscalate::merged(base.escalate.as_ref(), over.escalate.as_ref()),
        experiment: over.experiment.clone().or_else(|| base.experiment.clone()),
        detectors: base.detectors.merged(&over.detectors),
    }
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn regexes(list: &[String], path: &str, anchor: bool, problems: &mut Problems) -> Vec<Regex> {
    list.iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let text = if anchor { format!("^(?:{p})") } else { p.clone() };
            compile(text)
                .map_err(|e| {
                    problems.push(format!("{path}[{i}]"), format!("{p:?} is not a valid regex: {e}"))
                })
                .ok()
        })
        .collect()
}

/// Patterns compiled before, by their text: a reload (or `check-config`,
/// or a test building settings) compiles the same few dozen built-in
/// patterns again, which took most of a config load (over half of its time
/// in a profile of the config fuzz target). A [`Regex`] clone shares its
/// compiled program. Only patterns of at most [`COMPILED_TEXT_BYTES`] are
/// kept, and the map starts over when it holds [`COMPILED_KEPT`], so what
/// stays is bounded and follows the patterns in use.
static COMPILED: LazyLock<Mutex<HashMap<String, Regex>>> = LazyLock::new(Mutex::default);
/// See [`COMPILED`].
const COMPILED_KEPT: usize = 256;
/// See [`COMPILED`].
const COMPILED_TEXT_BYTES: usize = 512;

/// `text` compiled, from [`COMPILED`] when it was compiled before.
fn compile(text: String) -> Result<Regex, regex::Error> {
    let kept = COMPILED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&text)
        .cloned();
    if let Some(regex) = kept {
        return Ok(regex);
    }
    let regex = Regex::new(&text)?;
    if text.len() <= COMPILED_TEXT_BYTES {
        let mut map = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= COMPILED_KEPT {
            map.clear();
        }
        map.insert(text, regex.clone());
    }
    Ok(regex)
}

/// A built-in tool matcher: name and (argument, accepted values).
type DefaultMatcher = (&'static str, &'static [(&'static str, &'static [&'static str])]);

fn matchers(list: Option<&Vec<RawToolMatcher>>, defaults: &[DefaultMatcher]) -> Vec<ToolMatcher> {
    match list {
        Some(list) => list
            .iter()
            .map(|m| match m {
                RawToolMatcher::Name(name) => ToolMatcher {
                    name: name.clone(),
                    args: Vec::new(),
                },
                RawToolMatcher::Spec(spec) => ToolMatcher {
                    name: spec.name.clone(),
                    args: spec
                        .args
                        .iter()
                        .map(|(k, v)| match v {
                            OneOrMany::One(s) => (k.clone(), vec![s.clone()]),
                            OneOrMany::Many(list) => (k.clone(), list.clone()),
                        })
                        .collect(),
                },
            })
            .collect(),
        None => defaults
            .iter()
            .map(|(name, args)| ToolMatcher {
                name: (*name).to_owned(),
                args: args.iter().map(|(k, vs)| ((*k).to_owned(), owned(vs))).collect(),
            })
            .collect(),
    }
}

/// Default poll tools (DESIGN §3).
const DEFAULT_POLL_TOOLS: &[DefaultMatcher] = &[
    ("command_status", &[]),
    ("process", &[("action", &["poll", "log"])]),
    ("BashOutput", &[]),
    ("write_stdin", &[("chars", &[""])]),
    ("read_background_output", &[]),
];

fn action(text: Option<&String>, default: Action, path: &str, problems: &mut Problems) -> Option<Action> {
    let text = text?;
    Some(Action::parse(text).unwrap_or_else(|| {
        problems.push(path, format!("{text:?} is not one of {}", Action::NAMES));
        default
    }))
}

/// Validates one (merged) `[loop_detection]` table at `path` into its
/// settings, recording every problem: the actions, the pattern lists, the
/// built-in constants, then each detector's ladder.
fn build(raw: &RawLoopDetection, path: &str, problems: &mut Problems) -> Settings {
    let at = |key: &str| format!("{path}.{key}");
    let actions = level_actions(raw, path, problems);
    let error_pattern = error_pattern(raw, &at("error_patterns"), problems);
    let mut s = Settings {
        enabled: raw.enabled.unwrap_or(true),
        history_size: raw.history_size.unwrap_or(30),
        volatile_keys: list(&raw.volatile_keys, DEFAULT_VOLATILE_KEYS),
        outcome_masks: patterns(
            &raw.outcome_masks,
            DEFAULT_OUTCOME_MASKS,
            &at("outcome_masks"),
            problems,
        ),
        dedup_notices: patterns(
            &raw.dedup_notices,
            DEFAULT_DEDUP_NOTICES,
            &at("dedup_notices"),
            problems,
        ),
        error_pattern,
        poll_tools: matchers(raw.poll_tools.as_ref(), DEFAULT_POLL_TOOLS),
        exempt_tools: matchers(raw.exempt_tools.as_ref(), &[]),
        canned_patterns: patterns(
            &raw.canned_patterns,
            DEFAULT_CANNED_PATTERNS,
            &at("canned_patterns"),
            problems,
        ),
        call_identity: call_identity(raw),
        injected_patterns: patterns(
            &raw.injected_patterns,
            DEFAULT_INJECTED_PATTERNS,
            &at("injected_patterns"),
            problems,
        ),
        detectors: [Thresholds::new(0, 0, 0); DetectorKind::ALL.len()],
        actions,
        cycle_max_period: 5,
        max_wait: Duration::from_secs(1800),
        replay_storm_window: Duration::from_secs(900),
        post_compaction_window: 3,
        chanting: CHANTING,
        compaction: compaction_patterns(raw, path, problems),
        semantic_check: super::semantic::SemanticCheck::default(),
        escalate: super::escalate::escalate_settings(raw.escalate.as_ref(), &at("escalate"), problems),
        experiment: super::escalate::experiment(raw.experiment.as_ref(), &at("experiment"), problems),
    };
    if raw.history_size == Some(0) {
        problems.push(format!("{path}.history_size"), "must be at least 1, got 0");
        s.history_size = 1;
    }
    ladders(raw, &mut s, path, problems);
    s
}

/// The `content_chanting` parameters (not configurable).
const CHANTING: ChantingParams = ChantingParams {
    chunk_size: 50,
    min_repeats: 10,
    max_mean_gap: 250,
    max_periods: 5,
    buffer_chars: 5000,
    max_line_repeats: 30,
    low_entropy_repeats: 50,
};

/// A list key: the table's list, else the built-in one.
fn list(value: &Option<Vec<String>>, defaults: &[&str]) -> Vec<String> {
    value.clone().unwrap_or_else(|| owned(defaults))
}

/// A pattern list key (the table's, else the built-in one), compiled;
/// problems under `at`.
fn patterns(value: &Option<Vec<String>>, defaults: &[&str], at: &str, problems: &mut Problems) -> Vec<Regex> {
    regexes(&list(value, defaults), at, false, problems)
}

/// `[loop_detection.actions]`: the action of each level (warning, critical,
/// breaker), the built-in one where a key is absent or bad.
fn level_actions(raw: &RawLoopDetection, path: &str, problems: &mut Problems) -> [Action; 3] {
    let actions_raw = raw.actions.clone().unwrap_or_default();
    let default_actions = [Action::Warn, Action::Block, Action::Abort];
    let mut actions = default_actions;
    for (i, (key, value)) in [
        ("warning", &actions_raw.warning),
        ("critical", &actions_raw.critical),
        ("breaker", &actions_raw.breaker),
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(a) = action(
            value.as_ref(),
            default_actions[i],
            &format!("{path}.actions.{key}"),
            problems,
        ) {
            actions[i] = a;
        }
    }
    actions
}

/// `error_patterns`, compiled into one anchored alternation (`None` when
/// the list is empty); problems under `at`.
fn error_pattern(raw: &RawLoopDetection, at: &str, problems: &mut Problems) -> Option<Regex> {
    let error_patterns = patterns(&raw.error_patterns, DEFAULT_ERROR_PATTERNS, at, problems);
    (!error_patterns.is_empty())
        .then(|| {
            let alternation: Vec<String> = error_patterns
                .iter()
                .map(|r| format!("(?:{})", r.as_str()))
                .collect();
            Regex::new(&format!("^(?:{})", alternation.join("|"))).ok()
        })
        .flatten()
}

/// `[loop_detection.call_identity]`, else the built-in table.
fn call_identity(raw: &RawLoopDetection) -> Vec<(String, Vec<String>)> {
    match &raw.call_identity {
        Some(table) => table.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        None => DEFAULT_CALL_IDENTITY
            .iter()
            .map(|(tool, args)| ((*tool).to_owned(), owned(args)))
            .collect(),
    }
}

/// `[loop_detection.compaction]`: the summarizer and summary patterns.
fn compaction_patterns(raw: &RawLoopDetection, path: &str, problems: &mut Problems) -> CompactionPatterns {
    let comp = raw.compaction.clone().unwrap_or_default();
    CompactionPatterns {
        summarizer: patterns(
            &comp.summarizer_patterns,
            DEFAULT_SUMMARIZER_PATTERNS,
            &format!("{path}.compaction.summarizer_patterns"),
            problems,
        ),
        summary_prefixes: patterns(
            &comp.summary_prefixes,
            DEFAULT_SUMMARY_PREFIXES,
            &format!("{path}.compaction.summary_prefixes"),
            problems,
        ),
    }
}

/// Each detector's threshold ladder and extra keys, the history raised to
/// what they need, and the semantic check (which switches `semantic_loop`).
fn ladders(raw: &RawLoopDetection, s: &mut Settings, path: &str, problems: &mut Problems) {
    let actions = s.actions;
    for kind in DetectorKind::ALL {
        let d = raw.detectors.get(kind).cloned().unwrap_or_default();
        s.detectors[kind.index()] =
            super::ladder::thresholds(kind, &d, &format!("{path}.{}", kind.name()), &actions, problems);
        super::ladder::extras(kind, &d, s, &format!("{path}.{}", kind.name()), problems);
    }
    super::ladder::raise_history(s, path, problems);
    s.semantic_check = super::semantic::validate(
        raw.semantic_check.as_ref(),
        &format!("{path}.semantic_check"),
        problems,
    );
    s.detectors[DetectorKind::SemanticLoop.index()].enabled = s.semantic_check.enabled;
}

#[cfg(test)]
#[expect(clippy::expect_used, reason = "test")]
mod compiled_tests {
    use super::*;

    fn kept(text: &str) -> bool {
        COMPILED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(text)
    }

    #[test]
    fn compiled_patterns_are_kept_bounded_and_only_when_short() {
        let first = compile("^compiled-again-[0-9]+$".to_owned()).expect("valid");
        let again = compile("^compiled-again-[0-9]+$".to_owned()).expect("valid");
        assert_eq!(first.as_str(), again.as_str());
        assert!(again.is_match("compiled-again-42"));
        for i in 0..COMPILED_KEPT + 10 {
            compile(format!("bounded-{i}")).expect("valid");
        }
        assert!(COMPILED.lock().unwrap_or_else(PoisonError::into_inner).len() <= COMPILED_KEPT);
        let long = format!("long-{}", "x".repeat(COMPILED_TEXT_BYTES));
        assert!(compile(long.clone()).expect("valid").is_match(&long));
        assert!(!kept(&long), "a long pattern is compiled, not kept");
        assert!(
            compile("(unclosed".to_owned()).is_err(),
            "an invalid pattern is still an error"
        );
        assert!(!kept("(unclosed"));
    }
}
