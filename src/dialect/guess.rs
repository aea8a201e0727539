//! Guessing a request body's dialect from its shape alone (a recorded body
//! replayed without its path).

use super::Dialect;

impl Dialect {
    /// Guesses the dialect of a request body from its shape: `contents` is
    /// Gemini, `input` OpenAI Responses; `messages` is Anthropic when the body
    /// has Anthropic's marks (a top-level `system`, `max_tokens` without any
    /// OpenAI `tool` message, or `tool_use` / `tool_result` / `thinking`
    /// blocks), else OpenAI chat; a body with Bedrock Converse's marks
    /// (`toolConfig`, `inferenceConfig`, `toolUse` / `toolResult` blocks) is
    /// `bedrock-converse`.
    pub fn guess(body: &serde_json::Value) -> Option<Dialect> {
        if body.get("toolConfig").is_some() || body.get("inferenceConfig").is_some() || converse_blocks(body)
        {
            return Some(Dialect::BedrockConverse);
        }
        if body.get("contents").is_some() {
            return Some(Dialect::Gemini);
        }
        if body.get("input").is_some() {
            return Some(Dialect::OpenaiResponses);
        }
        let messages = body.get("messages")?.as_array()?;
        let openai = messages.iter().any(|m| {
            m.get("tool_calls").is_some()
                || matches!(m.get("role").and_then(|r| r.as_str()), Some("tool" | "developer"))
        });
        let blocks = messages
            .iter()
            .filter_map(|m| m.get("content").and_then(|c| c.as_array()))
            .flatten()
            .filter_map(|b| b.get("type").and_then(|t| t.as_str()));
        let anthropic_blocks = blocks
            .into_iter()
            .any(|t| matches!(t, "tool_use" | "tool_result" | "thinking" | "redacted_thinking"));
        let anthropic_body = body.get("system").is_some() || body.get("max_tokens").is_some() && !openai;
        Some(if anthropic_blocks || (anthropic_body && !openai) {
            Dialect::Anthropic
        } else {
            Dialect::OpenaiChat
        })
    }
}

/// A content block of Converse's shape (`toolUse`, `toolResult`) in `messages`.
fn converse_blocks(body: &serde_json::Value) -> bool {
    let messages = body
        .get("messages")
        .and_then(|m| m.as_array())
        .into_iter()
        .flatten();
    messages
        .filter_map(|m| m.get("content").and_then(|c| c.as_array()))
        .flatten()
        .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some())
}
