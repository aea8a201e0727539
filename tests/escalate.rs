//! The `escalate` action end to end (issue #17), in every dialect, through
//! the built binary and the mock upstream playing two models: `demo` keeps
//! calling `list_directory`, `strong` answers in text given the same
//! history.

mod common;

use common::{loopguard, mock, mock_requests, post};
use loopguard::dialect::Dialect;
use serde_json::{Value, json};

/// The dialects a route can escalate: all but Bedrock, whose requests are
/// signed by the client (a `bedrock` route with `escalate_model` is a
/// config error).
fn escalating() -> impl Iterator<Item = Dialect> {
    Dialect::ALL
        .into_iter()
        .filter(|d| !matches!(d, Dialect::Bedrock | Dialect::BedrockConverse))
}

/// The mock script: the agent's model loops, `strong` answers in text.
fn two_models(strong_loops: bool) -> String {
    let call = json!({"tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]});
    let strong = if strong_loops {
        call.clone()
    } else {
        json!({"text": "Listed: a.txt."})
    };
    json!({"turns": [call], "models": {"strong": {"turns": [strong]}}}).to_string()
}

/// Routes of every dialect to `upstream`, each escalating to `strong`;
/// `detection` is added at the end.
fn config(upstream: &str, detection: &str) -> String {
    let mut text = String::from("[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n");
    for (prefix, provider, strip) in [
        ("/v1", "openai", false),
        ("/v1beta", "gemini", false),
        ("/anthropic", "anthropic", true),
        ("/ollama", "ollama", true),
    ] {
        text.push_str(&format!(
            "[[routes]]\nprefix = \"{prefix}\"\nprovider = \"{provider}\"\nupstream = \"{upstream}\"\nstrip_prefix = {strip}\nescalate_model = \"strong\"\n\n"
        ));
    }
    text.push_str("[loop_detection.actions]\nwarning = \"escalate\"\n\n");
    text.push_str(detection);
    text
}

/// The demo conversation of `dialect` with `cycles` identical calls.
fn history(dialect: Dialect, proxy: &str, cycles: usize) -> (String, Value) {
    let (url, mut body) = dialect.demo_request(proxy);
    for n in 0..cycles {
        dialect.push_call_turn(&mut body, n, "list_directory", r#"{"path":"."}"#, "a.txt");
    }
    (url, body)
}

/// The model the mock was asked for in its recorded request `r`.
fn asked_model(r: &Value) -> String {
    let body: Value = serde_json::from_str(r["body"].as_str().unwrap_or("{}")).unwrap_or(Value::Null);
    if let Some(m) = body["model"].as_str() {
        return m.to_owned();
    }
    let path = r["path"].as_str().unwrap_or_default();
    path.rsplit('/')
        .next()
        .and_then(|l| l.split(':').next())
        .unwrap_or_default()
        .to_owned()
}

/// Sends a request of session `session`; returns the answer's text.
async fn send(url: &str, body: &Value, session: &str, script: &str) -> String {
    let response = post(
        url.to_owned(),
        &[("x-loopguard-session", session), ("x-mock-script", script)],
        body.to_string(),
    )
    .await;
    response.text().await.unwrap_or_else(|e| panic!("{e}"))
}

/// With `warning = "escalate"`, the request after the 3rd identical result
/// reaches the mock naming the escalation model (in the body, or Gemini's
/// path) with the warning in it; the second model answers in text, so the
/// loop ends with no block; when the person speaks next, the agent's own
/// model is back.
#[tokio::test(flavor = "multi_thread")]
async fn an_escalated_loop_ends_in_the_other_model_and_the_person_brings_the_model_back() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url(), ""));
    let script = two_models(false);
    for dialect in escalating() {
        let session = format!("esc-{}", dialect.name());
        let before = mock_requests(&mock).await.len();
        for cycles in 1..=3 {
            let (url, body) = history(dialect, &lg.url(), cycles);
            let text = send(&url, &body, &session, &script).await;
            assert!(
                !text.contains("[loopguard]"),
                "{}: no verdict text reaches the agent: {text}",
                dialect.name()
            );
            if cycles == 3 {
                assert!(
                    text.contains("Listed: a.txt."),
                    "{}: the second model answers: {text}",
                    dialect.name()
                );
                assert!(
                    text.contains("strong"),
                    "{}: the agent sees the other model's name: {text}",
                    dialect.name()
                );
            }
        }
        let (url, mut body) = history(dialect, &lg.url(), 3);
        dialect.push_user_turn(&mut body, "Thanks. Now tell me what a.txt holds.");
        let _ = send(&url, &body, &session, &script).await;
        let seen = mock_requests(&mock).await;
        let models: Vec<String> = seen[before..].iter().map(asked_model).collect();
        assert_eq!(models, ["demo", "demo", "strong", "demo"], "{}", dialect.name());
        let escalated = seen[before + 2]["body"].as_str().unwrap_or_default();
        assert!(
            escalated.contains("identical_call"),
            "{}: the warning rides along: {escalated}",
            dialect.name()
        );
    }
    let events = lg.log_events("escalation");
    let began = events
        .iter()
        .filter(|e| e["fields"]["step"] == "Began" || e["step"] == "Began")
        .count();
    assert_eq!(
        began,
        escalating().count(),
        "one escalation per dialect: {events:?}"
    );
}

/// After `requests` escalated requests the agent's model is back (the
/// warning still carried, as `warn` does: one escalation per session), and
/// the ladder holds: the 5th identical call, held at critical, is blocked.
#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_ends_after_its_requests_and_the_fifth_call_is_blocked() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url(), "[loop_detection.escalate]\nrequests = 1\n"));
    let script = two_models(true);
    for dialect in escalating() {
        let session = format!("esc-n-{}", dialect.name());
        let before = mock_requests(&mock).await.len();
        let mut last = String::new();
        for cycles in 1..=5 {
            let (url, body) = history(dialect, &lg.url(), cycles);
            last = send(&url, &body, &session, &script).await;
            if cycles == 4 {
                assert!(
                    last.contains("identical_call (critical"),
                    "{}: the 5th call is blocked as it streams: {last}",
                    dialect.name()
                );
            }
        }
        assert!(
            last.contains("identical_call (critical"),
            "{}: {last}",
            dialect.name()
        );
        let seen = mock_requests(&mock).await;
        let models: Vec<String> = seen[before..].iter().map(asked_model).collect();
        assert_eq!(
            models,
            ["demo", "demo", "strong", "demo"],
            "{}: the 5th request never goes upstream",
            dialect.name()
        );
        let fourth = seen[before + 3]["body"].as_str().unwrap_or_default();
        assert!(
            fourth.contains("identical_call"),
            "{}: past max_escalations_per_session it warns",
            dialect.name()
        );
    }
}

/// When the escalation model loops too, the ladder still holds: the 4th
/// request goes to it, its 5th call is blocked as it streams, and the 5th
/// request is answered by loopguard.
#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_model_that_loops_too_is_blocked_as_before() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url(), ""));
    let script = two_models(true);
    for dialect in escalating() {
        let session = format!("esc-loop-{}", dialect.name());
        let before = mock_requests(&mock).await.len();
        let mut texts = Vec::new();
        for cycles in 1..=5 {
            let (url, body) = history(dialect, &lg.url(), cycles);
            texts.push(send(&url, &body, &session, &script).await);
        }
        assert!(
            !texts[2].contains("[loopguard]"),
            "{}: {}",
            dialect.name(),
            texts[2]
        );
        assert!(
            texts[3].contains("identical_call (critical"),
            "{}: {}",
            dialect.name(),
            texts[3]
        );
        assert!(
            texts[4].contains("identical_call (critical"),
            "{}: {}",
            dialect.name(),
            texts[4]
        );
        let seen = mock_requests(&mock).await;
        let models: Vec<String> = seen[before..].iter().map(asked_model).collect();
        assert_eq!(models, ["demo", "demo", "strong", "strong"], "{}", dialect.name());
    }
}

/// The legitimate twin: without a loop nothing is rewritten — the mock
/// gets exactly the bytes the agent sent, with its own model.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_session_on_an_escalating_route_is_untouched() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url(), ""));
    let script = two_models(false);
    for dialect in escalating() {
        let before = mock_requests(&mock).await.len();
        let (url, body) = history(dialect, &lg.url(), 1);
        let sent = body.to_string();
        let _ = send(&url, &body, &format!("quiet-{}", dialect.name()), &script).await;
        let seen = mock_requests(&mock).await;
        assert_eq!(
            seen[before]["body"].as_str(),
            Some(sent.as_str()),
            "{}",
            dialect.name()
        );
    }
}
