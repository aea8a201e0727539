//! Recording end to end through the built binary: an agent loop streams
//! through `serve` with `[recording]` on; `loopguard replay` on the file it
//! wrote gives the verdicts `serve` logged live (request index, request or
//! stream time, detector, level); files are 0600 in a 0700 directory and
//! hold no credential.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{client, config_for, loopguard, mock};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";
const READ_LOOP: &str =
    r#"{"turns":[{"tool_calls":[{"name":"read_file","arguments":{"path":"src/main.rs"}}]}]}"#;

/// The assistant turn a streamed OpenAI chat answer carried: its text and tool calls.
fn assistant_turn(sse: &str) -> Value {
    let mut text = String::new();
    let mut calls: Vec<Value> = Vec::new();
    for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let delta = &chunk["choices"][0]["delta"];
        if let Some(t) = delta["content"].as_str() {
            text.push_str(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = usize::try_from(call["index"].as_u64().unwrap_or(0)).unwrap_or(0);
            while calls.len() <= i {
                calls.push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            if let Some(id) = call["id"].as_str() {
                calls[i]["id"] = json!(id);
            }
            for key in ["name", "arguments"] {
                if let Some(part) = call["function"][key].as_str() {
                    let so_far = calls[i]["function"][key].as_str().unwrap_or("").to_owned();
                    calls[i]["function"][key] = json!(so_far + part);
                }
            }
        }
    }
    let mut turn =
        json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        turn["tool_calls"] = json!(calls);
    }
    turn
}

fn recordings(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.to_string_lossy().ends_with(".rec.jsonl"));
    files.sort();
    files
}

/// (request index, at, detector, level) of every verdict.
type Seen = Vec<(u64, String, String, String)>;

/// An agent loop (the model repeats one read; the agent runs it and sends
/// the same result back) streams 9 requests through `serve` with recording
/// on. Replaying the recording gives exactly the verdicts `serve` logged:
/// the same request index, time of judgement, detector and level.
#[tokio::test(flavor = "multi_thread")]
async fn replaying_a_recording_gives_the_verdicts_serve_gave_live() {
    let dir = std::env::temp_dir().join(format!("loopguard-recording-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = mock();
    let config = format!(
        "{}\n[recording]\nenabled = true\ndir = \"{}\"\n",
        config_for(&upstream.url(), ""),
        dir.display()
    );
    let lg = loopguard(&config);
    let mut messages = vec![
        json!({"role": "user", "content": "fix the parser; my key is sk-proj-abcdefghijklmnopqrstuvwxyz012345"}),
    ];
    let mut live: Seen = Vec::new();
    for i in 0..9_u64 {
        let before = lg.log_events("verdict").len();
        let body = json!({"model": "gpt-test", "stream": true, "messages": messages, "tools": [
            {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]});
        let response = client()
            .post(format!("{}{CHAT}", lg.url()))
            .header("content-type", "application/json")
            .header("authorization", "Bearer sk-secret-header-value-0123456789")
            .header("x-mock-script", READ_LOOP)
            .header("x-loopguard-session", "recorded-agent")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let sse = response.text().await.unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(150)).await;
        for v in &lg.log_events("verdict")[before..] {
            let field = |k: &str| {
                v["fields"][k]
                    .as_str()
                    .or_else(|| v[k].as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            live.push((i, field("at"), field("detector"), field("level")));
        }
        let turn = assistant_turn(&sse);
        let calls = turn["tool_calls"].as_array().cloned().unwrap_or_default();
        messages.push(turn);
        if calls.is_empty() {
            messages.push(json!({"role": "user", "content": "go on"}));
        }
        for call in calls {
            messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "fn main() {}"}));
        }
    }
    assert!(
        live.iter().any(|v| v.1 == "request"),
        "no request-time verdict live: {live:?}"
    );
    assert!(
        live.iter().any(|v| v.1 == "stream"),
        "no stream-time verdict live: {live:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let files = recordings(&dir);
    assert_eq!(files.len(), 1, "one session lane: {files:?}");
    let file = &files[0];
    assert_eq!(
        std::fs::metadata(file)
            .map(|m| m.permissions().mode() & 0o777)
            .ok(),
        Some(0o600)
    );
    assert_eq!(
        std::fs::metadata(&dir)
            .map(|m| m.permissions().mode() & 0o777)
            .ok(),
        Some(0o700)
    );
    let text = std::fs::read_to_string(file).unwrap_or_default();
    assert!(
        !text.contains("abcdefghijklmnopqrstuvwxyz012345"),
        "a body credential was written"
    );
    assert!(!text.contains("sk-secret-header-value"), "a header was written");
    assert!(text.contains("[REDACTED]"));
    let requests = text.lines().filter(|l| l.contains(r#""kind":"request""#)).count();
    let responses = text
        .lines()
        .filter(|l| l.contains(r#""kind":"response""#))
        .count();
    assert_eq!(requests, 9);
    assert!(responses >= 5, "{responses} responses recorded");
    // What each request adds, not the whole history again: the last request
    // line is far smaller than the history it stands for.
    let last = text
        .lines()
        .rfind(|l| l.contains(r#""kind":"request""#))
        .unwrap_or_default();
    let whole = serde_json::to_string(&messages).unwrap_or_default();
    assert!(last.len() * 2 < whole.len(), "{} vs {}", last.len(), whole.len());

    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let replayed: Seen = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or("").to_owned();
            (
                l["request"].as_u64().unwrap_or(99),
                s("at"),
                s("detector"),
                s("level"),
            )
        })
        .collect();
    assert_eq!(replayed, live);
}
