//! The Grafana dashboard (`docker/grafana-loopguard.json`) is true to the
//! code: every metric its queries read is one the built binary exports
//! after a scripted loop (those exported only from their first event on,
//! a fail-open or a semantic check call, are named in the source), and every panel reads the dashboard's
//! Prometheus datasource variable.

mod common;

use std::collections::BTreeSet;

use common::{metrics, pair, post};
use serde_json::{Value, json};

fn dashboard() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docker/grafana-loopguard.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `loopguard_…` names in a PromQL expression, histogram suffixes removed.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("loopguard_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        names.push(name.trim_end_matches("_bucket").to_owned());
        rest = &tail[end..];
    }
    names
}

/// Every `.rs` file below `dir`, concatenated.
fn sources(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.push_str(&sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
    out
}

/// Every query's metrics exist in `/metrics` after a loop was stopped.
#[tokio::test(flavor = "multi_thread")]
async fn every_metric_the_dashboard_reads_is_exported() {
    let d = dashboard();
    let panels = d["panels"].as_array().cloned().unwrap_or_default();
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut wanted = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for p in &panels {
        assert!(ids.insert(p["id"].as_u64()), "duplicate panel id: {p}");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            let names = metric_names(t["expr"].as_str().unwrap_or_default());
            assert!(!names.is_empty(), "{t}");
            wanted.extend(names);
        }
    }
    assert_eq!(d["templating"]["list"][0]["type"], "datasource");

    let (_mock, lg) = pair("");
    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    let tools = json!([{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]);
    for i in 0..6 {
        let body = json!({"model": "m", "stream": true, "messages": messages, "tools": tools});
        let r = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[("x-loopguard-session", "dashboard")],
            body.to_string(),
        )
        .await;
        let _ = r.text().await;
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "a.txt"}));
    }
    let exported = metrics(&lg).await;
    // Exported from their first event on (a fail-open, a semantic check
    // call): named in the source instead.
    let conditional = ["loopguard_fail_open_total", "loopguard_judge_calls_total"];
    let source = sources(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")));
    for name in &wanted {
        if conditional.contains(&name.as_str()) {
            assert!(
                source.contains(&format!("\"{name}\"")),
                "{name} is not in the source"
            );
            continue;
        }
        assert!(
            exported.lines().any(|l| l.starts_with(name.as_str())),
            "{name} is read by the dashboard but not exported:\n{exported}"
        );
    }
}
