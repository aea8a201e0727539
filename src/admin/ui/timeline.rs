//! A session's timeline for the live page: each lane's held tool calls
//! (whether the result repeated) with the verdicts placed after the calls
//! they followed, and the text the agent got for each.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::detect::{Action, Verdict};
use crate::session::{Lane, Session};

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What loopguard wrote to the agent for a verdict: nothing for `observe`,
/// the warning injected into the tool result, the block's answer, or the
/// abort's error message (its code first).
pub fn delivered(v: &Verdict) -> Option<String> {
    match v.action {
        Action::Observe => None,
        Action::Warn | Action::Block | Action::Escalate => Some(v.message.clone()),
        Action::Abort => Some(crate::plan::abort_message(v)),
    }
}

/// One lane's events, oldest first: `{"kind": "call", …}` and
/// `{"kind": "verdict", …}`. `now` is the session clock and `wall` the wall
/// clock at the same moment (calls carry session-clock times).
fn lane_events(lane: &Lane, now: Duration, wall: SystemTime) -> Vec<Value> {
    let calls = lane.state.calls();
    let mut verdicts = lane.recent.iter().zip(&lane.noted).peekable();
    let mut out = Vec::with_capacity(calls.len() + lane.recent.len());
    let mut push_verdicts_before = |seq: u64, out: &mut Vec<Value>| {
        while let Some((v, noted)) = verdicts.next_if(|(_, n)| n.after_seq <= seq) {
            out.push(json!({
                "kind": "verdict",
                "at_unix_ms": noted.unix_ms,
                "detector": v.detector.name(),
                "level": v.level.name(),
                "action": v.action.name(),
                "count": v.count,
                "tool": v.tool,
                "arguments": v.arguments,
                "message": delivered(v),
            }));
        }
    };
    for call in &calls {
        push_verdicts_before(call.seq, &mut out);
        let seen = wall
            .checked_sub(now.saturating_sub(call.at))
            .unwrap_or(UNIX_EPOCH);
        out.push(json!({
            "kind": "call",
            "seq": call.seq,
            "at_unix_ms": unix_ms(seen),
            "tool": call.tool,
            "arguments": call.arguments,
            "failed": call.failed,
            "repeat": call.repeat,
        }));
    }
    push_verdicts_before(u64::MAX, &mut out);
    out
}

/// `GET /admin/sessions/{key}/timeline`: `{"key", "agent", "last_seen_unix",
/// "tool_cycles", "lanes": [{"lane", "events": […]}]}`, lanes most recently
/// used first. Bounded by what the session holds: `history_size` calls and
/// the last [`crate::session::RECENT_VERDICTS`] verdicts per lane.
pub fn timeline(s: &Session, now: Duration) -> Value {
    let wall = SystemTime::now();
    let lanes: Vec<Value> = s
        .lanes
        .iter()
        .rev()
        .map(|l| json!({"lane": format!("{:016x}", l.id), "events": lane_events(l, now, wall)}))
        .collect();
    json!({
        "key": s.key,
        "agent": s.agent,
        "last_seen_unix": s.last_seen.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "tool_cycles": s.cycles(),
        "lanes": lanes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::Settings;
    use crate::transcript::{Arguments, Message, ResultContent, Role, ToolCall, ToolResult, Transcript};

    fn looping(n: usize) -> Transcript {
        let mut t = Transcript {
            tools: vec!["ls".into()],
            ..Transcript::default()
        };
        t.messages_mut().push(Message::text(Role::User, "list the files"));
        for i in 0..n {
            let id = Some(format!("c{i}"));
            let mut turn = Message::text(Role::Assistant, "");
            turn.tool_calls = vec![ToolCall::new(
                id.clone(),
                "ls",
                Arguments::from_json_str(r#"{"path":"."}"#),
            )];
            t.messages_mut().push(turn);
            let mut result = Message::text(Role::Tool, "");
            result.tool_results = vec![ToolResult {
                call_id: id,
                name: Some("ls".into()),
                content: ResultContent::Text("a.txt".into()),
                is_error: false,
            }];
            t.messages_mut().push(result);
        }
        t
    }

    #[test]
    fn calls_are_marked_repeats_and_verdicts_follow_the_calls_they_judged() {
        let settings = Settings::default();
        let mut session = Session::new("k");
        let lane = session.lane(1);
        for n in 1..=4 {
            let verdicts = lane
                .state
                .on_request(&looping(n), Duration::from_secs(n as u64), &settings);
            for v in &verdicts {
                lane.remember(v);
            }
        }
        let t = timeline(&session, Duration::from_secs(5));
        let events = t["lanes"][0]["events"].as_array().cloned().unwrap_or_default();
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
        let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "call").collect();
        assert_eq!(calls.len(), 4, "{events:#?}");
        assert_eq!(calls[0]["repeat"], false);
        assert!(calls[1..].iter().all(|c| c["repeat"] == true), "{calls:#?}");
        let first_verdict = kinds.iter().position(|k| *k == "verdict");
        assert!(first_verdict.is_some_and(|i| i >= 2), "{kinds:?}");
        let verdict = &events[first_verdict.unwrap_or_default()];
        assert!(
            verdict["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("[loopguard]")),
            "{verdict}"
        );
    }
}
