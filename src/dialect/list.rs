//! The list of dialects: the one place that names each of them and sends
//! every dialect-specific question to its folder. Adding a dialect is its
//! folder plus its line in each `match` here; no other file names one.

use serde_json::Value;

use super::ending::Kept;
use super::write::{Answer, Mode, Signed};
use super::{DialectError, ParsedRequest, SplitRequest, StreamEvent};
use super::{anthropic, bedrock, bedrock_converse, gemini, ollama, openai_chat, openai_responses};

/// The wire protocol of a request, chosen from its path (DESIGN §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// OpenAI Chat Completions: `POST …/chat/completions`.
    OpenaiChat,
    /// Gemini: `POST …/models/{model}:generateContent` and `:streamGenerateContent`.
    Gemini,
    /// OpenAI Responses: `POST …/responses` (and `…/responses/compact`).
    OpenaiResponses,
    /// Anthropic Messages: `POST …/messages`, and Claude on Vertex AI
    /// (`POST …/publishers/anthropic/models/{model}:rawPredict` and
    /// `:streamRawPredict`, the same body with `anthropic_version` and no
    /// `model`).
    Anthropic,
    /// Ollama native chat: `POST …/api/chat` (NDJSON streams).
    OllamaChat,
    /// Ollama native completion: `POST …/api/generate` (no tool calls).
    OllamaGenerate,
    /// Claude on Amazon Bedrock: `POST …/model/{id}/invoke` and
    /// `…/invoke-with-response-stream` (Anthropic's body; AWS event stream).
    Bedrock,
    /// Amazon Bedrock's model-neutral API: `POST …/model/{id}/converse` and
    /// `…/converse-stream` (its own body and events; AWS event stream).
    BedrockConverse,
}

impl Dialect {
    /// The dialect's name as used in config, logs and metrics (`openai-chat`,
    /// `gemini`, `openai-responses`, `anthropic`).
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenaiChat => "openai-chat",
            Self::Gemini => "gemini",
            Self::OpenaiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::OllamaChat => "ollama-chat",
            Self::OllamaGenerate => "ollama-generate",
            Self::Bedrock => "bedrock",
            Self::BedrockConverse => "bedrock-converse",
        }
    }

    /// Every dialect, in the order they are documented.
    pub const ALL: [Self; 8] = [
        Self::OpenaiChat,
        Self::Gemini,
        Self::OpenaiResponses,
        Self::Anthropic,
        Self::OllamaChat,
        Self::OllamaGenerate,
        Self::Bedrock,
        Self::BedrockConverse,
    ];

    /// Picks the dialect for a request path (without query), or `None` for
    /// paths that are proxied without detection (model lists, embeddings,
    /// token counting, files).
    pub fn from_path(path: &str) -> Option<Self> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            return Some(Self::OpenaiChat);
        }
        if path.ends_with("/responses") || path.ends_with("/responses/compact") {
            return Some(Self::OpenaiResponses);
        }
        if path.ends_with("/messages") {
            return Some(Self::Anthropic);
        }
        if path.ends_with("/api/chat") {
            return Some(Self::OllamaChat);
        }
        if path.ends_with("/api/generate") {
            return Some(Self::OllamaGenerate);
        }
        // Bedrock: `/model/{modelId}/invoke[-with-response-stream]`, `/converse[-stream]`.
        if let Some((head, method)) = path.rsplit_once('/') {
            let model_path = head.rsplit_once('/').is_some_and(|(before, id)| {
                !id.is_empty() && (before == "/model" || before.ends_with("/model"))
            });
            match method {
                "invoke" | "invoke-with-response-stream" if model_path => return Some(Self::Bedrock),
                "converse" | "converse-stream" if model_path => return Some(Self::BedrockConverse),
                _ => {}
            }
        }
        let last = path.rsplit('/').next().unwrap_or_default();
        if let Some((model, method)) = last.split_once(':') {
            if method == "generateContent" || method == "streamGenerateContent" {
                return Some(Self::Gemini);
            }
            // Claude on Vertex AI: Anthropic's Messages body, model in the
            // path; its token counting is the pseudo-model `count-tokens`
            // (`/v1/messages/count_tokens` elsewhere), not a turn.
            if (method == "rawPredict" || method == "streamRawPredict")
                && path.contains("/publishers/anthropic/models/")
                && model != "count-tokens"
            {
                return Some(Self::Anthropic);
            }
        }
        None
    }

    /// The model a request path names: Bedrock's `…/model/{modelId}/invoke…`
    /// segment, else the last segment before a `:` (Gemini's
    /// `models/{model}:generateContent`, Vertex's `…/models/{model}:rawPredict`).
    pub fn path_model(self, path: &str) -> &str {
        let mut segments = path.trim_end_matches('/').rsplit('/');
        let last = segments.next().unwrap_or_default();
        match self {
            Self::Bedrock | Self::BedrockConverse => segments.next().unwrap_or_default(),
            _ => last.split(':').next().unwrap_or_default(),
        }
    }

    /// Parses a request body into what the detectors need.
    ///
    /// # Errors
    /// [`DialectError`] when the body is not JSON or not of this dialect's
    /// shape; the proxy then forwards it unchanged without detection (fail
    /// open).
    pub fn parse_request(self, body: &[u8]) -> Result<ParsedRequest, DialectError> {
        match self {
            Self::OpenaiChat => openai_chat::parse_request(body),
            Self::Gemini => gemini::parse_request(body),
            Self::OpenaiResponses => openai_responses::parse_request(body),
            Self::Anthropic | Self::Bedrock => anthropic::parse_request(body),
            Self::OllamaChat => ollama::parse_chat(body),
            Self::OllamaGenerate => ollama::parse_generate(body),
            Self::BedrockConverse => bedrock_converse::parse_request(body),
        }
    }

    /// Splits a request body into its envelope and raw history items, for
    /// the incremental parse (see [`split`](super::split)); `None` for a dialect without
    /// a split (every dialect has one today), whose requests would always get
    /// [`Dialect::parse_request`].
    ///
    /// # Errors
    /// [`DialectError`] when the body does not split; callers fall back to
    /// [`Dialect::parse_request`], which names the problem.
    pub fn split_request(self, body: &[u8]) -> Option<Result<SplitRequest<'_>, DialectError>> {
        match self {
            Self::OpenaiChat => Some(openai_chat::split_request(body)),
            Self::Gemini => Some(gemini::split_request(body)),
            Self::Anthropic | Self::Bedrock => Some(anthropic::split_request(body)),
            Self::OpenaiResponses => Some(openai_responses::split_request(body)),
            Self::OllamaChat => Some(ollama::split_chat(body)),
            Self::BedrockConverse => Some(bedrock_converse::split_request(body)),
            Self::OllamaGenerate => None,
        }
    }

    /// [`Dialect::split_request`] taken up again after the items an earlier
    /// body had, whose bytes up to `from.at` this body repeats (see
    /// [`super::split::resume_with`]).
    ///
    /// # Errors
    /// [`DialectError`] when the body does not continue that way; callers
    /// split it in full.
    pub fn resume_request(
        self,
        body: &[u8],
        from: super::split::Resume,
    ) -> Result<SplitRequest<'_>, DialectError> {
        match self {
            Self::OpenaiChat => openai_chat::resume_request(body, from),
            Self::Gemini => gemini::resume_request(body, from),
            Self::Anthropic | Self::Bedrock => anthropic::resume_request(body, from),
            Self::OpenaiResponses => openai_responses::resume_request(body, from),
            Self::OllamaChat => ollama::resume_chat(body, from),
            Self::BedrockConverse => bedrock_converse::resume_request(body, from),
            Self::OllamaGenerate => Err(DialectError::Shape(
                "`/api/generate` has no history to resume".to_owned(),
            )),
        }
    }

    /// The top-level field of a request body that holds its history (the
    /// array [`Dialect::split_request`] splits): `messages`, `contents` or
    /// `input`.
    pub fn history_key(self) -> &'static str {
        match self {
            Self::OpenaiChat
            | Self::Anthropic
            | Self::OllamaChat
            | Self::OllamaGenerate
            | Self::Bedrock
            | Self::BedrockConverse => "messages",
            Self::Gemini => "contents",
            Self::OpenaiResponses => "input",
        }
    }

    /// A fresh parser for one response of this dialect.
    pub fn stream_parser(self) -> StreamParser {
        match self {
            Self::OpenaiChat => StreamParser::OpenaiChat(openai_chat::ResponseParser::default()),
            Self::Gemini => StreamParser::Gemini(gemini::ResponseParser::default()),
            Self::OpenaiResponses => {
                StreamParser::OpenaiResponses(openai_responses::ResponseParser::default())
            }
            Self::Anthropic => StreamParser::Anthropic(anthropic::ResponseParser::default()),
            Self::OllamaChat => {
                StreamParser::Ollama(ollama::Endpoint::Chat, ollama::ResponseParser::default())
            }
            Self::OllamaGenerate => {
                StreamParser::Ollama(ollama::Endpoint::Generate, ollama::ResponseParser::default())
            }
            Self::Bedrock => StreamParser::Bedrock(anthropic::ResponseParser::default()),
            Self::BedrockConverse => {
                StreamParser::BedrockConverse(bedrock_converse::ResponseParser::default())
            }
        }
    }

    /// The name of the provider a dialect belongs to, as in a route's
    /// `provider` (`openai`, `gemini`, `anthropic`).
    pub fn provider(self) -> &'static str {
        match self {
            Self::OpenaiChat | Self::OpenaiResponses => "openai",
            Self::Gemini => "gemini",
            Self::Anthropic => "anthropic",
            Self::OllamaChat | Self::OllamaGenerate => "ollama",
            Self::Bedrock | Self::BedrockConverse => "bedrock",
        }
    }

    /// How the answer is framed, from the path, the query and the body's
    /// `stream` flag: Gemini says it in its method (`:streamGenerateContent`,
    /// a JSON array unless `alt=sse`), and so does Claude on Vertex AI
    /// (`:streamRawPredict` streams SSE whether or not the body says
    /// `"stream": true`); the others in the body.
    pub fn mode(self, path: &str, query: Option<&str>, stream: bool) -> Mode {
        match self {
            Self::OpenaiChat if stream => Mode::Sse,
            Self::OpenaiChat => Mode::Whole,
            Self::Gemini if path.ends_with(":streamGenerateContent") => {
                if query.is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse")) {
                    Mode::Sse
                } else {
                    Mode::JsonArray
                }
            }
            Self::Gemini => Mode::Whole,
            Self::Anthropic if path.ends_with(":streamRawPredict") => Mode::Sse,
            Self::OpenaiResponses | Self::Anthropic if stream => Mode::Sse,
            Self::OpenaiResponses | Self::Anthropic => Mode::Whole,
            Self::OllamaChat | Self::OllamaGenerate if stream => Mode::Ndjson,
            Self::OllamaChat | Self::OllamaGenerate => Mode::Whole,
            Self::Bedrock if path.ends_with("/invoke-with-response-stream") => Mode::EventStream,
            Self::Bedrock => Mode::Whole,
            Self::BedrockConverse if path.ends_with("/converse-stream") => Mode::EventStream,
            Self::BedrockConverse => Mode::Whole,
        }
    }

    /// After a block, the upstream's trailing usage chunk and `[DONE]` still
    /// belong to the answer (OpenAI chat); the other endings are complete.
    pub fn keeps_trailer_after_block(self) -> bool {
        self == Self::OpenaiChat
    }

    /// Responses chain by `previous_response_id`: the stream-time judge
    /// records each response's calls under its id (OpenAI Responses).
    pub fn chains_responses(self) -> bool {
        self == Self::OpenaiResponses
    }

    /// Adds `warning` to a request body where every server of the dialect
    /// accepts it: OpenAI chat — appended to the content of the last tool
    /// message; Gemini — a `loopguard_warning` field inside the last
    /// `functionResponse.response` object; OpenAI Responses — appended to the
    /// last call output's `output`; Anthropic — a `text` block after the
    /// `tool_result` blocks of the last user message. Returns `false` (body
    /// untouched) when the request carries no tool result to attach it to,
    /// and always on Bedrock, whose bodies are SigV4-signed by the client.
    pub fn inject_warning(self, body: &mut Value, warning: &str) -> bool {
        match self {
            Self::Bedrock | Self::BedrockConverse => false,
            Self::OpenaiChat => openai_chat::write::inject_warning(body, warning),
            Self::Gemini => gemini::write::inject_warning(body, warning),
            Self::OpenaiResponses => openai_responses::write::inject_warning(body, warning),
            Self::Anthropic => anthropic::write::inject_warning(body, warning),
            Self::OllamaChat | Self::OllamaGenerate => ollama::write::inject_warning(body, warning),
        }
    }

    /// Names `model` in the request where the dialect carries it: OpenAI
    /// and Anthropic — the body's `model`; Gemini — the path segment
    /// `models/{model}`. Returns the new path when the path carries it.
    pub fn set_model(self, body: &mut Value, path: &str, model: &str) -> Option<String> {
        match self {
            Self::OpenaiChat => {
                openai_chat::model::set_model(body, model);
                None
            }
            Self::Gemini => gemini::model::set_model(path, model),
            Self::OpenaiResponses => {
                openai_responses::model::set_model(body, model);
                None
            }
            Self::Anthropic => {
                anthropic::model::set_model(body, model);
                None
            }
            Self::OllamaChat | Self::OllamaGenerate => {
                ollama::model::set_model(body, model);
                None
            }
            // A signed request is never changed (the model is in its path).
            Self::Bedrock | Self::BedrockConverse => None,
        }
    }

    /// Drops or neutralises the signed reasoning parts of a request body
    /// whose ordinal (in history order) `foreign` names, as the dialect
    /// allows: Anthropic thinking blocks are dropped (and `thinking` turned
    /// off when the last assistant message loses its own), Gemini
    /// `thoughtSignature`s are replaced with the documented skip value,
    /// Responses `encrypted_content` reasoning items are dropped; OpenAI chat
    /// has none. Nothing else changes.
    pub fn strip_foreign_signatures(self, body: &mut Value, foreign: &dyn Fn(usize) -> bool) -> Signed {
        match self {
            Self::OpenaiChat => openai_chat::model::strip_foreign_signatures(body, foreign),
            Self::Gemini => gemini::model::strip_foreign_signatures(body, foreign),
            Self::OpenaiResponses => openai_responses::model::strip_foreign_signatures(body, foreign),
            Self::Anthropic => anthropic::model::strip_foreign_signatures(body, foreign),
            Self::OllamaChat | Self::OllamaGenerate => ollama::model::strip_foreign_signatures(body, foreign),
            Self::Bedrock | Self::BedrockConverse => Signed::default(),
        }
    }

    /// Replaces the client's credential (headers and `?key=`) with `secret`
    /// in the dialect's own header (OpenAI bearer token, Anthropic
    /// `x-api-key`, Gemini `x-goog-api-key`).
    pub fn set_credential(self, headers: &mut http::HeaderMap, url: &mut url::Url, secret: &str) {
        match self {
            Self::OpenaiChat => openai_chat::model::set_credential(headers, url, secret),
            Self::Gemini => gemini::model::set_credential(headers, url, secret),
            Self::OpenaiResponses => openai_responses::model::set_credential(headers, url, secret),
            Self::Anthropic => anthropic::model::set_credential(headers, url, secret),
            Self::OllamaChat | Self::OllamaGenerate => ollama::model::set_credential(headers, url, secret),
            // SigV4 signs each request: a static secret cannot replace it.
            Self::Bedrock | Self::BedrockConverse => {}
        }
    }

    /// A complete assistant answer carrying `message` as its text, finish reason
    /// "stop", in `mode`. `model` is echoed where the dialect names it;
    /// `include_usage` is OpenAI's `stream_options.include_usage`.
    pub fn block_answer(self, mode: Mode, model: &str, message: &str, include_usage: bool) -> Answer {
        match self {
            Self::OpenaiChat => openai_chat::write::block_answer(mode, model, message, include_usage),
            Self::Gemini => gemini::write::block_answer(mode, model, message),
            Self::OpenaiResponses => openai_responses::write::block_answer(mode, model, message),
            Self::Anthropic => anthropic::write::block_answer(mode, model, message),
            Self::OllamaChat => ollama::write::block_answer(ollama::Endpoint::Chat, mode, model, message),
            Self::OllamaGenerate => {
                ollama::write::block_answer(ollama::Endpoint::Generate, mode, model, message)
            }
            Self::Bedrock => bedrock::write::block_answer(mode, model, message),
            Self::BedrockConverse => bedrock_converse::write::block_answer(mode, model, message),
        }
    }

    /// The HTTP 400 body for `abort`, in the dialect's error shape; `message`
    /// should start with `loop_detected:` and name the detector.
    pub fn abort_body(self, message: &str) -> Vec<u8> {
        match self {
            Self::OpenaiChat => openai_chat::write::abort_body(message),
            Self::Gemini => gemini::write::abort_body(message),
            Self::OpenaiResponses => openai_responses::write::abort_body(message),
            Self::Anthropic => anthropic::write::abort_body(message),
            Self::OllamaChat | Self::OllamaGenerate => ollama::write::abort_body(message),
            Self::Bedrock | Self::BedrockConverse => bedrock::write::abort_body(message),
        }
    }

    /// `loopguard demo`'s first request in this dialect through the proxy at
    /// `proxy`: URL and body.
    pub fn demo_request(self, proxy: &str) -> (String, Value) {
        match self {
            Self::OpenaiChat => openai_chat::sample::demo_request(proxy),
            Self::Gemini => gemini::sample::demo_request(proxy),
            Self::OpenaiResponses => openai_responses::sample::demo_request(proxy),
            Self::Anthropic | Self::Bedrock => anthropic::sample::demo_request(proxy),
            Self::OllamaChat | Self::OllamaGenerate => ollama::sample::demo_request(proxy),
            Self::BedrockConverse => bedrock_converse::sample::demo_request(proxy),
        }
    }

    /// Appends call `n` of `name` with `args` (JSON text) and its `result` to
    /// the history of a demo request.
    pub fn push_call_turn(self, body: &mut Value, n: usize, name: &str, args: &str, result: &str) {
        match self {
            Self::OpenaiChat => openai_chat::sample::push_call_turn(body, n, name, args, result),
            Self::Gemini => gemini::sample::push_call_turn(body, n, name, args, result),
            Self::OpenaiResponses => openai_responses::sample::push_call_turn(body, n, name, args, result),
            Self::Anthropic | Self::Bedrock => anthropic::sample::push_call_turn(body, n, name, args, result),
            Self::OllamaChat | Self::OllamaGenerate => {
                ollama::sample::push_call_turn(body, n, name, args, result)
            }
            Self::BedrockConverse => bedrock_converse::sample::push_call_turn(body, n, name, args, result),
        }
    }

    /// Appends a message of the person to the history of a demo request.
    pub fn push_user_turn(self, body: &mut Value, text: &str) {
        match self {
            Self::OpenaiChat => openai_chat::sample::push_user_turn(body, text),
            Self::Gemini => gemini::sample::push_user_turn(body, text),
            Self::OpenaiResponses => openai_responses::sample::push_user_turn(body, text),
            Self::Anthropic | Self::Bedrock => anthropic::sample::push_user_turn(body, text),
            Self::OllamaChat | Self::OllamaGenerate => ollama::sample::push_user_turn(body, text),
            Self::BedrockConverse => bedrock_converse::sample::push_user_turn(body, text),
        }
    }
}

/// OpenAI chat, the dialect assumed when nothing tells (a recorded response
/// before any request).
impl Default for Dialect {
    fn default() -> Self {
        Self::OpenaiChat
    }
}

/// Turns the payloads of one response into [`StreamEvent`]s, incrementally.
///
/// Feed it every payload in order ([`StreamParser::payload`]: one SSE `data`
/// field, one element of a streamed JSON array, or a whole non-streaming
/// body), then call [`StreamParser::end`] once when the body ends, which
/// completes tool calls still being assembled.
#[derive(Debug)]
pub enum StreamParser {
    /// `openai-chat` responses.
    OpenaiChat(openai_chat::ResponseParser),
    /// `gemini` responses.
    Gemini(gemini::ResponseParser),
    /// `openai-responses` responses.
    OpenaiResponses(openai_responses::ResponseParser),
    /// `anthropic` responses.
    Anthropic(anthropic::ResponseParser),
    /// `ollama-chat` and `ollama-generate` answers (one line at a time).
    Ollama(ollama::Endpoint, ollama::ResponseParser),
    /// `bedrock` answers: Anthropic events, one per decoded `chunk`.
    Bedrock(anthropic::ResponseParser),
    /// `bedrock-converse` answers: `ConverseStream` events or a `Converse` answer.
    BedrockConverse(bedrock_converse::ResponseParser),
}

impl StreamParser {
    /// Parses one payload, appending what it carried to `out`.
    ///
    /// # Errors
    /// [`DialectError`] when the payload is not JSON or not of the dialect's
    /// shape; the parser stays usable for the next payload.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        match self {
            Self::OpenaiChat(p) => p.payload(payload, out),
            Self::Gemini(p) => p.payload(payload, out),
            Self::OpenaiResponses(p) => p.payload(payload, out),
            Self::Anthropic(p) | Self::Bedrock(p) => p.payload(payload, out),
            Self::Ollama(_, p) => p.payload(payload, out),
            Self::BedrockConverse(p) => p.payload(payload, out),
        }
    }

    /// Identity fields of the first payload that had any (OpenAI chat,
    /// Gemini, whose payloads carry them at the top level; `None` for the
    /// others, which keep their identity in the parser's state).
    pub fn meta(&self) -> Option<&super::Meta> {
        match self {
            Self::OpenaiChat(p) => p.meta(),
            Self::Gemini(p) => p.meta(),
            Self::Ollama(_, p) => p.meta(),
            Self::OpenaiResponses(_) | Self::Anthropic(_) | Self::Bedrock(_) | Self::BedrockConverse(_) => {
                None
            }
        }
    }

    /// The body ended: completes every tool call still open.
    pub fn end(&mut self, out: &mut Vec<StreamEvent>) {
        match self {
            Self::OpenaiChat(p) => p.end(out),
            Self::Gemini(p) => p.end(out),
            Self::OpenaiResponses(p) => p.end(out),
            Self::Anthropic(p) | Self::Bedrock(p) => p.end(out),
            Self::Ollama(_, p) => p.end(out),
            Self::BedrockConverse(p) => p.end(out),
        }
    }

    /// Where the frame parsed last stands in its stream (Responses
    /// `sequence_number` and `output_index`, Anthropic block `index`): the
    /// events replacing held ones take its place.
    pub fn anchor(&self) -> (Option<u64>, Option<u32>) {
        match self {
            Self::OpenaiResponses(p) => openai_responses::ending::anchor(p.state()),
            Self::Anthropic(p) | Self::Bedrock(p) => anthropic::ending::anchor(p.state()),
            Self::BedrockConverse(p) => bedrock_converse::ending::anchor(p.state()),
            Self::OpenaiChat(_) | Self::Gemini(_) | Self::Ollama(..) => (None, None),
        }
    }

    /// What replaces the held region for a block: the answer ends with
    /// `message` as text.
    pub fn block_ending(&self, kept: &Kept<'_>, message: &str) -> Vec<u8> {
        match self {
            Self::OpenaiChat(_) => openai_chat::ending::block(kept, message),
            Self::Gemini(_) => gemini::ending::block(kept, message),
            Self::OpenaiResponses(p) => openai_responses::ending::block(p.state(), kept, message),
            Self::Anthropic(p) => anthropic::ending::block(p.state(), kept, message),
            Self::Ollama(e, p) => ollama::write::block(*e, p.identity(), kept, message),
            Self::Bedrock(p) => bedrock::ending::block(p.state(), kept, message),
            Self::BedrockConverse(p) => bedrock_converse::ending::block(p.state(), kept, message),
        }
    }

    /// What replaces the held region for an abort: the dialect's error (the
    /// whole body when the client asked for one document).
    pub fn error_ending(&self, kept: &Kept<'_>, message: &str) -> Vec<u8> {
        match self {
            Self::OpenaiChat(_) => openai_chat::ending::error(kept, message),
            Self::Gemini(_) => gemini::ending::error(kept, message),
            Self::OpenaiResponses(p) => openai_responses::ending::error(p.state(), kept, message),
            Self::Anthropic(_) => anthropic::ending::error(kept, message),
            Self::Ollama(..) => ollama::write::error(kept, message),
            Self::Bedrock(_) => bedrock::ending::error(kept, message),
            Self::BedrockConverse(_) => bedrock_converse::ending::error(kept, message),
        }
    }

    /// What ends a generation cut short (content detectors), in place of
    /// everything not yet released: the note, then every terminal piece the
    /// client expects.
    pub fn cut_ending(&self, kept: &Kept<'_>, message: &str) -> Vec<u8> {
        match self {
            Self::OpenaiChat(_) => openai_chat::ending::cut(kept, message),
            Self::Gemini(_) => gemini::ending::cut(kept, message),
            Self::OpenaiResponses(p) => openai_responses::ending::cut(p.state(), kept, message),
            Self::Anthropic(p) => anthropic::ending::cut(p.state(), kept, message),
            Self::Ollama(e, p) => ollama::write::cut(*e, p.identity(), kept, message),
            Self::Bedrock(p) => bedrock::ending::cut(p.state(), kept, message),
            Self::BedrockConverse(p) => bedrock_converse::ending::cut(p.state(), kept, message),
        }
    }

    /// The payload an AWS event-stream message carries for this parser:
    /// a `ConverseStream` event as `{"<event-type>": …}`, else (Bedrock's
    /// `InvokeModelWithResponseStream`) the Anthropic event of a `chunk`.
    pub fn event_payload(&self, message: &crate::eventstream::Message) -> Option<String> {
        match self {
            Self::BedrockConverse(_) => bedrock_converse::payload_of(message),
            _ => bedrock::payload_of(message),
        }
    }

    /// A message an event-stream client skips, to keep an idle connection
    /// alive while a call is held: an Anthropic `ping` in a `chunk`
    /// (InvokeModel), an event of a type no SDK models (`ConverseStream`).
    pub fn event_keepalive(&self) -> Vec<u8> {
        match self {
            Self::BedrockConverse(_) => bedrock_converse::keepalive(),
            _ => bedrock::chunk(r#"{"type":"ping"}"#),
        }
    }
}
