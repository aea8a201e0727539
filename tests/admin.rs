//! The admin listener: session API behind a bearer token for mutations,
//! metrics that match the logs, and nothing of it on the proxy listener.

mod common;

use common::{client, config_for, loopguard, metric_value, metrics, mock, mock_requests, pair, post};
use serde_json::{Value, json};

async fn one_session(lg: &common::Proc) {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});
    let r = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("x-loopguard-session", "admin-test")],
        body.to_string(),
    )
    .await;
    let _ = r.bytes().await;
}

async fn session_keys(lg: &common::Proc) -> Vec<String> {
    let v: Value = common::get_json(format!("{}/admin/sessions", lg.admin_url())).await;
    v["sessions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["key"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Without a configured token, deleting a session is refused (403).
#[tokio::test(flavor = "multi_thread")]
async fn delete_is_refused_without_a_configured_token() {
    let (_mock, lg) = pair("");
    one_session(&lg).await;
    let keys = session_keys(&lg).await;
    assert_eq!(keys.len(), 1);
    let r = client()
        .delete(format!("{}/admin/sessions/{}", lg.admin_url(), keys[0]))
        .header("authorization", "Bearer anything")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status(), 403);
    assert_eq!(session_keys(&lg).await.len(), 1);
}

/// With a token: a missing or wrong one gets 401, the right one forgets the session.
#[tokio::test(flavor = "multi_thread")]
async fn delete_needs_the_bearer_token() {
    let (_mock, lg) = pair("admin_token = \"s3cret-admin\"");
    one_session(&lg).await;
    let keys = session_keys(&lg).await;
    let url = format!("{}/admin/sessions/{}", lg.admin_url(), keys[0]);
    let http = client();
    let r = http.delete(&url).send().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status(), 401);
    let r = http
        .delete(&url)
        .header("authorization", "Bearer wrong")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status(), 401);
    let detail = http.get(&url).send().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(detail.status(), 200, "a read-only endpoint is open");
    let r = http
        .delete(&url)
        .header("authorization", "Bearer s3cret-admin")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status(), 204);
    assert!(session_keys(&lg).await.is_empty());
}

/// Admin paths are not served on the proxy listener.
#[tokio::test(flavor = "multi_thread")]
async fn admin_paths_are_not_served_on_the_proxy_listener() {
    let mock = mock();
    let lg = loopguard(&config_for(&mock.url(), ""));
    for path in ["/admin/sessions", "/metrics", "/healthz"] {
        let r = client()
            .get(format!("{}{path}", lg.url()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status(), 404, "{path}");
    }
    assert!(mock_requests(&mock).await.is_empty());
}

/// After a scripted loop, each `loopguard_verdicts_total` series equals the
/// number of verdict events loopguard logged, and the request, block and
/// avoided-request counters match what the client saw.
#[tokio::test(flavor = "multi_thread")]
async fn verdict_metrics_match_the_logged_verdicts() {
    let (_mock, lg) = pair("");
    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    let tools = json!([{"type": "function", "function": {"name": "list_directory", "parameters": {"type": "object"}}}]);
    let mut blocked = 0;
    for i in 0..6 {
        let body = json!({"model": "m", "stream": true, "messages": messages, "tools": tools});
        let r = post(
            format!("{}/v1/chat/completions", lg.url()),
            &[("x-loopguard-session", "metrics")],
            body.to_string(),
        )
        .await;
        let text = r.text().await.unwrap_or_default();
        if text.contains("[loopguard]") {
            blocked += 1;
            break;
        }
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "a.txt"}));
    }
    assert_eq!(blocked, 1);
    let text = metrics(&lg).await;
    let logged = lg.log_events("verdict");
    assert!(!logged.is_empty());
    let mut by_series = std::collections::BTreeMap::new();
    for v in &logged {
        let series = format!(
            "loopguard_verdicts_total{{detector=\"{}\",level=\"{}\",action=\"{}\",at=\"{}\"}}",
            v["detector"].as_str().unwrap_or_default(),
            v["level"].as_str().unwrap_or_default(),
            v["action"].as_str().unwrap_or_default(),
            v["at"].as_str().unwrap_or_default()
        );
        *by_series.entry(series).or_insert(0.0) += 1.0;
    }
    for (series, count) in &by_series {
        assert_eq!(metric_value(&text, series), *count, "{series}\n{text}");
    }
    let blocks: f64 = by_series
        .iter()
        .filter(|(s, _)| s.contains("action=\"block\""))
        .map(|(_, c)| c)
        .sum();
    assert_eq!(blocks, 1.0, "one block was logged and the client saw one");
    let requests = metric_value(
        &text,
        "loopguard_requests_total{route=\"/v1\",dialect=\"openai-chat\",status=\"200\"}",
    );
    assert_eq!(requests, 5.0, "{text}");
    assert!(
        metric_value(&text, "loopguard_overhead_seconds_count") >= 5.0,
        "every request records loopguard's own time: {text}"
    );

    // A history that already shows the loop is answered without calling upstream.
    messages.truncate(1);
    for i in 0..5 {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("r{i}"), "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("r{i}"), "content": "a.txt"}));
    }
    let body = json!({"model": "m", "messages": messages, "tools": tools});
    let r = post(
        format!("{}/v1/chat/completions", lg.url()),
        &[("x-loopguard-session", "metrics-2")],
        body.to_string(),
    )
    .await;
    assert_eq!(
        r.headers()
            .get("x-loopguard-verdict")
            .and_then(|v| v.to_str().ok()),
        Some("block; detector=identical_call; count=5")
    );
    let text = metrics(&lg).await;
    assert_eq!(
        metric_value(&text, "loopguard_upstream_requests_avoided_total"),
        1.0,
        "{text}"
    );
}
