//! The mock's strict-signature mode (`x-mock-signatures: strict`): like a
//! real provider, it rejects a request whose history carries signed
//! reasoning produced by another model than the one asked for (HTTP 400).
//!
//! The signer of a part: `mocksig:{model}` (what the mock itself signs with)
//! names it; any other value was produced by the model in the
//! `x-mock-signer` header (the model of a recorded history). Gemini's
//! documented skip value ([`crate::dialect::gemini::model::SKIP_SIGNATURE`])
//! is accepted from anyone. Signed parts: Anthropic `thinking` signatures
//! and `redacted_thinking` data, Gemini `thoughtSignature`s, Responses
//! `encrypted_content` of reasoning items.

use serde_json::Value;

/// The signature the mock puts on reasoning `model` produced.
pub fn sign(model: &str) -> String {
    format!("mocksig:{model}")
}

/// Every signature (or opaque reasoning payload) in a request body.
fn signatures(body: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for b in m.get("content").and_then(Value::as_array).into_iter().flatten() {
            match b.get("type").and_then(Value::as_str) {
                Some("thinking") => out.extend(b.get("signature").and_then(Value::as_str)),
                Some("redacted_thinking") => out.extend(b.get("data").and_then(Value::as_str)),
                _ => {}
            }
        }
    }
    for c in body
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for p in c.get("parts").and_then(Value::as_array).into_iter().flatten() {
            out.extend(p.get("thoughtSignature").and_then(Value::as_str));
        }
    }
    for item in body.get("input").and_then(Value::as_array).into_iter().flatten() {
        if item.get("type").and_then(Value::as_str) == Some("reasoning") {
            out.extend(item.get("encrypted_content").and_then(Value::as_str));
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Why the request is rejected, if it is: the first signature whose signer
/// is not `model`. `recorded_signer` is the `x-mock-signer` header.
pub fn rejection(body: &Value, model: &str, recorded_signer: Option<&str>) -> Option<String> {
    signatures(body).into_iter().find_map(|sig| {
        if sig == crate::dialect::gemini::model::SKIP_SIGNATURE {
            return None;
        }
        let signer = sig.strip_prefix("mocksig:").or(recorded_signer)?;
        (signer != model)
            .then(|| format!("Invalid signature in reasoning: produced by {signer}, not {model}"))
    })
}
