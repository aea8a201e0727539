//! Tests of the sliced lean parse: one item too large to parse whole gives
//! the lean form of its whole parse, in every dialect, within the budget.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::super::chain::{ChainStore, Parsed};
use super::*;
use crate::budget::ByteBudget;
use crate::dialect::{Dialect, ParsedRequest};

/// Calls in the large item: about 1.5 MB of JSON, six slices or more.
const CALLS: usize = 12_000;

fn path(i: usize) -> String {
    format!("src/module_{}/file_{i}.rs", i % 7)
}

/// The lean form of the full parse of `body`: what the sliced parse must give.
fn lean_whole(dialect: Dialect, body: &[u8]) -> ParsedRequest {
    let mut parsed = dialect.parse_request(body).unwrap();
    let settings = Settings::default();
    for message in parsed.transcript.messages_mut() {
        let HistoryItem::Message(lean) = lean::item(&HistoryItem::Message(message.clone()), &settings) else {
            panic!("a message");
        };
        *message = lean;
    }
    parsed
}

/// `body` parsed within a budget of `per_request` bytes.
fn parse(dialect: Dialect, body: &[u8], per_request: usize) -> (Parsed, usize) {
    let store = ChainStore::new(Duration::from_secs(60));
    let budget = Arc::new(ByteBudget::default()).reserve(per_request, per_request);
    let parsed = store
        .parse_within(dialect, b"scope", body, &budget, &Settings::default())
        .unwrap();
    (parsed, budget.held())
}

/// A budget the large item does not fit whole but its lean form does.
const BUDGET: usize = 16 << 20;

/// Asserts that `body`, whose history holds `large`, is judged in the lean
/// form of its whole parse and that `large` alone does not fit the budget.
fn assert_sliced_is_lean_whole(dialect: Dialect, body: &[u8], large: &Value) {
    let item_estimate = estimate(large.to_string().as_bytes());
    assert!(
        item_estimate > BUDGET,
        "the item must not fit whole: {item_estimate}"
    );
    let (parsed, held) = parse(dialect, body, BUDGET);
    let Parsed::Lean(sliced) = parsed else {
        panic!("{dialect:?}: not judged in the lean form: {parsed:?}");
    };
    assert!(held <= BUDGET, "{held}");
    let whole = lean_whole(dialect, body);
    assert_eq!(sliced.transcript.messages.len(), whole.transcript.messages.len());
    for (s, w) in sliced
        .transcript
        .messages
        .iter()
        .zip(whole.transcript.messages.iter())
    {
        assert_eq!(s.role, w.role);
        assert_eq!(s.text, w.text, "{dialect:?}");
        assert_eq!(s.tool_calls, w.tool_calls, "{dialect:?}");
        assert_eq!(s.tool_results, w.tool_results, "{dialect:?}");
    }
    let calls: usize = sliced
        .transcript
        .messages
        .iter()
        .map(|m| m.tool_calls.len())
        .sum();
    let results: usize = sliced
        .transcript
        .messages
        .iter()
        .map(|m| m.tool_results.len())
        .sum();
    assert_eq!((calls, results), (CALLS, CALLS), "{dialect:?}");
}

#[test]
fn an_openai_message_of_many_calls_is_parsed_a_slice_at_a_time() {
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| {
            json!({"id": format!("call_{i}"), "type": "function",
                "function": {"name": "read_file", "arguments": json!({"path": path(i)}).to_string()}})
        })
        .collect();
    let large = json!({"role": "assistant", "content": "Reading every file.", "tool_calls": calls});
    let mut messages = vec![
        json!({"role": "system", "content": "be brief"}),
        json!({"role": "user", "content": "read them all"}),
        large.clone(),
    ];
    messages.extend(
        (0..CALLS).map(|i| json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "ok"})),
    );
    let body = json!({"model": "m", "messages": messages}).to_string();
    assert_sliced_is_lean_whole(Dialect::OpenaiChat, body.as_bytes(), &large);
}

#[test]
fn anthropic_messages_of_many_uses_and_results_are_parsed_a_slice_at_a_time() {
    let uses: Vec<Value> = std::iter::once(json!({"type": "text", "text": "Reading every file."}))
        .chain((0..CALLS).map(|i| {
            json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": "Read", "input": {"file_path": path(i)}})
        }))
        .collect();
    let results: Vec<Value> = (0..CALLS)
        .map(|i| json!({"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": "ok"}))
        .collect();
    let large = json!({"role": "assistant", "content": uses});
    let body = json!({"model": "claude", "max_tokens": 100, "system": "be brief", "messages": [
        {"role": "user", "content": "read them all"},
        large,
        {"role": "user", "content": results},
    ]})
    .to_string();
    assert_sliced_is_lean_whole(Dialect::Anthropic, body.as_bytes(), &large);
}

#[test]
fn gemini_contents_of_many_parts_are_parsed_a_slice_at_a_time() {
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| json!({"functionCall": {"name": "read_file", "args": {"path": path(i)}}}))
        .collect();
    let responses: Vec<Value> = (0..CALLS)
        .map(
            |i| json!({"functionResponse": {"name": "read_file", "response": {"output": format!("ok {i}")}}}),
        )
        .collect();
    let large = json!({"role": "model", "parts": calls});
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "read them all"}]},
        large,
        {"role": "user", "parts": responses},
    ]})
    .to_string();
    assert_sliced_is_lean_whole(Dialect::Gemini, body.as_bytes(), &large);
}

#[test]
fn a_lean_item_past_the_budget_is_refused_and_the_budget_left_as_it_was() {
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "f", "arguments": "{}"}}))
        .collect();
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": calls},
    ]})
    .to_string();
    let (parsed, held) = parse(Dialect::OpenaiChat, body.as_bytes(), 1 << 20);
    assert!(matches!(parsed, Parsed::OverBudget), "{parsed:?}");
    // What the turn before it weighs, none of the slices'.
    assert!(held < 4096, "{held}");
}

#[test]
fn join_appends_by_role_and_keeps_the_item_kind() {
    let turn = |role, text: &str| Message::text(role, text.to_owned());
    use crate::transcript::Role;
    let mut item = HistoryItem::Messages(vec![turn(Role::Tool, "")]);
    join(
        &mut item,
        HistoryItem::Messages(vec![turn(Role::User, "later text")]),
        true,
    );
    join(
        &mut item,
        HistoryItem::Messages(vec![turn(Role::User, "more")]),
        true,
    );
    join(&mut item, HistoryItem::Message(turn(Role::User, "beside")), false);
    let HistoryItem::Messages(turns) = &item else {
        panic!("{item:?}");
    };
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[1].text, "later text\nmore");
    let mut part = HistoryItem::Part(turn(Role::Assistant, "a"));
    join(&mut part, HistoryItem::Part(turn(Role::Assistant, "b")), true);
    assert_eq!(part, HistoryItem::Part(turn(Role::Assistant, "a\nb")));
}
