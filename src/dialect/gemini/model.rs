//! Escalation writing for `gemini` ([`crate::escalate`]): the model is the
//! path segment `models/{model}:method`; signed reasoning is a part's
//! `thoughtSignature`, bound to the model that produced it. A foreign one is
//! neutralised with the value Google documents for histories from another
//! model ([`SKIP_SIGNATURE`]): dropping it would make Gemini 3 reject the
//! function call it belongs to. The credential is `x-goog-api-key`.

use serde_json::Value;

use crate::dialect::write::{Signed, clear_credentials, set_header};

/// The `thoughtSignature` Gemini accepts in place of one produced by
/// another model ("skip_thought_signature_validator", Gemini API docs,
/// thought signatures: migrating from other models).
pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// The path with its `models/{model}` segment naming `model`; `None` when
/// the path names no model.
pub fn set_model(path: &str, model: &str) -> Option<String> {
    let at = path.rfind("/models/")? + "/models/".len();
    let rest = &path[at..];
    let end = rest.find(':')?;
    Some(format!("{}{model}{}", &path[..at], &rest[end..]))
}

/// Neutralises each `thoughtSignature` whose ordinal is `foreign`.
pub fn strip_foreign_signatures(body: &mut Value, foreign: &dyn Fn(usize) -> bool) -> Signed {
    let mut signed = Signed::default();
    let Some(contents) = body.get_mut("contents").and_then(Value::as_array_mut) else {
        return signed;
    };
    let parts = contents
        .iter_mut()
        .filter_map(|c| c.get_mut("parts").and_then(Value::as_array_mut))
        .flatten();
    for part in parts {
        let Some(sig) = part.get_mut("thoughtSignature") else {
            continue;
        };
        if sig.as_str() == Some(SKIP_SIGNATURE) {
            continue;
        }
        if foreign(signed.total) {
            *sig = Value::from(SKIP_SIGNATURE);
            signed.stripped += 1;
        }
        signed.total += 1;
    }
    signed
}

/// `x-goog-api-key: <secret>` in place of the client's credential (and
/// its `?key=`).
pub fn set_credential(headers: &mut http::HeaderMap, url: &mut url::Url, secret: &str) {
    clear_credentials(headers, url);
    set_header(headers, "x-goog-api-key", secret);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_segment_is_replaced() {
        assert_eq!(
            set_model(
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                "gemini-2.5-pro"
            )
            .as_deref(),
            Some("/v1beta/models/gemini-2.5-pro:streamGenerateContent")
        );
        assert_eq!(
            set_model(
                "/v1/projects/p/locations/l/publishers/google/models/m1:generateContent",
                "m2"
            )
            .as_deref(),
            Some("/v1/projects/p/locations/l/publishers/google/models/m2:generateContent")
        );
        assert_eq!(set_model("/v1beta/files", "m"), None);
    }
}
