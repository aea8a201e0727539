//! Escalation writing for `openai-responses` ([`crate::escalate`]): the
//! model is the body's `model`; signed reasoning is a `reasoning` input item
//! carrying `encrypted_content` (bound to the model that produced it), which
//! is dropped whole when foreign (the API accepts input without it); the
//! credential is a bearer token.

use serde_json::Value;

use crate::dialect::write::{Signed, set_body_model};

/// Names `model` in the body.
pub fn set_model(body: &mut Value, model: &str) {
    set_body_model(body, model);
}

/// Drops each `reasoning` item with `encrypted_content` whose ordinal is
/// `foreign`; other items (reasoning by id, messages, calls) stay.
pub fn strip_foreign_signatures(body: &mut Value, foreign: &dyn Fn(usize) -> bool) -> Signed {
    let mut signed = Signed::default();
    let Some(input) = body.get_mut("input").and_then(Value::as_array_mut) else {
        return signed;
    };
    input.retain(|item| {
        let is_signed = item.get("type").and_then(Value::as_str) == Some("reasoning")
            && item
                .get("encrypted_content")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty());
        if !is_signed {
            return true;
        }
        let drop = foreign(signed.total);
        signed.total += 1;
        signed.stripped += usize::from(drop);
        !drop
    });
    signed
}

/// `Authorization: Bearer <secret>` in place of the client's credential.
pub fn set_credential(headers: &mut http::HeaderMap, url: &mut url::Url, secret: &str) {
    crate::dialect::openai_chat::model::set_credential(headers, url, secret);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Only `encrypted_content` reasoning items named foreign go; a
    /// reasoning item without it, messages and calls stay in order.
    #[test]
    fn foreign_encrypted_reasoning_items_are_dropped_and_nothing_else() {
        let mut body = json!({"model": "gpt-5.1-codex-max", "input": [
            {"role": "user", "content": "add 2 and 3"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABpPDIUph8cz"},
            {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "5"},
            {"type": "reasoning", "id": "rs_2", "summary": []},
            {"type": "reasoning", "id": "rs_3", "summary": [], "encrypted_content": "mocksig:strong"}
        ]});
        let signed = strip_foreign_signatures(&mut body, &|i| i == 1);
        assert_eq!(
            signed,
            Signed {
                total: 2,
                stripped: 1
            }
        );
        let ids: Vec<&str> = body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| i["id"].as_str().or(i["call_id"].as_str()).unwrap_or("user"))
            .collect();
        assert_eq!(ids, ["user", "rs_1", "c1", "c1", "rs_2"]);
        set_model(&mut body, "gpt-5.1");
        assert_eq!(body["model"], "gpt-5.1");
    }
}
