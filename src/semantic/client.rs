//! One judge call: `POST {upstream}/chat/completions` on an OpenAI-compatible
//! endpoint (OpenAI, a local server such as llama.cpp / vLLM / Ollama, or
//! Gemini's OpenAI-compatible endpoint), asking for structured output, and a
//! defensive parse of the answer for servers that ignore the schema.

use serde_json::{Value, json};

use super::prompt::answer_schema;
use crate::config::semantic::SemanticCheck;

/// Largest judge answer read, bytes.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A parsed answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The judge's reasoning.
    pub analysis: String,
    /// How sure it is that the agent loops, 0..1.
    pub confidence: f64,
}

/// Why a call gave no answer. Never affects traffic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// No answer within `timeout_secs`.
    #[error("no answer within the timeout")]
    Timeout,
    /// The endpoint answered with an error status.
    #[error("HTTP {0}")]
    Http(u16),
    /// The answer held no usable `{"analysis", "confidence"}`.
    #[error("unparsable answer: {0}")]
    Unparsable(String),
    /// Connection or protocol error.
    #[error("transport error: {0}")]
    Transport(String),
    /// `api_key_env` names a variable that is not set.
    #[error("the variable named by api_key_env ({0}) is not set")]
    NoKey(String),
}

impl Failure {
    /// The `outcome` label of `loopguard_judge_calls_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Http(_) => "http_error",
            Self::Unparsable(_) => "unparsable",
            Self::Transport(_) => "transport_error",
            Self::NoKey(_) => "no_key",
        }
    }
}

/// The request body for `model`.
pub fn body(model: &str, messages: &Value) -> Value {
    json!({
        "model": model,
        "messages": messages,
        "temperature": 0,
        "stream": false,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "loop_check", "strict": true, "schema": answer_schema()}
        }
    })
}

/// Asks `model`. The key is read from the environment at call time and sent
/// as `Authorization: Bearer`; it is never logged. The caller bounds the
/// call with `timeout_secs`.
///
/// # Errors
/// A [`Failure`]: HTTP error status, transport error, unparsable answer, missing key.
pub async fn ask(
    client: &reqwest::Client,
    cfg: &SemanticCheck,
    model: &str,
    messages: &Value,
) -> Result<Answer, Failure> {
    let Some(upstream) = &cfg.upstream else {
        return Err(Failure::Transport("no upstream configured".into()));
    };
    let url = format!("{}/chat/completions", upstream.as_str().trim_end_matches('/'));
    let mut request = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body(model, messages).to_string());
    if let Some(var) = &cfg.api_key_env {
        let key = std::env::var(var).map_err(|_| Failure::NoKey(var.clone()))?;
        request = request.bearer_auth(key);
    }
    let mut response = request
        .send()
        .await
        .map_err(|e| Failure::Transport(e.without_url().to_string()))?;
    let status = response.status();
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Failure::Transport(e.without_url().to_string()))?
    {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Failure::Unparsable(format!(
                "answer longer than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(Failure::Http(status.as_u16()));
    }
    parse(&bytes).map_err(Failure::Unparsable)
}

/// Parses a chat-completion answer: the message content (a string or text
/// parts), code fences and prose around the JSON object tolerated, the
/// confidence a number or numeric string (a percentage above 1 is scaled).
///
/// # Errors
/// What was wrong, for the log.
pub fn parse(bytes: &[u8]) -> Result<Answer, String> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let content = match doc.pointer("/choices/0/message/content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ if doc.get("confidence").is_some() => doc.to_string(),
        _ => return Err("no choices[0].message.content".into()),
    };
    let object = extract_object(&content).ok_or_else(|| {
        format!(
            "no JSON object in the content: {:?}",
            crate::detect::truncate(&content, 80)
        )
    })?;
    // A number above 1 is read as a percentage; so is any string ending in
    // `%`, whatever its value ("1%" is 0.01, not 1.0).
    let confidence = match object.get("confidence") {
        Some(Value::Number(n)) => n.as_f64().map(|c| if c > 1.0 { c / 100.0 } else { c }),
        Some(Value::String(s)) => {
            let s = s.trim();
            match s.strip_suffix('%') {
                Some(pct) => pct.trim().parse::<f64>().ok().map(|c| c / 100.0),
                None => s.parse::<f64>().ok().map(|c| if c > 1.0 { c / 100.0 } else { c }),
            }
        }
        _ => None,
    }
    .filter(|c| c.is_finite() && (0.0..=1.0).contains(c))
    .ok_or_else(|| "no confidence between 0 and 1".to_owned())?;
    let analysis = object
        .get("analysis")
        .or_else(|| object.get("reasoning"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(Answer { analysis, confidence })
}

/// The JSON object in a text: the whole text; else the first object that
/// parses, starting at each `{` in turn (so prose with braces before or after
/// a fenced answer does not hide it).
fn extract_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    if let Ok(Value::Object(map)) = serde_json::from_str(text.trim()) {
        return Some(map);
    }
    text.match_indices('{').find_map(|(start, _)| {
        let mut objects = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match objects.next() {
            Some(Ok(Value::Object(map))) => Some(map),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_percentages_always_divide_and_prose_braces_do_not_hide_the_answer() {
        let one_percent = chat(json!(r#"{"analysis":"progress","confidence":"1%"}"#));
        assert_eq!(parse(&one_percent).map(|a| a.confidence), Ok(0.01));
        let fenced =
            "Sure!\n```json\n{\"analysis\":\"fenced\",\"confidence\":0.93}\n```\nHope that helps {ok}";
        assert_eq!(parse(&chat(json!(fenced))).map(|a| a.confidence), Ok(0.93));
    }

    fn chat(content: Value) -> Vec<u8> {
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn structured_answers_parse() {
        let a = parse(&chat(json!(r#"{"analysis":"same read","confidence":0.95}"#)));
        assert_eq!(
            a,
            Ok(Answer {
                analysis: "same read".into(),
                confidence: 0.95
            })
        );
    }

    #[test]
    fn fenced_prose_wrapped_string_and_percent_answers_parse() {
        let fenced = "Here you go:\n```json\n{\"analysis\": \"ok\", \"confidence\": \"0.4\"}\n```";
        assert_eq!(parse(&chat(json!(fenced))).map(|a| a.confidence), Ok(0.4));
        let parts = json!([{"type": "text", "text": "{\"confidence\": 85, \"reasoning\": \"r\"}"}]);
        let a = parse(&chat(parts)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((a.confidence, a.analysis.as_str()), (0.85, "r"));
    }

    #[test]
    fn non_answers_are_errors() {
        assert!(parse(b"<html>").is_err());
        assert!(parse(&chat(json!("I think it loops."))).is_err());
        assert!(parse(&chat(json!("{\"analysis\": \"x\"}"))).is_err());
        assert!(parse(&chat(json!("{\"confidence\": -1}"))).is_err());
        assert!(parse(&chat(json!("{\"confidence\": 250}"))).is_err());
        assert!(parse(br#"{"error": {"message": "overloaded"}}"#).is_err());
    }

    #[test]
    fn the_body_asks_for_structured_output() {
        let b = body("m", &json!([]));
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert_eq!(
            b["response_format"]["json_schema"]["schema"]["required"],
            json!(["analysis", "confidence"])
        );
    }
}
