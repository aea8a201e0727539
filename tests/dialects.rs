//! The `openai-responses` and `anthropic` dialects end to end through the
//! built binary, for what the SDK tests (`tests/python/test_responses_anthropic.py`)
//! do not reach: chanting cuts, compaction signals, chained responses.

mod common;

use common::{metric_value, metrics, mock_requests, pair, post};
use serde_json::{Value, json};

/// The `data` payloads of an SSE body, in order.
fn payloads(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect()
}

/// Posts `body` to `path` against a mock whose answer degenerates into one
/// repeated line; returns the whole answer, which must end cleanly.
async fn chanting_answer(lg: &common::Proc, path: &str, body: &'static str) -> String {
    let chant = "I will check the configuration file again now.\n".repeat(200);
    let script = json!({"turns": [{"text": chant}]}).to_string();
    let response = post(
        format!("{}{path}", lg.url()),
        &[("x-mock-script", script.as_str()), ("x-mock-pace-ms", "2")],
        body,
    )
    .await;
    response
        .text()
        .await
        .unwrap_or_else(|e| panic!("a clean end was expected: {e}"))
}

/// A Responses stream that degenerates into a repeated line is cut: the
/// open message item gets the note and is closed, `response.completed`
/// lists it, sequence numbers keep increasing, the upstream is dropped.
#[tokio::test(flavor = "multi_thread")]
async fn a_chanting_responses_stream_is_cut_and_completed() {
    let (mock, lg) = pair("");
    let text = chanting_answer(
        &lg,
        "/v1/responses",
        r#"{"model":"m","stream":true,"input":"hi"}"#,
    )
    .await;
    let events = payloads(&text);
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "response.completed", "{text}");
    let item = &last["response"]["output"][0];
    let final_text = item["content"][0]["text"].as_str().unwrap_or_default();
    assert!(final_text.contains("content_chanting"), "{final_text}");
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(
        streamed, final_text,
        "the done item holds exactly the streamed text"
    );
    let seqs: Vec<u64> = events
        .iter()
        .filter_map(|e| e["sequence_number"].as_u64())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(
        final_text.matches("check the configuration").count() < 100,
        "cut late"
    );
    common::wait_mock_stat(&mock, "responses_dropped", 1).await;
    assert_eq!(
        metric_value(&metrics(&lg).await, "loopguard_generation_cut_total"),
        1.0
    );
}

/// A non-streamed answer that degenerates is cut too, in every dialect: the
/// note replaces the text, and the upstream's id and usage stay (it
/// generated, and billed, all of it). The block's own answer used to
/// replace it whole, with a new id and zero usage (a new-user test).
#[tokio::test(flavor = "multi_thread")]
async fn a_chanting_whole_answer_keeps_the_upstreams_id_and_usage() {
    let (_mock, lg) = pair("");
    let cases: [(&str, &'static str, &str, &str); 4] = [
        (
            "/v1/chat/completions",
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            "/id",
            "/usage/completion_tokens",
        ),
        (
            "/v1/responses",
            r#"{"model":"m","input":"hi"}"#,
            "/id",
            "/usage/output_tokens",
        ),
        (
            "/anthropic/v1/messages",
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#,
            "/id",
            "/usage/output_tokens",
        ),
        (
            "/v1beta/models/m:generateContent",
            r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            "/modelVersion",
            "/usageMetadata/candidatesTokenCount",
        ),
    ];
    for (path, body, id, usage) in cases {
        let text = chanting_answer(&lg, path, body).await;
        assert!(text.contains("content_chanting"), "{path}: {text}");
        assert!(
            text.matches("check the configuration").count() < 5,
            "{path}: the chant was kept: {text}"
        );
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
        let id = answer.pointer(id).and_then(Value::as_str).unwrap_or_default();
        assert!(
            !id.is_empty() && !id.contains("loopguard"),
            "{path}: id {id:?}: {text}"
        );
        let tokens = answer.pointer(usage).and_then(Value::as_u64).unwrap_or(0);
        assert!(tokens > 0, "{path}: usage {tokens}: {text}");
    }
}

/// An Anthropic stream that degenerates is cut: the note ends the open text
/// block, then `message_delta` (`end_turn`) and `message_stop`.
#[tokio::test(flavor = "multi_thread")]
async fn a_chanting_anthropic_stream_is_cut_and_ended() {
    let (mock, lg) = pair("");
    let text = chanting_answer(
        &lg,
        "/anthropic/v1/messages",
        r#"{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    let events = payloads(&text);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        &kinds[kinds.len() - 4..],
        [
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{kinds:?}"
    );
    assert!(
        events[events.len() - 4]["delta"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("content_chanting"))
    );
    assert_eq!(events[events.len() - 2]["delta"]["stop_reason"], "end_turn");
    assert_eq!(kinds.iter().filter(|k| **k == "content_block_start").count(), 1);
    common::wait_mock_stat(&mock, "responses_dropped", 1).await;
}

/// A looping Responses history: `n` identical `exec_command` cycles.
fn responses_history(first: &str, cycles: usize, compaction: bool) -> Value {
    let mut input = Vec::new();
    if compaction {
        input.push(json!({"type": "compaction", "encrypted_content": "opaque-summary"}));
    }
    input.push(json!({"role": "user", "content": first}));
    for i in 0..cycles {
        input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "exec_command", "arguments": "{\"cmd\":\"cat a.txt\"}"}));
        input.push(json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "same"}));
    }
    json!({"model": "m", "input": input, "tools": [{"type": "function", "name": "exec_command"}]})
}

const EXEC_LOOP: &str =
    r#"{"turns":[{"tool_calls":[{"name":"exec_command","arguments":{"cmd":"cat a.txt"}}]}]}"#;

/// Sends a looping history as a summarizer request: it must pass untouched
/// (byte for byte, no verdict header), since no detector runs on it.
async fn assert_summarizer_passes(path: &str, headers: &[(&str, &str)], body: String) {
    let (mock, lg) = pair("");
    let response = post(format!("{}{path}", lg.url()), headers, body.clone()).await;
    assert_eq!(response.status(), 200);
    assert!(common::verdict_header(&response).is_none());
    let recorded = mock_requests(&mock).await;
    assert_eq!(
        recorded[0]["body"].as_str(),
        Some(body.as_str()),
        "forwarded byte for byte"
    );
}

/// `POST /v1/responses/compact` (Codex's compaction endpoint) is a
/// summarizer request.
#[tokio::test(flavor = "multi_thread")]
async fn the_responses_compact_endpoint_passes_untouched() {
    let body = responses_history("fix it", 6, false).to_string();
    assert_summarizer_passes(
        "/v1/responses/compact",
        &[("x-loopguard-session", "compact")],
        body,
    )
    .await;
}

/// Codex marks its compaction requests (sent to `/responses` itself) with
/// `"request_kind":"compaction"` in `x-codex-turn-metadata`.
#[tokio::test(flavor = "multi_thread")]
async fn a_codex_compaction_turn_feeds_no_detector() {
    let body = responses_history("fix it", 6, false).to_string();
    let headers = [
        ("x-loopguard-session", "codex-compact"),
        (
            "x-codex-turn-metadata",
            r#"{"request_kind":"compaction","turn_id":"t1"}"#,
        ),
    ];
    assert_summarizer_passes("/v1/responses", &headers, body).await;
}

/// Claude Code's `x-claude-code-compaction` marks a summarizer request too.
#[tokio::test(flavor = "multi_thread")]
async fn a_claude_code_compaction_request_feeds_no_detector() {
    let mut messages = vec![json!({"role": "user", "content": "fix it"})];
    for i in 0..6 {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "Read", "input": {"file_path": "a"}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "same"}]}));
    }
    let body = json!({"model": "m", "max_tokens": 10, "messages": messages}).to_string();
    let headers = [
        ("x-loopguard-session", "cc-compact"),
        ("x-claude-code-compaction", "1"),
    ];
    assert_summarizer_passes("/anthropic/v1/messages", &headers, body).await;
}

/// A Responses history that newly carries a `compaction` item is a
/// compaction: the loop seen before it, repeated 3 times after it, is
/// aborted with `compaction_loop_persisted`.
#[tokio::test(flavor = "multi_thread")]
async fn a_loop_that_survives_a_responses_compaction_item_is_aborted() {
    let (_mock, lg) = pair("");
    let url = format!("{}/v1/responses", lg.url());
    let headers = [
        ("x-loopguard-session", "responses-compaction"),
        ("x-mock-script", EXEC_LOOP),
    ];
    for n in 0..3 {
        let response = post(
            url.clone(),
            &headers,
            responses_history("fix it", n, false).to_string(),
        )
        .await;
        assert_eq!(response.status(), 200);
    }
    let mut aborted = None;
    for n in 0..4 {
        let response = post(
            url.clone(),
            &headers,
            responses_history("go on", n, true).to_string(),
        )
        .await;
        if response.status() == 400 {
            let body: Value = response.json().await.unwrap_or_default();
            aborted = Some((n, body));
            break;
        }
    }
    let (n, body) = aborted.unwrap_or_else(|| panic!("never aborted"));
    assert_eq!(n, 3);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("compaction_loop_persisted"), "{message}");
}

/// The calls a recorded response carries, parsed as loopguard parses it.
fn recorded_calls(dialect: loopguard::dialect::Dialect, body: &[u8]) -> Vec<loopguard::transcript::ToolCall> {
    let mut tap = loopguard::proxy::tap::Tap::new(dialect, loopguard::dialect::Mode::Sse, usize::MAX);
    let mut frames = Vec::new();
    tap.feed(body, &mut frames);
    let _ = tap.finish(body.len() as u64, &mut frames);
    frames
        .into_iter()
        .flat_map(|f| f.events)
        .filter_map(|e| match e {
            loopguard::dialect::StreamEvent::ToolCallComplete { call, .. } => Some(call),
            _ => None,
        })
        .collect()
}

/// The multi-step recordings (`*.stepN.sse`, successive responses of one
/// agent run) replayed as one session: each step is answered with its
/// recording, byte for byte, and the next request carries the calls it made
/// with results. A run that makes progress draws no verdict.
#[tokio::test(flavor = "multi_thread")]
async fn multi_step_recordings_pass_as_one_quiet_session() {
    use loopguard::dialect::Dialect;
    let (_mock, lg) = pair("");
    for (dir, prefix, dialect) in [
        (
            "openai-responses",
            "reasoning-calculator-steps",
            Dialect::OpenaiResponses,
        ),
        ("openai-responses", "shell-tool", Dialect::OpenaiResponses),
        ("anthropic", "tool-search-agent-steps", Dialect::Anthropic),
    ] {
        let steps: Vec<_> = common::fixtures_of(dir)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect();
        assert!(steps.len() >= 2, "{prefix}: {steps:?}");
        let mut history: Vec<Value> = vec![json!({"role": "user", "content": "work on it"})];
        for (n, step) in steps.iter().enumerate() {
            let name = format!("{dir}/{}", step.file_name().unwrap_or_default().to_string_lossy());
            let expected = std::fs::read(step).unwrap_or_else(|e| panic!("{e}"));
            let (path, body) = match dialect {
                Dialect::Anthropic => (
                    "/anthropic/v1/messages",
                    json!({"model": "m", "stream": true, "max_tokens": 100, "messages": history}),
                ),
                _ => (
                    "/v1/responses",
                    json!({"model": "m", "stream": true, "input": history}),
                ),
            };
            let session = format!("steps-{prefix}");
            let response = post(
                format!("{}{path}", lg.url()),
                &[
                    ("x-mock-fixture", name.as_str()),
                    ("x-loopguard-session", session.as_str()),
                ],
                body.to_string(),
            )
            .await;
            assert!(common::verdict_header(&response).is_none(), "{name}");
            let (bytes, end) = common::read_body(response).await;
            assert!(end.is_ok(), "{name}: {end:?}");
            assert!(bytes == expected, "{name}: bytes differ from the recording");
            for (i, call) in recorded_calls(dialect, &bytes).into_iter().enumerate() {
                let id = call.id.clone().unwrap_or_else(|| format!("s{n}c{i}"));
                let args = match &call.arguments {
                    loopguard::transcript::Arguments::Json(v) => v.clone(),
                    loopguard::transcript::Arguments::Unparsable(t) => json!(t),
                };
                if dialect == Dialect::Anthropic {
                    history.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": call.name, "input": args}]}));
                    history.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": format!("result {n}")}]}));
                } else {
                    history.push(json!({"type": "function_call", "call_id": id, "name": call.name, "arguments": args.to_string()}));
                    history.push(json!({"type": "function_call_output", "call_id": id, "output": format!("result {n}")}));
                }
            }
        }
    }
    let verdicts: Vec<String> = lg
        .logs()
        .lines()
        .filter(|l| l.contains("\"detector\""))
        .map(str::to_owned)
        .collect();
    assert!(
        verdicts.is_empty(),
        "a run making progress drew verdicts: {verdicts:#?}"
    );
}

/// Claude Code's `metadata.user_id` (a JSON string carrying `session_id`)
/// names the session when no header does: two requests with different first
/// messages are one session; another `session_id` is another session (by
/// fingerprint alone, the three requests would be three sessions).
#[tokio::test(flavor = "multi_thread")]
async fn a_metadata_session_id_names_the_session() {
    let (_mock, lg) = pair("");
    for (task, session) in [
        ("first wording", "s-1"),
        ("second wording", "s-1"),
        ("third wording", "s-2"),
    ] {
        let user_id = json!({"device_id": "d", "account_uuid": "", "session_id": session}).to_string();
        let body = json!({"model": "m", "max_tokens": 10, "metadata": {"user_id": user_id},
            "messages": [{"role": "user", "content": task}]});
        let response = post(
            format!("{}/anthropic/v1/messages", lg.url()),
            &[],
            body.to_string(),
        )
        .await;
        assert_eq!(response.status(), 200);
    }
    let sessions: Value = common::get_json(format!("{}/admin/sessions", lg.admin_url())).await;
    assert_eq!(
        sessions["sessions"].as_array().map(Vec::len),
        Some(2),
        "{sessions}"
    );
}
