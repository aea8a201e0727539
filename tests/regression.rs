//! Regressions: each test is named after a bug that was found and fixed.

mod common;

use common::{mock_requests, pair, post};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";

fn conversation(task: &str, cycles: usize) -> String {
    let mut m = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": task}),
    ];
    for i in 0..cycles {
        let id = format!("{}{i}", &task[..3]);
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}));
        m.push(json!({"role": "tool", "tool_call_id": id, "content": "a.txt\nb.txt"}));
    }
    json!({"model": "m", "messages": m, "tools": [{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]})
        .to_string()
}

/// A second conversation started with the same key, system text and tools
/// was taken for a compaction of the first, which then got a false
/// `compaction_loop_persisted` abort.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_conversation_on_the_same_key_is_not_a_compaction_of_another() {
    let (_mock, lg) = pair("");
    let auth = [("authorization", "Bearer sk-shared")];
    for n in 0..3 {
        let r = post(
            format!("{}{CHAT}", lg.url()),
            &auth,
            conversation("Task A: fix bug 1", n),
        )
        .await;
        let _ = r.bytes().await;
    }
    let r = post(
        format!("{}{CHAT}", lg.url()),
        &auth,
        conversation("Task B: another bug", 0),
    )
    .await;
    let _ = r.bytes().await;
    let r = post(
        format!("{}{CHAT}", lg.url()),
        &auth,
        conversation("Task A: fix bug 1", 3),
    )
    .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    assert!(!lg.logs().contains("post_compaction"));
}

/// An explicitly keyed session was hijacked by a fingerprinted request of the
/// same lane.
#[tokio::test(flavor = "multi_thread")]
async fn an_explicit_session_is_never_joined_by_a_fingerprinted_request() {
    let (_mock, lg) = pair("");
    let a = [("x-loopguard-session", "agent-A")];
    for n in 0..3 {
        let r = post(
            format!("{}{CHAT}", lg.url()),
            &a,
            conversation("Task A: fix bug 1", n),
        )
        .await;
        let _ = r.bytes().await;
    }
    let r = post(
        format!("{}{CHAT}", lg.url()),
        &[],
        conversation("Task B: another bug", 0),
    )
    .await;
    let _ = r.bytes().await;
    let r = post(
        format!("{}{CHAT}", lg.url()),
        &a,
        conversation("Task A: fix bug 1", 3),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(!lg.logs().contains("post_compaction"));
}

/// A fresh request on another route inherited a Gemini conversation's loop
/// and was blocked with a tool it had never seen.
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_request_never_inherits_another_routes_loop() {
    let (mock, lg) = pair("");
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "go"}]})];
    for _ in 0..5 {
        contents
            .push(json!({"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"p": "."}}}]}));
        contents.push(
            json!({"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"r": "a"}}}]}),
        );
    }
    let r = post(
        format!("{}/v1beta/models/x:generateContent", lg.url()),
        &[],
        json!({"contents": contents}).to_string(),
    )
    .await;
    let _ = r.bytes().await;
    let r = post(
        format!("{}{CHAT}", lg.url()),
        &[],
        r#"{"model":"m","messages":[{"role":"user","content":"a totally different task"}]}"#,
    )
    .await;
    assert!(r.headers().get("x-loopguard-verdict").is_none());
    let _ = r.bytes().await;
    let last: Value = mock_requests(&mock).await.pop().unwrap_or_default();
    assert_eq!(last["path"], CHAT, "the fresh request reached the upstream");
}

/// The misroute hint for a Gemini SDK call at the root named `/v1beta`,
/// which would send `/v1beta/v1/models/…` upstream; it must name the
/// prefix-stripping route.
#[tokio::test(flavor = "multi_thread")]
async fn the_misroute_hint_names_the_route_that_keeps_the_path() {
    let (_mock, lg) = pair("");
    let r = post(
        format!("{}/v1/models/gemini-x:generateContent", lg.url()),
        &[("x-goog-api-key", "AIza-test")],
        "{}",
    )
    .await;
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap_or_default();
    assert!(text.contains("prefix /gemini"), "{text}");
}

/// A dot-segment path escaped its route (`/v1/../v1beta/…` went to the
/// OpenAI upstream unparsed).
#[tokio::test(flavor = "multi_thread")]
async fn dot_segment_paths_are_refused() {
    let (mock, lg) = pair("");
    let mut tcp = tokio::net::TcpStream::connect(lg.addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let body = "{}";
    let request = format!(
        "POST /v1/../v1beta/models/x:generateContent HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut tcp, request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut raw = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut raw).await;
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(mock_requests(&mock).await.is_empty());
}
