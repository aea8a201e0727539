//! What the OpenTelemetry GenAI semantic conventions call each dialect and
//! provider, and the token counts of a usage object in each dialect's
//! spelling.

use serde_json::Value;

use crate::dialect::Dialect;

/// `gen_ai.operation.name` of a dialect: `chat` for the chat-shaped APIs
/// (OpenAI chat and Responses, Anthropic Messages, also on Bedrock, Bedrock
/// Converse, Ollama
/// `/api/chat`),
/// `generate_content` for Gemini, `text_completion` for Ollama
/// `/api/generate`.
pub fn operation(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenaiChat
        | Dialect::OpenaiResponses
        | Dialect::Anthropic
        | Dialect::Bedrock
        | Dialect::BedrockConverse
        | Dialect::OllamaChat => "chat",
        Dialect::Gemini => "generate_content",
        Dialect::OllamaGenerate => "text_completion",
    }
}

/// `gen_ai.provider.name` of a route: the semconv's well-known values
/// (`openai`, `anthropic`, `gcp.gemini`, `gcp.vertex_ai` when the upstream
/// is Vertex AI's `aiplatform.googleapis.com`, Claude there included,
/// `aws.bedrock`), and `ollama`, which the conventions do not list.
pub fn provider(provider: crate::config::Provider, upstream_host: Option<&str>) -> &'static str {
    use crate::config::Provider;
    match provider {
        Provider::Openai => "openai",
        Provider::Anthropic if upstream_host.is_some_and(|h| h.ends_with("aiplatform.googleapis.com")) => {
            "gcp.vertex_ai"
        }
        Provider::Anthropic => "anthropic",
        Provider::Bedrock => "aws.bedrock",
        Provider::Gemini if upstream_host.is_some_and(|h| h.ends_with("aiplatform.googleapis.com")) => {
            "gcp.vertex_ai"
        }
        Provider::Gemini => "gcp.gemini",
        Provider::Ollama => "ollama",
    }
}

/// Input and output tokens a usage object reports, as the conventions
/// count them (input includes cached input): OpenAI chat `prompt_tokens` /
/// `completion_tokens`; OpenAI Responses and Anthropic `input_tokens` /
/// `output_tokens` (Anthropic's cache reads and writes added to the
/// input); Gemini `promptTokenCount` / `candidatesTokenCount` (plus
/// `thoughtsTokenCount`, which Gemini bills as output); Ollama
/// `prompt_eval_count` / `eval_count`; Bedrock Converse `inputTokens` /
/// `outputTokens` (its `cacheReadInputTokens` and `cacheWriteInputTokens`
/// added to the input). `None` for a count not reported.
pub fn tokens(usage: &Value) -> (Option<u64>, Option<u64>) {
    let get = |key: &str| usage.get(key).and_then(Value::as_u64);
    let first = |keys: &[&str]| keys.iter().find_map(|k| get(k));
    let input = first(&[
        "prompt_tokens",
        "input_tokens",
        "promptTokenCount",
        "prompt_eval_count",
        "inputTokens",
    ])
    .map(|n| {
        let cached = [
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "cacheReadInputTokens",
            "cacheWriteInputTokens",
        ];
        n + cached.iter().filter_map(|k| get(k)).sum::<u64>()
    });
    let output = first(&[
        "completion_tokens",
        "output_tokens",
        "candidatesTokenCount",
        "eval_count",
        "outputTokens",
    ])
    .map(|n| n + get("thoughtsTokenCount").unwrap_or(0));
    (input, output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialects_usage_spelling_is_read() {
        let t = |json: &str| tokens(&serde_json::from_str(json).unwrap_or_default());
        assert_eq!(
            t(r#"{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}"#),
            (Some(7), Some(3))
        );
        assert_eq!(
            t(
                r#"{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":2,"output_tokens":9}"#
            ),
            (Some(107), Some(9))
        );
        assert_eq!(
            t(r#"{"promptTokenCount":4,"candidatesTokenCount":6,"thoughtsTokenCount":10}"#),
            (Some(4), Some(16))
        );
        assert_eq!(
            t(r#"{"prompt_eval_count":11,"eval_count":2}"#),
            (Some(11), Some(2))
        );
        assert_eq!(
            t(r#"{"inputTokens":5,"cacheReadInputTokens":10,"outputTokens":3,"totalTokens":18}"#),
            (Some(15), Some(3))
        );
        // Anthropic's message_delta reports the output alone.
        assert_eq!(t(r#"{"output_tokens":12}"#), (None, Some(12)));
    }

    #[test]
    fn operation_and_provider_names_follow_the_conventions() {
        assert_eq!(operation(Dialect::Gemini), "generate_content");
        assert_eq!(operation(Dialect::OllamaGenerate), "text_completion");
        assert_eq!(operation(Dialect::Anthropic), "chat");
        use crate::config::Provider;
        assert_eq!(
            provider(Provider::Gemini, Some("generativelanguage.googleapis.com")),
            "gcp.gemini"
        );
        assert_eq!(
            provider(Provider::Gemini, Some("us-central1-aiplatform.googleapis.com")),
            "gcp.vertex_ai"
        );
        assert_eq!(provider(Provider::Openai, Some("127.0.0.1")), "openai");
        assert_eq!(
            provider(Provider::Anthropic, Some("us-east5-aiplatform.googleapis.com")),
            "gcp.vertex_ai"
        );
        assert_eq!(
            provider(Provider::Anthropic, Some("api.anthropic.com")),
            "anthropic"
        );
        assert_eq!(
            provider(Provider::Bedrock, Some("bedrock-runtime.us-east-1.amazonaws.com")),
            "aws.bedrock"
        );
        assert_eq!(operation(Dialect::Bedrock), "chat");
        assert_eq!(operation(Dialect::BedrockConverse), "chat");
    }
}
