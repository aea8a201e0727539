//! Act in flight, end to end through the built binary: sessions, compaction,
//! chanting, fail-open, retries. (The SDK-driven warn / block / abort loops
//! for both dialects are in `tests/python/test_loops.py`.)

mod common;

use common::{
    client, config_for, loopguard, loopguard_with_env, metric_value, metrics, mock, mock_requests, pair, post,
};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";

/// An OpenAI chat request whose history holds `cycles` identical
/// `read_file` calls, each answered with `result`.
fn history(first_user: &str, cycles: usize, result: &str) -> Value {
    let mut messages = vec![json!({"role": "user", "content": first_user})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/main.rs\"}"}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": result}));
    }
    json!({"model": "gpt-test", "stream": true, "messages": messages, "tools": [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]})
}

const READ_LOOP: &str =
    r#"{"turns":[{"tool_calls":[{"name":"read_file","arguments":{"path":"src/main.rs"}}]}]}"#;

struct Sent {
    status: u16,
    verdict: Option<String>,
    body: String,
}

async fn send(lg: &common::Proc, body: &Value, headers: &[(&str, &str)]) -> Sent {
    let mut request = client()
        .post(format!("{}{CHAT}", lg.url()))
        .header("content-type", "application/json")
        .header("x-mock-script", READ_LOOP)
        .body(body.to_string());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("{e}"));
    let status = response.status().as_u16();
    let verdict = common::verdict_header(&response);
    let body = response.text().await.unwrap_or_default();
    Sent {
        status,
        verdict,
        body,
    }
}

/// Whether the last tool message the upstream received carried loopguard's warning.
fn warned(request: &Value) -> bool {
    let body: Value = serde_json::from_str(request["body"].as_str().unwrap_or_default()).unwrap_or_default();
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.contains("[loopguard]"))
}

/// Two conversations without any session header, interleaved, keep
/// separate state: each is warned from its own 3rd result and blocked at its
/// own 5th call.
#[tokio::test(flavor = "multi_thread")]
async fn interleaved_conversations_without_session_headers_keep_separate_state() {
    let (mock, lg) = pair("");
    for n in 0..5 {
        for task in ["task A: fix the parser", "task B: write the docs"] {
            let sent = send(&lg, &history(task, n, "fn main() {}"), &[]).await;
            let blocked = sent.body.contains("[loopguard]");
            assert_eq!(blocked, n == 4, "{task} after {n} cycles: {}", sent.body);
        }
    }
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 10);
    let warnings: Vec<bool> = recorded.iter().map(warned).collect();
    // Requests carry 0,0,1,1,2,2,3,3,4,4 results: warned from the 3rd on, per conversation.
    assert_eq!(
        warnings,
        vec![false, false, false, false, false, false, true, true, true, true]
    );
}

/// A session header wins over the fingerprint: two requests with different
/// first messages but the same header are one session.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_header_wins_over_the_fingerprint() {
    let (_mock, lg) = pair("");
    for task in ["first wording of the task", "second wording of the task"] {
        let _ = send(
            &lg,
            &history(task, 2, "same"),
            &[("x-loopguard-session", "one-session")],
        )
        .await;
    }
    let sessions: Value = common::get_json(format!("{}/admin/sessions", lg.admin_url())).await;
    assert_eq!(
        sessions["sessions"].as_array().map(Vec::len),
        Some(1),
        "{sessions}"
    );
}

/// Thousands of distinct sessions: the store stays within `max_sessions`.
#[tokio::test(flavor = "multi_thread")]
async fn the_session_store_stays_within_max_sessions() {
    let mock = mock();
    let config =
        config_for(&mock.url(), "").replacen("[[routes]]", "[sessions]\nmax_sessions = 50\n\n[[routes]]", 1);
    let lg = loopguard(&config);
    let http = client();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let http = http.clone();
        let url = format!("{}{CHAT}", lg.url());
        tasks.push(loopguard::task::spawn(async move {
            for i in 0..250 {
                let body = json!({"model": "m", "messages": [{"role": "user", "content": format!("conversation {worker}-{i}")}]});
                let r = http.post(&url).body(body.to_string()).send().await.unwrap_or_else(|e| panic!("{e}"));
                let _ = r.bytes().await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap_or_else(|e| panic!("{e}"));
    }
    let text = metrics(&lg).await;
    let kept = metric_value(&text, "loopguard_sessions");
    assert!(kept > 0.0 && kept <= 50.0, "sessions kept: {kept}");
}

/// After a compaction (history replaced by a summary), the same (call,
/// result) seen before, 3 times, aborts with `compaction_loop_persisted`.
#[tokio::test(flavor = "multi_thread")]
async fn a_loop_that_survives_compaction_is_aborted() {
    let (_mock, lg) = pair("");
    let session = [("x-loopguard-session", "compaction-test")];
    for n in 0..3 {
        let sent = send(&lg, &history("refactor the module", n, "same contents"), &session).await;
        assert_eq!(sent.status, 200);
    }
    let summary = "This session is being continued from a previous conversation that ran out of context. Summary: reading src/main.rs.";
    let mut last = None;
    for n in 0..4 {
        let sent = send(&lg, &history(summary, n, "same contents"), &session).await;
        if sent.status == 400 {
            last = Some((n, sent));
            break;
        }
    }
    let (n, sent) = last.unwrap_or_else(|| panic!("never aborted"));
    assert_eq!(n, 3, "aborted after the 3rd repeat");
    let body: Value = serde_json::from_str(&sent.body).unwrap_or_default();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("compaction_loop_persisted"), "{message}");
    assert!(
        sent.verdict
            .is_some_and(|v| v.contains("detector=post_compaction"))
    );
}

/// A summarizer request feeds no detector: a looping history sent to be
/// summarised is forwarded unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn a_summarizer_request_feeds_no_detector() {
    let (mock, lg) = pair("");
    let mut body = history("fix the bug", 6, "same");
    if let Some(messages) = body["messages"].as_array_mut() {
        messages.push(json!({"role": "user", "content": "Your task is to create a detailed summary of the conversation so far."}));
    }
    let sent = send(&lg, &body, &[("x-loopguard-session", "summarizer")]).await;
    assert_eq!(sent.status, 200);
    assert!(sent.verdict.is_none());
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 1);
    assert!(!warned(&recorded[0]));
}

/// The same request sent twice (an SDK retry) and a tool-less side request
/// of the same session change no counts.
#[tokio::test(flavor = "multi_thread")]
async fn retries_and_side_requests_change_no_counts() {
    let (mock, lg) = pair("");
    let session = [("x-loopguard-session", "retries")];
    for n in 0..3 {
        let body = history("tidy the imports", n, "same");
        let _ = send(&lg, &body, &session).await;
        let _ = send(&lg, &body, &session).await;
        let side = json!({"model": "small", "messages": [
            {"role": "system", "content": "Generate a short title for this conversation."},
            {"role": "user", "content": "tidy the imports"}]});
        let _ = send(&lg, &side, &session).await;
    }
    let recorded = mock_requests(&mock).await;
    assert_eq!(recorded.len(), 9);
    assert!(
        !recorded.iter().any(warned),
        "2 results sent twice must not count as 4"
    );
    let sent = send(&lg, &history("tidy the imports", 3, "same"), &session).await;
    assert_eq!(sent.status, 200);
    assert!(
        warned(mock_requests(&mock).await.last().unwrap_or(&Value::Null)),
        "the 3rd result warns"
    );
}

/// Rerunning the same headless prompt: the second run is a fresh start, not
/// a compaction (no `post_compaction`), and is warned again only at its own 3rd result.
#[tokio::test(flavor = "multi_thread")]
async fn rerunning_the_same_prompt_is_a_fresh_start() {
    let (mock, lg) = pair("");
    for n in 0..5 {
        let _ = send(&lg, &history("run the tests", n, "same"), &[]).await;
    }
    for n in 0..3 {
        let sent = send(&lg, &history("run the tests", n, "same"), &[]).await;
        assert_eq!(sent.status, 200, "{}", sent.body);
        assert!(!sent.body.contains("post_compaction"));
    }
    let recorded = mock_requests(&mock).await;
    let second_run: Vec<bool> = recorded[recorded.len() - 3..].iter().map(warned).collect();
    assert_eq!(second_run, vec![false, false, false]);
    assert!(!lg.logs().contains("post_compaction"));
}

/// A stream that degenerates into a repeated line is cut: the client gets a
/// clean finish with loopguard's note, and the upstream connection is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_chanting_stream_is_cut_with_a_clean_finish() {
    let (mock, lg) = pair("");
    let chant = "I will check the configuration file again now.\n".repeat(200);
    let script = json!({"turns": [{"text": chant}]}).to_string();
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-script", script.as_str()), ("x-mock-pace-ms", "2")],
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    let text = response
        .text()
        .await
        .unwrap_or_else(|e| panic!("a clean end was expected: {e}"));
    assert!(text.contains("content_chanting"), "{text}");
    assert!(text.contains("\"finish_reason\":\"stop\""));
    assert!(text.trim_end().ends_with("data: [DONE]"));
    let delivered: usize = text.matches("check the configuration").count();
    assert!(delivered < 100, "cut late: {delivered} repeats delivered");
    common::wait_mock_stat(&mock, "responses_dropped", 1).await;
    let cut = metric_value(&metrics(&lg).await, "loopguard_generation_cut_total");
    assert_eq!(cut, 1.0);
}

/// A detector panic never breaks traffic: the request and the response pass,
/// and the fault is counted as a fail-open.
#[tokio::test(flavor = "multi_thread")]
async fn a_detector_panic_fails_open() {
    let mock = mock();
    let lg = loopguard_with_env(
        &config_for(&mock.url(), ""),
        &[("LOOPGUARD_FAULT_INJECTION", "1")],
    );
    for at in ["request", "stream"] {
        let sent = send(
            &lg,
            &history("anything", 4, "same"),
            &[("x-loopguard-test-panic", at)],
        )
        .await;
        assert_eq!(sent.status, 200, "{at}");
        assert!(
            sent.body.contains("read_file"),
            "{at}: the tool call must pass: {}",
            sent.body
        );
        assert!(sent.body.contains("[DONE]"));
    }
    let text = metrics(&lg).await;
    assert_eq!(
        metric_value(&text, "loopguard_fail_open_total{reason=\"detector_panic\"}"),
        2.0,
        "{text}"
    );
}

/// A stream loopguard cannot parse passes through unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn an_unparsable_stream_passes_unchanged() {
    let own = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mock = common::mock_with_fixtures(&own);
    let lg = loopguard(&config_for(&mock.url(), ""));
    let expected = std::fs::read(own.join("openai-chat/unparsable.sse")).unwrap_or_else(|e| panic!("{e}"));
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-fixture", "openai-chat/unparsable.sse")],
        r#"{"model":"m","stream":true,"messages":[]}"#,
    )
    .await;
    let body = response.bytes().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(body.to_vec(), expected);
}

/// An `[[agents]]` override changes the verdicts of that agent only.
#[tokio::test(flavor = "multi_thread")]
async fn agent_overrides_apply_to_that_agent_only() {
    let mock = mock();
    let config = format!(
        "{}\n[[agents]]\nid = \"strict\"\nmatch = {{ header = \"x-agent\", value = \"strict\" }}\n\
         [agents.loop_detection.identical_call]\nwarning = 2\ncritical = 4\n",
        config_for(&mock.url(), "")
    );
    let lg = loopguard(&config);
    let _ = send(&lg, &history("task one", 2, "same"), &[("x-agent", "strict")]).await;
    assert!(
        warned(mock_requests(&mock).await.last().unwrap_or(&Value::Null)),
        "warned at 2 for the strict agent"
    );
    let _ = send(&lg, &history("task two", 2, "same"), &[("x-agent", "other")]).await;
    assert!(
        !warned(mock_requests(&mock).await.last().unwrap_or(&Value::Null)),
        "default threshold for the others"
    );
    // At request time (2 results in), only the strict agent gets a verdict.
    let at_request: Vec<Value> = lg
        .log_events("verdict")
        .into_iter()
        .filter(|v| v["at"] == "request")
        .collect();
    assert!(
        !at_request.is_empty() && at_request.iter().all(|v| v["agent"] == "strict"),
        "{at_request:?}"
    );
}

/// A lone surrogate escape in the history (a tool result cut in the middle
/// of an emoji) does not switch detection off: the body is parsed with it
/// replaced, and the loop it carries is still stopped at request time.
#[tokio::test(flavor = "multi_thread")]
async fn a_lone_surrogate_in_the_history_does_not_hide_a_loop() {
    let (mock, lg) = pair("");
    let body = history("cut emoji", 5, "output LONE")
        .to_string()
        .replace("LONE", "\\ud83d");
    assert!(
        serde_json::from_str::<Value>(&body).is_err(),
        "the body really is strict-JSON invalid"
    );
    let response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-loopguard-session", "surrogate"), ("x-mock-script", READ_LOOP)],
        body,
    )
    .await;
    assert_eq!(
        common::verdict_header(&response)
            .as_deref()
            .map(|v| v.starts_with("block")),
        Some(true)
    );
    assert!(mock_requests(&mock).await.is_empty(), "answered by loopguard");
}

/// Parallel runs of one task (same key, system, tools and prompt, no
/// session header — an evaluation harness's pass@k) are separate sessions
/// once they made a call: their calls carry different ids. Six runs that
/// each made one call draw no verdict.
#[tokio::test(flavor = "multi_thread")]
async fn parallel_runs_of_one_task_are_separate_sessions() {
    let (_mock, lg) = pair("");
    for run in 0..6 {
        let body = json!({"model": "gpt-test", "stream": true, "messages": [
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_run{run}"), "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"src/main.rs\"}"}}]},
            {"role": "tool", "tool_call_id": format!("call_run{run}"), "content": "fn main() {}"}],
            "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]});
        let sent = send(&lg, &body, &[]).await;
        assert_eq!(sent.status, 200, "run {run}");
        assert_eq!(sent.verdict, None, "run {run}: {}", sent.body);
        assert!(!sent.body.contains("[loopguard]"), "run {run}: {}", sent.body);
    }
}

/// A client resending one request unchanged (a replay storm) is stopped by
/// `replay_storm`'s breaker at the 30th copy within the window: an HTTP 400
/// `loop_detected` that names the detector; the 29 before it reach the
/// upstream. The legitimate twin, ten retries of one request (more than any
/// SDK or agent makes after an error), all pass untouched, in another session.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_resent_thirty_times_trips_the_replay_storm_breaker() {
    let (mock, lg) = pair("");
    let body = history("summarise the logs", 1, "2 lines");
    for n in 1..=10 {
        let sent = send(&lg, &body, &[("x-loopguard-session", "ten-retries")]).await;
        assert_eq!(sent.status, 200, "retry {n}");
        assert!(sent.verdict.is_none(), "retry {n}: {:?}", sent.verdict);
    }
    let storm = [("x-loopguard-session", "storm")];
    for n in 1..=29 {
        let sent = send(&lg, &body, &storm).await;
        assert_eq!(sent.status, 200, "copy {n}");
    }
    let sent = send(&lg, &body, &storm).await;
    assert_eq!(sent.status, 400, "{}", sent.body);
    assert!(
        sent.verdict
            .as_deref()
            .is_some_and(|v| v.contains("detector=replay_storm") && v.contains("count=30")),
        "{:?}",
        sent.verdict
    );
    let answer: Value = serde_json::from_str(&sent.body).unwrap_or_default();
    assert_eq!(answer["error"]["code"], "loop_detected", "{}", sent.body);
    assert_eq!(
        mock_requests(&mock).await.len(),
        39,
        "the 30th copy never reached the upstream"
    );
}

/// The legitimate twin of a replay storm: one first prompt sampled 40 times
/// (best-of-n, pass@k) in one session is never stopped.
#[tokio::test(flavor = "multi_thread")]
async fn one_prompt_sampled_forty_times_is_not_a_replay_storm() {
    let (_mock, lg) = pair("");
    let body = history("write a haiku about the sea", 0, "");
    for n in 1..=40 {
        let sent = send(&lg, &body, &[("x-loopguard-session", "best-of-n")]).await;
        assert_eq!(sent.status, 200, "sample {n}");
        assert!(sent.verdict.is_none(), "sample {n}: {:?}", sent.verdict);
    }
}
