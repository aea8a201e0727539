//! Stream-time judging over a bounded look-back against the whole view it
//! replaced: on random histories and batches up to the look-back the ranked
//! verdicts are the same; a long batch of one repeated call keeps its
//! verdicts; a huge batch costs linear time.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::detect::testkit::{Builder, Dialect};
use crate::transcript::Arguments;

/// One step of a random history.
#[derive(Debug, Clone)]
enum Op {
    Call {
        tool: u8,
        arg: u8,
        result: u8,
        error: bool,
    },
    Parallel(Vec<(u8, u8, u8)>),
    User(u8),
    Said(u8),
}

const TOOLS: [&str; 4] = ["read_file", "bash", "command_status", "edit_file"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..4, 0u8..3, 0u8..3, any::<bool>()).prop_map(|(tool, arg, result, error)| Op::Call { tool, arg, result, error }),
        1 => prop::collection::vec((0u8..4, 0u8..3, 0u8..3), 2..5).prop_map(Op::Parallel),
        1 => (0u8..3).prop_map(Op::User),
        1 => (0u8..2).prop_map(Op::Said),
    ]
}

fn history(dialect: Dialect, ops: &[Op]) -> Builder {
    let mut b = Builder::new(dialect, &TOOLS[..3]);
    for op in ops {
        match op {
            Op::Call {
                tool,
                arg,
                result,
                error,
            } => {
                let result = if *error {
                    format!("Error: failed {result}")
                } else {
                    format!("ok {result}")
                };
                b.call(TOOLS[usize::from(*tool)], json!({"arg": arg}), &result, *error);
            }
            Op::Parallel(calls) => {
                let results: Vec<String> = calls.iter().map(|(_, _, r)| format!("ok {r}")).collect();
                let calls: Vec<(&str, serde_json::Value, &str, bool)> = calls
                    .iter()
                    .zip(&results)
                    .map(|((t, a, _), r)| (TOOLS[usize::from(*t)], json!({"arg": a}), r.as_str(), false))
                    .collect();
                b.calls(&calls);
            }
            Op::User(n) => {
                b.say(Role::User, &format!("please try approach {n}"));
            }
            Op::Said(n) => {
                b.say(Role::Assistant, &format!("I will look again ({n})."));
            }
        }
    }
    b
}

use crate::transcript::Role;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn bounded_lookback_gives_the_verdicts_of_the_whole_view(
        ops in prop::collection::vec(op(), 0..80),
        batch in prop::collection::vec((0u8..4, 0u8..2), 0..=256),
        gemini in any::<bool>(),
    ) {
        let dialect = if gemini { Dialect::Gemini } else { Dialect::OpenAi };
        let settings = Settings::default();
        let mut session = SessionState::new();
        let b = history(dialect, &ops);
        let _ = session.on_request(&b.request(), Duration::from_secs(1), &settings);
        let calls: Vec<ToolCall> = batch
            .iter()
            .map(|(t, a)| ToolCall::new(Some("p".into()), TOOLS[usize::from(*t)], Arguments::Json(json!({"arg": a}))))
            .collect();
        let now = Duration::from_secs(400);
        let bounded = session.judge_pending(&calls, now, &settings);
        let whole = session.judge_pending_within(&calls, now, usize::MAX, &settings);
        prop_assert_eq!(bounded, whole);
    }
}

/// A batch of identical calls longer than the look-back keeps the verdicts
/// of the whole view (the first call reaching each level decides).
#[test]
fn a_long_identical_batch_keeps_its_verdicts() {
    let settings = Settings::default();
    let mut b = Builder::new(Dialect::OpenAi, &["read_file"]);
    for _ in 0..4 {
        b.call("read_file", json!({"path": "a"}), "same", false);
    }
    let mut session = SessionState::new();
    let _ = session.on_request(&b.request(), Duration::from_secs(1), &settings);
    let calls = vec![
        ToolCall::new(
            Some("p".into()),
            "read_file",
            Arguments::Json(json!({"path": "a"}))
        );
        1000
    ];
    let bounded = session.judge_pending(&calls, Duration::from_secs(2), &settings);
    let whole = session.judge_pending_within(&calls, Duration::from_secs(2), usize::MAX, &settings);
    assert!(!bounded.is_empty());
    assert_eq!(bounded, whole);
}

/// 20,000 distinct pending calls are judged in well under the time the
/// whole view took (quadratic: minutes); debug build, generous bound.
#[test]
fn a_huge_batch_is_judged_in_linear_time() {
    let settings = Settings::default();
    let session = SessionState::new();
    let calls: Vec<ToolCall> = (0..20_000)
        .map(|i| {
            ToolCall::new(
                Some(format!("p{i}")),
                "read_file",
                Arguments::Json(json!({"path": i})),
            )
        })
        .collect();
    let started = std::time::Instant::now();
    let _ = session.judge_pending(&calls, Duration::from_secs(2), &settings);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// A request that carries one call and its result, and nothing else (what
/// a Responses request chained with `previous_response_id` holds once the
/// call of the response it chains to is put first).
fn delta(round: usize, result: &str) -> Transcript {
    let mut b = Builder::new(Dialect::OpenAi, &["list_directory"]);
    b.t.messages_mut().clear();
    b.next_id = round * 10;
    b.call("list_directory", json!({"path": "."}), result, false);
    b.request()
}

/// Chained requests each carrying the same call and result: the fifth is
/// critical, as in a resent history. Aligned as whole histories they would
/// read as the previous request resent, and nothing would count.
#[test]
fn chained_requests_count_each_identical_cycle() {
    let settings = Settings::default();
    let mut session = SessionState::new();
    let mut levels = Vec::new();
    for round in 0..5 {
        session.absorb_new(
            &delta(round, "a.txt"),
            Duration::from_secs(round as u64),
            &settings,
        );
        levels.push(session.judge_request(&settings).first().map(|v| v.level));
    }
    assert_eq!(session.cycles(), 5);
    assert_eq!(levels[4], Some(crate::detect::Level::Critical), "{levels:?}");
}

/// The legitimate twin: chained requests whose results change (the agent
/// learns something each time) reach no critical.
#[test]
fn chained_requests_with_changing_results_are_left_alone() {
    let settings = Settings::default();
    let mut session = SessionState::new();
    for round in 0..6 {
        session.absorb_new(
            &delta(round, &format!("{round}.txt")),
            Duration::from_secs(round as u64),
            &settings,
        );
        let verdicts = session.judge_request(&settings);
        assert!(
            verdicts.iter().all(|v| v.level != crate::detect::Level::Critical),
            "round {round}: {verdicts:?}"
        );
    }
}

/// A request resent unchanged keeps one arrival per resend for the
/// `replay_storm` breaker, up to its threshold; switched off, one arrival
/// is kept whatever the resends (the session, written to the shared store
/// whole, does not grow with them).
#[test]
fn a_switched_off_replay_storm_keeps_one_arrival() {
    let request = Builder::new(Dialect::OpenAi, &["list_directory"])
        .call("list_directory", json!({"path": "."}), "a.txt", false)
        .request();
    let arrivals = |settings: &Settings| {
        let mut session = SessionState::new();
        for i in 0..40 {
            session.absorb(&request, Duration::from_secs(i), settings);
        }
        session.repeats.count()
    };
    assert_eq!(arrivals(&Settings::default()), 30);
    let mut off = Settings::default();
    off.detectors[crate::detect::DetectorKind::ReplayStorm.index()].enabled = false;
    assert_eq!(arrivals(&off), 1);
}
