//! Tests of the OpenAI Chat Completions dialect: request parsing and stream events.

use serde_json::json;

use super::*;
use crate::dialect::StreamEvent;
use crate::dialect::openai_chat::ResponseParser;

fn request(body: Value) -> ParsedRequest {
    crate::dialect::testing::request(crate::dialect::Dialect::OpenaiChat, &body)
}

fn events(payloads: &[Value]) -> Vec<StreamEvent> {
    crate::dialect::testing::events(crate::dialect::Dialect::OpenaiChat, payloads)
}

fn completed(events: &[StreamEvent]) -> Vec<(u32, u32, Option<String>, String, Arguments)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallComplete { choice, index, call } => Some((
                *choice,
                *index,
                call.id.clone(),
                call.name.clone(),
                call.arguments.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn chunk(delta: Value) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn json_args(value: Value) -> Arguments {
    Arguments::Json(value)
}

/// Content as a string or as parts (images skipped), stream flags and model.
#[test]
fn request_content_forms_and_flags() {
    let parsed = request(json!({
        "model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:"}},
                {"type": "text", "text": "here"}
            ]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": null}
        ]
    }));
    assert!(parsed.stream && parsed.include_usage);
    assert_eq!(parsed.model.as_deref(), Some("gpt-4o"));
    let texts: Vec<_> = parsed
        .transcript
        .messages
        .iter()
        .map(|m| (m.role, m.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            (Role::User, "look\nhere"),
            (Role::Assistant, "ok"),
            (Role::User, "")
        ]
    );
}

/// Leading system and developer messages are the system text; a later one is a System message.
#[test]
fn request_system_before_first_turn_only() {
    let parsed = request(json!({"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": [{"type": "text", "text": "use tools"}]},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "late"}
    ]}));
    assert_eq!(parsed.transcript.system, "be brief\nuse tools");
    assert_eq!(parsed.transcript.messages.len(), 2);
    assert_eq!(parsed.transcript.messages[1], Message::text(Role::System, "late"));
    assert!(!parsed.stream && !parsed.include_usage);
}

/// Tool calls with string or object arguments, tool results resolved by id, declared tools.
#[test]
fn request_tool_calls_and_results() {
    let parsed = request(json!({
        "tools": [{"type": "function", "function": {"name": "read"}}, {"type": "function", "function": {"name": "grep"}}],
        "functions": [{"name": "legacy"}],
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "grep", "arguments": {"q": "x"}}},
                {"id": "c3", "type": "function", "function": {"name": "read", "arguments": "{bad"}}
            ]},
            {"role": "tool", "tool_call_id": "c2", "content": "no match"},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "file a"}]},
            {"role": "tool", "tool_call_id": "zz", "name": "named", "content": "?"}
        ]
    }));
    let t = &parsed.transcript;
    assert_eq!(t.tools, ["read", "grep", "legacy"]);
    let calls = &t.messages[1].tool_calls;
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].arguments, json_args(json!({"path": "a"})));
    assert_eq!(calls[1].arguments, json_args(json!({"q": "x"})));
    assert_eq!(calls[2].arguments, Arguments::Unparsable("{bad".to_owned()));
    assert_eq!(calls[0].id.as_deref(), Some("c1"));
    let results: Vec<_> = t.messages[2..]
        .iter()
        .map(|m| {
            assert_eq!(m.role, Role::Tool);
            let r = &m.tool_results[0];
            (r.call_id.as_deref(), r.name.as_deref(), r.content.clone())
        })
        .collect();
    assert_eq!(
        results,
        [
            (
                Some("c2"),
                Some("grep"),
                ResultContent::Text("no match".to_owned())
            ),
            (Some("c1"), Some("read"), ResultContent::Text("file a".to_owned())),
            (Some("zz"), Some("named"), ResultContent::Text("?".to_owned())),
        ]
    );
}

/// Legacy `function_call` on the assistant and `role: function` results.
#[test]
fn request_legacy_function_call() {
    let parsed = request(json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{\"a\":1}"}},
        {"role": "function", "name": "f", "content": "done"}
    ]}));
    let m = &parsed.transcript.messages;
    assert_eq!(m[1].tool_calls[0].name, "f");
    assert_eq!(m[1].tool_calls[0].arguments, json_args(json!({"a": 1})));
    assert_eq!(m[2].role, Role::Tool);
    assert_eq!(m[2].tool_results[0].name.as_deref(), Some("f"));
}

/// Bodies that are not chat requests are shape errors, not panics.
#[test]
fn request_errors() {
    assert!(matches!(parse_request(b"nope"), Err(DialectError::Json(_))));
    assert!(matches!(parse_request(b"[]"), Err(DialectError::Shape(_))));
    assert!(matches!(
        parse_request(b"{\"model\":\"x\"}"),
        Err(DialectError::Shape(_))
    ));
}

/// Content, reasoning (both spellings, one read when both are sent) and refusal deltas.
#[test]
fn stream_text_reasoning_refusal() {
    let out = events(&[
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"reasoning_content": "think", "reasoning": "think"})),
        chunk(json!({"reasoning": " more"})),
        chunk(json!({"content": "Hi"})),
        chunk(json!({"refusal": "no"})),
        finish("stop"),
        json!("[DONE]"),
    ]);
    assert_eq!(
        out,
        [
            StreamEvent::ReasoningDelta {
                choice: 0,
                text: "think".into()
            },
            StreamEvent::ReasoningDelta {
                choice: 0,
                text: " more".into()
            },
            StreamEvent::TextDelta {
                choice: 0,
                text: "Hi".into()
            },
            StreamEvent::TextDelta {
                choice: 0,
                text: "no".into()
            },
            StreamEvent::Finish {
                choice: 0,
                reason: "stop".into()
            },
            StreamEvent::Done,
        ]
    );
}

/// Parallel calls keyed by index complete in index order when the choice finishes.
#[test]
fn stream_parallel_calls_by_index() {
    let out = events(&[
        chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]})),
        chunk(json!({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})),
        finish("tool_calls"),
    ]);
    assert_eq!(
        out.iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
            .count(),
        4
    );
    let finish_at = out
        .iter()
        .position(|e| matches!(e, StreamEvent::Finish { .. }))
        .unwrap();
    assert_eq!(finish_at, out.len() - 1, "calls complete before the finish");
    assert_eq!(
        completed(&out),
        [
            (0, 0, Some("a".into()), "f".into(), json_args(json!({"x": 1}))),
            (0, 1, Some("b".into()), "g".into(), json_args(json!({}))),
        ]
    );
}

/// Mistral: a whole call without `index`, finish and usage in the same chunk.
#[test]
fn stream_call_without_index() {
    let out = events(&[
        json!({"choices": [{"index": 0, "delta": {"content": null, "tool_calls": [
        {"id": "m1", "function": {"name": "weather", "arguments": "{\"location\": \"SF\"}"}},
        {"id": "m2", "function": {"name": "weather", "arguments": "{\"location\": \"LA\"}"}}
    ]}, "finish_reason": "tool_calls"}], "usage": {"total_tokens": 3}}),
    ]);
    assert_eq!(
        completed(&out),
        [
            (
                0,
                0,
                Some("m1".into()),
                "weather".into(),
                json_args(json!({"location": "SF"}))
            ),
            (
                0,
                1,
                Some("m2".into()),
                "weather".into(),
                json_args(json!({"location": "LA"}))
            ),
        ]
    );
    assert!(matches!(out.last(), Some(StreamEvent::Usage { .. })));
}

/// Fragments with neither index nor id continue the last open call; an id alone finds its call.
#[test]
fn stream_fragments_keyed_by_id_or_order() {
    let out = events(&[
        chunk(json!({"tool_calls": [{"id": "p", "function": {"name": "f", "arguments": "{\"a\""}}]})),
        chunk(json!({"tool_calls": [{"function": {"arguments": ":1}"}}]})),
        chunk(json!({"tool_calls": [{"id": "q", "function": {"name": "g"}}]})),
        chunk(json!({"tool_calls": [{"id": "q", "function": {"arguments": "{}"}}]})),
    ]);
    assert_eq!(
        completed(&out),
        [
            (0, 0, Some("p".into()), "f".into(), json_args(json!({"a": 1}))),
            (0, 1, Some("q".into()), "g".into(), json_args(json!({}))),
        ]
    );
}

/// Qwen: continuation fragments carry `"id": ""`, which neither renames nor splits the call.
#[test]
fn stream_empty_continuation_ids() {
    let out = events(&[
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "weather", "arguments": ""}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "id": "", "function": {"arguments": "{\"l\": \"S"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "", "function": {"arguments": "F\"}"}}]})),
        finish("tool_calls"),
    ]);
    assert_eq!(
        completed(&out),
        [(
            0,
            0,
            Some("call_1".into()),
            "weather".into(),
            json_args(json!({"l": "SF"}))
        )]
    );
}

/// A server that numbers every parallel call 0 but gives each its own id.
#[test]
fn stream_same_index_new_id_is_a_new_call() {
    let out = events(&[
        chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]})),
    ]);
    let names: Vec<_> = completed(&out).into_iter().map(|c| (c.3, c.4)).collect();
    assert_eq!(
        names,
        [
            ("f".into(), json_args(json!({}))),
            ("g".into(), json_args(json!({})))
        ]
    );
}

/// Arguments sent as an object are taken whole.
#[test]
fn stream_arguments_as_object() {
    let out = events(&[chunk(
        json!({"tool_calls": [{"index": 0, "id": "o", "function": {"name": "f", "arguments": {"k": [1]}}}]}),
    )]);
    assert_eq!(completed(&out)[0].4, json_args(json!({"k": [1]})));
    assert!(
        matches!(&out[0], StreamEvent::ToolCallDelta { arguments_delta, .. } if arguments_delta == "{\"k\":[1]}")
    );
}

/// n > 1: choices are kept apart by their index and each finishes on its own.
#[test]
fn stream_several_choices() {
    let out = events(&[
        json!({"choices": [{"index": 1, "delta": {"content": "B"}}, {"index": 0, "delta": {"content": "A"}}]}),
        json!({"choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "x", "function": {"name": "t", "arguments": "{}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [{"index": 1, "delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    assert_eq!(
        out[0],
        StreamEvent::TextDelta {
            choice: 1,
            text: "B".into()
        }
    );
    assert_eq!(
        out[1],
        StreamEvent::TextDelta {
            choice: 0,
            text: "A".into()
        }
    );
    assert_eq!(
        completed(&out),
        [(1, 0, Some("x".into()), "t".into(), json_args(json!({})))]
    );
    assert_eq!(
        out.last(),
        Some(&StreamEvent::Finish {
            choice: 1,
            reason: "tool_calls".into()
        })
    );
}

/// Calls still open complete at `[DONE]`, before the Done event; "has tool calls" does not need
/// finish_reason `tool_calls`.
#[test]
fn stream_done_completes_open_calls() {
    let mut parser = ResponseParser::default();
    let mut out = Vec::new();
    let c =
        chunk(json!({"tool_calls": [{"index": 0, "id": "d", "function": {"name": "f", "arguments": "{}"}}]}));
    parser.payload(&c.to_string(), &mut out).unwrap();
    parser.payload(" [DONE]\n", &mut out).unwrap();
    assert!(matches!(out[1], StreamEvent::ToolCallComplete { .. }));
    assert_eq!(out[2], StreamEvent::Done);
    let before = out.len();
    parser.end(&mut out);
    assert_eq!(out.len(), before, "end after [DONE] adds nothing");
}

/// Usage chunks (empty choices) are reported; `"usage": null` is not.
#[test]
fn stream_usage_chunk() {
    let out = events(&[
        json!({"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": null}),
        json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
    ]);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[1],
        StreamEvent::Usage {
            usage: json!({"prompt_tokens": 1, "completion_tokens": 2})
        }
    );
}

/// A mid-stream error object is an Error event with its message; garbage is a parse error.
#[test]
fn stream_error_and_garbage() {
    let out = events(&[
        json!({"error": {"message": "overloaded", "type": "server_error"}}),
        json!({"error": {"code": 5}}),
    ]);
    assert_eq!(
        out,
        [
            StreamEvent::Error {
                message: "overloaded".into()
            },
            StreamEvent::Error {
                message: "{\"code\":5}".into()
            },
        ]
    );
    let mut parser = ResponseParser::default();
    let mut out = Vec::new();
    assert!(matches!(
        parser.payload("{oops", &mut out),
        Err(DialectError::Json(_))
    ));
    assert!(matches!(
        parser.payload("42", &mut out),
        Err(DialectError::Shape(_))
    ));
    assert!(out.is_empty());
}

/// A non-streaming `chat.completion` body yields the same event kinds as a stream.
#[test]
fn whole_completion_body() {
    let out = events(&[json!({
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Let me look.", "reasoning_content": "hmm",
            "tool_calls": [
                {"id": "w1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1}"}},
                {"id": "w2", "type": "function", "function": {"name": "read", "arguments": "{\"p\":2}"}}
            ]
        }}],
        "usage": {"total_tokens": 9}
    })]);
    let kinds: Vec<&str> = out
        .iter()
        .map(|e| match e {
            StreamEvent::ReasoningDelta { .. } => "reasoning",
            StreamEvent::TextDelta { .. } => "text",
            StreamEvent::ToolCallDelta { .. } => "delta",
            StreamEvent::ToolCallComplete { .. } => "complete",
            StreamEvent::Finish { .. } => "finish",
            StreamEvent::Usage { .. } => "usage",
            StreamEvent::Error { .. } => "error",
            StreamEvent::Done => "done",
            StreamEvent::ResponseId { .. } => "id",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "reasoning",
            "text",
            "delta",
            "complete",
            "delta",
            "complete",
            "finish",
            "usage"
        ]
    );
    assert_eq!(completed(&out)[1].4, json_args(json!({"p": 2})));
}

/// The call matching of the parser before its open calls were indexed: a
/// scan of the choice's calls per fragment (O(n) a fragment, O(n²) an
/// answer of n parallel calls). Kept as the reference the indexed parser
/// must agree with, event for event.
mod reference {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use crate::dialect::StreamEvent;
    use crate::transcript::{Arguments, ToolCall};

    struct Call {
        wire_index: Option<u64>,
        id: String,
        name: String,
        arguments: String,
        done: bool,
    }

    /// Tool-call events of `payloads` (chunks of `choices` carrying only
    /// `tool_calls` and `finish_reason`, or `[DONE]`).
    pub fn events(payloads: &[Value]) -> Vec<StreamEvent> {
        let mut choices: BTreeMap<u32, Vec<Call>> = BTreeMap::new();
        let mut out = Vec::new();
        for payload in payloads {
            if payload.as_str() == Some("[DONE]") {
                let keys: Vec<u32> = choices.keys().copied().collect();
                for choice in keys {
                    complete_choice(&mut choices, choice, &mut out);
                }
                out.push(StreamEvent::Done);
                continue;
            }
            for choice in payload["choices"].as_array().into_iter().flatten() {
                let index = choice["index"]
                    .as_u64()
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or(0);
                let whole = choice.get("delta").is_none();
                if let Some(part) = choice.get("delta").or_else(|| choice.get("message")) {
                    for fragment in part["tool_calls"].as_array().into_iter().flatten() {
                        let position = apply(&mut choices, index, fragment, &mut out);
                        if whole {
                            complete(&mut choices, index, position, &mut out);
                        }
                    }
                }
                if let Some(reason) = choice["finish_reason"].as_str() {
                    complete_choice(&mut choices, index, &mut out);
                    out.push(StreamEvent::Finish {
                        choice: index,
                        reason: reason.to_owned(),
                    });
                }
            }
        }
        out
    }

    fn apply(
        choices: &mut BTreeMap<u32, Vec<Call>>,
        choice: u32,
        fragment: &Value,
        out: &mut Vec<StreamEvent>,
    ) -> usize {
        let calls = choices.entry(choice).or_default();
        let wire_index = fragment.get("index").and_then(Value::as_u64);
        let id = fragment
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let found = match (wire_index, id) {
            (Some(w), _) => calls.iter().rposition(|c| {
                !c.done && c.wire_index == Some(w) && id.is_none_or(|id| c.id.is_empty() || c.id == id)
            }),
            (None, Some(id)) => calls.iter().position(|c| !c.done && c.id == id),
            (None, None) => calls.iter().rposition(|c| !c.done),
        };
        let position = found.unwrap_or_else(|| {
            calls.push(Call {
                wire_index,
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
                done: false,
            });
            calls.len() - 1
        });
        let call = &mut calls[position];
        if let (Some(id), true) = (id, call.id.is_empty()) {
            id.clone_into(&mut call.id);
        }
        let function = fragment.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            if call.name.is_empty() {
                name.clone_into(&mut call.name);
            }
        }
        let arguments_delta = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(text)) => {
                call.arguments.push_str(text);
                text.clone()
            }
            None | Some(Value::Null) => String::new(),
            Some(other) => {
                call.arguments = other.to_string();
                call.arguments.clone()
            }
        };
        out.push(StreamEvent::ToolCallDelta {
            choice,
            index: u32::try_from(position).unwrap_or(u32::MAX),
            arguments_delta,
        });
        position
    }

    fn complete_choice(choices: &mut BTreeMap<u32, Vec<Call>>, choice: u32, out: &mut Vec<StreamEvent>) {
        let count = choices.get(&choice).map_or(0, Vec::len);
        for position in 0..count {
            complete(choices, choice, position, out);
        }
    }

    fn complete(
        choices: &mut BTreeMap<u32, Vec<Call>>,
        choice: u32,
        position: usize,
        out: &mut Vec<StreamEvent>,
    ) {
        let Some(call) = choices.get_mut(&choice).and_then(|c| c.get_mut(position)) else {
            return;
        };
        if call.done {
            return;
        }
        call.done = true;
        let arguments = Arguments::from_json_str(&std::mem::take(&mut call.arguments));
        let id = (!call.id.is_empty()).then(|| call.id.clone());
        out.push(StreamEvent::ToolCallComplete {
            choice,
            index: u32::try_from(position).unwrap_or(u32::MAX),
            call: ToolCall::new(id, call.name.clone(), arguments),
        });
    }
}

/// A generated fragment: wire index, id, name, argument text.
type Fragment<'a> = (Option<u64>, Option<&'a str>, Option<&'a str>, &'a str);

/// One generated payload: chunks of fragments per choice, a finish, a
/// whole message, or `[DONE]`.
fn generated_payload(kind: u8, choice: u32, fragments: &[Fragment<'_>]) -> Value {
    let calls: Vec<Value> = fragments
        .iter()
        .map(|(index, id, name, arguments)| {
            let mut f = json!({"function": {"arguments": arguments}});
            if let Some(i) = index {
                f["index"] = json!(i);
            }
            if let Some(id) = id {
                f["id"] = json!(id);
            }
            if let Some(name) = name {
                f["function"]["name"] = json!(name);
            }
            f
        })
        .collect();
    match kind {
        0 => json!("[DONE]"),
        1 => json!({"choices": [{"index": choice, "delta": {}, "finish_reason": "tool_calls"}]}),
        2 => json!({"choices": [{"index": choice, "message": {"tool_calls": calls}}]}),
        3 => {
            json!({"choices": [{"index": choice, "delta": {"tool_calls": calls}, "finish_reason": "tool_calls"}]})
        }
        _ => json!({"choices": [{"index": choice, "delta": {"tool_calls": calls}}]}),
    }
}

proptest::proptest! {
    /// The indexed call matching gives exactly the events of the scanning
    /// one, for any mix of fragments with and without index and id (shared
    /// indices, repeated, empty and new ids), finishes, whole messages and
    /// `[DONE]`, over two choices.
    #[test]
    fn indexed_call_matching_agrees_with_the_scan(
        payloads in proptest::collection::vec(
            (
                0u8..8,
                0u32..2,
                proptest::collection::vec(
                    (
                        proptest::option::of(0u64..3),
                        proptest::option::of(proptest::sample::select(vec!["", "a", "b", "c"])),
                        proptest::option::of(proptest::sample::select(vec!["f", "g"])),
                        proptest::sample::select(vec!["", "{", "}", "{}", "{\"k\":1}", "1"]),
                    ),
                    0..4,
                ),
            ),
            0..24,
        )
    ) {
        let payloads: Vec<Value> = payloads
            .iter()
            .map(|(kind, choice, fragments)| generated_payload(*kind, *choice, fragments))
            .collect();
        let texts: Vec<String> = payloads
            .iter()
            .map(|payload| payload.as_str().map_or_else(|| payload.to_string(), str::to_owned))
            .collect();
        let mut parser = ResponseParser::default();
        let mut got = Vec::new();
        for text in &texts {
            parser.payload(text, &mut got).unwrap();
        }
        let expected = reference::events(&payloads);
        proptest::prop_assert_eq!(&got, &expected);
        // The `Value` read alone (the typed read's fallback) agrees too.
        let ((typed, _), (lenient, _)) = both_reads(&texts);
        proptest::prop_assert_eq!(&typed, &expected);
        proptest::prop_assert_eq!(&lenient, &expected);
    }
}

/// Many parallel calls in one whole answer, and streamed by index, each
/// complete once, in order, with its own id and arguments.
#[test]
fn many_parallel_calls_complete_in_order() {
    let n = 3_000;
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("r{i}"), "type": "function", "function": {"name": "f", "arguments": format!("{{\"i\":{i}}}")}}))
        .collect();
    let whole = events(&[
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"tool_calls": calls}}]}),
    ]);
    let streamed_chunks: Vec<Value> = (0..n)
        .map(|i| chunk(json!({"tool_calls": [{"index": i, "id": format!("r{i}"), "function": {"name": "f", "arguments": format!("{{\"i\":{i}}}")}}]})))
        .chain(std::iter::once(finish("tool_calls")))
        .collect();
    let streamed = events(&streamed_chunks);
    for out in [whole, streamed] {
        let done = completed(&out);
        assert_eq!(done.len(), n);
        for (i, (_, index, id, _, arguments)) in done.into_iter().enumerate() {
            assert_eq!(index as usize, i);
            assert_eq!(id, Some(format!("r{i}")));
            assert_eq!(arguments, json_args(json!({"i": i})));
        }
    }
}

/// What a parser made of a stream: its events and the identity it read.
type Read = (Vec<StreamEvent>, Option<crate::dialect::Meta>);

/// Every payload through the typed read and, separately, through the
/// lenient `Value` read alone (the typed read's answer and the lenient one's).
fn both_reads(payloads: &[String]) -> (Read, Read) {
    let mut typed = ResponseParser::default();
    let mut lenient = ResponseParser::default();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for payload in payloads {
        let ra = typed.payload(payload, &mut a);
        let rb = if payload.trim() == "[DONE]" {
            done(&mut lenient, &mut b);
            Ok(())
        } else {
            lenient.lenient(payload.trim(), &mut b)
        };
        assert_eq!(ra.is_ok(), rb.is_ok(), "{payload}");
    }
    ((a, typed.meta), (b, lenient.meta))
}

/// `[DONE]` as [`ResponseParser::payload`] takes it.
fn done(parser: &mut ResponseParser, out: &mut Vec<StreamEvent>) {
    parser.end(out);
    out.push(StreamEvent::Done);
}

/// The recorded streams of every server in the fixtures: each payload is
/// read in the typed form (none needs the `Value` read), with the events
/// the `Value` read gives.
#[test]
fn the_typed_read_agrees_with_the_value_read_on_recorded_streams() {
    let dir = std::env::var_os("LOOPGUARD_FIXTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"))
        .join("openai-chat");
    let mut streams = 0;
    for entry in
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e} (set LOOPGUARD_FIXTURES)", dir.display()))
    {
        let path = entry.unwrap().path();
        let mut decoder = crate::sse::SseDecoder::new();
        let mut decoded = Vec::new();
        decoder.push(&std::fs::read(&path).unwrap(), &mut decoded);
        decoded.extend(decoder.finish());
        let payloads: Vec<String> = decoded.into_iter().map(|e| e.data).collect();
        for payload in payloads.iter().filter(|p| p.trim() != "[DONE]") {
            assert!(
                super::super::chunk::read(payload.trim()).is_some(),
                "{}: {payload}",
                path.display()
            );
        }
        let (typed, lenient) = both_reads(&payloads);
        assert!(!typed.0.is_empty(), "{}", path.display());
        assert_eq!(typed, lenient, "{}", path.display());
        streams += 1;
    }
    assert!(streams >= 5, "{streams} recorded streams in {}", dir.display());
}

/// Shapes the typed read refuses or reads differently from the usual
/// (wrong types, `null`s, arrays where objects belong, keys given twice,
/// escapes, whole answers, errors): the same events as the `Value` read,
/// alone and after a usual chunk.
#[test]
fn the_typed_read_agrees_with_the_value_read_on_odd_shapes() {
    let odd = [
        r#"{"choices":[{"index":0,"delta":null,"message":{"content":"hidden"}}]}"#,
        r#"{"choices":[{"index":0,"message":null}]}"#,
        r#"{"choices":[{"index":"1","delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"index":-1,"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"index":1.0,"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":{"index":0}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[5,{"index":0,"function":{"name":"f"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":["content","x"]}]}"#,
        r#"{"choices":{"index":0}}"#,
        r#"{"choices":null,"usage":{"total_tokens":3}}"#,
        r#"{"choices":[],"usage":7}"#,
        r#"["choices"]"#,
        r#""text""#,
        r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"id":"x","id":"y","choices":[]}"#,
        r#"{"id":7,"model":"m","choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"created":1.5,"model":"m","choices":[]}"#,
        r#"{"created":-3,"choices":[]}"#,
        r#"{"modelVersion":"v","choices":[]}"#,
        r#"{"id":"a\"b\u00e9","choices":[{"delta":{"tool_calls":[{"index":0,"id":"c\u0031","function":{"name":"r\u0065ad","arguments":"{\"p\":\"\\n\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","function":{"name":null,"arguments":null}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":{"b":1,"a":[2]}}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":12}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":"f"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"function_call":{"name":"f","arguments":"{}"}}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"function_call":"f"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":null,"reasoning":"r"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":5,"reasoning":"r"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","reasoning":"r","refusal":"no"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"a"},"b",{"type":"image_url"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":7}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":3}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"error":null,"choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"error":{"message":"overloaded"},"choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"error":"plain","id":"e"}"#,
        r#"{"error":{"code":500}}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}},{"id":"c2","type":"function","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x"}}],"extra":{"nested":[1,{"a":null}]}}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x"}}"#,
        "  {\"choices\":[{\"delta\":{\"content\":\"padded\"}}]}\n",
    ];
    let usual = r#"{"id":"chatcmpl-0","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c0","function":{"name":"f","arguments":"{"}}]}}]}"#;
    for payload in odd {
        for before in [None, Some(usual)] {
            let payloads: Vec<String> = before
                .into_iter()
                .chain([payload, "[DONE]"])
                .map(str::to_owned)
                .collect();
            let (typed, lenient) = both_reads(&payloads);
            assert_eq!(
                typed,
                lenient,
                "{payload} (after a usual chunk: {})",
                before.is_some()
            );
        }
    }
    // The usual shapes are read typed; the refused ones fall back.
    assert!(super::super::chunk::read(usual).is_some());
    assert!(super::super::chunk::read(odd[2]).is_none());
    assert!(super::super::chunk::read(r#"["choices"]"#).is_none());
    assert!(super::super::chunk::read(odd[13]).is_none());
}

/// A value the `Value` read cannot hold, in a field loopguard does not
/// read (a lone surrogate in a `logprobs` token, a number out of range,
/// nesting past 128 levels), leaves the rest of the payload readable: the
/// `Value` read refuses the whole payload, the typed read still sees its
/// text, calls and identity.
#[test]
fn an_unreadable_value_in_a_field_loopguard_skips_hides_nothing_else() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let payloads = [
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":{"content":[{"token":"\ud83d","logprob":-0.5}]}}]}"#.to_owned(),
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"x":1e400}"#.to_owned(),
        format!(r#"{{"id":"c","x":{deep},"choices":[{{"index":0,"delta":{{"content":"hi"}}}}]}}"#),
    ];
    for payload in &payloads {
        let mut lenient = ResponseParser::default();
        assert!(lenient.lenient(payload, &mut Vec::new()).is_err(), "{payload}");
        let mut typed = ResponseParser::default();
        let mut out = Vec::new();
        typed.payload(payload, &mut out).unwrap();
        assert_eq!(
            out,
            vec![StreamEvent::TextDelta {
                choice: 0,
                text: "hi".to_owned()
            }],
            "{payload}"
        );
        assert_eq!(typed.meta().and_then(|m| m.id.as_deref()), Some("c"));
    }
    // A whole answer with a lone surrogate in its logprobs: its call is seen.
    let whole = r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"tool_calls":[{"id":"t","type":"function","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":"tool_calls","logprobs":{"content":[{"token":"\udc00"}]}}]}"#;
    let mut out = Vec::new();
    ResponseParser::default().payload(whole, &mut out).unwrap();
    assert_eq!(completed(&out).len(), 1);
}
