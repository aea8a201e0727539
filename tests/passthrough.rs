//! Transparent when quiet: every recorded stream goes through loopguard
//! byte-exact, however the upstream chunks its writes, and loopguard's tap
//! parses the same events as a whole-body parse of the same file.

mod common;

use common::{client, fixtures_of, pair, post, read_body};
use loopguard::dialect::{Dialect, StreamEvent};
use loopguard::sse::SseDecoder;

/// What the request log line reports, computed from a whole-file parse.
fn expected_summary(dialect: Dialect, body: &[u8]) -> (String, String) {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    decoder.push(body, &mut events);
    events.extend(decoder.finish());
    let mut parser = dialect.stream_parser();
    let mut out = Vec::new();
    for e in &events {
        if e.data.trim() == "[DONE]" {
            continue;
        }
        let _ = parser.payload(&e.data, &mut out);
    }
    parser.end(&mut out);
    let calls: Vec<String> = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallComplete { call, .. } => Some(call.name.clone()),
            _ => None,
        })
        .collect();
    let finish: Vec<String> = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Finish { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    (calls.join(","), finish.join(","))
}

async fn check_dialect(dir: &str, dialect: Dialect, url_path: &str) {
    let (_mock, lg) = pair("");
    let http = client();
    let mut seen = 0;
    for file in fixtures_of(dir) {
        let name = format!("{dir}/{}", file.file_name().unwrap_or_default().to_string_lossy());
        let expected = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
        let (calls, finish) = expected_summary(dialect, &expected);
        for (chunk, seed) in [("random", "1"), ("random", "2"), ("bytes", "0")] {
            let response = http
                .post(format!("{}{url_path}", lg.url()))
                .header("x-mock-fixture", &name)
                .header("x-mock-chunk", chunk)
                .header("x-mock-seed", seed)
                .header("content-type", "application/json")
                .body(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"contents":[]}"#)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(response.status(), 200, "{name}");
            let (body, end) = read_body(response).await;
            assert!(end.is_ok(), "{name} ({chunk}): body broke off: {end:?}");
            assert!(
                body == expected,
                "{name} ({chunk} writes): bytes differ from the recording"
            );
            seen += 1;
            let logs = lg.wait_log_events("request", seen);
            let line = &logs[seen - 1];
            assert_eq!(line["outcome"], "complete", "{name} ({chunk}): {line}");
            assert_eq!(
                line["tool_calls"],
                calls.as_str(),
                "{name} ({chunk}): tool calls parsed in flight"
            );
            assert_eq!(
                line["finish"],
                finish.as_str(),
                "{name} ({chunk}): finish reasons parsed in flight"
            );
        }
    }
}

/// OpenAI chat recordings pass byte-exact in random-sized and one-byte writes.
#[tokio::test(flavor = "multi_thread")]
async fn openai_chat_fixtures_pass_byte_exact() {
    check_dialect("openai-chat", Dialect::OpenaiChat, "/v1/chat/completions").await;
}

/// Gemini recordings (SSE framing, CRLF) pass byte-exact.
#[tokio::test(flavor = "multi_thread")]
async fn gemini_sse_fixtures_pass_byte_exact() {
    check_dialect(
        "gemini",
        Dialect::Gemini,
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
    )
    .await;
}

/// OpenAI Responses recordings (named SSE events, no `[DONE]`) pass byte-exact.
#[tokio::test(flavor = "multi_thread")]
async fn openai_responses_fixtures_pass_byte_exact() {
    check_dialect("openai-responses", Dialect::OpenaiResponses, "/v1/responses").await;
}

/// Anthropic Messages recordings pass byte-exact through the `/anthropic`
/// route, with Claude Code's `?beta=true` query.
#[tokio::test(flavor = "multi_thread")]
async fn anthropic_fixtures_pass_byte_exact() {
    check_dialect(
        "anthropic",
        Dialect::Anthropic,
        "/anthropic/v1/messages?beta=true",
    )
    .await;
}

/// Gemini recordings re-served as one streamed JSON array (no `alt=sse`)
/// pass byte-exact, compared with the mock's own answer.
#[tokio::test(flavor = "multi_thread")]
async fn gemini_json_array_streams_pass_byte_exact() {
    let (mock, lg) = pair("");
    let mut seen = 0;
    for file in fixtures_of("gemini") {
        let name = format!(
            "gemini/{}",
            file.file_name().unwrap_or_default().to_string_lossy()
        );
        let path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent";
        let direct = post(
            format!("{}{path}", mock.url()),
            &[("x-mock-fixture", &name)],
            "{}",
        )
        .await;
        let (expected, _) = read_body(direct).await;
        assert!(
            expected.starts_with(b"[") && expected.ends_with(b"]"),
            "{name}: not an array"
        );
        for chunk in ["random", "bytes"] {
            let response = post(
                format!("{}{path}", lg.url()),
                &[("x-mock-fixture", &name), ("x-mock-chunk", chunk)],
                "{}",
            )
            .await;
            let (body, end) = read_body(response).await;
            assert!(end.is_ok(), "{name} ({chunk}): {end:?}");
            assert!(body == expected, "{name} ({chunk}): bytes differ");
            seen += 1;
            let logs = lg.wait_log_events("request", seen);
            assert_eq!(
                logs[seen - 1]["outcome"],
                "complete",
                "{name}: {}",
                logs[seen - 1]
            );
        }
    }
}
