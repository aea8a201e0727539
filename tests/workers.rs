//! Proxy workers (`server.workers`), end to end through the built binary:
//! each worker is a thread of its own, connections spread over them share
//! one session store, and many connections at once are all served.

mod common;

use common::{client, config_for, loopguard, mock, mock_requests};
use serde_json::{Value, json};

/// An OpenAI chat request whose history holds `cycles` identical calls with
/// the same result.
fn history(cycles: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "List the files."})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "a.txt"}));
    }
    json!({"model": "gpt-test", "messages": messages})
}

/// The names of the process's threads (`/proc/PID/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap_or_else(|e| panic!("{e}"));
    dir.filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

/// `workers = 3` starts three worker threads; a loop sent over a fresh
/// connection per request (spread over the workers by the kernel) is still
/// one session: its 5th identical call is blocked.
#[tokio::test(flavor = "multi_thread")]
async fn workers_share_sessions_across_connections() {
    let mock = mock();
    let lg = loopguard(&config_for(&mock.url(), "workers = 3"));
    // The runtimes' threads may come up just after the listening line.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let workers = loop {
        let mut workers: Vec<String> = thread_names(lg.pid())
            .into_iter()
            .filter(|n| n.starts_with("lg-worker-"))
            .collect();
        workers.sort();
        if workers.len() >= 3 || std::time::Instant::now() > deadline {
            break workers;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(workers, ["lg-worker-0", "lg-worker-1", "lg-worker-2"]);
    let line = lg.wait_log_events("loopguard listening", 1);
    assert_eq!(line[0]["workers"], 3, "{}", line[0]);
    let mut verdicts = Vec::new();
    for cycles in 0..5 {
        // A client of its own: a new connection for each request.
        let response = client()
            .post(format!("{}/v1/chat/completions", lg.url()))
            .header("x-loopguard-session", "spread")
            .header("x-test-session", "spread")
            .header(
                "x-mock-script",
                r#"{"turns":[{"tool_calls":[{"name":"list_directory","arguments":{"path":"."}}]}]}"#,
            )
            .json(&history(cycles))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.status(), 200);
        verdicts.push(common::verdict_header(&response));
    }
    assert!(
        verdicts[..4]
            .iter()
            .all(|v| v.as_deref().is_none_or(|v| !v.starts_with("block"))),
        "{verdicts:?}"
    );
    assert!(
        verdicts[4]
            .as_deref()
            .is_some_and(|v| v.starts_with("block") && v.contains("identical_call")),
        "{verdicts:?}"
    );
    assert_eq!(mock_requests(&mock).await.len(), 5);
}

/// 200 connections at once, each with its own request, are all answered
/// with the upstream's answer.
#[tokio::test(flavor = "multi_thread")]
async fn many_connections_at_once_are_all_served() {
    let mock = mock();
    let lg = loopguard(&config_for(&mock.url(), "workers = 2"));
    let url = format!("{}/v1/chat/completions", lg.url());
    let requests = (0..200).map(|n| {
        let url = url.clone();
        async move {
            let body =
                json!({"model": "gpt-test", "messages": [{"role": "user", "content": format!("task {n}")}]});
            let response = client()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            (status, text)
        }
    });
    let answers = futures_util::future::join_all(requests).await;
    for (status, text) in answers {
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("choices"), "{text}");
    }
}
