//! What loopguard writes when a verdict calls for more than observing, the
//! shapes every dialect shares; each dialect renders them in its own
//! `<dialect>/write.rs`, through [`super::Dialect`]:
//!
//! - `warn`: the warning is added to the forwarded request where every server
//!   of the dialect accepts it ([`super::Dialect::inject_warning`]).
//! - `block`: a complete, well-formed assistant answer explaining what was
//!   stopped, in the mode the client asked for
//!   ([`super::Dialect::block_answer`]); at stream time, the events that
//!   replace the withheld tool calls (see [`super::ending`]).
//! - `abort`: HTTP 400 with the dialect's error shape
//!   ([`super::Dialect::abort_body`]), or the dialect's in-stream error event
//!   once headers went out.

/// How a response body is framed: what the client asked for, and what the
/// upstream sends (one type for both; see [`super::Dialect::mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One JSON document.
    Whole,
    /// Server-sent events.
    Sse,
    /// One JSON array streamed element by element (Gemini without `alt=sse`).
    JsonArray,
    /// Newline-delimited JSON, one object per line (Ollama).
    Ndjson,
    /// AWS's binary event stream (`application/vnd.amazon.eventstream`,
    /// Bedrock's `InvokeModelWithResponseStream` and `ConverseStream`), see
    /// [`crate::eventstream`].
    EventStream,
}

/// A response loopguard writes in the upstream's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `Content-Type` of the body.
    pub content_type: &'static str,
    /// The body, whole.
    pub body: Vec<u8>,
}

/// What is known of a response when loopguard must end it itself: the ids
/// its own events have to carry to keep the dialect's invariants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamEnding {
    /// OpenAI chunk `id` (the upstream's).
    pub id: Option<String>,
    /// Model name as the upstream wrote it.
    pub model: Option<String>,
    /// OpenAI `created`.
    pub created: Option<u64>,
    /// Choice / candidate index being ended.
    pub choice: u32,
}

/// Random hex for ids loopguard makes up (never chained to by a client).
pub fn random_id() -> String {
    let n: u64 = rand::random();
    format!("{n:016x}")
}

/// Signed reasoning parts of a request body (Anthropic thinking blocks,
/// Gemini `thoughtSignature`s, Responses `encrypted_content` reasoning
/// items), as [`super::Dialect::strip_foreign_signatures`] counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signed {
    /// Signed parts in the body, in history order.
    pub total: usize,
    /// Of those, dropped or neutralised.
    pub stripped: usize,
}

/// Removes the client's credentials from upstream request headers and the
/// URL's `key` query parameter, before a dialect sets another one.
pub(crate) fn clear_credentials(headers: &mut http::HeaderMap, url: &mut url::Url) {
    for name in ["authorization", "x-api-key", "x-goog-api-key", "api-key"] {
        headers.remove(name);
    }
    if url.query().is_some() {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != "key")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(kept);
        }
    }
}

/// Sets `value` as a header, when it is a valid header value.
pub(crate) fn set_header(headers: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = http::HeaderValue::from_str(value) {
        headers.insert(http::HeaderName::from_static(name), v);
    }
}

/// Sets the body's top-level `model` (OpenAI and Anthropic bodies).
pub(crate) fn set_body_model(body: &mut serde_json::Value, model: &str) {
    if let Some(root) = body.as_object_mut() {
        root.insert("model".to_owned(), serde_json::Value::from(model));
    }
}
