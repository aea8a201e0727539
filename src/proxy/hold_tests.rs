//! Unit tests of the holding state machine over recorded streams.

use super::*;
use crate::plan::PassJudge;

fn fixture(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("LOOPGUARD_FIXTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e} (set LOOPGUARD_FIXTURES)"))
}

fn holder(dialect: Dialect) -> Holder {
    Holder::new(
        Tap::new(dialect, Mode::Sse, 1 << 20),
        dialect,
        Mode::Sse,
        true,
        1 << 20,
    )
}

/// Feeds `input` in pieces of `size` bytes; returns everything released and
/// the cut, if any.
fn run(mut h: Holder, input: &[u8], size: usize, judge: &mut dyn StreamJudge) -> (Vec<u8>, Option<Decision>) {
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

impl StreamJudge for Always {
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
    let payloads = crate::tools::mock::fixture::sse_payloads(&fixture("gemini/function-call.sse"));
    let input: Vec<u8> = crate::tools::mock::fixture::json_array_pieces(&payloads).concat();
    let h = Holder::new(
        Tap::new(Dialect::Gemini, Mode::JsonArray, 1 << 20),
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

/// The `data` payloads of an SSE body, in order.
fn payloads(body: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data:")))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

#[test]
fn a_blocked_responses_stream_keeps_its_sequence_and_output_indices() {
    for name in [
        "openai-responses/azure-gpt51-function-call.sse",
        "openai-responses/reasoning-calculator-steps.step1.sse",
        "openai-responses/custom-tool-write-sql.sse",
    ] {
        let input = fixture(name);
        for size in [7, 4096] {
            let mut judge = Always(Decision::Block(cut("[loopguard] stopped a loop")));
            let (out, decision) = run(holder(Dialect::OpenaiResponses), &input, size, &mut judge);
            assert!(matches!(decision, Some(Decision::Block(_))), "{name}");
            let events = payloads(&out);
            let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
            assert!(
                !kinds.contains(&"response.function_call_arguments.delta"),
                "{name}: {kinds:?}"
            );
            assert!(
                !kinds.iter().any(|k| *k == "response.output_item.added"
                    && events.iter().any(|e| e["item"]["type"] != "message"
                        && e["item"]["type"] != "reasoning"
                        && e["type"] == *k)),
                "{name}: a call item went out"
            );
            assert_eq!(kinds.last(), Some(&"response.completed"), "{name}");
            let seqs: Vec<u64> = events
                .iter()
                .filter_map(|e| e["sequence_number"].as_u64())
                .collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{name}: {seqs:?}");
            let completed = events
                .last()
                .map(|e| e["response"]["output"].clone())
                .unwrap_or_default();
            let output = completed.as_array().cloned().unwrap_or_default();
            let added: Vec<u64> = events
                .iter()
                .filter(|e| e["type"] == "response.output_item.added")
                .filter_map(|e| e["output_index"].as_u64())
                .collect();
            assert_eq!(
                added,
                (0..output.len() as u64).collect::<Vec<_>>(),
                "{name}: contiguous indices"
            );
            let last = output.last().cloned().unwrap_or_default();
            assert_eq!(last["type"], "message", "{name}");
            assert_eq!(last["content"][0]["text"], "[loopguard] stopped a loop", "{name}");
        }
    }
}

#[test]
fn a_blocked_anthropic_stream_puts_the_explanation_at_the_first_withheld_index() {
    for (name, text_blocks) in [
        ("anthropic/tool-use-no-args.sse", 1),
        ("anthropic/parallel-tool-use-same-tool.sse", 0),
        ("anthropic/tool-use-quoted-input.sse", 0),
    ] {
        let input = fixture(name);
        for size in [5, 4096] {
            let mut judge = Always(Decision::Block(cut("[loopguard] stopped a loop")));
            let (out, decision) = run(holder(Dialect::Anthropic), &input, size, &mut judge);
            assert!(matches!(decision, Some(Decision::Block(_))), "{name}");
            let events = payloads(&out);
            let starts: Vec<(u64, String)> = events
                .iter()
                .filter(|e| e["type"] == "content_block_start")
                .map(|e| {
                    let kind = e["content_block"]["type"].as_str().unwrap_or_default().to_owned();
                    (e["index"].as_u64().unwrap_or(99), kind)
                })
                .collect();
            let indices: Vec<u64> = starts.iter().map(|(i, _)| *i).collect();
            assert_eq!(
                indices,
                (0..starts.len() as u64).collect::<Vec<_>>(),
                "{name}: {starts:?}"
            );
            assert!(starts.iter().all(|(_, k)| k == "text"), "{name}: {starts:?}");
            assert_eq!(starts.len(), text_blocks + 1, "{name}");
            let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
            assert_eq!(
                &kinds[kinds.len() - 2..],
                ["message_delta", "message_stop"],
                "{name}"
            );
            let delta = &events[events.len() - 2];
            assert_eq!(delta["delta"]["stop_reason"], "end_turn");
            assert!(
                delta["usage"]["output_tokens"].is_u64(),
                "{name}: upstream usage kept"
            );
        }
    }
}

#[test]
fn an_abort_after_text_ends_with_the_dialects_error_event() {
    for (dialect, name, error) in [
        (
            Dialect::Anthropic,
            "anthropic/tool-use-no-args.sse",
            "invalid_request_error",
        ),
        (
            Dialect::OpenaiResponses,
            "openai-responses/reasoning-calculator-steps.step1.sse",
            "loop_detected",
        ),
    ] {
        let input = fixture(name);
        let mut judge = Always(Decision::Abort(cut("loop_detected: stop")));
        let (out, decision) = run(holder(dialect), &input, 64, &mut judge);
        assert!(matches!(decision, Some(Decision::Abort(_))));
        let events = payloads(&out);
        let error_event = events
            .iter()
            .find(|e| e["type"] == "error")
            .cloned()
            .unwrap_or_default();
        assert!(error_event.to_string().contains(error), "{name}: {error_event}");
        let last = events.last().cloned().unwrap_or_default();
        if dialect == Dialect::OpenaiResponses {
            assert_eq!(last["type"], "response.failed", "{name}");
            assert_eq!(last["response"]["error"]["code"], "loop_detected");
            let listed = last["response"]["output"].as_array().cloned().unwrap_or_default();
            assert!(
                listed.iter().all(|item| item["type"] != "function_call"),
                "{name}: {listed:?}"
            );
            let seqs: Vec<u64> = events
                .iter()
                .filter_map(|e| e["sequence_number"].as_u64())
                .collect();
            assert!(
                seqs.windows(2).all(|w| w[1] == w[0] + 1),
                "{name}: no gap: {seqs:?}"
            );
        } else {
            assert_eq!(last["type"], "error", "{name}");
        }
    }
}

#[test]
fn a_whole_answer_keeps_the_models_text_and_usage_when_its_calls_are_blocked() {
    let turn = crate::tools::mock::script::Turn {
        text: "I will list the files.".to_owned(),
        reasoning: "thinking it over".to_owned(),
        tool_calls: vec![crate::tools::mock::script::ScriptCall {
            name: "list_directory".to_owned(),
            arguments: serde_json::json!({"path": "."}),
        }],
    };
    // `/api/generate` answers carry no calls: nothing to withhold.
    for dialect in Dialect::ALL.into_iter().filter(|d| *d != Dialect::OllamaGenerate) {
        let body = match dialect {
            Dialect::OllamaChat | Dialect::OllamaGenerate => {
                String::from_utf8_lossy(&crate::tools::mock::ollama::whole(&turn, "mock-7", false))
                    .into_owned()
            }
            Dialect::Anthropic | Dialect::Bedrock => {
                crate::tools::mock::script::anthropic_whole(&turn, "m", 7)
            }
            Dialect::OpenaiResponses => crate::tools::mock::script::responses_whole(&turn, "m", 7),
            Dialect::OpenaiChat => crate::tools::mock::script::openai_whole(&turn, "m", 7),
            Dialect::BedrockConverse => crate::tools::mock::converse::whole(&turn, 7),
            Dialect::Gemini => crate::tools::mock::script::gemini_whole(&turn, "mock-7"),
        };
        let h = Holder::new(
            Tap::new(dialect, Mode::Whole, 1 << 20),
            dialect,
            Mode::Whole,
            false,
            1 << 20,
        );
        let mut judge = Always(Decision::Block(cut("[loopguard] stopped")));
        let (out, decision) = run(h, body.as_bytes(), 4096, &mut judge);
        assert!(matches!(decision, Some(Decision::Block(_))), "{dialect:?}");
        let answer: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
        let text = answer.to_string();
        assert!(text.contains("I will list the files."), "{dialect:?}: {text}");
        assert!(!text.contains("list_directory"), "the call is withheld: {text}");
        assert!(text.contains("[loopguard] stopped"));
        // A Converse answer names neither its id nor its model.
        assert!(
            dialect == Dialect::BedrockConverse || text.contains("mock-7") || text.contains("mock_7"),
            "the upstream's identity is kept: {text}"
        );
        let output_tokens = match dialect {
            Dialect::OpenaiChat => &answer["usage"]["completion_tokens"],
            Dialect::Gemini => &answer["usageMetadata"]["candidatesTokenCount"],
            Dialect::OllamaChat => &answer["eval_count"],
            Dialect::BedrockConverse => &answer["usage"]["outputTokens"],
            _ => &answer["usage"]["output_tokens"],
        };
        assert!(
            output_tokens.as_u64().is_some_and(|n| n > 0),
            "usage kept: {text}"
        );
        if dialect != Dialect::OpenaiChat {
            assert!(text.contains("thinking it over"), "reasoning kept: {text}");
        }
    }
}
