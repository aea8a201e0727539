//! Escalation writing for Ollama: the model is the body's `model`; the
//! dialect has no signed reasoning; a credential (Ollama's cloud, or a
//! server behind an authenticating proxy) is a bearer token.

use serde_json::Value;

use crate::dialect::write::{Signed, clear_credentials, set_body_model, set_header};

/// Names `model` in the body.
pub fn set_model(body: &mut Value, model: &str) {
    set_body_model(body, model);
}

/// Ollama histories carry no signed reasoning: nothing to strip.
pub fn strip_foreign_signatures(_body: &mut Value, _foreign: &dyn Fn(usize) -> bool) -> Signed {
    Signed::default()
}

/// `Authorization: Bearer <secret>` in place of the client's credential.
pub fn set_credential(headers: &mut http::HeaderMap, url: &mut url::Url, secret: &str) {
    clear_credentials(headers, url);
    set_header(headers, "authorization", &format!("Bearer {secret}"));
}
