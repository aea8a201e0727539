//! `[loop_detection.semantic_check]`: the LLM judge's settings, raw and validated.
//!
//! The judge is Gemini CLI's LLM loop check made a loopguard feature (see
//! [`crate::semantic`]): off by default; when on, a second, OpenAI-compatible
//! endpoint is asked now and then whether the session's recent turns are a
//! loop. Every key, with its default:
//!
//! ```toml
//! [loop_detection.semantic_check]
//! enabled = false
//! upstream = "http://127.0.0.1:8000/v1"   # POST {upstream}/chat/completions
//! model = "qwen2.5-7b-instruct"
//! api_key_env = "LOOPGUARD_JUDGE_KEY"     # optional; the variable's name, never the key
//! double_check_model = "…"                # optional second opinion
//! after_turns = 30
//! interval = 10
//! min_interval = 5
//! max_interval = 15
//! confidence = 0.9
//! history = 20
//! max_result_chars = 1000
//! timeout_secs = 30
//! max_concurrent = 4                      # global; not allowed in [[agents]]
//! ```

use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::problems::Problems;
pub use crate::detect::settings::SemanticCheck;

/// Raw `[loop_detection.semantic_check]` (also in an agent's `loop_detection`;
/// every key optional, `None` = inherit).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSemanticCheck {
    /// Switch (default off).
    pub enabled: Option<bool>,
    /// Base URL of an OpenAI-compatible endpoint.
    pub upstream: Option<String>,
    /// Judge model.
    pub model: Option<String>,
    /// Name of the environment variable holding the judge's key.
    pub api_key_env: Option<String>,
    /// Second model that must agree.
    pub double_check_model: Option<String>,
    /// Model turns since the person spoke before the first check.
    pub after_turns: Option<u64>,
    /// Turns between checks until an answer adapts it.
    pub interval: Option<u64>,
    /// Shortest adapted interval, turns.
    pub min_interval: Option<u64>,
    /// Longest adapted interval, turns.
    pub max_interval: Option<u64>,
    /// Confidence (0..1) at which an answer is a verdict.
    pub confidence: Option<f64>,
    /// Transcript entries shown to the judge.
    pub history: Option<usize>,
    /// Longest tool result or argument text sent, characters.
    pub max_result_chars: Option<usize>,
    /// Timeout of one judge call, seconds.
    pub timeout_secs: Option<u64>,
    /// Judge calls in flight, process-wide.
    pub max_concurrent: Option<usize>,
}

/// Key-wise merge: `over`'s keys win.
pub fn merged(base: Option<&RawSemanticCheck>, over: Option<&RawSemanticCheck>) -> Option<RawSemanticCheck> {
    let (base, over) = match (base, over) {
        (None, None) => return None,
        (Some(b), None) => return Some(b.clone()),
        (None, Some(o)) => return Some(o.clone()),
        (Some(b), Some(o)) => (b, o),
    };
    Some(RawSemanticCheck {
        enabled: over.enabled.or(base.enabled),
        upstream: over.upstream.clone().or_else(|| base.upstream.clone()),
        model: over.model.clone().or_else(|| base.model.clone()),
        api_key_env: over.api_key_env.clone().or_else(|| base.api_key_env.clone()),
        double_check_model: over
            .double_check_model
            .clone()
            .or_else(|| base.double_check_model.clone()),
        after_turns: over.after_turns.or(base.after_turns),
        interval: over.interval.or(base.interval),
        min_interval: over.min_interval.or(base.min_interval),
        max_interval: over.max_interval.or(base.max_interval),
        confidence: over.confidence.or(base.confidence),
        history: over.history.or(base.history),
        max_result_chars: over.max_result_chars.or(base.max_result_chars),
        timeout_secs: over.timeout_secs.or(base.timeout_secs),
        max_concurrent: over.max_concurrent.or(base.max_concurrent),
    })
}

/// Validates the table at `path`, recording every problem. Upstream and
/// model are required only when the judge is enabled.
pub fn validate(raw: Option<&RawSemanticCheck>, path: &str, problems: &mut Problems) -> SemanticCheck {
    let d = SemanticCheck::default();
    let Some(raw) = raw else {
        return d;
    };
    let mut keys = Keys { path, problems };
    let after_turns = keys.at_least("after_turns", raw.after_turns, 1, d.after_turns);
    let interval = keys.at_least("interval", raw.interval, 1, d.interval);
    let min_interval = keys.at_least("min_interval", raw.min_interval, 1, d.min_interval);
    let max_interval = keys.at_least("max_interval", raw.max_interval, 1, d.max_interval);
    let history = keys.at_least_count("history", raw.history, 2, d.history);
    let max_result_chars =
        keys.at_least_count("max_result_chars", raw.max_result_chars, 50, d.max_result_chars);
    let timeout = Duration::from_secs(keys.at_least("timeout_secs", raw.timeout_secs, 1, 30));
    let max_concurrent = keys.at_least_count("max_concurrent", raw.max_concurrent, 1, d.max_concurrent);
    keys.interval_order(min_interval, max_interval);
    let confidence = keys.confidence(raw.confidence, d.confidence);
    let enabled = raw.enabled.unwrap_or(false);
    let upstream = keys.upstream(raw.upstream.as_deref(), enabled);
    let model = raw.model.clone().unwrap_or_default();
    if enabled && model.trim().is_empty() {
        keys.problems
            .push(format!("{path}.model"), "required when enabled");
    }
    let api_key_env = keys.api_key_env(raw.api_key_env.clone());
    SemanticCheck {
        enabled,
        upstream,
        model,
        api_key_env,
        double_check_model: raw.double_check_model.clone().filter(|m| !m.trim().is_empty()),
        after_turns,
        interval,
        min_interval,
        max_interval,
        confidence,
        history,
        max_result_chars,
        timeout,
        max_concurrent,
    }
}

/// The checks of one table's keys: each records its problem under
/// `{path}.{key}` and yields the value to use (the default when it is bad).
struct Keys<'a> {
    path: &'a str,
    problems: &'a mut Problems,
}

impl Keys<'_> {
    /// A whole number of at least `min`.
    fn at_least(&mut self, key: &str, value: Option<u64>, min: u64, default: u64) -> u64 {
        match value {
            Some(v) if v < min => {
                self.problems.push(
                    format!("{}.{key}", self.path),
                    format!("must be at least {min}, got {v}"),
                );
                default
            }
            Some(v) => v,
            None => default,
        }
    }

    /// A count (`usize`) of at least `min`.
    fn at_least_count(&mut self, key: &str, value: Option<usize>, min: u64, default: usize) -> usize {
        self.at_least(key, value.map(|h| h as u64), min, default as u64) as usize
    }

    /// `min_interval` must not exceed `max_interval`.
    fn interval_order(&mut self, min_interval: u64, max_interval: u64) {
        if min_interval > max_interval {
            self.problems.push(
                format!("{}.min_interval", self.path),
                format!("must not exceed max_interval = {max_interval}, got {min_interval}"),
            );
        }
    }

    /// `confidence`: above 0 and at most 1.
    fn confidence(&mut self, value: Option<f64>, default: f64) -> f64 {
        match value {
            Some(c) if !(c > 0.0 && c <= 1.0) => {
                self.problems.push(
                    format!("{}.confidence", self.path),
                    format!("must be above 0 and at most 1, got {c}"),
                );
                default
            }
            Some(c) => c,
            None => default,
        }
    }

    /// `upstream`: an http(s) URL with a host, required when enabled.
    fn upstream(&mut self, text: Option<&str>, enabled: bool) -> Option<Url> {
        let path = self.path;
        match text {
            Some(text) => match Url::parse(text) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Some(url),
                _ => {
                    self.problems
                        .push(format!("{path}.upstream"), format!("{text:?} is not a valid URL"));
                    None
                }
            },
            None => {
                if enabled {
                    self.problems.push(
                        format!("{path}.upstream"),
                        "required when enabled: the base URL of an OpenAI-compatible endpoint",
                    );
                }
                None
            }
        }
    }

    /// `api_key_env`: the name of an environment variable (empty = none).
    fn api_key_env(&mut self, value: Option<String>) -> Option<String> {
        let api_key_env = value.filter(|v| !v.is_empty());
        if let Some(name) = &api_key_env {
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                self.problems.push(
                    format!("{}.api_key_env", self.path),
                    format!(
                        "{name:?} is not an environment variable name (the key itself goes in the environment)"
                    ),
                );
            }
        }
        api_key_env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RawSemanticCheck {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_absent_table_is_the_disabled_default() {
        let mut p = Problems::default();
        assert_eq!(validate(None, "x", &mut p), SemanticCheck::default());
        assert!(p.errors.is_empty());
    }

    #[test]
    fn enabled_needs_upstream_and_model_and_every_problem_names_its_key() {
        let mut p = Problems::default();
        let raw = parse("enabled = true\nconfidence = 1.5\nmin_interval = 20\napi_key_env = \"sk-abc def\"");
        let _ = validate(Some(&raw), "loop_detection.semantic_check", &mut p);
        let keys: Vec<&str> = p.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            keys,
            [
                "loop_detection.semantic_check.min_interval",
                "loop_detection.semantic_check.confidence",
                "loop_detection.semantic_check.upstream",
                "loop_detection.semantic_check.model",
                "loop_detection.semantic_check.api_key_env",
            ]
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<RawSemanticCheck>("api_key = \"x\"").is_err());
    }

    #[test]
    fn an_agent_overrides_key_by_key() {
        let base = parse("enabled = true\nmodel = \"a\"\nupstream = \"http://127.0.0.1:1/v1\"");
        let over = parse("model = \"b\"");
        let m = merged(Some(&base), Some(&over)).unwrap_or_default();
        assert_eq!(
            (m.enabled, m.model.as_deref(), m.upstream.is_some()),
            (Some(true), Some("b"), true)
        );
    }
}
