use serde_json::{Value, json};

use super::*;
use crate::dialect::bedrock_converse::{ResponseParser, payload_of};
use crate::eventstream::Decoder;

/// The wrapped payloads of an event-stream body, every CRC checked.
fn read(body: &[u8]) -> Vec<Value> {
    let mut messages = Vec::new();
    let mut decoder = Decoder::default();
    decoder.push(body, &mut messages).unwrap();
    decoder.finish().unwrap();
    messages
        .iter()
        .map(|m| serde_json::from_str(&payload_of(m).unwrap()).unwrap())
        .collect()
}

/// A streamed block is a whole ConverseStream: `messageStart`, the text,
/// `messageStop` `end_turn`, `metadata` with usage and metrics.
#[test]
fn a_streamed_block_is_a_complete_converse_stream() {
    let answer = block_answer(Mode::EventStream, "m", "[loopguard] stop");
    assert_eq!(answer.content_type, EVENT_STREAM);
    let events = read(&answer.body);
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e.as_object()?.keys().next().map(String::as_str))
        .collect();
    assert_eq!(
        kinds,
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata"
        ]
    );
    assert_eq!(
        events[1]["contentBlockDelta"]["delta"]["text"],
        "[loopguard] stop"
    );
    assert_eq!(events[3]["messageStop"]["stopReason"], "end_turn");
    assert_eq!(events[4]["metadata"]["usage"]["totalTokens"], 0);
}

/// A whole block is a Converse answer.
#[test]
fn a_whole_block_is_a_converse_answer() {
    let answer = block_answer(Mode::Whole, "m", "[loopguard] stop");
    let v: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(v["output"]["message"]["content"][0]["text"], "[loopguard] stop");
    assert_eq!(v["stopReason"], "end_turn");
    assert_eq!(v["metrics"]["latencyMs"], 0);
}

/// A whole answer keeps its text, reasoning and usage; its calls are replaced.
#[test]
fn a_whole_answer_keeps_all_but_its_calls() {
    let mut parser = ResponseParser::default();
    let answer = json!({"output": {"message": {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "t"}}}, {"text": "Listing."},
        {"toolUse": {"toolUseId": "x", "name": "ls", "input": {}}}]}},
        "stopReason": "tool_use", "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
        "metrics": {"latencyMs": 5}});
    parser.payload(&answer.to_string(), &mut Vec::new()).unwrap();
    let kept: Value =
        serde_json::from_slice(&block_whole(parser.state(), "[loopguard] no", false).unwrap()).unwrap();
    let content = kept["output"]["message"]["content"].as_array().cloned().unwrap();
    assert_eq!(content.len(), 3);
    assert!(content.iter().all(|b| b.get("toolUse").is_none()));
    assert_eq!(content[2]["text"], "[loopguard] no");
    assert_eq!(kept["stopReason"], "end_turn");
    assert_eq!(kept["usage"]["outputTokens"], 2);
    assert_eq!(kept["metrics"]["latencyMs"], 5);
}

/// At stream time the explanation takes the held block's index; a cut
/// continues an open text block.
#[test]
fn stream_endings_continue_the_blocks() {
    let mut parser = ResponseParser::default();
    let delta = json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "a"}}});
    parser.payload(&delta.to_string(), &mut Vec::new()).unwrap();
    let more = json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "b"}}});
    parser.payload(&more.to_string(), &mut Vec::new()).unwrap();
    let cut = read(&cut_ending(parser.state(), "[loopguard] cut"));
    assert_eq!(cut[0]["contentBlockDelta"]["contentBlockIndex"], 0);
    assert_eq!(
        cut[0]["contentBlockDelta"]["delta"]["text"],
        "\n\n[loopguard] cut"
    );
    assert_eq!(cut[2]["messageStop"]["stopReason"], "end_turn");
    let block = read(&block_stream_ending(parser.state(), Some(1), "[loopguard] held"));
    assert_eq!(block[0]["contentBlockDelta"]["contentBlockIndex"], 1);
    assert_eq!(block[1]["contentBlockStop"]["contentBlockIndex"], 1);
}
