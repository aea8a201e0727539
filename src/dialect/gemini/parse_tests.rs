//! Tests of the Gemini dialect: request parsing and stream events.

use serde_json::json;

use super::*;

fn request(body: Value) -> ParsedRequest {
    crate::dialect::testing::request(crate::dialect::Dialect::Gemini, &body)
}

fn events(payloads: &[Value]) -> Vec<StreamEvent> {
    crate::dialect::testing::events(crate::dialect::Dialect::Gemini, payloads)
}

fn parts(parts: Value) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": parts}}]})
}

fn completed(events: &[StreamEvent]) -> Vec<(u32, Option<String>, String, Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallComplete { index, call, .. } => match &call.arguments {
                Arguments::Json(args) => Some((*index, call.id.clone(), call.name.clone(), args.clone())),
                Arguments::Unparsable(_) => None,
            },
            _ => None,
        })
        .collect()
}

/// Roles, thought parts skipped, calls with ids, responses (errors by `error` key), tools, system.
#[test]
fn request_history() {
    let parsed = request(json!({
        "systemInstruction": {"parts": [{"text": "be brief"}, {"text": "use tools"}]},
        "tools": [{"functionDeclarations": [{"name": "read_file"}, {"name": "run"}]}, {"googleSearch": {}}],
        "contents": [
            {"role": "user", "parts": [{"text": "<session_context>"}, {"text": "fix it"}]},
            {"role": "model", "parts": [
                {"text": "planning", "thought": true},
                {"text": "Reading."},
                {"functionCall": {"name": "read_file", "args": {"path": "a"}, "id": "f1"}, "thoughtSignature": "sig"},
                {"functionCall": {"name": "run"}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read_file", "id": "f1", "response": {"output": "x"}}},
                {"functionResponse": {"name": "run", "response": {"error": "exit 1"}}}
            ]},
            {"role": "user", "parts": [{"text": "thanks"}]}
        ]
    }));
    let t = &parsed.transcript;
    assert_eq!(t.system, "be brief\nuse tools");
    assert_eq!(t.tools, ["read_file", "run"]);
    assert_eq!(parsed.model, None);
    let roles: Vec<_> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User]);
    assert_eq!(t.messages[0].text, "<session_context>\nfix it");
    assert_eq!(t.messages[1].text, "Reading.");
    let calls = &t.messages[1].tool_calls;
    assert_eq!(calls[0].id.as_deref(), Some("f1"));
    assert_eq!(calls[0].arguments, Arguments::Json(json!({"path": "a"})));
    assert_eq!(calls[1].arguments, Arguments::Json(json!({})));
    let results = &t.messages[2].tool_results;
    assert_eq!(results[0].content, ResultContent::Json(json!({"output": "x"})));
    assert_eq!((results[0].is_error, results[1].is_error), (false, true));
    assert_eq!(results[1].name.as_deref(), Some("run"));
}

/// snake_case field names are read too, and a user content mixing text and responses stays User.
#[test]
fn request_snake_case_and_mixed_user_content() {
    let parsed = request(json!({
        "system_instruction": {"parts": [{"text": "sys"}]},
        "tools": [{"function_declarations": [{"name": "t"}]}],
        "contents": [{"role": "user", "parts": [
            {"function_response": {"name": "t", "response": {}}},
            {"text": "also this"}
        ]}]
    }));
    assert_eq!(parsed.transcript.system, "sys");
    assert_eq!(parsed.transcript.tools, ["t"]);
    assert_eq!(parsed.transcript.messages[0].role, Role::User);
    assert_eq!(parsed.transcript.messages[0].tool_results.len(), 1);
}

/// Non-Gemini bodies are errors.
#[test]
fn request_errors() {
    assert!(matches!(parse_request(b"{"), Err(DialectError::Json(_))));
    assert!(matches!(
        parse_request(b"{\"messages\":[]}"),
        Err(DialectError::Shape(_))
    ));
}

/// Text, thoughts, finish reason (STOP even with calls), usage on every chunk.
#[test]
fn stream_text_thought_finish_usage() {
    let out = events(&[
        json!({"candidates": [{"content": {"parts": [{"text": "hmm", "thought": true}]}, "index": 0}],
               "usageMetadata": {"promptTokenCount": 1}}),
        json!({"candidates": [{"content": {"parts": [{"text": "Hi", "thoughtSignature": "s"}, {"text": ""}]},
               "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 2}}),
    ]);
    assert_eq!(
        out,
        [
            StreamEvent::ReasoningDelta {
                choice: 0,
                text: "hmm".into()
            },
            StreamEvent::Usage {
                usage: json!({"promptTokenCount": 1})
            },
            StreamEvent::TextDelta {
                choice: 0,
                text: "Hi".into()
            },
            StreamEvent::Finish {
                choice: 0,
                reason: "STOP".into()
            },
            StreamEvent::Usage {
                usage: json!({"promptTokenCount": 2})
            },
        ]
    );
}

/// Whole calls (Gemini API) complete at once, several in one chunk, each with its position.
#[test]
fn stream_whole_calls() {
    let out = events(&[parts(json!([
        {"functionCall": {"name": "a", "args": {"x": 1}, "id": "i1"}, "thoughtSignature": "s"},
        {"functionCall": {"name": "b"}}
    ]))]);
    assert_eq!(
        out[0],
        StreamEvent::ToolCallDelta {
            choice: 0,
            index: 0,
            arguments_delta: "{\"x\":1}".into()
        }
    );
    assert!(matches!(out[1], StreamEvent::ToolCallComplete { index: 0, .. }));
    assert_eq!(
        completed(&out),
        [
            (0, Some("i1".into()), "a".into(), json!({"x": 1})),
            (1, None, "b".into(), json!({}))
        ]
    );
}

/// Vertex streamed arguments: nested paths, arrays, continued strings, numbers; `{}` completes.
#[test]
fn stream_partial_args_assembled_by_path() {
    let fragment = |path: &str, value: Value, more: bool| {
        let mut entry = json!({"jsonPath": path});
        entry
            .as_object_mut()
            .unwrap()
            .extend(value.as_object().unwrap().clone());
        if more {
            entry["willContinue"] = json!(true);
        }
        parts(json!([{"functionCall": {"partialArgs": [entry], "willContinue": true}}]))
    };
    let out = events(&[
        parts(json!([{"functionCall": {"name": "cook", "willContinue": true}}])),
        fragment("$.r.items[1].name", json!({"stringValue": "Eg"}), true),
        fragment("$.r.items[1].name", json!({"stringValue": "g"}), true),
        fragment("$.r.items[1].name", json!({"stringValue": ""}), false),
        parts(json!([{"functionCall": {"willContinue": true}}])),
        fragment("$.r.items[0]", json!({"numberValue": 0.5}), false),
        fragment("$.r.ok", json!({"boolValue": true}), false),
        fragment("$.r['odd key']", json!({"nullValue": "NULL_VALUE"}), false),
        fragment("$.r.name", json!({"stringValue": "x"}), false),
        fragment("$.r.name", json!({"stringValue": "y"}), false),
        parts(json!([{"functionCall": {}}])),
        parts(json!([{"functionCall": {}}])),
    ]);
    assert_eq!(
        completed(&out),
        [(
            0,
            None,
            "cook".into(),
            json!({"r": {"items": [0.5, {"name": "Egg"}], "ok": true, "odd key": null, "name": "y"}})
        )]
    );
    let deltas = out
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
        .count();
    assert_eq!(
        deltas, 11,
        "every fragment is a delta; the stray second `{{}}` is not"
    );
    assert!(
        matches!(out[1], StreamEvent::ToolCallDelta { ref arguments_delta, .. } if arguments_delta == "Eg")
    );
}

/// Same tool streamed three times: each call gets its own position and arguments.
#[test]
fn stream_same_tool_three_times() {
    let mut payloads = vec![parts(json!([{"functionCall": {"name": "read_theme"}}]))];
    for id in ["A", "B", "C"] {
        payloads.push(parts(
            json!([{"functionCall": {"name": "read_screen", "willContinue": true}}]),
        ));
        payloads.push(parts(json!([{"functionCall": {"partialArgs": [
            {"jsonPath": "$.id", "stringValue": id, "willContinue": true}], "willContinue": true}}])));
        payloads.push(parts(json!([{"functionCall": {"partialArgs": [
            {"jsonPath": "$.id", "stringValue": ""}], "willContinue": true}}])));
        payloads.push(parts(json!([{"functionCall": {}}])));
    }
    let calls: Vec<_> = completed(&events(&payloads))
        .into_iter()
        .map(|c| (c.0, c.2, c.3))
        .collect();
    assert_eq!(
        calls,
        [
            (0, "read_theme".into(), json!({})),
            (1, "read_screen".into(), json!({"id": "A"})),
            (2, "read_screen".into(), json!({"id": "B"})),
            (3, "read_screen".into(), json!({"id": "C"})),
        ]
    );
}

/// Without the final part, the call completes at finishReason, or at `end()` with no finish.
#[test]
fn stream_missing_terminal_part() {
    let start = parts(json!([{"functionCall": {"name": "w", "willContinue": true}}]));
    let arg = parts(json!([{"functionCall": {"partialArgs": [
        {"jsonPath": "$.items[0]", "stringValue": "a"}], "willContinue": true}}]));
    let out = events(&[start.clone(), arg.clone()]);
    assert_eq!(completed(&out), [(0, None, "w".into(), json!({"items": ["a"]}))]);
    let stop = json!({"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}]});
    let out = events(&[start, arg, stop]);
    assert!(matches!(out[out.len() - 2], StreamEvent::ToolCallComplete { .. }));
    assert!(matches!(out[out.len() - 1], StreamEvent::Finish { .. }));
}

/// A new named call completes the open one first.
#[test]
fn stream_new_call_completes_open_one() {
    let out = events(&[
        parts(json!([{"functionCall": {"name": "a", "willContinue": true}}])),
        parts(json!([{"functionCall": {"name": "b", "args": {}}}])),
    ]);
    let names: Vec<_> = completed(&out).into_iter().map(|c| (c.0, c.2)).collect();
    assert_eq!(names, [(0, "a".into()), (1, "b".into())]);
}

/// Candidates are kept apart by index.
#[test]
fn stream_several_candidates() {
    let out = events(&[json!({"candidates": [
        {"index": 0, "content": {"parts": [{"text": "x"}]}},
        {"index": 1, "content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}, "finishReason": "STOP"}
    ]})]);
    assert_eq!(
        out[0],
        StreamEvent::TextDelta {
            choice: 0,
            text: "x".into()
        }
    );
    assert!(matches!(
        out[2],
        StreamEvent::ToolCallComplete {
            choice: 1,
            index: 0,
            ..
        }
    ));
    assert_eq!(
        out[3],
        StreamEvent::Finish {
            choice: 1,
            reason: "STOP".into()
        }
    );
}

/// Error objects, a whole array body, and unparsable payloads.
#[test]
fn stream_errors_and_array_body() {
    let out = events(&[json!({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}})]);
    assert_eq!(
        out,
        [StreamEvent::Error {
            message: "quota".into()
        }]
    );
    let out = events(&[json!([
        {"candidates": [{"content": {"parts": [{"text": "a"}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "b"}]}}]}
    ])]);
    assert_eq!(out.len(), 2);
    let mut parser = ResponseParser::default();
    let mut out = Vec::new();
    assert!(matches!(
        parser.payload("[1]", &mut out),
        Err(DialectError::Shape(_))
    ));
    assert!(matches!(
        parser.payload("nope", &mut out),
        Err(DialectError::Json(_))
    ));
}

/// Paths: the forms Vertex sends, and what is refused.
#[test]
fn json_paths() {
    use Segment::{Index, Key};
    assert_eq!(
        parse_path("$.a[2].b['c.d']"),
        Some(vec![
            Key("a".into()),
            Index(2),
            Key("b".into()),
            Key("c.d".into())
        ])
    );
    assert_eq!(parse_path("$"), Some(vec![]));
    for bad in ["a.b", "$..a", "$[x]", "$[1", "$a"] {
        assert_eq!(parse_path(bad), None, "{bad}");
    }
    let mut root = json!({});
    assert!(slot(&mut root, &[Index(MAX_PATH_INDEX + 1)]).is_none());
}
