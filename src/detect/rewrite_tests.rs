//! Property test of issue #12 point 8: agents rewrite old history (SWE-agent's
//! last-N observations, OpenCode's prune, Claude Code's context edits,
//! OpenClaw's pruning); the session merges requests by stable identity, so
//! rewriting items older than the newest K never changes a verdict.
//!
//! Generator: a session of 4..40 steps, each one of: a call of one of three
//! tools with one of two arguments and one of two results (repeats are
//! frequent), a canned format reminder after an assistant text, an assistant
//! text, or a new user message. Each request is sent twice: as is, and with
//! every message older than the newest K = 8 (the task prompt excepted)
//! kept, clipped (`Old output omitted …`, a truncated text), replaced by a
//! placeholder, or — in the dialect with call ids — dropped (a call with its
//! result, or a text alone). Each message has its own furthest rewrite, and
//! reaches it as it ages (one stage more per message past the newest K), so
//! rewrites only progress as in every agent named: a message once clipped
//! stays clipped or is replaced or dropped later, and none comes back
//! (a dropped item that came back could not be told from a new identical
//! one). The verdicts (detector, level) of every request must be the same
//! in both sessions. Without call ids (Gemini) a dropped item cannot be told
//! from a new identical one either, so drops are generated for the dialect
//! with ids only.

use proptest::prelude::*;
use serde_json::json;

use super::testkit::{Builder, Dialect};
use super::{SessionState, Settings};
use crate::transcript::{Message, ResultContent, Role, Transcript};

const K: usize = 8;

#[derive(Debug, Clone, Copy)]
enum Op {
    Keep,
    Clip,
    Replace,
    Drop,
}

fn requests(d: Dialect, steps: &[u8]) -> Vec<Transcript> {
    let mut b = Builder::new(d, &["read", "run", "edit"]);
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match s % 8 {
            0..=4 => {
                let tool = ["read", "run", "edit"][usize::from(s % 3)];
                let arg = (s / 8) % 2;
                let result = if (s / 16) % 2 == 0 {
                    "same output"
                } else {
                    "other output"
                };
                b.call(tool, json!({"a": arg}), result, false);
            }
            5 => {
                b.say(Role::Assistant, "I will continue.");
                b.say(Role::User, "No tool calls found in the response. Use a tool.");
            }
            6 => {
                b.say(Role::Assistant, "Thinking about it.");
            }
            _ => {
                b.say(Role::User, &format!("Please also check file {i}."));
            }
        }
        out.push(b.request());
    }
    out
}

fn rewrite(t: &Transcript, ops: &[u8], drops: bool) -> Transcript {
    let n = t.messages.len();
    let mut out = t.clone();
    let mut kept: Vec<Message> = Vec::new();
    let mut skip_results = false;
    for (i, m) in t.messages.iter().enumerate() {
        // How far past the newest K this message is, and its furthest rewrite.
        let age = if i > 0 { (n - i).saturating_sub(K) } else { 0 };
        let furthest = usize::from(ops[(i * 31) % ops.len()] % 4);
        let op = match furthest.min(age) {
            0 => Op::Keep,
            1 => Op::Clip,
            2 => Op::Replace,
            _ if drops => Op::Drop,
            _ => Op::Replace,
        };
        if skip_results && m.role == Role::Tool {
            continue;
        }
        skip_results = false;
        let mut m = m.clone();
        match op {
            Op::Keep => {}
            Op::Drop => {
                // A call goes with its results; a text alone.
                skip_results = m.role == Role::Assistant && !m.tool_calls.is_empty();
                if m.role != Role::Tool {
                    continue;
                }
            }
            Op::Clip | Op::Replace => {
                let placeholder = |text: &str| match op {
                    Op::Clip => format!(
                        "Old output omitted (3 lines): {}",
                        text.chars().take(4).collect::<String>()
                    ),
                    _ => "[pruned]".to_owned(),
                };
                if !m.text.is_empty() {
                    m.set_text(placeholder(&m.text));
                }
                for r in &mut m.tool_results {
                    let text = match &r.content {
                        ResultContent::Text(t) => t.clone(),
                        ResultContent::Json(v) => v.to_string(),
                    };
                    r.content = match r.content {
                        ResultContent::Text(_) => ResultContent::Text(placeholder(&text)),
                        ResultContent::Json(_) => ResultContent::Json(json!({"output": placeholder(&text)})),
                    };
                }
            }
        }
        kept.push(m);
    }
    out.messages = kept.into();
    out
}

fn verdicts(ts: &[Transcript]) -> Vec<Vec<(super::DetectorKind, super::Level)>> {
    let s = Settings::default();
    let mut session = SessionState::new();
    ts.iter()
        .enumerate()
        .map(|(i, t)| {
            let now = std::time::Duration::from_secs(10 * i as u64);
            session
                .on_request(t, now, &s)
                .into_iter()
                .map(|v| (v.detector, v.level))
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn rewriting_items_older_than_the_newest_k_never_changes_a_verdict(
        steps in proptest::collection::vec(any::<u8>(), 4..40),
        ops in proptest::collection::vec(any::<u8>(), 8..32),
    ) {
        for d in [Dialect::OpenAi, Dialect::Gemini] {
            let plain = requests(d, &steps);
            let drops = d == Dialect::OpenAi;
            let rewritten: Vec<Transcript> = plain
                .iter()
                .map(|t| rewrite(t, &ops, drops))
                .collect();
            prop_assert_eq!(verdicts(&plain), verdicts(&rewritten), "{:?}", d);
        }
    }
}

/// The mini-swe-agent trajectories (`../shared/trajectories`) clip every
/// older message anew in each request: the newest format reminder is whole,
/// the same reminder in older turns reads `No tool calls found … [… 8
/// characters truncated …] …`. Each new reminder must still count once, as
/// in the same session sent unclipped.
#[test]
fn a_reminder_clipped_from_the_next_request_on_still_counts_each_time() {
    const WHOLE: &str =
        "No tool calls found in the response. Every response MUST include at least one tool call.";
    const CLIPPED: &str =
        "No tool calls found in the response. Eve\n[... 8 characters truncated ...]\nnse MUST include";
    let s = Settings::default();
    let mut b = Builder::new(Dialect::OpenAi, &["bash"]);
    b.call("bash", json!({"command": "ls"}), "src tests", false);
    let (mut whole, mut clipped) = (SessionState::new(), SessionState::new());
    let (mut seen_whole, mut seen_clipped) = (Vec::new(), Vec::new());
    for i in 0..8u64 {
        b.say(Role::User, WHOLE);
        let t = b.request();
        let mut c = t.clone();
        let newest = c.messages.len() - 1;
        for m in &mut c.messages_mut()[..newest] {
            if m.text == WHOLE {
                m.set_text(CLIPPED);
            }
        }
        let now = std::time::Duration::from_secs(10 * i);
        let levels =
            |v: Vec<super::Verdict>| v.into_iter().map(|v| (v.detector, v.level)).collect::<Vec<_>>();
        seen_whole.push(levels(whole.on_request(&t, now, &s)));
        seen_clipped.push(levels(clipped.on_request(&c, now, &s)));
    }
    assert_eq!(seen_whole, seen_clipped);
    let last = seen_clipped.last().cloned().unwrap_or_default();
    assert!(
        last.iter().any(|(_, level)| *level >= super::Level::Critical),
        "eight reminders in a row reach critical: {seen_clipped:?}"
    );
}
