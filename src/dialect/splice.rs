//! A warning injected into a request body by replacing only the history
//! items it changes: the rest of the body reaches the upstream byte for
//! byte as the agent sent it (what an upstream's prompt cache keys on), and
//! injecting costs the parse of the last items, not of the whole body, so a
//! request judged in its lean form (past its parse-memory budget) still
//! carries its warning.
//!
//! Every dialect's [`Dialect::inject_warning`] writes into the last history
//! item of some kind (the last tool message, user message, function
//! response or call output), so it finds the same item in a suffix of the
//! history that holds it as in the whole: the suffix is widened (1, 4, 16 …
//! items, up to all of them) until the injection succeeds or covers the
//! whole history.

use serde_json::Value;

use super::Dialect;
use super::split::split_object;
use crate::budget::{Reservation, estimate};

/// What [`inject_warning`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Spliced {
    /// The body with the warning in it.
    Injected(Vec<u8>),
    /// The history has no item to carry a warning (no tool result).
    NoCarrier,
    /// Not done: the body does not split into its history items, or the
    /// items to parse do not fit the request's parse-memory budget.
    NotDone,
}

/// Injects `warning` into `body` (decoded JSON of `dialect`) as
/// [`Dialect::inject_warning`] does, rewriting only the items it changes.
/// The items parsed are held in `budget` while they are parsed.
pub fn inject_warning(dialect: Dialect, body: &[u8], warning: &str, budget: Option<&Reservation>) -> Spliced {
    let key = dialect.history_key();
    let Ok((_, items)) = split_object(body, key) else {
        return Spliced::NotDone;
    };
    let mut width = 1_usize;
    loop {
        let from = items.len().saturating_sub(width);
        let window = &items[from..];
        let cost: usize = window.iter().map(|raw| estimate(raw.get().as_bytes())).sum();
        if budget.is_some_and(|b| !b.grow(cost)) {
            return Spliced::NotDone;
        }
        let result = inject_into(dialect, body, key, window, warning);
        if let Some(b) = budget {
            b.shrink(cost);
        }
        match result {
            Some(done) => return done,
            None if from == 0 => return Spliced::NoCarrier,
            None => width = width.saturating_mul(4),
        }
    }
}

/// The injection into the items `window` (a suffix of `body`'s history):
/// `None` when no item of the window carries it.
fn inject_into(
    dialect: Dialect,
    body: &[u8],
    key: &str,
    window: &[&serde_json::value::RawValue],
    warning: &str,
) -> Option<Spliced> {
    let Ok(before) = window
        .iter()
        .map(|raw| serde_json::from_str::<Value>(raw.get()))
        .collect::<Result<Vec<_>, _>>()
    else {
        return Some(Spliced::NotDone);
    };
    let mut history = serde_json::Map::new();
    history.insert(key.to_owned(), Value::Array(before.clone()));
    let mut history = Value::Object(history);
    if !dialect.inject_warning(&mut history, warning) {
        return None;
    }
    let after = history.get(key).and_then(Value::as_array)?;
    let mut out = Vec::with_capacity(body.len() + warning.len() + 64);
    let mut copied = 0;
    for ((raw, old), new) in window.iter().zip(&before).zip(after) {
        if old == new {
            continue;
        }
        let Some(start) = (raw.get().as_ptr() as usize).checked_sub(body.as_ptr() as usize) else {
            return Some(Spliced::NotDone);
        };
        let end = start + raw.get().len();
        let (Some(kept), Ok(written)) = (body.get(copied..start), serde_json::to_vec(new)) else {
            return Some(Spliced::NotDone);
        };
        out.extend_from_slice(kept);
        out.extend_from_slice(&written);
        copied = end;
    }
    out.extend_from_slice(body.get(copied..).unwrap_or_default());
    Some(Spliced::Injected(out))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use serde_json::json;

    use super::*;

    const WARNING: &str = "[loopguard] the same call again";

    /// The body with the warning injected the old way: the whole body parsed,
    /// changed and written again.
    fn whole(dialect: Dialect, body: &str) -> Option<Value> {
        let mut value: Value = serde_json::from_str(body).unwrap();
        dialect.inject_warning(&mut value, WARNING).then_some(value)
    }

    fn spliced(dialect: Dialect, body: &str) -> Spliced {
        inject_warning(dialect, body.as_bytes(), WARNING, None)
    }

    /// Asserts the splice gives the whole-body injection's JSON and keeps
    /// every byte outside the one item it changed (each carrier here is
    /// under 120 bytes) as sent.
    fn assert_same_as_whole(dialect: Dialect, body: &str) {
        let Spliced::Injected(out) = spliced(dialect, body) else {
            panic!("{dialect:?}: not injected");
        };
        let out_value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(Some(out_value), whole(dialect, body), "{dialect:?}");
        let head = body.bytes().zip(&out).take_while(|(a, b)| a == *b).count();
        let tail = body
            .bytes()
            .rev()
            .zip(out.iter().rev())
            .take_while(|(a, b)| a == *b)
            .count();
        let changed = body.len().saturating_sub(head + tail);
        assert!(changed < 120, "{dialect:?}: {changed} bytes of the body changed");
    }

    /// A body with its own spacing and escapes, which a parse and write would lose.
    fn openai(messages: &str) -> String {
        format!("{{ \"model\" : \"m\",\n  \"messages\": [ {messages} ],\n  \"stream\": true }}")
    }

    #[test]
    fn each_dialect_gets_the_same_warning_as_the_whole_body_injection() {
        let chat = openai(
            r#"{"role":"system","content":"caf\u00e9  rules"}, {"role":"user","content":"go"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"a.txt"}, {"role":"assistant","content":"done?"}"#,
        );
        assert_same_as_whole(Dialect::OpenaiChat, &chat);
        let anthropic = json!({"model": "c", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]},
        ]})
        .to_string();
        assert_same_as_whole(Dialect::Anthropic, &anthropic);
        let gemini = json!({"contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a.txt"}}}]},
            {"role": "model", "parts": [{"text": "thinking"}]},
        ]})
        .to_string();
        assert_same_as_whole(Dialect::Gemini, &gemini);
        let responses = json!({"model": "g", "input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        ]})
        .to_string();
        assert_same_as_whole(Dialect::OpenaiResponses, &responses);
    }

    #[test]
    fn the_carrier_is_found_behind_many_later_items() {
        let mut messages = vec![r#"{"role":"tool","tool_call_id":"c0","content":"first"}"#.to_owned()];
        messages.extend((0..40).map(|i| format!(r#"{{"role":"assistant","content":"note {i}"}}"#)));
        assert_same_as_whole(Dialect::OpenaiChat, &openai(&messages.join(",")));
    }

    #[test]
    fn a_history_without_a_carrier_or_a_body_without_history_is_left_alone() {
        let body = openai(r#"{"role":"user","content":"go"},{"role":"assistant","content":"ok"}"#);
        assert_eq!(spliced(Dialect::OpenaiChat, &body), Spliced::NoCarrier);
        // Anthropic: the last user message decides, an earlier one with a result does not carry it.
        let anthropic = json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
            {"role": "user", "content": "a person speaks"},
        ]})
        .to_string();
        assert_eq!(whole(Dialect::Anthropic, &anthropic), None);
        assert_eq!(spliced(Dialect::Anthropic, &anthropic), Spliced::NoCarrier);
        assert_eq!(spliced(Dialect::OpenaiChat, r#"{"model":"m"}"#), Spliced::NotDone);
    }

    #[test]
    fn a_window_past_the_budget_is_not_parsed() {
        let body = openai(r#"{"role":"tool","tool_call_id":"c1","content":"a.txt"}"#);
        let budget = std::sync::Arc::new(crate::budget::ByteBudget::default()).reserve(16, 16);
        assert_eq!(
            inject_warning(Dialect::OpenaiChat, body.as_bytes(), WARNING, Some(&budget)),
            Spliced::NotDone
        );
        assert_eq!(budget.held(), 0);
    }
}
