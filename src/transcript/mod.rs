//! The dialect-neutral view of a request's history: turns, tool calls, tool results.
//!
//! Every dialect parser (see [`crate::dialect`]) turns a request body into a
//! [`Transcript`]; the detectors only ever see this shape. Text is kept as the
//! model or agent wrote it; nothing here is normalised except a tool call's
//! [`Signature`], which is canonical by construction.

mod signature;

pub use signature::{Signature, canonical_json, canonical_json_prefix};

use std::sync::{Arc, OnceLock};

use serde_json::Value;

/// Who wrote a message, in the dialect-neutral sense.
///
/// `Tool` is a message that carries only tool results (OpenAI `role: tool`,
/// a Gemini `user` content made of `functionResponse` parts, an Anthropic
/// `user` message of `tool_result` blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// System or developer instructions (not the system text of the request, see [`Transcript::system`]).
    System,
    /// The person, or the agent speaking for them.
    User,
    /// The model.
    Assistant,
    /// Tool results sent back to the model.
    Tool,
}

/// A request's history in dialect-neutral form.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Transcript {
    /// System text: OpenAI `system`/`developer` messages before the first
    /// turn, Gemini `systemInstruction`, joined by newlines. Empty when absent.
    pub system: String,
    /// Names of the tools the request declares, in declaration order.
    pub tools: Vec<String>,
    /// The turns, in order. Shared: a request whose history a kept hash
    /// chain already holds gets the chain's turns without a copy
    /// ([`crate::session::chain`]); change them with [`Arc::make_mut`],
    /// which copies them first when they are shared.
    pub messages: Arc<Vec<Message>>,
    /// Opaque compaction items the history carries (OpenAI Responses
    /// `compaction`): one more than in the previous request is a compaction.
    pub compactions: usize,
    /// Which kept history `messages` are the turns of, when they are a kept
    /// hash chain's ([`crate::session::chain`]): not part of a comparison or
    /// a serialised form.
    #[serde(skip)]
    pub lineage: Lineage,
}

/// A stamp shared by the turns of one kept hash chain from the time they
/// are first assembled: while a chain keeps its stamp its turns only grow
/// (turns are appended, or a part joined to the last turn), so two
/// transcripts with the same stamp agree on every turn but the last of the
/// shorter one. Detection reads the items of those turns once
/// (`detect::step`). `Lineage::NONE` (the default) stamps turns
/// of no kept chain. Never part of a comparison.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lineage(u64);

impl Lineage {
    /// No kept chain's turns.
    pub const NONE: Self = Self(0);

    /// A stamp no other turns have had in this process.
    pub fn fresh() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether these are a kept chain's turns.
    pub fn is_some(self) -> bool {
        self.0 != 0
    }

    /// Whether both stamps name the same kept chain's turns.
    pub fn same(self, other: Self) -> bool {
        self.is_some() && self.0 == other.0
    }
}

impl PartialEq for Lineage {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Transcript {
    /// The turns to change: copied first when another request or the hash
    /// chain store shares them ([`Arc::make_mut`]).
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.messages)
    }
}

/// One turn of the history.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text parts joined by newlines (reasoning / thought parts excluded).
    pub text: String,
    /// Tool calls the model made in this turn (assistant turns only).
    pub tool_calls: Vec<ToolCall>,
    /// Tool results carried by this turn (in an assistant turn: the results
    /// of its server-side calls).
    pub tool_results: Vec<ToolResult>,
    /// How detection read the text of a user message, computed on its first
    /// judgement and kept (see [`UserRead`]): change the text with
    /// [`Message::set_text`], which drops it (appending a part to a turn,
    /// [`crate::dialect::split::append_turn`], drops it too).
    #[serde(skip)]
    pub read: Memo<UserRead>,
}

/// What a user message's text is to detection, before the session's memory
/// of earlier texts (`detect::step::classify_user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserText {
    /// Only synthetic wrappers, loopguard's own text or a compaction summary.
    Synthetic,
    /// Matches a `canned_patterns` entry.
    Canned,
    /// Text of its own (the person, unless the session saw it before).
    Own,
}

/// How detection read a user message (its own text without the wrappers
/// agents inject, classified), kept with the message: a text-protocol
/// agent sends every tool result as a user message, and a resent history's
/// messages, shared from one request to the next by the parse cache, are
/// then read once, not on every request (issue #14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRead {
    /// A fingerprint of the user-text patterns it was read under: the read
    /// holds only while the same ones are in force.
    pub patterns: u64,
    /// What the text is.
    pub text: UserText,
    /// The hash of its own text (the step's merge key).
    pub key: u64,
}

impl Message {
    /// Replaces the message's text, dropping what detection kept of the old
    /// one ([`Message::read`]).
    pub fn set_text(&mut self, text: impl Into<String>) {
        self.text = text.into();
        self.read = Memo::default();
    }

    /// A message with only text.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            text: text.into(),
            tool_calls: Vec::new(),
            tool_results: Vec::new(),
            read: Memo::default(),
        }
    }
}

/// A tool call: what the model asked the agent to run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolCall {
    /// The call id when the dialect has one (OpenAI `tool_calls[].id`,
    /// Gemini `functionCall.id`). Never part of the signature.
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed when they are JSON.
    pub arguments: Arguments,
    /// Name + canonical arguments, hashed (see [`Signature`]).
    #[serde(skip)]
    pub signature: Signature,
    /// The call ran on the provider's server (Responses `web_search_call`,
    /// Anthropic `server_tool_use`, Gemini `executableCode`): its result is
    /// in the same assistant turn, and the agent never executes it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub server: bool,
    /// A call read back from the shared store with bounded arguments
    /// (see `crate::state::record`): what detection derives from the full
    /// arguments, computed before they were bounded. `None` for calls
    /// parsed from traffic.
    #[serde(skip)]
    pub digest: Option<std::sync::Arc<Digest>>,
    /// Detection's hashes of the call, computed on its first judgement and
    /// kept (see [`CallHashes`]): its id, name and signature must not change
    /// after that.
    #[serde(skip)]
    pub hashes: Memo<CallHashes>,
}

/// What detection hashes of a call's id, name and signature alone
/// (`detect::step`): kept with the call, so a history resent on every
/// request, whose parsed turns the parse cache shares from one request to
/// the next, has them computed once per call rather than once per request
/// (issue #14: a byte at a time, they were most of a 500 KB history's
/// detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallHashes {
    /// The merge key of the call's cycle when the call has an id (id and
    /// signature; without an id the key needs the result's outcome).
    pub merge: Option<u64>,
    /// The id's hash.
    pub ident: Option<u64>,
    /// The tool name's hash (the cycle's shape).
    pub shape: u64,
}

/// A value computed on first use and kept. Never part of a comparison or a
/// serialised form: two calls are equal by what they say, whether either
/// has its hashes computed yet or not.
#[derive(Debug, Clone)]
pub struct Memo<T>(OnceLock<T>);

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Self(OnceLock::new())
    }
}

impl<T> Memo<T> {
    /// The value, computed by `init` the first time.
    pub fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(init)
    }
}

impl<T> PartialEq for Memo<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// What detection derives from a call's full arguments, kept when only a
/// bounded form of them is stored (the shared store's response records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    /// The call's identity under the settings of the response that carried
    /// it (`detect::identity`).
    pub identity: Signature,
    /// Hashes of the argument lines a failing result may echo (the first
    /// ones, see `crate::state::record::ECHO_MAX`).
    pub echo: Vec<u64>,
}

impl ToolCall {
    /// Builds a tool call and computes its signature.
    pub fn new(id: Option<String>, name: impl Into<String>, arguments: Arguments) -> Self {
        let name = name.into();
        let signature = Signature::of(&name, &arguments);
        Self {
            id,
            name,
            arguments,
            signature,
            server: false,
            digest: None,
            hashes: Memo::default(),
        }
    }

    /// A server-side call (see [`ToolCall::server`]).
    pub fn server_side(id: Option<String>, name: impl Into<String>, arguments: Arguments) -> Self {
        Self {
            server: true,
            ..Self::new(id, name, arguments)
        }
    }
}

/// A tool call's arguments.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Arguments {
    /// Arguments that parsed as JSON (OpenAI's argument string after parsing,
    /// Gemini's `args` object).
    Json(Value),
    /// Arguments that did not parse as JSON, kept as received. A call with
    /// such arguments counts as a failure for `consecutive_failures`.
    Unparsable(String),
}

impl Arguments {
    /// Parses an argument string as OpenAI sends it (a JSON document in a
    /// string). An empty string is an empty object, as every OpenAI client
    /// treats it.
    pub fn from_json_str(text: &str) -> Self {
        if text.trim().is_empty() {
            return Self::Json(Value::Object(serde_json::Map::new()));
        }
        match serde_json::from_str(text) {
            Ok(value) => Self::Json(value),
            Err(_) => Self::Unparsable(text.to_owned()),
        }
    }
}

/// A tool result: what the agent sent back for a tool call.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolResult {
    /// The id of the call it answers, when the dialect carries one.
    pub call_id: Option<String>,
    /// The tool's name: given by the dialect (Gemini) or resolved from the
    /// call id against earlier assistant turns (OpenAI).
    pub name: Option<String>,
    /// The result's content.
    pub content: ResultContent,
    /// The dialect marked it as an error structurally (Anthropic `is_error`,
    /// a Gemini `functionResponse.response.error`). Pattern-based error
    /// recognition happens in the detectors, not here.
    pub is_error: bool,
}

/// A tool result's content.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ResultContent {
    /// Plain text (OpenAI tool message content, text parts joined).
    Text(String),
    /// A JSON value (Gemini `functionResponse.response`).
    Json(Value),
}
