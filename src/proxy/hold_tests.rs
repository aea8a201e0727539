//! Unit tests of the holding state machine over recorded streams.

use super::*;
use crate::proxy::tap::Framing;

fn fixture(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("LOOPGUARD_FIXTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e} (set LOOPGUARD_FIXTURES)"))
}

fn holder(dialect: Dialect) -> Holder {
    Holder::new(
        Tap::new(dialect, Framing::Sse, 1 << 20),
        dialect,
        Mode::Sse,
        true,
        1 << 20,
    )
}

/// Feeds `input` in pieces of `size` bytes; returns everything released and
/// the cut, if any.
fn run(
    mut h: Holder,
    input: &[u8],
    size: usize,
    judge: &mut dyn ResponseJudge,
) -> (Vec<u8>, Option<Decision>) {
    let mut out = Vec::new();
    let mut cut = None;
    for piece in input.chunks(size) {
        let o = h.push(piece, judge);
        out.extend(o.release.iter().flat_map(|b| b.to_vec()));
        cut = cut.or(o.cut);
        if o.stop_upstream {
            return (out, cut);
        }
    }
    let (o, _) = h.finish(judge);
    out.extend(o.release.iter().flat_map(|b| b.to_vec()));
    (out, cut.or(o.cut))
}

struct Always(Decision);

impl ResponseJudge for Always {
    fn calls(&mut self, _calls: &[ToolCall]) -> Decision {
        self.0.clone()
    }
    fn event(&mut self, _event: &StreamEvent) -> Decision {
        Decision::Pass
    }
}

fn cut(message: &str) -> Cut {
    Cut {
        message: message.to_owned(),
        header: "block; detector=identical_call; count=5".to_owned(),
    }
}

#[test]
fn passing_judges_release_every_byte_whatever_the_chunking() {
    for (dialect, name) in [
        (Dialect::OpenaiChat, "openai-chat/gpt4o-parallel-tool-calls.sse"),
        (Dialect::OpenaiChat, "openai-chat/mistral-tool-call-no-index.sse"),
        (Dialect::Gemini, "gemini/streamed-args-same-tool-x3.sse"),
    ] {
        let input = fixture(name);
        for size in [1, 7, 64, input.len()] {
            let (out, cut) = run(holder(dialect), &input, size, &mut PassJudge);
            assert!(out == input, "{name} in {size}-byte pieces");
            assert!(cut.is_none());
        }
    }
}

#[test]
fn a_block_replaces_the_held_calls_and_keeps_usage_and_done() {
    let input = fixture("openai-chat/gpt4o-single-tool-call.sse");
    let (out, decision) = run(
        holder(Dialect::OpenaiChat),
        &input,
        13,
        &mut Always(Decision::Block(cut("[loopguard] stop"))),
    );
    let text = String::from_utf8(out).unwrap_or_default();
    assert!(matches!(decision, Some(Decision::Block(_))));
    assert!(!text.contains("get_weather"), "the call leaked: {text}");
    assert!(text.contains("[loopguard] stop") && text.contains("\"finish_reason\":\"stop\""));
    assert!(
        text.contains("\"usage\""),
        "the upstream's usage chunk is kept: {text}"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"));
    // Every event is a whole SSE event with valid JSON.
    for event in text.split("\n\n").filter(|e| !e.is_empty()) {
        let data = event
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not an event: {event}"));
        if data != "[DONE]" {
            serde_json::from_str::<Value>(data).unwrap_or_else(|e| panic!("{e}: {data}"));
        }
    }
}

#[test]
fn an_abort_after_text_ends_with_the_error_event() {
    let input = fixture("openai-chat/deepseek-reasoner-tool-call.sse");
    let (out, decision) = run(
        holder(Dialect::OpenaiChat),
        &input,
        50,
        &mut Always(Decision::Abort(cut("loop_detected: x"))),
    );
    assert!(matches!(decision, Some(Decision::Abort(_))));
    let text = String::from_utf8(out).unwrap_or_default();
    assert!(text.trim_end().ends_with(r#""param":null}}"#), "{text}");
    assert!(text.contains("\"code\":\"loop_detected\""));
}

#[test]
fn a_gemini_block_closes_the_json_array() {
    let payloads = crate::mock::fixture::sse_payloads(&fixture("gemini/function-call.sse"));
    let input: Vec<u8> = crate::mock::fixture::json_array_pieces(&payloads).concat();
    let h = Holder::new(
        Tap::new(Dialect::Gemini, Framing::JsonArray, 1 << 20),
        Dialect::Gemini,
        Mode::JsonArray,
        false,
        1 << 20,
    );
    let (out, _) = run(
        h,
        &input,
        9,
        &mut Always(Decision::Block(cut("[loopguard] stop"))),
    );
    let value: Value =
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    let last = value
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        last["candidates"][0]["content"]["parts"][0]["text"],
        "[loopguard] stop"
    );
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(!String::from_utf8_lossy(&out).contains("functionCall"));
}

#[test]
fn a_block_never_drops_another_choices_events() {
    // Our own stream (tests/fixtures): two interleaved choices, each ending
    // in a tool call.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openai-chat/n2-choices-with-calls.sse");
    let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    let (out, decision) = run(
        holder(Dialect::OpenaiChat),
        &input,
        17,
        &mut Always(Decision::Block(cut("[loopguard] stop"))),
    );
    assert!(out == input, "with several choices the stream passes unjudged");
    assert!(decision.is_none());
}
