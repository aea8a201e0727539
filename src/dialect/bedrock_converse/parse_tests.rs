use serde_json::{Value, json};

use super::*;
use crate::dialect::Dialect;

fn request(body: Value) -> ParsedRequest {
    crate::dialect::testing::request(Dialect::BedrockConverse, &body)
}

fn events(payloads: &[Value]) -> Vec<StreamEvent> {
    crate::dialect::testing::events(Dialect::BedrockConverse, payloads)
}

/// A Converse body as boto3 sends it: `system` blocks, `toolConfig`,
/// `toolUse` / `toolResult` blocks with `status`, text after results.
#[test]
fn messages_become_turns_with_calls_results_and_errors() {
    let parsed = request(json!({
        "system": [{"text": "You are a coding agent."}, {"cachePoint": {"type": "default"}}],
        "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
        "toolConfig": {"tools": [
            {"toolSpec": {"name": "shell", "description": "run", "inputSchema": {"json": {"type": "object"}}}},
            {"cachePoint": {"type": "default"}}]},
        "messages": [
            {"role": "user", "content": [{"text": "list files"}]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}},
                {"text": "Looking."},
                {"toolUse": {"toolUseId": "t1", "name": "shell", "input": {"command": "ls"}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "t1", "content": [{"text": "a.txt"}], "status": "error"}},
                {"text": "keep going"}]},
        ]
    }));
    let t = &parsed.transcript;
    assert_eq!(t.system, "You are a coding agent.");
    assert_eq!(t.tools, vec!["shell"]);
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User]);
    assert_eq!(t.messages[1].text, "Looking.");
    let call = &t.messages[1].tool_calls[0];
    assert_eq!((call.id.as_deref(), call.name.as_str()), (Some("t1"), "shell"));
    assert_eq!(call.arguments, Arguments::Json(json!({"command": "ls"})));
    let result = &t.messages[2].tool_results[0];
    assert_eq!(result.name.as_deref(), Some("shell"), "named from its call");
    assert_eq!(result.content, ResultContent::Text("a.txt".to_owned()));
    assert!(result.is_error);
    assert_eq!(t.messages[3].text, "keep going");
    assert!(!parsed.stream, "the path says it");
    assert_eq!(parsed.model, None, "the path names it");
}

/// A `json` result block is read as JSON; mixed blocks as the whole array.
#[test]
fn json_results_are_json() {
    let parsed = request(json!({"messages": [
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "a", "name": "get", "input": {}}}]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "a", "content": [{"json": {"ok": true}}]}},
            {"toolResult": {"toolUseId": "a", "content": [{"json": {"n": 1}}, {"text": "and"}]}}]},
    ]}));
    let results = &parsed.transcript.messages[1].tool_results;
    assert_eq!(results[0].content, ResultContent::Json(json!({"ok": true})));
    assert!(!results[0].is_error);
    assert_eq!(
        results[1].content,
        ResultContent::Json(json!([{"json": {"n": 1}}, {"text": "and"}]))
    );
}

/// The split (incremental parse) gives what the full parse gives.
#[test]
fn the_split_parses_as_the_whole() {
    let body = json!({"system": [{"text": "s"}], "messages": [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "a", "name": "ls", "input": {"p": 1}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "a", "content": [{"text": "x"}]}}]},
    ]});
    let bytes = body.to_string();
    let whole = parse_request(bytes.as_bytes()).unwrap();
    let split = split_request(bytes.as_bytes()).unwrap();
    let items = split.parse_items(&[], 0).unwrap();
    let assembled = crate::dialect::split::assemble(split.head.clone(), items);
    assert_eq!(assembled, whole);
}

/// A ConverseStream with text, then a streamed `toolUse` whose `input`
/// arrives in string fragments, `messageStop`, `metadata`.
#[test]
fn a_stream_yields_text_calls_finish_and_usage() {
    let out = events(&[
        json!({"messageStart": {"role": "assistant"}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Let me look."}, "p": "abcd"}}),
        json!({"contentBlockStop": {"contentBlockIndex": 0}}),
        json!({"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "ls"}}}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"path\""}}}}),
        json!({"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": ":\".\"}"}}}}),
        json!({"contentBlockStop": {"contentBlockIndex": 1}}),
        json!({"messageStop": {"stopReason": "tool_use"}}),
        json!({"metadata": {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}, "metrics": {"latencyMs": 9}}}),
    ]);
    assert_eq!(
        out[0],
        StreamEvent::TextDelta {
            choice: 0,
            text: "Let me look.".to_owned()
        }
    );
    let complete = out.iter().find_map(|e| match e {
        StreamEvent::ToolCallComplete { call, .. } => Some(call.clone()),
        _ => None,
    });
    let call = complete.unwrap();
    assert_eq!(call.name, "ls");
    assert_eq!(call.id.as_deref(), Some("tooluse_1"));
    assert_eq!(call.arguments, Arguments::Json(json!({"path": "."})));
    assert!(out.contains(&StreamEvent::Finish {
        choice: 0,
        reason: "tool_use".to_owned()
    }));
    assert!(matches!(out[out.len() - 2], StreamEvent::Usage { .. }));
    assert_eq!(out.last(), Some(&StreamEvent::Done));
}

/// The parser notes where the stream stands: a text block opens with its
/// first delta, a tool block with its start.
#[test]
fn the_state_follows_the_blocks() {
    let mut parser = ResponseParser::default();
    let mut out = Vec::new();
    let feed = |p: &mut ResponseParser, v: Value, out: &mut Vec<StreamEvent>| {
        p.payload(&v.to_string(), out).unwrap()
    };
    feed(
        &mut parser,
        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "a"}}}),
        &mut out,
    );
    assert_eq!(parser.state().open_block, Some((0, "text".to_owned())));
    assert!(parser.state().opened_by_last);
    feed(
        &mut parser,
        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "b"}}}),
        &mut out,
    );
    assert!(!parser.state().opened_by_last);
    feed(
        &mut parser,
        json!({"contentBlockStop": {"contentBlockIndex": 0}}),
        &mut out,
    );
    feed(
        &mut parser,
        json!({"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "x", "name": "ls"}}}}),
        &mut out,
    );
    assert_eq!(parser.state().anchor, Some(1));
    assert_eq!(parser.state().blocks, 2);
}

/// A whole Converse answer: text, reasoning, calls, usage, stop reason.
#[test]
fn a_whole_answer_yields_its_blocks() {
    let out = events(&[json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "think", "signature": "s"}}},
            {"text": "Listing."},
            {"toolUse": {"toolUseId": "t", "name": "ls", "input": {"path": "."}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
        "metrics": {"latencyMs": 12}})]);
    assert_eq!(
        out[0],
        StreamEvent::ReasoningDelta {
            choice: 0,
            text: "think".to_owned()
        }
    );
    assert_eq!(
        out[1],
        StreamEvent::TextDelta {
            choice: 0,
            text: "Listing.".to_owned()
        }
    );
    assert!(matches!(&out[3], StreamEvent::ToolCallComplete { call, .. } if call.name == "ls"));
    assert_eq!(
        out.last(),
        Some(&StreamEvent::Finish {
            choice: 0,
            reason: "tool_use".to_owned()
        })
    );
}

/// An exception message is an error event.
#[test]
fn an_exception_is_an_error() {
    let out = events(&[json!({"modelStreamErrorException": {"message": "boom"}})]);
    assert_eq!(
        out,
        [StreamEvent::Error {
            message: "boom".to_owned()
        }]
    );
}

/// The path says whether the answer streams; a recorded Converse body
/// replayed without its path is told by its shape.
#[test]
fn the_path_picks_the_framing_and_the_shape_tells_the_dialect() {
    use crate::dialect::Mode;
    let stream = "/bedrock/model/us.amazon.nova-pro-v1:0/converse-stream";
    assert_eq!(
        Dialect::BedrockConverse.mode(stream, None, false),
        Mode::EventStream
    );
    assert_eq!(
        Dialect::BedrockConverse.mode("/model/m/converse", None, true),
        Mode::Whole
    );
    assert_eq!(
        Dialect::BedrockConverse.path_model(stream),
        "us.amazon.nova-pro-v1:0"
    );
    let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {}});
    assert_eq!(Dialect::guess(&body), Some(Dialect::BedrockConverse));
    let body = json!({"messages": [{"role": "user", "content": [{"toolResult": {"toolUseId": "a", "content": []}}]}]});
    assert_eq!(Dialect::guess(&body), Some(Dialect::BedrockConverse));
    let anthropic = json!({"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(Dialect::guess(&anthropic), Some(Dialect::Anthropic));
}
