//! Tests of the OpenAI Chat Completions dialect: request parsing and stream events.

use serde_json::json;

use super::*;

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
