//! Signed reasoning across an escalation (issue #17): a Claude Code and a
//! Gemini CLI history carrying reasoning signed by the agent's model,
//! escalated, against a mock that (like the providers) rejects reasoning
//! signed by another model than the one asked for. Accepted both ways: on
//! the way to the escalation model (the agent's signatures go) and on the
//! way back (the escalation model's go, the agent's stay).

mod common;

use common::{loopguard, mock, mock_requests, post};
use serde_json::{Value, json};

/// The first `thoughtSignature` of a recorded Gemini 3 function call.
fn recorded_gemini_signature() -> String {
    let path = common::fixtures_dir().join("gemini/function-call-gemini3.sse");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| {
            v.pointer("/candidates/0/content/parts/0/thoughtSignature")?
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no thoughtSignature in {}", path.display()))
}

fn config(upstream: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[[routes]]
prefix = "/v1beta"
provider = "gemini"
upstream = "{upstream}"
escalate_model = "gemini-2.5-pro"

[[routes]]
prefix = "/anthropic"
provider = "anthropic"
upstream = "{upstream}"
strip_prefix = true
escalate_model = "claude-opus-4-1"

[loop_detection.actions]
warning = "escalate"

[loop_detection.escalate]
requests = 1
"#
    )
}

/// A Gemini CLI request: `cycles` calls of `read_file` by
/// gemini-3-pro-preview, each with its recorded signature, then (when
/// `escalated_turn`) one more call signed by the escalation model.
fn gemini_body(signature: &str, cycles: usize, escalated_turn: bool) -> Value {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "Read README.md and summarise it."}]})];
    let mut turn = |n: usize, sig: &str| {
        contents.push(json!({"role": "model", "parts": [
            {"functionCall": {"id": format!("read_file-{n}"), "name": "read_file", "args": {"absolute_path": "/w/README.md"}}, "thoughtSignature": sig}]}));
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"id": format!("read_file-{n}"), "name": "read_file", "response": {"output": "# demo"}}}]}));
    };
    for n in 0..cycles {
        turn(n, signature);
    }
    if escalated_turn {
        turn(cycles, "mocksig:gemini-2.5-pro");
    }
    json!({
        "contents": contents,
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent."}]},
        "tools": [{"functionDeclarations": [{"name": "read_file", "parametersJsonSchema": {"type": "object"}}]}],
        "generationConfig": {"temperature": 1, "topP": 0.95, "thinkingConfig": {"includeThoughts": true, "thinkingLevel": "HIGH"}}
    })
}

/// A Claude Code request (shape of claude-cli 2.x with extended thinking):
/// `cycles` Bash calls by claude-sonnet-4-5, each after a signed thinking
/// block, then (when `escalated_turn`) one more by the escalation model.
fn claude_body(cycles: usize, escalated_turn: bool) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Run the tests and fix what fails."}]}),
    ];
    let mut turn = |n: usize, sig: &str| {
        let id = format!("toolu_01{n:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The tests need running first.", "signature": sig},
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "npm test", "description": "Run tests"}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "1 failing", "is_error": false}]}));
    };
    for n in 0..cycles {
        turn(n, "ErUBCkYIBxgCIkCsonnet45signedreasoningAAAA==");
    }
    if escalated_turn {
        turn(cycles, "mocksig:claude-opus-4-1");
    }
    json!({
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "stream": true,
        "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}],
        "messages": messages,
        "tools": [{"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "user_abc_account__session_4f1c7e2a-0000-4000-8000-000000000001"}
    })
}

const TEXT: &str = r#"{"turns": [{"text": "Done."}]}"#;

async fn send(url: &str, body: &Value, signer: &str) -> reqwest::StatusCode {
    post(
        url.to_owned(),
        &[
            ("x-mock-signatures", "strict"),
            ("x-mock-signer", signer),
            ("x-mock-script", TEXT),
            ("x-loopguard-session", signer),
            ("anthropic-version", "2023-06-01"),
        ],
        body.to_string(),
    )
    .await
    .status()
}

fn forwarded(r: &Value) -> Value {
    serde_json::from_str(r["body"].as_str().unwrap_or("{}")).unwrap_or(Value::Null)
}

/// The mock's strict mode is real: reasoning signed by the agent's model,
/// sent to another model without loopguard, is rejected.
#[tokio::test(flavor = "multi_thread")]
async fn the_strict_mock_rejects_reasoning_signed_by_another_model() {
    let mock = mock();
    let sig = recorded_gemini_signature();
    let url = format!(
        "{}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        mock.url()
    );
    assert_eq!(
        send(&url, &gemini_body(&sig, 1, false), "gemini-3-pro-preview").await,
        400
    );
    let url = format!(
        "{}/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse",
        mock.url()
    );
    assert_eq!(
        send(&url, &gemini_body(&sig, 1, false), "gemini-3-pro-preview").await,
        200
    );
    let mut opus = claude_body(1, false);
    opus["model"] = json!("claude-opus-4-1");
    let url = format!("{}/v1/messages", mock.url());
    assert_eq!(send(&url, &opus, "claude-sonnet-4-5-20250929").await, 400);
}

/// A Gemini CLI history with the recorded gemini-3 signatures: before the
/// loop it passes byte for byte; escalated to gemini-2.5-pro its signatures
/// are replaced with the documented skip value and the request is
/// accepted; back on gemini-3 the escalation model's signature is replaced
/// while the agent's own stay, and it is accepted again.
#[tokio::test(flavor = "multi_thread")]
async fn a_gemini_cli_history_is_accepted_by_both_models() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url()));
    let sig = recorded_gemini_signature();
    let url = format!(
        "{}/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse",
        lg.url()
    );
    let signer = "gemini-3-pro-preview";
    for cycles in 1..=3 {
        assert_eq!(
            send(&url, &gemini_body(&sig, cycles, false), signer).await,
            200,
            "cycles {cycles}"
        );
    }
    assert_eq!(
        send(&url, &gemini_body(&sig, 3, true), signer).await,
        200,
        "back on the agent's model"
    );
    let seen = mock_requests(&mock).await;
    assert_eq!(seen.len(), 4);
    assert_eq!(
        seen[1]["body"].as_str(),
        Some(gemini_body(&sig, 2, false).to_string().as_str())
    );
    assert!(
        seen[2]["path"]
            .as_str()
            .is_some_and(|p| p.contains("/models/gemini-2.5-pro:")),
        "{}",
        seen[2]["path"]
    );
    let sigs = |r: &Value| -> Vec<String> {
        forwarded(r)["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                c.pointer("/parts/0/thoughtSignature")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    };
    let skip = loopguard::dialect::gemini::model::SKIP_SIGNATURE.to_owned();
    assert_eq!(sigs(&seen[2]), vec![skip.clone(); 3]);
    assert!(
        seen[3]["path"]
            .as_str()
            .is_some_and(|p| p.contains("/models/gemini-3-pro-preview:"))
    );
    assert_eq!(sigs(&seen[3]), vec![sig.clone(), sig.clone(), sig, skip]);
}

/// A Claude Code history with signed thinking: escalated to claude-opus-4-1
/// its thinking blocks are dropped (and `thinking` turned off, the last
/// assistant message having lost its own) and the request is accepted;
/// back on sonnet only the escalation model's thinking is dropped.
#[tokio::test(flavor = "multi_thread")]
async fn a_claude_code_history_is_accepted_by_both_models() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url()));
    let url = format!("{}/anthropic/v1/messages?beta=true", lg.url());
    let signer = "claude-sonnet-4-5-20250929";
    for cycles in 1..=3 {
        assert_eq!(
            send(&url, &claude_body(cycles, false), signer).await,
            200,
            "cycles {cycles}"
        );
    }
    assert_eq!(
        send(&url, &claude_body(3, true), signer).await,
        200,
        "back on the agent's model"
    );
    let seen = mock_requests(&mock).await;
    assert_eq!(seen.len(), 4);
    assert_eq!(
        seen[1]["body"].as_str(),
        Some(claude_body(2, false).to_string().as_str())
    );
    let thinking = |r: &Value| -> Vec<String> {
        forwarded(r)["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "thinking")
            .filter_map(|b| b["signature"].as_str().map(str::to_owned))
            .collect()
    };
    let escalated = forwarded(&seen[2]);
    assert_eq!(escalated["model"], "claude-opus-4-1");
    assert!(thinking(&seen[2]).is_empty());
    assert!(escalated.get("thinking").is_none(), "{escalated}");
    assert_eq!(escalated["max_tokens"], 32000, "nothing else changes");
    assert_eq!(escalated["metadata"], claude_body(3, false)["metadata"]);
    let back = forwarded(&seen[3]);
    assert_eq!(back["model"], "claude-sonnet-4-5-20250929");
    assert_eq!(thinking(&seen[3]).len(), 3, "the agent's own thinking stays");
    assert!(!thinking(&seen[3]).iter().any(|s| s.starts_with("mocksig:")));
}
