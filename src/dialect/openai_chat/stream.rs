//! The `openai-chat` dialect's responses: payloads, streamed
//! (`chat.completion.chunk`) or whole (`chat.completion`), → [`StreamEvent`]s.
//!
//! Reading is lenient, as the request's ([`super::parse`]): tool-call
//! fragments without `index`, empty continuation ids and arguments as an
//! object are accepted.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::parse::content_text;
use crate::dialect::{DialectError, StreamEvent};
use crate::transcript::{Arguments, ToolCall};

/// Incremental response parser for one `chat/completions` response, streamed
/// (`chat.completion.chunk` payloads, then `[DONE]`) or not (one whole
/// `chat.completion` body).
///
/// Tool-call fragments are keyed per choice by their `index`; without one, by
/// their non-empty `id`, else they continue the last open call. A choice's
/// calls complete, in order, when its `finish_reason` arrives, or at `[DONE]`
/// / [`ResponseParser::end`] for any still open.
///
/// Cost: a fragment finds its call through indexes of the open calls
/// (O(log n) for n calls of its choice), so an answer with n parallel calls
/// parses in O(n log n) — never a scan of the calls per fragment.
#[derive(Debug, Default)]
pub struct ResponseParser {
    /// Calls per choice index.
    choices: BTreeMap<u32, ChoiceCalls>,
    /// Identity fields of the first chunk that had any.
    pub(super) meta: Option<crate::dialect::Meta>,
}

/// The calls of one choice, in order of first appearance, and indexes of
/// those still open (not reported by a `ToolCallComplete` yet).
#[derive(Debug, Default)]
struct ChoiceCalls {
    calls: Vec<PendingCall>,
    /// Positions of the open calls.
    open: BTreeSet<usize>,
    /// Positions of the open calls by wire `index`.
    by_wire: HashMap<u64, BTreeSet<usize>>,
    /// Positions of the open calls by wire `index`, then id (`""` while
    /// the call has none).
    by_wire_id: HashMap<u64, HashMap<String, BTreeSet<usize>>>,
    /// Positions of the open calls by their (non-empty) id, whatever their wire index.
    by_id: HashMap<String, BTreeSet<usize>>,
}

/// A tool call being assembled from fragments.
#[derive(Debug)]
struct PendingCall {
    /// The fragment `index` the server keys it by, when it sends one.
    wire_index: Option<u64>,
    /// The call id (empty until a fragment carries a non-empty one).
    id: String,
    name: String,
    /// Argument text so far.
    arguments: String,
    /// Already reported by a `ToolCallComplete`.
    done: bool,
}

/// Removes `position` from the set under `key`, dropping the set once empty.
fn unindex<K: std::hash::Hash + Eq + std::borrow::Borrow<Q>, Q: std::hash::Hash + Eq + ?Sized>(
    map: &mut HashMap<K, BTreeSet<usize>>,
    key: &Q,
    position: usize,
) {
    if let Some(set) = map.get_mut(key) {
        set.remove(&position);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl ChoiceCalls {
    /// The open call a fragment with `wire_index` and `id` continues:
    /// - with an index, the last open call of that index whose id is
    ///   unknown or the same (a new id under a known index is a new call:
    ///   some servers number every call 0);
    /// - with only an id, the first open call of that id;
    /// - with neither, the last open call.
    fn find(&self, wire_index: Option<u64>, id: Option<&str>) -> Option<usize> {
        let last = |set: Option<&BTreeSet<usize>>| set.and_then(|s| s.last().copied());
        match (wire_index, id) {
            (Some(w), None) => last(self.by_wire.get(&w)),
            (Some(w), Some(id)) => {
                let ids = self.by_wire_id.get(&w);
                let unnamed = last(ids.and_then(|m| m.get("")));
                let named = last(ids.and_then(|m| m.get(id)));
                unnamed.max(named)
            }
            (None, Some(id)) => self.by_id.get(id).and_then(|s| s.first().copied()),
            (None, None) => self.open.last().copied(),
        }
    }

    /// Appends a new open call; returns its position.
    fn push(&mut self, wire_index: Option<u64>) -> usize {
        let position = self.calls.len();
        self.calls.push(PendingCall {
            wire_index,
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
            done: false,
        });
        self.open.insert(position);
        if let Some(w) = wire_index {
            self.by_wire.entry(w).or_default().insert(position);
            self.by_wire_id
                .entry(w)
                .or_default()
                .entry(String::new())
                .or_default()
                .insert(position);
        }
        position
    }

    /// Gives the open call at `position`, which has no id yet, its `id`.
    fn name(&mut self, position: usize, id: &str) {
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        id.clone_into(&mut call.id);
        if let Some(w) = call.wire_index {
            let ids = self.by_wire_id.entry(w).or_default();
            unindex(ids, "", position);
            ids.entry(id.to_owned()).or_default().insert(position);
        }
        self.by_id.entry(id.to_owned()).or_default().insert(position);
    }

    /// Marks the call at `position` done and drops it from the indexes;
    /// `false` when it already was (or there is none).
    fn close(&mut self, position: usize) -> bool {
        let Some(call) = self.calls.get_mut(position) else {
            return false;
        };
        if call.done {
            return false;
        }
        call.done = true;
        self.open.remove(&position);
        if let Some(w) = call.wire_index {
            unindex(&mut self.by_wire, &w, position);
            if let Some(ids) = self.by_wire_id.get_mut(&w) {
                unindex(ids, call.id.as_str(), position);
                if ids.is_empty() {
                    self.by_wire_id.remove(&w);
                }
            }
        }
        if !call.id.is_empty() {
            unindex(&mut self.by_id, call.id.as_str(), position);
        }
        true
    }
}

impl ResponseParser {
    /// Parses one payload: an SSE `data` field of a streamed response, or a
    /// whole non-streaming body.
    ///
    /// # Errors
    /// [`DialectError::Json`] when the payload is not JSON (nor `[DONE]`),
    /// [`DialectError::Shape`] when it is not an object. Nothing is appended
    /// then, and the parser stays usable.
    pub fn payload(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        let payload = payload.trim();
        if payload == "[DONE]" {
            self.end(out);
            out.push(StreamEvent::Done);
            return Ok(());
        }
        match super::chunk::read(payload) {
            Some(chunk) => {
                self.typed(chunk, out);
                Ok(())
            }
            None => self.lenient(payload, out),
        }
    }

    /// A payload read as a [`Value`], for the shapes the typed read
    /// refuses: a field of an unexpected type counts as absent.
    pub(super) fn lenient(&mut self, payload: &str, out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        let Value::Object(chunk) = serde_json::from_str(payload)? else {
            return Err(DialectError::Shape("payload is not a JSON object".to_owned()));
        };
        if self.meta.is_none() {
            self.meta = crate::dialect::Meta::of(&chunk);
        }
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            out.push(StreamEvent::Error {
                message: error_message(error),
            });
            return Ok(());
        }
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.choice(choice, out);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage { usage: usage.clone() });
        }
        Ok(())
    }

    /// A payload in the typed form ([`super::chunk`]): the same steps as
    /// the lenient read of [`Self::payload`], on fields read once.
    fn typed(&mut self, chunk: super::chunk::Chunk<'_>, out: &mut Vec<StreamEvent>) {
        if self.meta.is_none() {
            self.meta = crate::dialect::Meta {
                id: chunk.id.map(|s| s.0.into_owned()),
                model: chunk.model.map(|s| s.0.into_owned()),
                created: chunk.created,
                model_version: chunk.model_version.map(|s| s.0.into_owned()),
            }
            .any();
        }
        if let Some(error) = chunk.error {
            out.push(StreamEvent::Error {
                message: error_message(&error),
            });
            return;
        }
        for super::chunk::Object(choice) in chunk.choices.into_iter().flatten() {
            let index = choice.index.and_then(|i| u32::try_from(i).ok()).unwrap_or(0);
            let whole = choice.delta.is_none();
            let part = match choice.delta {
                Some(delta) => delta.map(|d| d.0),
                None => choice.message.map(|m| m.0),
            };
            let texts = part.as_ref().map_or_else(Texts::default, |p| Texts {
                reasoning_content: p.reasoning_content.as_ref(),
                reasoning: p.reasoning.as_ref(),
                content: p.content.as_ref(),
                refusal: p.refusal.as_ref(),
            });
            push_text(&texts, index, out);
            let (calls, legacy) = part.map_or((None, None), |p| (p.tool_calls, p.function_call));
            let calls = calls
                .into_iter()
                .flatten()
                .map(|super::chunk::Object(call)| Fragment {
                    wire_index: call.index,
                    id: call.id.map(|s| s.0).filter(|s| !s.is_empty()),
                    ..Fragment::of_typed_function(call.function.map(|f| f.0))
                });
            let legacy = legacy.map(|f| Fragment::of_typed_function(Some(f.0)));
            let finish = choice.finish_reason.map(|s| s.0);
            self.apply_choice(index, whole, calls.chain(legacy), finish.as_deref(), out);
        }
        if let Some(usage) = chunk.usage.filter(Value::is_object) {
            out.push(StreamEvent::Usage { usage });
        }
    }

    /// Identity fields (`id`, `model`, `created`) of the first chunk that had any.
    pub fn meta(&self) -> Option<&crate::dialect::Meta> {
        self.meta.as_ref()
    }

    /// Ends the response: completes every tool call still open, choice by
    /// choice. Calling it again appends nothing.
    pub fn end(&mut self, out: &mut Vec<StreamEvent>) {
        let choices: Vec<u32> = self.choices.keys().copied().collect();
        for choice in choices {
            self.complete_choice(choice, out);
        }
    }

    /// One entry of `choices[]`: a streamed `delta` or a whole `message`.
    fn choice(&mut self, choice: &Value, out: &mut Vec<StreamEvent>) {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(0);
        let whole = choice.get("delta").is_none();
        let part = choice.get("delta").or_else(|| choice.get("message"));
        let field = |key: &str| part.and_then(|p| p.get(key));
        let texts = Texts {
            reasoning_content: field("reasoning_content"),
            reasoning: field("reasoning"),
            content: field("content"),
            refusal: field("refusal"),
        };
        push_text(&texts, index, out);
        let calls = field("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(Fragment::of_value);
        let legacy = field("function_call")
            .filter(|f| f.is_object())
            .map(|function| Fragment::of_function(Some(function)));
        let finish = choice.get("finish_reason").and_then(Value::as_str);
        self.apply_choice(index, whole, calls.chain(legacy), finish, out);
    }

    /// A choice's calls, then its end: each fragment applied (and its call
    /// completed when the choice is a whole `message`), then every call
    /// still open completed when the choice has a `finish_reason`.
    fn apply_choice<'p>(
        &mut self,
        index: u32,
        whole: bool,
        calls: impl Iterator<Item = Fragment<'p>>,
        finish: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        for fragment in calls {
            let position = self.fragment(index, fragment, out);
            if whole {
                self.complete_call(index, position, out);
            }
        }
        if let Some(reason) = finish {
            self.complete_choice(index, out);
            out.push(StreamEvent::Finish {
                choice: index,
                reason: reason.to_owned(),
            });
        }
    }

    /// Applies one `tool_calls[]` fragment; returns the call's position in its choice.
    fn fragment(&mut self, choice: u32, fragment: Fragment<'_>, out: &mut Vec<StreamEvent>) -> usize {
        let calls = self.choices.entry(choice).or_default();
        let Fragment {
            wire_index,
            id,
            name,
            arguments,
        } = fragment;
        let position = calls
            .find(wire_index, id.as_deref())
            .unwrap_or_else(|| calls.push(wire_index));
        if let (Some(id), true) = (id.as_deref(), calls.calls[position].id.is_empty()) {
            calls.name(position, id);
        }
        let call = &mut calls.calls[position];
        if let Some(name) = name {
            if call.name.is_empty() {
                call.name = name.into_owned();
            }
        }
        let arguments_delta = match arguments {
            Piece::Text(text) => {
                call.arguments.push_str(&text);
                text.into_owned()
            }
            Piece::Absent => String::new(),
            // Some servers send the arguments as an object, whole.
            Piece::Whole(whole) => {
                call.arguments.clone_from(&whole);
                whole
            }
        };
        out.push(StreamEvent::ToolCallDelta {
            choice,
            index: position_u32(position),
            arguments_delta,
        });
        position
    }

    /// Completes every open call of a choice, in order.
    fn complete_choice(&mut self, choice: u32, out: &mut Vec<StreamEvent>) {
        let open: Vec<usize> = self
            .choices
            .get(&choice)
            .map(|c| c.open.iter().copied().collect())
            .unwrap_or_default();
        for position in open {
            self.complete_call(choice, position, out);
        }
    }

    /// Completes one call unless it already was.
    fn complete_call(&mut self, choice: u32, position: usize, out: &mut Vec<StreamEvent>) {
        let Some(calls) = self.choices.get_mut(&choice) else {
            return;
        };
        if !calls.close(position) {
            return;
        }
        let Some(call) = calls.calls.get_mut(position) else {
            return;
        };
        let arguments = Arguments::from_json_str(&std::mem::take(&mut call.arguments));
        let id = (!call.id.is_empty()).then(|| call.id.clone());
        out.push(StreamEvent::ToolCallComplete {
            choice,
            index: position_u32(position),
            call: ToolCall::new(id, call.name.clone(), arguments),
        });
    }
}

/// One `tool_calls[]` fragment, from either read of a payload.
struct Fragment<'p> {
    wire_index: Option<u64>,
    /// Non-empty.
    id: Option<Cow<'p, str>>,
    name: Option<Cow<'p, str>>,
    arguments: Piece<'p>,
}

/// A fragment's `arguments`.
enum Piece<'p> {
    /// Absent or `null`.
    Absent,
    /// A string: more argument text.
    Text(Cow<'p, str>),
    /// Anything else: the arguments whole, as JSON text.
    Whole(String),
}

impl<'p> Piece<'p> {
    fn of_value(value: Option<&'p Value>) -> Self {
        match value {
            None | Some(Value::Null) => Self::Absent,
            Some(Value::String(text)) => Self::Text(Cow::Borrowed(text)),
            Some(other) => Self::Whole(other.to_string()),
        }
    }

    fn of_owned(value: Option<Value>) -> Self {
        match value {
            None | Some(Value::Null) => Self::Absent,
            Some(Value::String(text)) => Self::Text(Cow::Owned(text)),
            Some(other) => Self::Whole(other.to_string()),
        }
    }
}

impl<'p> Fragment<'p> {
    /// A fragment as the lenient read finds it: any field of another type
    /// than expected counts as absent.
    fn of_value(fragment: &'p Value) -> Self {
        Self {
            wire_index: fragment.get("index").and_then(Value::as_u64),
            id: fragment
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(Cow::Borrowed),
            ..Self::of_function(fragment.get("function"))
        }
    }

    /// The name and arguments of a `function` object.
    fn of_function(function: Option<&'p Value>) -> Self {
        Self {
            wire_index: None,
            id: None,
            name: function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(Cow::Borrowed),
            arguments: Piece::of_value(function.and_then(|f| f.get("arguments"))),
        }
    }

    /// The name and arguments of a `function` in the typed read; like
    /// [`Fragment::of_function`], no index or id.
    fn of_typed_function(function: Option<super::chunk::Function<'p>>) -> Self {
        let (name, arguments) = function.map_or((None, None), |f| (f.name, f.arguments));
        Self {
            wire_index: None,
            id: None,
            name: name.map(|s| s.0),
            arguments: Piece::of_owned(arguments),
        }
    }
}

/// The text fields of a `delta` or `message`, from either read.
#[derive(Default)]
struct Texts<'p> {
    reasoning_content: Option<&'p Value>,
    reasoning: Option<&'p Value>,
    content: Option<&'p Value>,
    refusal: Option<&'p Value>,
}

/// Reasoning, answer text and refusal of a `delta` or `message`, in that order.
fn push_text(texts: &Texts<'_>, choice: u32, out: &mut Vec<StreamEvent>) {
    let text_of = |field: Option<&Value>| {
        field
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    // Servers that send both fields send the same text twice: read one.
    let reasoning = if texts.reasoning_content.is_some_and(|r| !r.is_null()) {
        text_of(texts.reasoning_content)
    } else {
        text_of(texts.reasoning)
    };
    if let Some(text) = reasoning {
        out.push(StreamEvent::ReasoningDelta { choice, text });
    }
    let content = match texts.content {
        Some(Value::Array(_)) => Some(content_text(texts.content)).filter(|s| !s.is_empty()),
        other => text_of(other),
    };
    for text in content.into_iter().chain(text_of(texts.refusal)) {
        out.push(StreamEvent::TextDelta { choice, text });
    }
}

/// An error object's `message`, or its JSON when it has none.
fn error_message(error: &Value) -> String {
    match error.get("message").and_then(Value::as_str) {
        Some(message) => message.to_owned(),
        None => match error {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        },
    }
}

fn position_u32(position: usize) -> u32 {
    u32::try_from(position).unwrap_or(u32::MAX)
}
