//! Tests of `[loop_detection]` / `[[agents]]` validation and agent selection.

use serde_json::json;

use super::testkit::{Dialect, Run, level};
use super::{DetectorKind as D, Level as L, Settings};
use crate::config::{DEFAULT_TOML, load_str};

const ROUTE: &str =
    "[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"https://api.openai.com\"\n";

/// The shipped file documents the defaults: loading it gives the built-in settings.
#[test]
fn the_default_config_file_equals_the_built_in_defaults() {
    let loaded = load_str(DEFAULT_TOML, "<default>").unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.notices.is_empty(), "{:?}", loaded.notices);
    let from_file = format!("{:?}", loaded.config.loop_detection.defaults);
    assert_eq!(from_file, format!("{:?}", Settings::default()));
}

/// An agent's overrides apply to that agent's requests only.
#[test]
fn agent_overrides_change_verdicts_for_that_agent_only() {
    let text = format!(
        "{ROUTE}\n[[agents]]\nid = \"codex\"\nmatch = {{ header = \"Originator\", value = \"codex_cli_rs\" }}\n[agents.loop_detection.identical_call]\nwarning = 2\naction_warning = \"observe\"\n\n[[agents]]\nid = \"claude\"\nmatch = {{ user_agent_prefix = \"claude-cli/\" }}\n"
    );
    let loaded = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let ld = &loaded.config.loop_detection;
    let (id, codex) = ld.select([("originator", "codex_cli_rs")]);
    assert_eq!(id, Some("codex"));
    let (id, claude) = ld.select([("User-Agent", "claude-cli/1.0.3 (external, cli)")]);
    assert_eq!(id, Some("claude"));
    let (id, other) = ld.select([("user-agent", "curl/8")]);
    assert_eq!(id, None);
    let two_calls = |s: &Settings| {
        let mut r = Run::with(Dialect::OpenAi, &["read"], s.clone());
        r.call("read", json!({"p": 1}), "x", false);
        r.call("read", json!({"p": 1}), "x", false)
    };
    let v = two_calls(codex);
    assert_eq!(level(&v, D::IdenticalCall), Some(L::Warning));
    assert_eq!(v[0].action, super::Action::Observe);
    assert!(two_calls(claude).is_empty());
    assert!(two_calls(other).is_empty());
}

/// A broken ladder is repaired, not rejected, and the notice names the key.
#[test]
fn a_critical_at_or_below_warning_is_raised_with_a_notice() {
    let text = format!(
        "{ROUTE}\n[loop_detection.error_repeat]\nwarning = 4\ncritical = 4\n[loop_detection.circuit_breaker]\nbreaker = 50\n"
    );
    let loaded = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let s = &loaded.config.loop_detection.defaults;
    assert_eq!(s.thresholds(D::ErrorRepeat).at, [4, 5, 0]);
    let notices: Vec<String> = loaded.notices.iter().map(ToString::to_string).collect();
    assert!(
        notices
            .iter()
            .any(|n| n.starts_with("loop_detection.error_repeat.critical: raised from 4 to 5")),
        "{notices:?}"
    );
    assert!(
        notices
            .iter()
            .any(|n| n.starts_with("loop_detection.history_size: raised from 30 to 50")),
        "{notices:?}"
    );
    assert_eq!(s.history_size, 50);
}

/// Typos are rejected with the key and its line; misplaced keys with their path.
#[test]
fn unknown_and_misplaced_keys_are_rejected_with_their_path() {
    let text = format!("{ROUTE}\n[loop_detection.identical_call]\nwarnin = 3\n");
    let err = load_str(&text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("accepted"));
    let shown = err.to_string();
    assert!(
        shown.contains("`warnin`") && shown.contains("loop_detection.identical_call.warnin"),
        "{shown}"
    );
    let err = load_str(&format!("{ROUTE}\n[loop_detection]\nhistory = 3\n"), "t.toml").err();
    let shown = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(shown.contains("`history`"), "{shown}");
    let text = format!(
        "{ROUTE}\n[loop_detection]\nerror_patterns = [\"(unclosed\"]\n[loop_detection.identical_call]\nmin_stall_secs = 5\nbreaker = 9\naction_warning = \"shout\"\n[loop_detection.actions]\ncritical = \"nuke\"\n"
    );
    let err = load_str(&text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("accepted"));
    let paths: Vec<&str> = err.errors.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "loop_detection.actions.critical",
        "loop_detection.error_patterns[0]",
        "loop_detection.identical_call.breaker",
        "loop_detection.identical_call.action_warning",
        "loop_detection.identical_call.min_stall_secs",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
}

/// Poll tools accept bare names and argument matches.
#[test]
fn poll_tools_accept_names_and_argument_matches() {
    let text = format!(
        "{ROUTE}\n[loop_detection]\npoll_tools = [\"status\", {{ name = \"process\", args = {{ action = [\"poll\", \"log\"] }} }}]\n"
    );
    let s = &load_str(&text, "t.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .config
        .loop_detection
        .defaults;
    let args = |v| crate::transcript::Arguments::Json(v);
    assert!(s.is_poll("status", &args(json!({}))));
    assert!(s.is_poll("process", &args(json!({"action": "log"}))));
    assert!(!s.is_poll("process", &args(json!({"action": "kill"}))));
    let d = Settings::default();
    assert!(d.is_poll("write_stdin", &args(json!({"session_id": 1}))));
    assert!(!d.is_poll("write_stdin", &args(json!({"session_id": 1, "chars": "y\n"}))));
}
