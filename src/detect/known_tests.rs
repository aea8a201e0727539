//! Property test of issue #37 goal 3: a request whose turns a kept hash
//! chain shares with the lane's previous request ([`Lineage`]) takes the
//! items of its stable messages as that request read them
//! ([`super::step::Known`]); the session it leaves must be exactly the one
//! reading every item again leaves (its stored form, every verdict).
//!
//! Generator: sessions of 4..48 steps like `rewrite_tests`' (three tools,
//! repeats frequent, JSON results among them so that `json_volatile` looks
//! for an earlier result of the same call among the known messages),
//! assistant texts, canned reminders and user messages; each request is
//! the previous one with its new step appended, stamped with one lineage.
//! Now and then a request is sent twice, or an older one again (a stale
//! retry, which no kept chain would stamp the same: the check must hold
//! anyway).

use proptest::prelude::*;
use serde_json::json;

use super::testkit::{Builder, Dialect};
use super::{SessionState, Settings};
use crate::transcript::{Arguments, Lineage, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

fn requests(d: Dialect, steps: &[u8]) -> Vec<Transcript> {
    let mut b = Builder::new(d, &["read", "run", "edit"]);
    let mut out: Vec<Transcript> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match s % 10 {
            0..=5 => {
                let tool = ["read", "run", "edit"][usize::from(s % 3)];
                let arg = (s / 10) % 2;
                let result = match (s / 20) % 3 {
                    0 => "same output".to_owned(),
                    // A token that changes on every poll: masked when the
                    // same call's earlier result is found.
                    1 => format!("{{\"state\": \"running\", \"job\": \"build\", \"ref\": \"run-{i}\"}}"),
                    _ => "{\"status\": \"done\"}".to_owned(),
                };
                b.call(tool, json!({"a": arg}), &result, false);
            }
            6 => {
                b.say(Role::Assistant, "I will continue.");
                b.say(Role::User, "No tool calls found in the response. Use a tool.");
            }
            7 => {
                b.say(Role::Assistant, "Thinking about it.");
            }
            8 => {
                b.say(Role::User, &format!("Please also check file {i}."));
            }
            _ => {
                // A resend: the same request again, or an older one.
                let back = usize::from(s / 10) % 3;
                if let Some(t) = out.len().checked_sub(1 + back).map(|k| out[k].clone()) {
                    out.push(t);
                }
                continue;
            }
        }
        out.push(b.request());
    }
    let lineage = Lineage::fresh();
    for t in &mut out {
        t.lineage = lineage;
    }
    out
}

/// The session's stored form and verdicts after each request.
fn absorbed(ts: &[Transcript]) -> Vec<(serde_json::Value, Vec<String>)> {
    let s = Settings::default();
    let mut session = SessionState::new();
    ts.iter()
        .enumerate()
        .map(|(i, t)| {
            let now = std::time::Duration::from_secs(10 * i as u64);
            let verdicts = session
                .on_request(t, now, &s)
                .into_iter()
                .map(|v| format!("{v:?}"))
                .collect();
            let mut stored = serde_json::to_value(&session).unwrap_or_default();
            // A set: its order is the hasher's.
            if let Some(texts) = stored.get_mut("user_texts").and_then(|v| v.as_array_mut()) {
                texts.sort_by_key(|v| v.as_u64());
            }
            (stored, verdicts)
        })
        .collect()
}

fn unstamped(ts: &[Transcript]) -> Vec<Transcript> {
    ts.iter()
        .cloned()
        .map(|mut t| {
            t.lineage = Lineage::NONE;
            t
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn taking_the_known_items_unread_leaves_the_session_reading_them_would(
        steps in proptest::collection::vec(any::<u8>(), 4..48),
    ) {
        for d in [Dialect::OpenAi, Dialect::Gemini] {
            let stamped = requests(d, &steps);
            let read = absorbed(&unstamped(&stamped));
            prop_assert_eq!(absorbed(&stamped), read, "{:?}", d);
        }
    }
}

/// The results of a turn's parallel calls arrive over two requests, and the
/// last message (the turn of the second result) grows: the last assistant
/// turn and the last message are drafted again, so the second call becomes
/// a cycle once it has its result, as when every item is read.
#[test]
fn a_result_arriving_later_for_a_known_turn_makes_its_cycle() {
    let call =
        |id: &str, name: &str| ToolCall::new(Some(id.to_owned()), name, Arguments::Json(json!({"p": id})));
    let result = |id: &str, name: &str| ToolResult {
        call_id: Some(id.to_owned()),
        name: Some(name.to_owned()),
        content: ResultContent::Text(format!("output of {id}")),
        is_error: false,
    };
    let assistant = Message {
        role: Role::Assistant,
        text: String::new(),
        tool_calls: vec![call("a", "read"), call("b", "run")],
        tool_results: Vec::new(),
        read: Default::default(),
    };
    let tool = |results: Vec<ToolResult>| Message {
        role: Role::Tool,
        text: String::new(),
        tool_calls: Vec::new(),
        tool_results: results,
        read: Default::default(),
    };
    let lineage = Lineage::fresh();
    let mut first = Builder::new(Dialect::OpenAi, &["read", "run"]).request();
    first.lineage = lineage;
    first.messages_mut().push(assistant);
    first.messages_mut().push(tool(vec![result("a", "read")]));
    let mut second = first.clone();
    second.messages_mut().push(tool(vec![result("b", "run")]));
    let mut third = second.clone();
    third
        .messages_mut()
        .push(Message::text(Role::User, "Thanks, go on."));
    let stamped = vec![first, second, third];
    let read = absorbed(&unstamped(&stamped));
    assert_eq!(absorbed(&stamped), read);
    let s = Settings::default();
    let mut session = SessionState::new();
    for t in &stamped {
        session.on_request(t, std::time::Duration::ZERO, &s);
    }
    let tools: Vec<String> = session.calls().into_iter().map(|c| c.tool).collect();
    assert_eq!(tools, ["read", "run"]);
}

/// A poll's JSON result is compared with the same call's previous result
/// (`json_volatile`) also when that result is among the known messages,
/// several requests back: its changing token is masked (from the second
/// poll on, see `json_volatile`), so the third poll repeats the second, as
/// when every item is read.
#[test]
fn a_poll_is_compared_with_its_result_among_the_known_messages() {
    let poll = |i: usize| format!("{{\"state\": \"running\", \"job\": \"build\", \"ref\": \"run-{i}\"}}");
    let mut b = Builder::new(Dialect::OpenAi, &["read", "status"]);
    let mut stamped = Vec::new();
    b.call("status", json!({"job": "build"}), &poll(1), false);
    stamped.push(b.request());
    b.call("status", json!({"job": "build"}), &poll(2), false);
    stamped.push(b.request());
    b.call("read", json!({"path": "log"}), "line 1", false);
    stamped.push(b.request());
    b.say(Role::Assistant, "Still building.");
    stamped.push(b.request());
    b.call("status", json!({"job": "build"}), &poll(3), false);
    stamped.push(b.request());
    let lineage = Lineage::fresh();
    for t in &mut stamped {
        t.lineage = lineage;
    }
    assert_eq!(absorbed(&stamped), absorbed(&unstamped(&stamped)));
    let s = Settings::default();
    let mut session = SessionState::new();
    for t in &stamped {
        session.on_request(t, std::time::Duration::ZERO, &s);
    }
    let repeats: Vec<(String, bool)> = session.calls().into_iter().map(|c| (c.tool, c.repeat)).collect();
    assert_eq!(
        repeats,
        [
            ("status".to_owned(), false),
            ("status".to_owned(), false),
            ("read".to_owned(), false),
            ("status".to_owned(), true)
        ]
    );
}
