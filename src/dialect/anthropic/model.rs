//! Escalation writing for `anthropic` ([`crate::escalate`]): the model is
//! the body's `model`; signed reasoning is an assistant `thinking` block
//! (its `signature`) or a `redacted_thinking` block (its `data`), bound to
//! the model that produced it. A foreign one is dropped; when that leaves
//! the last assistant message without the thinking block the API requires
//! before its tool use while thinking is on, the request's `thinking` is
//! turned off (the API accepts a history without thinking blocks then).
//! The credential is `x-api-key`.

use serde_json::Value;

use crate::dialect::write::{Signed, clear_credentials, set_body_model, set_header};

/// Names `model` in the body.
pub fn set_model(body: &mut Value, model: &str) {
    set_body_model(body, model);
}

fn is_signed(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("thinking") => block
            .get("signature")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()),
        Some("redacted_thinking") => true,
        _ => false,
    }
}

/// Drops each signed thinking block whose ordinal is `foreign`.
pub fn strip_foreign_signatures(body: &mut Value, foreign: &dyn Fn(usize) -> bool) -> Signed {
    let mut signed = Signed::default();
    let mut last_lost = false;
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return signed;
    };
    let last_assistant = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"));
    for (i, message) in messages.iter_mut().enumerate() {
        if message.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let Some(content) = message.get_mut("content").and_then(Value::as_array_mut) else {
            continue;
        };
        content.retain(|block| {
            if !is_signed(block) {
                return true;
            }
            let drop = foreign(signed.total);
            signed.total += 1;
            if drop {
                signed.stripped += 1;
                last_lost |= Some(i) == last_assistant;
            }
            !drop
        });
    }
    let thinking_on = body
        .pointer("/thinking/type")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "disabled");
    if last_lost && thinking_on {
        if let Some(root) = body.as_object_mut() {
            root.remove("thinking");
        }
    }
    signed
}

/// `x-api-key: <secret>` in place of the client's credential.
pub fn set_credential(headers: &mut http::HeaderMap, url: &mut url::Url, secret: &str) {
    clear_credentials(headers, url);
    set_header(headers, "x-api-key", secret);
}
