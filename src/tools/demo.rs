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
use crate::dialect::Mode;
use crate::dialect::{Dialect, StreamEvent};
use crate::guard::Guard;
use crate::proxy::tap::Tap;
use crate::tools::mock::script::Script;

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
    crate::task::spawn(async move {
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
    mode: Mode,
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
    let mut tap = Tap::new(dialect, mode, usize::MAX);
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
    let (url, mut body) = dialect.demo_request(proxy);
    if !run.stream {
        body["stream"] = json!(false);
    }
    let mode = if run.stream { Mode::Sse } else { Mode::Whole };
    println!(
        "\n=== {} ({}) — the model keeps calling list_directory(\".\")",
        dialect.name(),
        run.title
    );
    for n in 0..8 {
        let results = n;
        let received = turn(client, &url, dialect, &body, mode).await?;
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
            dialect.push_call_turn(&mut body, n, name, args, RESULT);
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
    crate::http_client::install_crypto_provider();
    let mock = spawn(crate::tools::mock::app(
        std::path::PathBuf::from("."),
        Script::from_turns(vec![crate::tools::mock::script::Turn {
            tool_calls: vec![crate::tools::mock::script::ScriptCall {
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
    // Ollama's and Bedrock's dialects are not in the demo yet (its config
    // has no route for them).
    for dialect in Dialect::ALL
        .into_iter()
        .filter(|d| !matches!(d.provider(), "ollama" | "bedrock"))
    {
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
  loopguard mock-upstream --listen 127.0.0.1:8090 &             a scripted upstream (see README, \"The mock upstream\")
  loopguard serve --config config/loopguard.toml                the proxy in front of it (routes point at the mock with
                                                                LOOPGUARD_OPENAI_UPSTREAM=http://127.0.0.1:8090)
  open http://127.0.0.1:9090/ui                                 the live page: sessions, their timelines, verdicts per detector";

async fn spawn_proxy(mock: &str, extra: &str) -> Result<String, String> {
    let config = demo_config(mock, extra)?;
    let guard = Guard::new(&config);
    let shared = Arc::new(arc_swap::ArcSwap::from_pointee(config));
    spawn(crate::server::proxy_app(shared, guard).map_err(|e| e.to_string())?).await
}
