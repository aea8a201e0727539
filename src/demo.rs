//! `loopguard demo`: see it work in ten seconds. Starts the mock upstream
//! (scripted to loop on one tool call) and the proxy on free local ports,
//! drives a short agent loop through it for each dialect (streaming), once
//! without streaming and once with `abort` as the critical action, and
//! prints, turn by turn, what the agent sent, what loopguard decided (each
//! warning in full, with where in the request it was carried) and what the
//! agent received; then what to try next.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::{self, Config};
use crate::dialect::{Dialect, StreamEvent};
use crate::guard::Guard;
use crate::mock::script::Script;
use crate::proxy::tap::{Framing, Tap};

const RESULT: &str = "Cargo.toml\nREADME.md\nsrc/";

fn demo_config(upstream: &str, extra: &str) -> Result<Config, String> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"{upstream}\"\n\n\
         [[routes]]\nprefix = \"/v1beta\"\nprovider = \"gemini\"\nupstream = \"{upstream}\"\n\n\
         [[routes]]\nprefix = \"/anthropic\"\nprovider = \"anthropic\"\nupstream = \"{upstream}\"\nstrip_prefix = true\n{extra}"
    );
    config::load_str(&text, "<demo>")
        .map(|l| l.config)
        .map_err(|e| e.to_string())
}

async fn spawn(router: axum::Router) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}

/// What the agent received in one turn.
struct Received {
    verdict: Option<String>,
    status: u16,
    text: String,
    calls: Vec<(String, String)>,
}

async fn turn(
    client: &reqwest::Client,
    url: &str,
    dialect: Dialect,
    body: &Value,
    framing: Framing,
) -> Result<Received, String> {
    let response = client
        .post(url)
        .header("x-loopguard-session", format!("demo-{}", dialect.name()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let verdict = response
        .headers()
        .get("x-loopguard-verdict")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Ok(Received {
            verdict,
            status,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            calls: Vec::new(),
        });
    }
    let mut tap = Tap::new(dialect, framing, usize::MAX);
    let mut frames = Vec::new();
    tap.feed(&bytes, &mut frames);
    let _ = tap.finish(bytes.len() as u64, &mut frames);
    let mut text = String::new();
    let mut calls = Vec::new();
    for event in frames.into_iter().flat_map(|f| f.events) {
        match event {
            StreamEvent::TextDelta { text: t, .. } => text.push_str(&t),
            StreamEvent::ToolCallComplete { call, .. } => {
                let args = match &call.arguments {
                    crate::transcript::Arguments::Json(v) => v.to_string(),
                    crate::transcript::Arguments::Unparsable(s) => s.clone(),
                };
                calls.push((call.name, args));
            }
            _ => {}
        }
    }
    Ok(Received {
        verdict,
        status,
        text,
        calls,
    })
}

fn add_turn(dialect: Dialect, body: &mut Value, n: usize, name: &str, args: &str) {
    let args_value: Value = serde_json::from_str(args).unwrap_or(json!({}));
    match dialect {
        Dialect::OpenaiChat => {
            if let Some(messages) = body["messages"].as_array_mut() {
                let id = format!("call_{n}");
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": name, "arguments": args}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": RESULT}));
            }
        }
        Dialect::Gemini => {
            if let Some(contents) = body["contents"].as_array_mut() {
                contents.push(
                    json!({"role": "model", "parts": [{"functionCall": {"name": name, "args": args_value}}]}),
                );
                contents.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": name, "response": {"output": RESULT}}}]}));
            }
        }
        Dialect::OpenaiResponses => {
            if let Some(input) = body["input"].as_array_mut() {
                let id = format!("call_{n}");
                input.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": args}));
                input.push(json!({"type": "function_call_output", "call_id": id, "output": RESULT}));
            }
        }
        Dialect::Anthropic => {
            if let Some(messages) = body["messages"].as_array_mut() {
                let id = format!("toolu_{n}");
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": name, "input": args_value}]}));
                messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": RESULT}]}));
            }
        }
    }
}

/// The warning loopguard added to the last request the upstream received,
/// in full, and where in that body it was carried (a JSON path).
async fn warned(client: &reqwest::Client, mock: &str) -> Option<(String, String)> {
    let bytes = client
        .get(format!("{mock}/_mock/requests"))
        .send()
        .await
        .ok()?
        .bytes()
        .await
        .ok()?;
    let requests: Vec<Value> = serde_json::from_slice(&bytes).ok()?;
    let body: Value = serde_json::from_str(requests.last()?["body"].as_str()?).ok()?;
    find_warning(&body, String::new())
}

/// The first string holding `[loopguard]` below `value`, with its path.
fn find_warning(value: &Value, path: String) -> Option<(String, String)> {
    match value {
        Value::String(s) => s.find("[loopguard]").map(|i| (s[i..].trim().to_owned(), path)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_warning(v, format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let sep = if path.is_empty() { "" } else { "." };
            find_warning(v, format!("{path}{sep}{k}"))
        }),
        _ => None,
    }
}

/// One demo run: which dialect, streaming or not, and the heading.
struct Run {
    dialect: Dialect,
    stream: bool,
    title: &'static str,
}

async fn run_dialect(client: &reqwest::Client, proxy: &str, mock: &str, run: &Run) -> Result<(), String> {
    let dialect = run.dialect;
    let (url, mut body) = match dialect {
        Dialect::OpenaiChat => (
            format!("{proxy}/v1/chat/completions"),
            json!({"model": "demo", "stream": true, "messages": [{"role": "user", "content": "What files are in this project?"}],
                   "tools": [{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]}),
        ),
        Dialect::Gemini => (
            format!("{proxy}/v1beta/models/demo:streamGenerateContent?alt=sse"),
            json!({"contents": [{"role": "user", "parts": [{"text": "What files are in this project?"}]}],
                   "tools": [{"functionDeclarations": [{"name": "list_directory"}]}]}),
        ),
        Dialect::OpenaiResponses => (
            format!("{proxy}/v1/responses"),
            json!({"model": "demo", "stream": true, "store": false,
                   "input": [{"role": "user", "content": "What files are in this project?"}],
                   "tools": [{"type": "function", "name": "list_directory", "parameters": {"type": "object"}}]}),
        ),
        Dialect::Anthropic => (
            format!("{proxy}/anthropic/v1/messages"),
            json!({"model": "demo", "stream": true, "max_tokens": 1024,
                   "messages": [{"role": "user", "content": "What files are in this project?"}],
                   "tools": [{"name": "list_directory", "input_schema": {"type": "object"}}]}),
        ),
    };
    if !run.stream {
        body["stream"] = json!(false);
    }
    let framing = if run.stream { Framing::Sse } else { Framing::Json };
    println!(
        "\n=== {} ({}) — the model keeps calling list_directory(\".\")",
        dialect.name(),
        run.title
    );
    for n in 0..8 {
        let results = n;
        let received = turn(client, &url, dialect, &body, framing).await?;
        let warning = warned(client, mock).await;
        println!(
            "turn {}: agent sends its history with {results} identical tool result(s)",
            n + 1
        );
        match &warning {
            Some((w, at)) if received.status == 200 || received.verdict.is_none() => {
                println!("        loopguard: forwarded with a warning for the model, carried in {at}:");
                println!("          {w}");
            }
            _ if received.verdict.is_some() => {
                println!(
                    "        loopguard: {}",
                    received.verdict.as_deref().unwrap_or_default()
                );
            }
            _ => println!("        loopguard: forwarded unchanged"),
        }
        if let Some((name, args)) = received.calls.first() {
            println!("        agent receives: tool call {name}({args})");
            add_turn(dialect, &mut body, n, name, args);
        } else if received.status == 200 {
            let text = received.text.trim();
            let how = if run.stream { "stream" } else { "answer" };
            println!(
                "        loopguard withheld call {} to list_directory from the model's {how}; in its place the agent receives (HTTP 200):",
                n + 1
            );
            println!("          {text}");
            println!("        → the agent stops: the looping call never reached it.");
            return Ok(());
        } else {
            println!(
                "        agent receives an error (HTTP {}): {}",
                received.status,
                received.text.trim()
            );
            println!("        → the agent's run ends: the looping call never reached it.");
            return Ok(());
        }
    }
    Ok(())
}

/// Runs the demo and prints it.
///
/// # Errors
/// When a local listener cannot be bound or a request fails.
pub async fn run() -> Result<(), String> {
    crate::proxy::upstream::install_crypto_provider();
    let mock = spawn(crate::mock::app(
        std::path::PathBuf::from("."),
        Script::from_turns(vec![crate::mock::script::Turn {
            tool_calls: vec![crate::mock::script::ScriptCall {
                name: "list_directory".to_owned(),
                arguments: json!({"path": "."}),
            }],
            ..Default::default()
        }]),
        0,
    ))
    .await?;
    let proxy = spawn_proxy(&mock, "").await?;
    let aborting = spawn_proxy(&mock, "\n[loop_detection.actions]\ncritical = \"abort\"\n").await?;
    println!(
        "loopguard demo: mock upstream at {mock}, loopguard at {proxy} (defaults: warn at 3 identical calls, block at 5)"
    );
    let client = reqwest::Client::new();
    for dialect in Dialect::ALL {
        let run = Run {
            dialect,
            stream: true,
            title: "streaming",
        };
        run_dialect(&client, &proxy, &mock, &run).await?;
    }
    let whole = Run {
        dialect: Dialect::OpenaiChat,
        stream: false,
        title: "not streaming",
    };
    run_dialect(&client, &proxy, &mock, &whole).await?;
    println!(
        "\n--- the same loop with [loop_detection.actions] critical = \"abort\" (loopguard at {aborting})"
    );
    let abort = Run {
        dialect: Dialect::OpenaiChat,
        stream: true,
        title: "streaming, critical → abort",
    };
    run_dialect(&client, &aborting, &mock, &abort).await?;
    println!("{NEXT}");
    Ok(())
}

/// What to try after the demo.
const NEXT: &str = "
Try next:
  loopguard replay --summary ../shared/trajectories/*.jsonl     the detectors over recorded sessions, one row per file
  loopguard mock-upstream --listen 127.0.0.1:8090 &             a scripted upstream (see README, \"Try it with the mock\")
  loopguard serve --config config/loopguard.toml                the proxy in front of it (routes point at the mock with
                                                                LOOPGUARD_OPENAI_UPSTREAM=http://127.0.0.1:8090)
  open http://127.0.0.1:9090/ui                                 the live page: sessions, their timelines, verdicts per detector";

async fn spawn_proxy(mock: &str, extra: &str) -> Result<String, String> {
    let config = demo_config(mock, extra)?;
    let guard = Guard::new(&config);
    let shared = Arc::new(arc_swap::ArcSwap::from_pointee(config));
    spawn(crate::server::proxy_app(shared, guard).map_err(|e| e.to_string())?).await
}
