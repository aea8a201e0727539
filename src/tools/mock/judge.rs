//! The mock's semantic judge: scripted answers for the models in the judge
//! script, in order (the last repeated).

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::{Value, json};

use super::{JudgeAnswer, MockState, script};

/// The next scripted judge answer when the request's model is in the judge script.
pub(super) fn judge_answer(st: &MockState, body: &Value) -> Option<JudgeAnswer> {
    let model = body.get("model").and_then(Value::as_str)?;
    let answers = st.judge.get(model)?;
    let mut calls = st.judge_calls.lock().ok()?;
    let n = calls.entry(model.to_owned()).or_insert(0);
    let answer = answers.get(*n).or_else(|| answers.last()).cloned();
    *n += 1;
    answer
}

/// The judge's answer: its delay, then its status or its text (or JSON)
/// as an OpenAI chat completion.
pub(super) async fn play_judge(answer: JudgeAnswer, body: &Value) -> Response {
    if let Some(ms) = answer.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(code) = answer.status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = json!({"error": {"message": format!("mock judge error {code}"), "type": "server_error"}});
        return (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let text = answer
        .text
        .or_else(|| answer.json.map(|v| v.to_string()))
        .unwrap_or_default();
    let model = body.get("model").and_then(Value::as_str).unwrap_or("judge");
    let turn = script::Turn {
        text,
        ..script::Turn::default()
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        script::openai_whole(&turn, model, 0),
    )
        .into_response()
}
