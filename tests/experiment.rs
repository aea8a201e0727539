//! The experiment (issue #17) as a scripted run: sessions of one looping
//! task, a share held out (`observe` at warning level), the rest escalated
//! to a model that answers; the outcome counters, in `/admin/experiment`,
//! in `/metrics` and in the logs, agree with what each session did.

mod common;

use std::collections::BTreeMap;

use common::{get_json, loopguard, metric_value, metrics, mock, post};
use loopguard::dialect::Dialect;
use serde_json::{Value, json};

const SESSIONS: usize = 30;

fn config(upstream: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "{upstream}"
escalate_model = "strong"

[loop_detection.actions]
warning = "escalate"

[loop_detection.experiment]
holdout = 0.3
"#
    )
}

/// One agent session: it follows the model (a call is run, always with the
/// same result; a text answer ends the task, and the person thanks it)
/// until loopguard blocks or the task ends. Returns how it ended.
async fn run_session(lg: &common::Proc, session: &str, script: &str) -> &'static str {
    let (url, mut body) = Dialect::OpenaiChat.demo_request(&lg.url());
    body["stream"] = json!(false);
    for n in 0..8 {
        let response = post(
            url.clone(),
            &[("x-loopguard-session", session), ("x-mock-script", script)],
            body.to_string(),
        )
        .await;
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        let message = &answer["choices"][0]["message"];
        if message["content"]
            .as_str()
            .is_some_and(|t| t.contains("[loopguard]"))
        {
            return "blocked";
        }
        if message["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
            Dialect::OpenaiChat.push_call_turn(&mut body, n, "list_directory", r#"{"path":"."}"#, "a.txt");
            continue;
        }
        if let Some(messages) = body["messages"].as_array_mut() {
            messages.push(json!({"role": "assistant", "content": message["content"]}));
        }
        Dialect::OpenaiChat.push_user_turn(&mut body, "Thanks, that is all.");
        let _ = post(
            url.clone(),
            &[("x-loopguard-session", session), ("x-mock-script", script)],
            body.to_string(),
        )
        .await;
        return "answered";
    }
    "ran out"
}

/// Held-out sessions are only observed at warning level and end blocked;
/// escalated ones end recovered; every counter equals the sessions that
/// ended that way, and the logged `loop outcome` events and verdicts agree.
#[tokio::test(flavor = "multi_thread")]
async fn outcome_counters_match_what_each_arm_did() {
    let mock = mock();
    let lg = loopguard(&config(&mock.url()));
    let call = json!({"tool_calls": [{"name": "list_directory", "arguments": {"path": "."}}]});
    let script =
        json!({"turns": [call], "models": {"strong": {"turns": [{"text": "Listed: a.txt."}]}}}).to_string();
    let mut ended = BTreeMap::new();
    for i in 0..SESSIONS {
        let how = run_session(&lg, &format!("exp-{i}"), &script).await;
        *ended.entry(how).or_insert(0u64) += 1;
    }
    let outcomes = lg.wait_log_events("loop outcome", SESSIONS);
    let mut by_arm: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in &outcomes {
        let f = if e["fields"].is_object() { &e["fields"] } else { e };
        let key = (
            f["arm"].as_str().unwrap_or("").to_owned(),
            f["outcome"].as_str().unwrap_or("").to_owned(),
        );
        *by_arm.entry(key).or_insert(0) += 1;
    }
    let held = by_arm
        .get(&("holdout".into(), "blocked".into()))
        .copied()
        .unwrap_or(0);
    let recovered = by_arm
        .get(&("treatment".into(), "recovered".into()))
        .copied()
        .unwrap_or(0);
    assert_eq!(outcomes.len(), SESSIONS, "one outcome per session: {by_arm:?}");
    assert_eq!(
        held + recovered,
        SESSIONS as u64,
        "held out → blocked, escalated → recovered: {by_arm:?}"
    );
    assert!(held > 0 && recovered > 0, "both arms ran: {by_arm:?}");
    assert_eq!(ended.get("blocked").copied().unwrap_or(0), held, "{ended:?}");
    assert_eq!(
        ended.get("answered").copied().unwrap_or(0),
        recovered,
        "{ended:?}"
    );
    // The verdict log: every held-out warning was observed, every other escalated.
    let verdicts = lg.log_events("verdict");
    let actions = |level: &str, action: &str| {
        verdicts
            .iter()
            .map(|e| if e["fields"].is_object() { &e["fields"] } else { e })
            .filter(|f| f["level"] == level && f["action"] == action && f["at"] == "request")
            .map(|f| f["session"].as_str().unwrap_or("").to_owned())
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u64
    };
    assert_eq!(actions("warning", "observe"), held);
    assert_eq!(actions("warning", "escalate"), recovered);
    // Judged as the answer arrives too: a held-out session's warnings are
    // observed there as well (they were logged and counted as escalations:
    // a new-user test).
    let sessions = |at: &str, action: &str| {
        verdicts
            .iter()
            .map(|e| if e["fields"].is_object() { &e["fields"] } else { e })
            .filter(|f| f["level"] == "warning" && f["action"] == action && f["at"] == at)
            .map(|f| f["session"].as_str().unwrap_or("").to_owned())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let held_out = sessions("request", "observe");
    let escalated_at_stream = sessions("stream", "escalate");
    assert!(
        !escalated_at_stream.is_empty(),
        "stream-time warnings were judged"
    );
    assert!(
        held_out.is_disjoint(&escalated_at_stream),
        "held-out sessions escalated at stream time: {:?}",
        held_out.intersection(&escalated_at_stream).collect::<Vec<_>>()
    );
    let admin: Value = get_json(format!("{}/admin/experiment", lg.admin_url())).await;
    eprintln!("/admin/experiment after {SESSIONS} scripted sessions: {admin:#}");
    assert_eq!(admin["holdout"], 0.3);
    let rows = admin["outcomes"].as_array().cloned().unwrap_or_default();
    let count = |arm: &str, outcome: &str| {
        rows.iter()
            .filter(|r| r["arm"] == arm && r["outcome"] == outcome && r["detector"] == "identical_call")
            .filter_map(|r| r["count"].as_u64())
            .sum::<u64>()
    };
    assert_eq!(count("holdout", "blocked"), held);
    assert_eq!(count("treatment", "recovered"), recovered);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let text = metrics(&lg).await;
    let series = |arm: &str, outcome: &str| {
        metric_value(
            &text,
            &format!(
                "loopguard_loop_outcomes_total{{arm=\"{arm}\",detector=\"identical_call\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    #[expect(clippy::cast_precision_loss, reason = "small counts")]
    let (h, r) = (held as f64, recovered as f64);
    assert_eq!(series("holdout", "blocked"), h, "{text}");
    assert_eq!(series("treatment", "recovered"), r);
}
