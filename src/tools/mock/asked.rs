//! What a request to the mock asks for, read from its path, query and
//! body: the dialect, the model and how the answer is framed ([`Mode`]).

use serde_json::Value;

use super::Mode;
use super::pieces::Named;

/// What a request's path (and body) ask the mock for.
pub(super) struct Asked<'a> {
    pub(super) path: &'a str,
    /// Gemini's `:generateContent` or `:streamGenerateContent`.
    pub(super) gemini: bool,
    /// Ollama's `/api/chat` or `/api/generate`.
    pub(super) ollama: bool,
    /// Ollama's `/api/generate`.
    pub(super) ollama_generate: bool,
    /// Claude on Vertex AI: Anthropic's answer; `:streamRawPredict` streams
    /// whatever the body says.
    pub(super) vertex_claude: bool,
    /// Claude on Bedrock: Anthropic's answer.
    pub(super) bedrock: bool,
    /// Bedrock's `invoke-with-response-stream`: its events as AWS
    /// event-stream `chunk`s.
    pub(super) bedrock_stream: bool,
    /// The dialect of named SSE events answered, if any.
    pub(super) named: Option<Named>,
    pub(super) mode: Mode,
}

impl<'a> Asked<'a> {
    /// What the request for `uri` with body `json_body` asks for.
    pub(super) fn read(uri: &'a http::Uri, json_body: &Value) -> Self {
        let path = uri.path();
        let gemini = path.contains(":generateContent") || path.contains(":streamGenerateContent");
        let ollama_generate = path.ends_with("/api/generate");
        let ollama = ollama_generate || path.ends_with("/api/chat");
        let vertex_claude = path.contains("/publishers/anthropic/models/")
            && (path.ends_with(":rawPredict") || path.ends_with(":streamRawPredict"));
        let bedrock = crate::dialect::Dialect::from_path(path) == Some(crate::dialect::Dialect::Bedrock);
        let bedrock_stream = bedrock && path.ends_with("/invoke-with-response-stream");
        let named = if path.ends_with("/responses") {
            Some(Named::Responses)
        } else if path.ends_with("/messages") || vertex_claude || bedrock {
            Some(Named::Anthropic)
        } else {
            None
        };
        let mut asked = Self {
            path,
            gemini,
            ollama,
            ollama_generate,
            vertex_claude,
            bedrock,
            bedrock_stream,
            named,
            mode: Mode::Whole, // Set just below, from the rest.
        };
        asked.mode = asked.mode_for(uri.query().unwrap_or_default(), json_body);
        asked
    }

    /// How the answer is framed: Gemini by its method and `alt=sse`,
    /// Ollama streamed unless told not to, Bedrock by its path, the others
    /// by the body's `stream` (Vertex AI's `:streamRawPredict` always).
    fn mode_for(&self, query: &str, json_body: &Value) -> Mode {
        let path = self.path;
        let stream = json_body.get("stream").and_then(Value::as_bool);
        if self.gemini {
            if path.ends_with(":generateContent") {
                Mode::Whole
            } else if query.split('&').any(|kv| kv == "alt=sse") {
                Mode::Sse
            } else {
                Mode::Array
            }
        } else if self.ollama {
            if stream == Some(false) {
                Mode::Whole
            } else {
                Mode::Lines
            }
        } else if self.bedrock {
            if self.bedrock_stream {
                Mode::Sse
            } else {
                Mode::Whole
            }
        } else if stream == Some(true) || path.ends_with(":streamRawPredict") {
            Mode::Sse
        } else {
            Mode::Whole
        }
    }

    /// The model asked for: the body's `model`, else the path's (Gemini and
    /// Claude on Vertex AI: `…/models/{model}:…`; Bedrock:
    /// `/model/{modelId}/invoke…`), else `mock-model`.
    pub(super) fn model(&self, json_body: &Value) -> String {
        let path = self.path;
        json_body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                (self.gemini || self.vertex_claude)
                    .then(|| path.rsplit('/').next().and_then(|last| last.split(':').next()))
                    .flatten()
                    .map(str::to_owned)
            })
            .or_else(|| {
                // Bedrock: `/model/{modelId}/invoke…`.
                self.bedrock
                    .then(|| path.rsplit('/').nth(1))
                    .flatten()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "mock-model".to_owned())
    }
}
