//! Test support: transcripts as the OpenAI-chat and Gemini parsers would produce them.

use serde_json::{Value, json};

use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

/// Which dialect's shape to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Call ids; results are text, named from the call id.
    OpenAi,
    /// No call ids; results are JSON objects with `name`, `is_error` when `error` exists.
    Gemini,
}

/// Builds a session's successive requests, one tool turn at a time.
#[derive(Debug, Clone)]
pub(crate) struct Builder {
    pub dialect: Dialect,
    pub t: Transcript,
    pub next_id: usize,
}

impl Builder {
    /// A session with a task prompt and the given declared tools.
    pub fn new(dialect: Dialect, tools: &[&str]) -> Self {
        let t = Transcript {
            system: "You are a coding agent.".into(),
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            messages: vec![Message::text(Role::User, "Fix the failing test in the repo.")].into(),
            compactions: 0,
            lineage: Default::default(),
        };
        Self {
            dialect,
            t,
            next_id: 0,
        }
    }

    /// One assistant turn with one call and its result (text for OpenAI; for
    /// Gemini, `{"output": text}`, or `{"error": text}` when `error`).
    pub fn call(&mut self, name: &str, args: Value, result: &str, error: bool) -> &mut Self {
        self.calls(&[(name, args, result, error)])
    }

    /// One assistant turn with parallel calls and their results.
    pub fn calls(&mut self, calls: &[(&str, Value, &str, bool)]) -> &mut Self {
        let mut tool_calls = Vec::new();
        let mut results = Vec::new();
        for (name, args, result, error) in calls {
            let id = match self.dialect {
                Dialect::OpenAi => {
                    self.next_id += 1;
                    Some(format!("call_{}", self.next_id))
                }
                Dialect::Gemini => None,
            };
            tool_calls.push(ToolCall::new(id.clone(), *name, Arguments::Json(args.clone())));
            results.push(match self.dialect {
                Dialect::OpenAi => ToolResult {
                    call_id: id,
                    name: Some((*name).to_owned()),
                    content: ResultContent::Text((*result).to_owned()),
                    is_error: false,
                },
                Dialect::Gemini => {
                    let response = if *error {
                        json!({"error": result})
                    } else {
                        json!({"output": result})
                    };
                    ToolResult {
                        call_id: None,
                        name: Some((*name).to_owned()),
                        content: ResultContent::Json(response),
                        is_error: *error,
                    }
                }
            });
        }
        self.t.messages_mut().push(Message {
            role: Role::Assistant,
            text: String::new(),
            tool_calls,
            tool_results: Vec::new(),
            read: Default::default(),
        });
        let role = if self.dialect == Dialect::OpenAi {
            Role::Tool
        } else {
            Role::User
        };
        self.t.messages_mut().push(Message {
            role,
            text: String::new(),
            tool_calls: Vec::new(),
            tool_results: results,
            read: Default::default(),
        });
        self
    }

    /// A call with raw (possibly unparsable) OpenAI argument text.
    pub fn raw_call(&mut self, name: &str, raw: &str, result: &str) -> &mut Self {
        self.next_id += 1;
        let id = format!("call_{}", self.next_id);
        self.t.messages_mut().push(Message {
            role: Role::Assistant,
            text: String::new(),
            tool_calls: vec![ToolCall::new(
                Some(id.clone()),
                name,
                Arguments::from_json_str(raw),
            )],
            tool_results: Vec::new(),
            read: Default::default(),
        });
        self.t.messages_mut().push(Message {
            role: Role::Tool,
            text: String::new(),
            tool_calls: Vec::new(),
            tool_results: vec![ToolResult {
                call_id: Some(id),
                name: Some(name.to_owned()),
                content: ResultContent::Text(result.to_owned()),
                is_error: false,
            }],
            read: Default::default(),
        });
        self
    }

    /// A message of some role with text only.
    pub fn say(&mut self, role: Role, text: &str) -> &mut Self {
        self.t.messages_mut().push(Message::text(role, text));
        self
    }

    /// The current request.
    pub fn request(&self) -> Transcript {
        self.t.clone()
    }
}

/// A pending call as the stream would complete it.
pub(crate) fn pending(name: &str, args: Value) -> ToolCall {
    ToolCall::new(Some("pending".into()), name, Arguments::Json(args))
}

/// A session driven one tool turn per request.
pub(crate) struct Run {
    pub b: Builder,
    pub s: crate::detect::Settings,
    pub session: crate::detect::SessionState,
    pub clock: u64,
    pub step_secs: u64,
}

impl Run {
    /// A run with default settings, requests 10 s apart.
    pub fn new(dialect: Dialect, tools: &[&str]) -> Self {
        Self::with(dialect, tools, crate::detect::Settings::default())
    }

    /// A run with given settings.
    pub fn with(dialect: Dialect, tools: &[&str], s: crate::detect::Settings) -> Self {
        Self {
            b: Builder::new(dialect, tools),
            s,
            session: crate::detect::SessionState::new(),
            clock: 0,
            step_secs: 10,
        }
    }

    /// Sends the current request.
    pub fn send(&mut self) -> Vec<crate::detect::Verdict> {
        self.clock += self.step_secs;
        let now = std::time::Duration::from_secs(self.clock);
        self.session.on_request(&self.b.request(), now, &self.s)
    }

    /// One call with its result, then the request that carries it.
    pub fn call(
        &mut self,
        name: &str,
        args: Value,
        result: &str,
        error: bool,
    ) -> Vec<crate::detect::Verdict> {
        self.b.call(name, args, result, error);
        self.send()
    }
}

/// The level of a detector's verdict, if any.
pub(crate) fn level(
    verdicts: &[crate::detect::Verdict],
    kind: crate::detect::DetectorKind,
) -> Option<crate::detect::Level> {
    verdicts
        .iter()
        .filter(|v| v.detector == kind)
        .map(|v| v.level)
        .max()
}

/// The highest level among verdicts.
pub(crate) fn top(verdicts: &[crate::detect::Verdict]) -> Option<crate::detect::Level> {
    verdicts.iter().map(|v| v.level).max()
}

/// Both dialects.
pub(crate) const DIALECTS: [Dialect; 2] = [Dialect::OpenAi, Dialect::Gemini];
