//! Credentials an agent puts in tool-call arguments (a `curl` with a bearer
//! token, an exported API key) never appear in what loopguard writes: the
//! verdict log lines (request time and stream time), `/admin/sessions/{key}`
//! and the warning and block messages. The agent's own bytes are forwarded
//! unchanged.

mod common;

use common::{client, get_json, mock_requests, pair};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";
/// A curl-shaped bearer token.
const BEARER: &str = "Zq8tXk2vWm4pL9sR7yB3nC6dF1gH5jK0";
/// An OpenAI-shaped API key.
const API_KEY: &str = "sk-proj-T3stKey0123456789abcdefghijKLMNOPqr";

fn command(shape: &str) -> String {
    match shape {
        "curl" => format!("curl -sS -H \"Authorization: Bearer {BEARER}\" https://api.example.com/v1/items"),
        _ => format!("export OPENAI_API_KEY={API_KEY} && python run.py"),
    }
}

/// A history of `cycles` identical `bash` calls running `command`.
fn history(command: &str, cycles: usize) -> Value {
    let args = json!({"command": command}).to_string();
    let mut messages = vec![json!({"role": "user", "content": "Fetch the items."})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "bash", "arguments": args}}
        ]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "401 Unauthorized"}),
        );
    }
    json!({"model": "gpt-test", "stream": true, "messages": messages, "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    ]})
}

/// Sends the history with the mock answering the same call again; returns the client's body.
async fn send(lg: &common::Proc, command: &str, cycles: usize) -> String {
    let script = json!({"turns": [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}]});
    client()
        .post(format!("{}{CHAT}", lg.url()))
        .header("content-type", "application/json")
        .header("x-loopguard-session", "secrets-test")
        .header("x-mock-script", script.to_string())
        .body(history(command, cycles).to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_default()
}

fn assert_clean(what: &str, text: &str) {
    for secret in [BEARER, API_KEY, &API_KEY[..20], &BEARER[..16]] {
        assert!(
            !text.contains(secret),
            "{what} shows a credential ({secret}):\n{text}"
        );
    }
}

async fn credentials_stay_out_of_everything_loopguard_writes(shape: &str) {
    let (mock, lg) = pair("");
    let command = command(shape);
    // Four identical calls: warned at request time; the model's fifth one
    // is blocked at stream time.
    let blocked = send(&lg, &command, 4).await;
    let verdicts = lg.wait_log_events("verdict", 2);
    for at in ["request", "stream"] {
        assert!(
            verdicts
                .iter()
                .any(|v| v["at"] == at && v.to_string().contains("[REDACTED]")),
            "a {at}-time verdict showing the call, redacted: {verdicts:?}"
        );
    }
    assert!(blocked.contains("[loopguard]"), "blocked: {blocked}");
    assert!(blocked.contains("[REDACTED]"), "blocked: {blocked}");
    assert_clean("the block message", &blocked);
    assert_clean("the log", &lg.logs());

    // The warning injected upstream names the call but not the credential;
    // the agent's own history is forwarded as it was.
    let requests = mock_requests(&mock).await;
    let forwarded = requests
        .iter()
        .filter_map(|r| r["body"].as_str())
        .find(|b| b.contains("[loopguard]"))
        .unwrap_or_else(|| panic!("no warned request upstream: {requests:?}"));
    let warning = &forwarded[forwarded.find("[loopguard]").unwrap_or(0)..];
    let warning = &warning[..warning.find('"').unwrap_or(warning.len())];
    assert!(warning.contains("bash"), "{warning}");
    assert_clean("the injected warning", warning);
    let forwarded: Value = serde_json::from_str(forwarded).unwrap_or_default();
    assert_eq!(
        forwarded["messages"][1]["tool_calls"][0]["function"]["arguments"],
        json!({"command": command}).to_string(),
        "the agent's own arguments are forwarded unchanged"
    );

    let sessions: Value = get_json(format!("{}/admin/sessions", lg.admin_url())).await;
    let key = sessions["sessions"][0]["key"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let detail: Value = get_json(format!("{}/admin/sessions/{key}", lg.admin_url())).await;
    let text = detail.to_string();
    assert!(
        text.contains("[REDACTED]"),
        "the session shows the call, redacted: {text}"
    );
    assert_clean("/admin/sessions/{key}", &text);
}

/// `curl -H "Authorization: Bearer …"` in a `bash` call: the token is redacted.
#[tokio::test(flavor = "multi_thread")]
async fn a_curl_bearer_token_in_tool_arguments_is_never_written() {
    credentials_stay_out_of_everything_loopguard_writes("curl").await;
}

/// `export OPENAI_API_KEY=sk-…` in a `bash` call: the key is redacted.
#[tokio::test(flavor = "multi_thread")]
async fn an_exported_api_key_in_tool_arguments_is_never_written() {
    credentials_stay_out_of_everything_loopguard_writes("export").await;
}
