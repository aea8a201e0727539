//! The LLM judge (`[loop_detection.semantic_check]`) end to end through the
//! built binary, with the mock upstream playing both the agent's model and
//! the judge (`--judge-script`, answers scripted per judge model).

mod common;

use std::time::{Duration, Instant};

use common::{Proc, client, config_for, loopguard_with_env, metrics, mock_requests, mock_with_args};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";
const KEY_VAR: &str = "LOOPGUARD_TEST_JUDGE_KEY";
const KEY: &str = "sk-test-judge-0123456789abcdefXYZ";

/// A request after `turns` model turns, each reading a different file (so
/// no other detector fires).
fn history(turns: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "fix the parser"})];
    for i in 0..turns {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}"), "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\":\"f{i}.rs\"}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": format!("contents of f{i}.rs")}));
    }
    json!({"model": "agent-model", "stream": false, "messages": messages, "tools": [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]})
}

/// A mock playing the judge with `script` (model → answers).
fn judge_mock(script: &Value) -> Proc {
    let path = std::env::temp_dir().join(format!(
        "loopguard-judge-script-{}-{}.json",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, script.to_string()).unwrap_or_else(|e| panic!("{e}"));
    mock_with_args(&["--judge-script", &path.to_string_lossy()])
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// loopguard in front of `mock`, with the judge on and `extra` keys added to its table.
fn guarded(mock: &Proc, extra: &str) -> Proc {
    let config = format!(
        "{}\n[loop_detection.semantic_check]\nenabled = true\nupstream = \"{}/v1\"\nmodel = \"judge-a\"\napi_key_env = \"{KEY_VAR}\"\n{extra}\n",
        config_for(&mock.url(), ""),
        mock.url()
    );
    loopguard_with_env(&config, &[(KEY_VAR, KEY)])
}

struct Sent {
    status: u16,
    verdict: Option<String>,
    body: String,
    elapsed: Duration,
}

async fn send(lg: &Proc, session: &str, turns: usize) -> Sent {
    let started = Instant::now();
    let response = client()
        .post(format!("{}{CHAT}", lg.url()))
        .header("content-type", "application/json")
        .header("x-loopguard-session", session)
        .body(history(turns).to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let status = response.status().as_u16();
    let verdict = common::verdict_header(&response);
    let body = response.text().await.unwrap_or_default();
    Sent {
        status,
        verdict,
        body,
        elapsed: started.elapsed(),
    }
}

/// `loopguard_judge_calls_total` per outcome.
async fn judge_calls(lg: &Proc, outcome: &str) -> f64 {
    common::metric_value(
        &metrics(lg).await,
        &format!("loopguard_judge_calls_total{{outcome=\"{outcome}\"}}"),
    )
}

async fn judge_calls_total(lg: &Proc) -> f64 {
    let text = metrics(lg).await;
    text.lines()
        .filter(|l| l.starts_with("loopguard_judge_calls_total{") && !l.contains("outcome=\"busy\""))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Waits until `n` judge calls finished (were counted).
async fn wait_calls(lg: &Proc, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(8);
    while judge_calls_total(lg).await < n {
        assert!(Instant::now() < deadline, "fewer than {n} judge calls finished");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The judge requests the mock received, for `model`.
async fn judge_requests(mock: &Proc, model: &str) -> Vec<Value> {
    mock_requests(mock)
        .await
        .into_iter()
        .filter(|r| {
            serde_json::from_str::<Value>(r["body"].as_str().unwrap_or_default())
                .is_ok_and(|b| b["model"] == model)
        })
        .collect()
}

/// The agent requests the mock received (forwarded by loopguard).
async fn agent_requests(mock: &Proc) -> Vec<Value> {
    mock_requests(mock)
        .await
        .into_iter()
        .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str().unwrap_or_default()).ok())
        .filter(|b| b["model"] == "agent-model")
        .collect()
}

/// Whether the last tool message of a forwarded request carries loopguard's text.
fn warning_in(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .filter(|c| c.contains("[loopguard]"))
        .map(str::to_owned)
}

/// The model turn a judge request was made at: the last file in its window + 1.
fn turn_of(judge_request: &Value) -> usize {
    let body: Value =
        serde_json::from_str(judge_request["body"].as_str().unwrap_or_default()).unwrap_or_default();
    let text = body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let last = text
        .rsplit("{\"path\":\"f")
        .next()
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no file in the judge's window: {text}"));
    last + 1
}

fn assert_key_never_logged(lg: &Proc) {
    let logs = lg.logs();
    assert!(!logs.is_empty());
    assert!(
        !logs.contains(KEY) && !logs.contains("0123456789abcdefXYZ"),
        "the judge's key was logged"
    );
}

/// Gemini CLI's schedule: the first check at turn 30, the next ones after
/// round(5 + 10·(1 − confidence)) turns — so a calm judge looks rarely and a
/// suspicious one soon. The judge sees the request and the window, asks for
/// structured output, and gets its key as a bearer token.
#[tokio::test(flavor = "multi_thread")]
async fn the_first_check_is_at_turn_30_and_the_next_at_adapted_intervals() {
    let answers = json!({"judge-a": [
        {"json": {"analysis": "varied reads", "confidence": 0.2}},
        {"json": {"analysis": "new files", "confidence": 0.0}},
        {"json": {"analysis": "hmm", "confidence": 0.5}},
    ]});
    let mock = judge_mock(&answers);
    let lg = guarded(&mock, "");
    // Intervals: 0.2 → 13, 0.0 → 15, 0.5 → 10.
    let expected = [30, 43, 58, 68];
    for turn in 1..=70 {
        let sent = send(&lg, "sched", turn).await;
        assert_eq!(sent.status, 200, "{}", sent.body);
        if let Some(n) = expected.iter().position(|t| *t == turn) {
            wait_calls(&lg, (n + 1) as f64).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let requests = judge_requests(&mock, "judge-a").await;
    let turns: Vec<usize> = requests.iter().map(turn_of).collect();
    assert_eq!(turns, expected);
    let first = &requests[0];
    assert_eq!(first["headers"]["authorization"], format!("Bearer {KEY}"));
    let body: Value = serde_json::from_str(first["body"].as_str().unwrap_or_default()).unwrap_or_default();
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["messages"][0]["role"], "system");
    let user = body["messages"][1]["content"].as_str().unwrap_or_default();
    assert!(
        user.contains("fix the parser") && user.contains("[1] agent called read_file"),
        "{user}"
    );
    assert!(
        user.contains("entries") && !user.contains("f9.rs\"}"),
        "history = 20 entries: {user}"
    );
    for forwarded in agent_requests(&mock).await {
        assert_eq!(warning_in(&forwarded), None, "no verdict below the bar");
    }
    assert_key_never_logged(&lg);
}

/// Two confident answers in one stretch: the request after the first check
/// is forwarded with a warning carrying the judge's analysis; the request
/// after the second is blocked (critical).
#[tokio::test(flavor = "multi_thread")]
async fn two_confident_answers_warn_then_block_on_the_following_requests() {
    let answers = json!({"judge-a": [{"json": {"analysis": "It keeps opening file after file without editing anything.", "confidence": 0.95}}]});
    let mock = judge_mock(&answers);
    let lg = guarded(&mock, "");
    for turn in 1..=30 {
        send(&lg, "loop", turn).await;
    }
    wait_calls(&lg, 1.0).await;
    let sent = send(&lg, "loop", 31).await;
    assert_eq!(sent.status, 200);
    let forwarded = agent_requests(&mock).await;
    let warning = forwarded
        .last()
        .and_then(warning_in)
        .unwrap_or_else(|| panic!("no warning"));
    assert!(
        warning.contains("[loopguard] semantic_loop (warning, count 1)")
            && warning.contains("confidence 0.95")
            && warning.contains("It keeps opening file after file"),
        "{warning}"
    );
    let sent = send(&lg, "loop", 32).await;
    assert_eq!(sent.status, 200);
    assert_eq!(
        agent_requests(&mock).await.last().and_then(warning_in),
        None,
        "the warning is given once"
    );
    // 0.95 → next check round(5.5) = 6 turns later, at 36.
    for turn in 33..=36 {
        send(&lg, "loop", turn).await;
    }
    wait_calls(&lg, 2.0).await;
    let before = agent_requests(&mock).await.len();
    let blocked = send(&lg, "loop", 37).await;
    assert_eq!(blocked.status, 200);
    assert_eq!(
        blocked.verdict.as_deref(),
        Some("block; detector=semantic_loop; count=2")
    );
    assert!(
        blocked.body.contains("semantic_loop (critical, count 2)"),
        "{}",
        blocked.body
    );
    assert_eq!(
        agent_requests(&mock).await.len(),
        before,
        "a block is answered by loopguard"
    );
    assert_eq!(judge_calls(&lg, "loop").await, 2.0);
    assert_key_never_logged(&lg);
}

/// With a double-check model, both must reach the bar: 0.95 then 0.5 is no verdict.
#[tokio::test(flavor = "multi_thread")]
async fn a_double_check_below_the_bar_gives_no_verdict() {
    let answers = json!({
        "judge-a": [{"json": {"analysis": "looks stuck", "confidence": 0.95}}],
        "judge-b": [{"json": {"analysis": "batch work over files", "confidence": 0.5}}],
    });
    let mock = judge_mock(&answers);
    let lg = guarded(&mock, "double_check_model = \"judge-b\"");
    for turn in 1..=30 {
        send(&lg, "dc", turn).await;
    }
    wait_calls(&lg, 2.0).await;
    for turn in 31..=33 {
        assert_eq!(send(&lg, "dc", turn).await.status, 200);
    }
    assert!(
        agent_requests(&mock)
            .await
            .iter()
            .all(|b| warning_in(b).is_none())
    );
    assert_eq!(judge_calls(&lg, "loop").await, 1.0);
    assert_eq!(judge_calls(&lg, "no_loop").await, 1.0);
    assert_eq!(judge_requests(&mock, "judge-b").await.len(), 1);
}

/// A judge that times out, answers HTTP 500 or answers prose gives no
/// verdict; each failure is counted by outcome and traffic is untouched
/// (a failed check is retried after `interval` turns).
#[tokio::test(flavor = "multi_thread")]
async fn timeouts_http_500_and_non_json_answers_give_nothing_and_are_counted() {
    let answers = json!({"judge-a": [
        {"delay_ms": 3000, "json": {"analysis": "late", "confidence": 0.99}},
        {"status": 500},
        {"text": "I think the agent is looping, confidence high."},
    ]});
    let mock = judge_mock(&answers);
    let lg = guarded(&mock, "timeout_secs = 1");
    for turn in 1..=52 {
        let sent = send(&lg, "faults", turn).await;
        assert_eq!(sent.status, 200, "{}", sent.body);
        assert_eq!(sent.verdict, None);
        if [30, 40, 50].contains(&turn) {
            wait_calls(
                &lg,
                [30, 40, 50]
                    .iter()
                    .position(|t| *t == turn)
                    .map_or(0.0, |n| (n + 1) as f64),
            )
            .await;
        }
    }
    assert_eq!(judge_calls(&lg, "timeout").await, 1.0);
    assert_eq!(judge_calls(&lg, "http_error").await, 1.0);
    assert_eq!(judge_calls(&lg, "unparsable").await, 1.0);
    assert!(
        agent_requests(&mock)
            .await
            .iter()
            .all(|b| warning_in(b).is_none())
    );
    let logs = lg.logs();
    assert!(logs.contains("semantic check failed; no verdict"), "{logs}");
    assert_key_never_logged(&lg);
}

/// The judge's key never reaches a log line, whether the call fails (401)
/// or succeeds and yields a verdict.
#[tokio::test(flavor = "multi_thread")]
async fn the_judges_key_appears_in_no_log_line() {
    let answers = json!({"judge-a": [{"status": 401}, {"json": {"analysis": "stuck", "confidence": 1.0}}]});
    let mock = judge_mock(&answers);
    let lg = guarded(&mock, "");
    for turn in 1..=41 {
        send(&lg, "key", turn).await;
        if turn == 30 || turn == 40 {
            wait_calls(&lg, if turn == 30 { 1.0 } else { 2.0 }).await;
        }
    }
    assert_eq!(judge_calls(&lg, "http_error").await, 1.0);
    assert!(agent_requests(&mock).await.last().and_then(warning_in).is_some());
    let requests = judge_requests(&mock, "judge-a").await;
    assert!(
        requests
            .iter()
            .all(|r| r["headers"]["authorization"] == format!("Bearer {KEY}"))
    );
    assert_key_never_logged(&lg);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A judge taking 2 s adds nothing measurable to the agent's requests:
/// the request that starts a check and the ones sent while it is in flight
/// take as long as with the judge off (same mock, same run).
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_judge_adds_nothing_to_the_agents_latency() {
    let answers = json!({"judge-a": [{"delay_ms": 2000, "json": {"analysis": "calm", "confidence": 0.1}}]});
    let mock = judge_mock(&answers);
    let on = guarded(&mock, "max_concurrent = 64");
    let off = loopguard_with_env(&config_for(&mock.url(), ""), &[]);
    let (mut with_judge, mut without) = (Vec::new(), Vec::new());
    // Warm both (connections, lazy statics).
    send(&on, "warm", 1).await;
    send(&off, "warm", 1).await;
    for s in 0..10 {
        let session = format!("lat-{s}");
        for turn in [29, 30, 31, 32] {
            let a = send(&on, &session, turn).await;
            let b = send(&off, &session, turn).await;
            assert_eq!((a.status, b.status), (200, 200));
            with_judge.push(a.elapsed);
            without.push(b.elapsed);
        }
    }
    let max_on = with_judge.iter().max().copied().unwrap_or_default();
    let (m_on, m_off) = (median(with_judge), median(without));
    println!("latency median judge on {m_on:?} / off {m_off:?}; max with the judge on {max_on:?}");
    assert!(
        judge_requests(&mock, "judge-a").await.len() >= 5,
        "checks were started"
    );
    assert!(
        m_on < m_off + Duration::from_millis(20),
        "median with the judge {m_on:?} vs without {m_off:?}"
    );
    assert!(
        max_on < Duration::from_millis(1000),
        "a request waited for the judge: {max_on:?}"
    );
}

/// Runs `loopguard replay --config CONFIG SESSION`: exit code, stdout lines, stderr.
fn replay(config: &str, session: &str) -> (Option<i32>, Vec<Value>, String) {
    let dir = std::env::temp_dir();
    let stamp = rand_suffix();
    let config_path = dir.join(format!("loopguard-judge-replay-{stamp}.toml"));
    let session_path = dir.join(format!("loopguard-judge-replay-{stamp}.jsonl"));
    std::fs::write(&config_path, config).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&session_path, session).unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["replay", "--config"])
        .arg(&config_path)
        .arg(&session_path)
        .env(KEY_VAR, KEY)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `loopguard replay` runs the judge on the live schedule when it is
/// configured (a check at the 30th turn, its finding on the next request),
/// says so when it is configured but off, and says nothing when it is not configured.
#[tokio::test(flavor = "multi_thread")]
async fn replay_runs_the_judge_when_configured_and_says_when_it_did_not() {
    let answers = json!({"judge-a": [{"json": {"analysis": "opens files endlessly", "confidence": 0.97}}]});
    let mock = judge_mock(&answers);
    let session: Vec<String> = (0..=31).map(|t| history(t).to_string()).collect();
    let session = session.join("\n");
    let on = format!(
        "{}\n[loop_detection.semantic_check]\nenabled = true\nupstream = \"{}/v1\"\nmodel = \"judge-a\"\napi_key_env = \"{KEY_VAR}\"\n",
        config_for(&mock.url(), ""),
        mock.url()
    );
    let (code, lines, stderr) = replay(&on, &session);
    assert_eq!(code, Some(0), "{stderr}");
    let judged: Vec<&Value> = lines
        .iter()
        .filter(|l| l["detector"] == "semantic_loop")
        .collect();
    assert_eq!(judged.len(), 1, "{lines:?}\n{stderr}");
    assert_eq!(
        (judged[0]["request"].as_u64(), judged[0]["level"].as_str()),
        (Some(31), Some("warning"))
    );
    assert!(
        judged[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("opens files endlessly")
    );
    assert!(stderr.contains("runs too") && !stderr.contains(KEY), "{stderr}");
    let off = on.replace("enabled = true", "enabled = false");
    let (code, lines, stderr) = replay(&off, &session);
    assert_eq!(code, Some(0));
    assert!(lines.iter().all(|l| l["detector"] != "semantic_loop"));
    assert!(stderr.contains("did not run"), "configured but off: {stderr}");
    let (code, lines, stderr) = replay(&config_for(&mock.url(), ""), &session);
    assert_eq!(code, Some(0));
    assert!(lines.iter().all(|l| l["detector"] != "semantic_loop"));
    assert!(
        !stderr.contains("semantic check"),
        "not configured: no notice: {stderr}"
    );
}
