//! Operating loopguard: hot reload, graceful shutdown, and logs that never
//! carry an API key.

mod common;

use std::time::{Duration, Instant};

use common::{client, config_for, loopguard_with_env, mock, mock_requests, post, read_body};
use serde_json::{Value, json};

const CHAT: &str = "/v1/chat/completions";

fn history(first_user: &str, cycles: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": first_user})];
    for i in 0..cycles {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "grep", "arguments": "{\"q\":\"x\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "no match"}));
    }
    json!({"model": "m", "messages": messages})
}

/// Sends a history with `cycles` identical results; says whether the upstream got a warning.
async fn warned_at(lg: &common::Proc, mock: &common::Proc, task: &str, cycles: usize) -> bool {
    let r = post(
        format!("{}{CHAT}", lg.url()),
        &[],
        history(task, cycles).to_string(),
    )
    .await;
    let _ = r.bytes().await;
    let last = mock_requests(mock).await.pop().unwrap_or_default();
    last["body"].as_str().unwrap_or_default().contains("[loopguard]")
}

fn write_config(path: &std::path::Path, upstream: &str, warning: u32) {
    let text = format!(
        "{}\n[loop_detection.identical_call]\nwarning = {warning}\ncritical = 8\n",
        config_for(upstream, "admin_token = \"tok\"")
    );
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
}

/// A valid reload changes the verdicts of the next requests; an invalid file
/// is rejected with its errors logged and the old behaviour stays; SIGHUP
/// reloads too.
#[tokio::test(flavor = "multi_thread")]
async fn reload_applies_valid_files_and_keeps_the_running_config_on_invalid_ones() {
    let mock = mock();
    let path = std::env::temp_dir().join(format!("loopguard-reload-{}.toml", std::process::id()));
    write_config(&path, &mock.url(), 3);
    let lg = common::loopguard_from_file(&path, &[]);
    assert!(!warned_at(&lg, &mock, "a", 2).await);
    assert!(warned_at(&lg, &mock, "a", 3).await);

    let reload = |token: Option<&'static str>| {
        let mut r = client().post(format!("{}/admin/reload", lg.admin_url()));
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.send()
    };
    write_config(&path, &mock.url(), 2);
    assert_eq!(reload(None).await.unwrap_or_else(|e| panic!("{e}")).status(), 401);
    assert!(
        !warned_at(&lg, &mock, "b", 2).await,
        "an unauthorised reload changes nothing"
    );
    let ok = reload(Some("tok")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.status(), 200);
    assert!(
        warned_at(&lg, &mock, "c", 2).await,
        "the new threshold applies to the next request"
    );

    std::fs::write(&path, "[server]\nlisten = \"nowhere\"\n[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"htp:/x\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let bad = reload(Some("tok")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap_or_default();
    assert_eq!(body["errors"].as_array().map(Vec::len), Some(2), "{body}");
    lg.wait_for_log("routes[0].upstream");
    assert!(warned_at(&lg, &mock, "d", 2).await, "the running config was kept");

    write_config(&path, &mock.url(), 4);
    lg.signal("HUP");
    lg.wait_for_log("SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while lg.log_events("configuration reloaded").len() < 2 {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!warned_at(&lg, &mock, "e", 3).await, "warning = 4 after SIGHUP");
}

/// SIGTERM during a slow stream: the stream completes, new connections are
/// refused, and the process exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_stream_in_flight_finish_and_exits_zero() {
    let mock = mock();
    let mut lg = loopguard_with_env(&config_for(&mock.url(), ""), &[]);
    let fixture = "openai-chat/gpt4o-refusal.sse";
    let mut response = post(
        format!("{}{CHAT}", lg.url()),
        &[("x-mock-fixture", fixture), ("x-mock-pace-ms", "100")],
        r#"{"model":"m","stream":true,"messages":[]}"#,
    )
    .await;
    let first = response
        .chunk()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_default();
    lg.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = tokio::net::TcpStream::connect(lg.addr).await;
    assert!(refused.is_err(), "new connections must be refused while draining");
    let ready = client()
        .get(format!("{}/readyz", lg.admin_url()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("the admin listener must stay up while draining: {e}"));
    assert_eq!(ready.status(), 503, "not ready while draining");
    let (rest, end) = read_body(response).await;
    assert!(end.is_ok(), "the stream in flight must complete: {end:?}");
    let expected = std::fs::read(common::fixtures_dir().join(fixture)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!([first.to_vec(), rest].concat(), expected);
    let status = lg.wait();
    assert_eq!(status.code(), Some(0));
}

/// A full run with a known API key in every supported place, logs at trace
/// level: the key's text appears in no log line and no admin output.
#[tokio::test(flavor = "multi_thread")]
async fn api_keys_never_reach_the_logs() {
    const KEY: &str = "sk-SECRET-7f3a9c1e5b";
    let mock = mock();
    let lg = loopguard_with_env(&config_for(&mock.url(), ""), &[("LOOPGUARD_LOG", "trace")]);
    let http = client();
    let places: [(&str, &str); 5] = [
        ("authorization", "Bearer sk-SECRET-7f3a9c1e5b"),
        ("x-api-key", KEY),
        ("api-key", KEY),
        ("x-goog-api-key", KEY),
        ("proxy-authorization", "Bearer sk-SECRET-7f3a9c1e5b"),
    ];
    for (name, value) in places {
        for _ in 0..6 {
            let r = post(
                format!("{}{CHAT}?key={KEY}", lg.url()),
                &[(name, value)],
                history("find x", 5).to_string(),
            )
            .await;
            let _ = r.bytes().await;
        }
        let r = http
            .post(format!(
                "{}/v1beta/models/g:streamGenerateContent?alt=sse&key={KEY}",
                lg.url()
            ))
            .header(name, value)
            .body("{\"contents\":[]}")
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = r.bytes().await;
    }
    // An upstream failure, whose error names the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let dead = loopguard_with_env(
        &config_for(&format!("http://127.0.0.1:{port}"), ""),
        &[("LOOPGUARD_LOG", "trace")],
    );
    let r = post(
        format!("{}{CHAT}?key={KEY}", dead.url()),
        &[("authorization", "Bearer sk-SECRET-7f3a9c1e5b")],
        "{}",
    )
    .await;
    let error = r.text().await.unwrap_or_default();
    assert!(!error.contains(KEY), "the error answer leaks the key: {error}");
    let admin = http
        .get(format!("{}/admin/sessions", lg.admin_url()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_default();
    assert!(lg.logs().lines().count() > 50, "trace logging was not on");
    for (what, text) in [
        ("logs", lg.logs()),
        ("failure logs", dead.logs()),
        ("admin", admin),
    ] {
        assert!(!text.contains("7f3a9c1e5b"), "the key appears in the {what}");
    }
}

/// `loopguard healthcheck` without `--url` probes the admin listener that
/// `LOOPGUARD_ADMIN_LISTEN` moves (the Dockerfile's health check runs it so):
/// it probed port 9090 whatever the variable said (found by a new-user test).
#[tokio::test]
async fn healthcheck_probes_the_admin_listener_the_environment_names() {
    let (_mock, lg) = common::pair("");
    let admin = lg.admin.unwrap_or_else(|| panic!("no admin address"));
    let probe = |listen: String| {
        std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
            .arg("healthcheck")
            .env("LOOPGUARD_ADMIN_LISTEN", listen)
            .output()
            .unwrap_or_else(|e| panic!("cannot run healthcheck: {e}"))
    };
    let healthy = probe(admin.to_string());
    assert!(healthy.status.success(), "{healthy:?}");
    // A wildcard listen address is probed on loopback.
    let wildcard = probe(format!("0.0.0.0:{}", admin.port()));
    assert!(wildcard.status.success(), "{wildcard:?}");
    // Nothing listens there: unhealthy, and the message names the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("{e}"));
    let down = probe(closed.to_string());
    assert!(!down.status.success());
    let said = String::from_utf8_lossy(&down.stderr).into_owned() + &String::from_utf8_lossy(&down.stdout);
    assert!(said.contains(&format!("http://{closed}/healthz")), "{said}");
}

/// A `LOOPGUARD_LOG` that is not a filter is reported, and logging goes on
/// at the default level (it was dropped without a word: a new-user test).
#[test]
fn a_log_filter_that_does_not_parse_is_reported() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args([
            "check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/loopguard.toml"),
        ])
        .env("LOOPGUARD_LOG", "bogus[[")
        .output()
        .unwrap_or_else(|e| panic!("cannot run check-config: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LOOPGUARD_LOG=\"bogus[[\" is not a log filter"),
        "{stderr}"
    );
    assert!(out.status.success(), "{out:?}");
}

/// `[state]` and `[recording]` are set up at start: a reload that changes
/// them says they apply only after a restart (it said nothing, and the old
/// store kept being written: a new-user test).
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_names_the_state_and_recording_changes_it_cannot_apply() {
    let mock = mock();
    let path = std::env::temp_dir().join(format!("loopguard-reload-fixed-{}.toml", std::process::id()));
    write_config(&path, &mock.url(), 3);
    let lg = common::loopguard_from_file(&path, &[]);
    let extra = "\n[state]\nkey_prefix = \"other:\"\ntimeout_ms = 700\n[recording]\nenabled = true\ndir = \"/tmp/loopguard-reload-fixed\"\n";
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}")) + extra;
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let answer = client()
        .post(format!("{}/admin/reload", lg.admin_url()))
        .header("authorization", "Bearer tok")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap_or_default();
    let notices: Vec<String> = body["notices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    for key in ["state", "recording"] {
        assert!(
            notices
                .iter()
                .any(|n| n.starts_with(&format!("{key}: changed, but applies only after a restart"))),
            "{key}: {notices:?}"
        );
    }
}
