//! Scenario harness: one abstract agent session rendered into the request
//! bodies of all four dialects, judged through the real dialect parsers both
//! by the built binary (`loopguard replay`, end to end) and by the library
//! (`Dialect::parse_request` + `detect::replay`); the two must agree.
#![allow(dead_code, reason = "each test binary uses a different part of the harness")]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use loopguard::detect::{Level, Settings, replay};
use loopguard::dialect::Dialect;
use serde_json::{Value, json};

/// The dialects the scenarios are rendered into (Ollama's `/api/chat` and
/// Bedrock Converse among them; `/api/generate` carries no tool calls, and
/// `bedrock` reads Anthropic's bodies).
pub const ALL: [Dialect; 6] = [
    Dialect::OpenaiChat,
    Dialect::OpenaiResponses,
    Dialect::Gemini,
    Dialect::Anthropic,
    Dialect::OllamaChat,
    Dialect::BedrockConverse,
];

/// What a tool returned.
#[derive(Debug, Clone)]
pub enum Res {
    /// Text (Gemini: `{"output": text}`).
    Text(String),
    /// A failure the agent marks structurally where its dialect can
    /// (Anthropic `is_error`, Gemini `{"error": text}`); the text as is in
    /// the OpenAI dialects.
    Error(String),
    /// A JSON result (a JSON string in the OpenAI dialects and Anthropic).
    Json(Value),
}

/// Text result.
pub fn text(s: impl Into<String>) -> Res {
    Res::Text(s.into())
}

/// Structural failure.
pub fn error(s: impl Into<String>) -> Res {
    Res::Error(s.into())
}

/// One step of a session; a request follows every step.
#[derive(Debug, Clone)]
pub enum Step {
    /// One assistant turn with calls (name, arguments) and their results.
    Calls(Vec<(String, Value, Res)>),
    /// A user text (the person, or text the agent injects as a user turn).
    User(String),
    /// An assistant text turn without calls.
    Said(String),
    /// A server-side web search (Responses `web_search_call`, Anthropic
    /// `server_tool_use` + `web_search_tool_result`, Gemini
    /// `executableCode` + `codeExecutionResult`, a plain assistant text in
    /// OpenAI chat, which has no server tools).
    ServerSearch { query: String, result: String },
    /// The agent compacted its history: every earlier item is replaced by
    /// one user message carrying this summary (after the system text).
    Compacted(String),
}

/// One call with its result.
pub fn call(name: &str, args: Value, res: Res) -> Step {
    Step::Calls(vec![(name.to_owned(), args, res)])
}

/// A session: declared tools and steps.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub tools: Vec<String>,
    pub steps: Vec<Step>,
    /// Seconds between requests.
    pub interval: f64,
}

impl Scenario {
    /// A scenario declaring `tools`, requests 10 s apart.
    pub fn new(tools: &[&str]) -> Self {
        Self {
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            steps: Vec::new(),
            interval: 10.0,
        }
    }

    /// Appends a step.
    pub fn push(&mut self, step: Step) -> &mut Self {
        self.steps.push(step);
        self
    }

    /// Appends `n` copies of a step.
    pub fn repeat(&mut self, step: Step, n: usize) -> &mut Self {
        for _ in 0..n {
            self.steps.push(step.clone());
        }
        self
    }

    /// The request bodies: the i-th carries steps 0..=i.
    pub fn bodies(&self, d: Dialect) -> Vec<Value> {
        (1..=self.steps.len()).map(|n| self.body(d, n)).collect()
    }

    fn body(&self, d: Dialect, n: usize) -> Value {
        let task = "Fix the failing test in this repository.";
        let mut items: Vec<Value> = Vec::new();
        let mut id = 0usize;
        match d {
            Dialect::OpenaiChat => {
                items.push(json!({"role": "system", "content": "You are a coding agent."}));
                items.push(json!({"role": "user", "content": task}));
            }
            Dialect::OpenaiResponses => items.push(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}),
            ),
            Dialect::Gemini => items.push(json!({"role": "user", "parts": [{"text": task}]})),
            Dialect::Anthropic | Dialect::Bedrock => items.push(json!({"role": "user", "content": task})),
            Dialect::OllamaChat | Dialect::OllamaGenerate => {
                items.push(json!({"role": "system", "content": "You are a coding agent."}));
                items.push(json!({"role": "user", "content": task}));
            }
            Dialect::BedrockConverse => items.push(json!({"role": "user", "content": [{"text": task}]})),
        }
        for step in &self.steps[..n] {
            if let Step::Compacted(summary) = step {
                // The system message stays where the dialect carries it in the list.
                let system = matches!(
                    d,
                    Dialect::OpenaiChat | Dialect::OllamaChat | Dialect::OllamaGenerate
                );
                items.truncate(usize::from(system));
                render(d, &Step::User(summary.clone()), &mut id, &mut items);
                continue;
            }
            render(d, step, &mut id, &mut items);
        }
        let names = &self.tools;
        match d {
            Dialect::OpenaiChat => json!({"model": "m", "messages": items,
                "tools": names.iter().map(|t| json!({"type": "function", "function": {"name": t, "parameters": {"type": "object"}}})).collect::<Vec<_>>()}),
            Dialect::OpenaiResponses => {
                json!({"model": "m", "instructions": "You are a coding agent.", "input": items,
                "tools": names.iter().map(|t| json!({"type": "function", "name": t, "parameters": {"type": "object"}})).collect::<Vec<_>>()})
            }
            Dialect::Gemini => {
                json!({"systemInstruction": {"parts": [{"text": "You are a coding agent."}]}, "contents": items,
                "tools": [{"functionDeclarations": names.iter().map(|t| json!({"name": t})).collect::<Vec<_>>()}]})
            }
            Dialect::Anthropic | Dialect::Bedrock => {
                json!({"model": "m", "max_tokens": 1024, "system": "You are a coding agent.", "messages": items,
                "tools": names.iter().map(|t| json!({"name": t, "input_schema": {"type": "object"}})).collect::<Vec<_>>()})
            }
            Dialect::OllamaChat | Dialect::OllamaGenerate => json!({"model": "m", "messages": items,
                "tools": names.iter().map(|t| json!({"type": "function", "function": {"name": t, "parameters": {"type": "object"}}})).collect::<Vec<_>>()}),
            Dialect::BedrockConverse => {
                json!({"system": [{"text": "You are a coding agent."}], "messages": items,
                "toolConfig": {"tools": names.iter().map(|t| json!({"toolSpec": {"name": t, "inputSchema": {"json": {"type": "object"}}}})).collect::<Vec<_>>()}})
            }
        }
    }

    /// Verdict lines of the built binary's `loopguard replay` (checked
    /// against the library's: same requests, detectors and levels).
    pub fn judge(&self, d: Dialect) -> Vec<Verdict> {
        let bodies = self.bodies(d);
        let bin = self.judge_bin(d, &bodies);
        let lib = self.judge_lib(d, &bodies);
        assert_eq!(bin, lib, "{d:?}: binary and library disagree");
        bin
    }

    fn judge_lib(&self, d: Dialect, bodies: &[Value]) -> Vec<Verdict> {
        let transcripts: Vec<_> = bodies
            .iter()
            .map(|b| {
                d.parse_request(b.to_string().as_bytes())
                    .unwrap_or_else(|e| panic!("{d:?}: {e}"))
                    .transcript
            })
            .collect();
        let interval = Duration::from_secs_f64(self.interval);
        replay(&Settings::default(), &transcripts, interval, None)
            .into_iter()
            .map(|l| Verdict {
                request: l.request,
                detector: l.detector.name().to_owned(),
                level: l.level,
                observe: l.action == loopguard::detect::Action::Observe,
            })
            .collect()
    }

    fn judge_bin(&self, d: Dialect, bodies: &[Value]) -> Vec<Verdict> {
        static N: AtomicU64 = AtomicU64::new(0);
        let path: PathBuf = std::env::temp_dir().join(format!(
            "loopguard-scenario-{}-{}.jsonl",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let text: Vec<String> = bodies.iter().map(Value::to_string).collect();
        std::fs::write(&path, text.join("\n")).unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
            .args(["replay", "--dialect", d.name(), "--interval"])
            .arg(self.interval.to_string())
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "{d:?}: replay failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                Verdict {
                    request: v["request"].as_u64().unwrap_or(u64::MAX) as usize,
                    detector: v["detector"].as_str().unwrap_or_default().to_owned(),
                    level: match v["level"].as_str() {
                        Some("warning") => Level::Warning,
                        Some("critical") => Level::Critical,
                        _ => Level::Breaker,
                    },
                    observe: v["action"].as_str() == Some("observe"),
                }
            })
            .collect()
    }
}

/// One verdict line, as much as the tests look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub request: usize,
    pub detector: String,
    pub level: Level,
    /// Action `observe`: logged, never told to the agent.
    pub observe: bool,
}

/// The verdicts that act on the agent (not observe-only).
fn acting(v: &[Verdict]) -> impl Iterator<Item = &Verdict> {
    v.iter().filter(|v| !v.observe)
}

/// The highest level the agent is told of (None when silent to the agent).
pub fn top(v: &[Verdict]) -> Option<Level> {
    acting(v).map(|v| v.level).max()
}

/// The highest level of one detector told to the agent.
pub fn level_of(v: &[Verdict], detector: &str) -> Option<Level> {
    acting(v)
        .filter(|v| v.detector == detector)
        .map(|v| v.level)
        .max()
}

/// The first request (0-based) at which a level was told to the agent.
pub fn first_at(v: &[Verdict], level: Level) -> Option<usize> {
    acting(v).filter(|v| v.level >= level).map(|v| v.request).min()
}

/// Detectors of the observe-only verdicts (logged, not told).
pub fn observed(v: &[Verdict]) -> Vec<&str> {
    v.iter()
        .filter(|v| v.observe)
        .map(|v| v.detector.as_str())
        .collect()
}

fn result_text(res: &Res) -> String {
    match res {
        Res::Text(t) | Res::Error(t) => t.clone(),
        Res::Json(v) => v.to_string(),
    }
}

fn render(d: Dialect, step: &Step, id: &mut usize, items: &mut Vec<Value>) {
    match step {
        Step::Compacted(_) => {}
        Step::User(t) => items.push(match d {
            Dialect::OpenaiChat | Dialect::Anthropic | Dialect::Bedrock | Dialect::OllamaChat | Dialect::OllamaGenerate => json!({"role": "user", "content": t}),
            Dialect::OpenaiResponses => {
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]})
            }
            Dialect::Gemini => json!({"role": "user", "parts": [{"text": t}]}),
            Dialect::BedrockConverse => json!({"role": "user", "content": [{"text": t}]}),
        }),
        Step::Said(t) => items.push(match d {
            Dialect::OpenaiChat | Dialect::OllamaChat | Dialect::OllamaGenerate => json!({"role": "assistant", "content": t}),
            Dialect::Anthropic | Dialect::Bedrock => json!({"role": "assistant", "content": [{"type": "text", "text": t}]}),
            Dialect::OpenaiResponses => {
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]})
            }
            Dialect::Gemini => json!({"role": "model", "parts": [{"text": t}]}),
            Dialect::BedrockConverse => json!({"role": "assistant", "content": [{"text": t}]}),
        }),
        Step::ServerSearch { query, result } => {
            *id += 1;
            match d {
                Dialect::OpenaiChat | Dialect::OllamaChat | Dialect::OllamaGenerate => {
                    items.push(json!({"role": "assistant", "content": format!("Searched: {query}")}));
                }
                Dialect::BedrockConverse => {
                    items.push(json!({"role": "assistant", "content": [{"text": format!("Searched: {query}")}]}));
                }
                Dialect::OpenaiResponses => {
                    items.push(json!({"type": "web_search_call", "id": format!("ws_{id}"), "status": "completed",
                        "action": {"type": "search", "query": query}}));
                    items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": result}]}));
                }
                Dialect::Anthropic | Dialect::Bedrock => items.push(json!({"role": "assistant", "content": [
                    {"type": "server_tool_use", "id": format!("srvtoolu_{id}"), "name": "web_search", "input": {"query": query}},
                    {"type": "web_search_tool_result", "tool_use_id": format!("srvtoolu_{id}"), "content": [
                        {"type": "web_search_result", "url": "https://example.com/a", "title": result, "encrypted_content": format!("enc{id}")}]},
                    {"type": "text", "text": result}]})),
                Dialect::Gemini => items.push(json!({"role": "model", "parts": [
                    {"executableCode": {"language": "PYTHON", "code": format!("print(search({query:?}))")}},
                    {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": result}},
                    {"text": result}]})),
            }
        }
        Step::Calls(calls) => {
            let mut turn = Vec::new();
            let mut results = Vec::new();
            for (name, args, res) in calls {
                *id += 1;
                let cid = format!("call_{id}");
                let is_error = matches!(res, Res::Error(_));
                match d {
                    Dialect::OpenaiChat => {
                        turn.push(json!({"id": cid, "type": "function", "function": {"name": name, "arguments": args.to_string()}}));
                        results.push(json!({"role": "tool", "tool_call_id": cid, "content": result_text(res)}));
                    }
                    Dialect::OpenaiResponses => {
                        items.push(json!({"type": "function_call", "call_id": cid, "name": name, "arguments": args.to_string()}));
                        results.push(json!({"type": "function_call_output", "call_id": cid, "output": result_text(res)}));
                    }
                    Dialect::Gemini => {
                        turn.push(json!({"functionCall": {"name": name, "args": args}}));
                        let response = match res {
                            Res::Text(t) => json!({"output": t}),
                            Res::Error(t) => json!({"error": t}),
                            Res::Json(v) => v.clone(),
                        };
                        results.push(json!({"functionResponse": {"name": name, "response": response}}));
                    }
                    Dialect::OllamaChat | Dialect::OllamaGenerate => {
                        turn.push(json!({"function": {"name": name, "arguments": args}}));
                        results.push(json!({"role": "tool", "tool_name": name, "content": result_text(res)}));
                    }
                    Dialect::Anthropic | Dialect::Bedrock => {
                        turn.push(json!({"type": "tool_use", "id": cid, "name": name, "input": args}));
                        results.push(json!({"type": "tool_result", "tool_use_id": cid, "content": result_text(res), "is_error": is_error}));
                    }
                    Dialect::BedrockConverse => {
                        turn.push(json!({"toolUse": {"toolUseId": cid, "name": name, "input": args}}));
                        let content = match res {
                            Res::Json(v) => json!([{"json": v}]),
                            _ => json!([{"text": result_text(res)}]),
                        };
                        let status = if is_error { "error" } else { "success" };
                        results.push(json!({"toolResult": {"toolUseId": cid, "content": content, "status": status}}));
                    }
                }
            }
            match d {
                Dialect::OpenaiChat => {
                    items.push(json!({"role": "assistant", "content": null, "tool_calls": turn}));
                    items.extend(results);
                }
                Dialect::OllamaChat | Dialect::OllamaGenerate => {
                    items.push(json!({"role": "assistant", "content": "", "tool_calls": turn}));
                    items.extend(results);
                }
                Dialect::OpenaiResponses => items.extend(results),
                Dialect::Gemini => {
                    items.push(json!({"role": "model", "parts": turn}));
                    items.push(json!({"role": "user", "parts": results}));
                }
                Dialect::Anthropic | Dialect::Bedrock | Dialect::BedrockConverse => {
                    items.push(json!({"role": "assistant", "content": turn}));
                    items.push(json!({"role": "user", "content": results}));
                }
            }
        }
    }
}

/// The SSE stream of one response whose answer text arrives in `deltas`, in
/// dialect `d`'s wire form.
pub fn answer_stream(d: Dialect, deltas: &[String]) -> String {
    let mut out = String::new();
    let mut event = |name: Option<&str>, data: Value| {
        if let Some(name) = name {
            out.push_str(&format!("event: {name}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    };
    match d {
        Dialect::OpenaiChat => {
            for t in deltas {
                event(
                    None,
                    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": t}}]}),
                );
            }
            event(
                None,
                json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            );
            out.push_str("data: [DONE]\n\n");
        }
        Dialect::OpenaiResponses => {
            event(
                Some("response.created"),
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "r", "status": "in_progress", "output": []}}),
            );
            event(
                Some("response.output_item.added"),
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                "item": {"type": "message", "id": "m", "role": "assistant", "status": "in_progress", "content": []}}),
            );
            for (i, t) in deltas.iter().enumerate() {
                event(
                    Some("response.output_text.delta"),
                    json!({"type": "response.output_text.delta", "sequence_number": i + 2,
                    "item_id": "m", "output_index": 0, "content_index": 0, "delta": t}),
                );
            }
        }
        // Converse events as `{"<event-type>": …}` (as the parser reads
        // them), each framed as one SSE payload for the harness.
        Dialect::BedrockConverse => {
            event(None, json!({"messageStart": {"role": "assistant"}}));
            for t in deltas {
                event(
                    None,
                    json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": t}}}),
                );
            }
        }
        // Ollama's lines, each framed as one SSE payload for the harness.
        Dialect::OllamaChat | Dialect::OllamaGenerate => {
            for t in deltas {
                event(
                    None,
                    json!({"model": "m", "created_at": "t", "message": {"role": "assistant", "content": t}, "done": false}),
                );
            }
        }
        Dialect::Gemini => {
            for t in deltas {
                event(
                    None,
                    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "index": 0}]}),
                );
            }
        }
        Dialect::Anthropic | Dialect::Bedrock => {
            event(
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "m"}}),
            );
            event(
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            );
            for t in deltas {
                event(
                    Some("content_block_delta"),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
                );
            }
        }
    }
    out
}

/// The built binary's verdicts on a one-request session followed by a
/// streamed answer made of `deltas` (stream-time detectors: chanting).
pub fn judge_answer(d: Dialect, deltas: &[String]) -> Vec<Verdict> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir();
    let req = dir.join(format!("loopguard-answer-{}-{n}.jsonl", std::process::id()));
    let sse = dir.join(format!("loopguard-answer-{}-{n}.sse", std::process::id()));
    let s = Scenario::new(&["bash"]);
    std::fs::write(&req, s.body(d, 0).to_string()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&sse, answer_stream(d, deltas)).unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["replay", "--dialect", d.name()])
        .arg(&req)
        .arg(&sse)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = (std::fs::remove_file(&req), std::fs::remove_file(&sse));
    assert!(
        out.status.success(),
        "{d:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            Verdict {
                request: v["request"].as_u64().unwrap_or(u64::MAX) as usize,
                detector: v["detector"].as_str().unwrap_or_default().to_owned(),
                level: if v["level"] == "critical" {
                    Level::Critical
                } else {
                    Level::Warning
                },
                observe: v["action"] == "observe",
            }
        })
        .collect()
}
