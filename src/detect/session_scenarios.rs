//! Scenario tests of the session-level rules, through `SessionState`, in both
//! dialect shapes: unknown tools, failure runs, retries, stream-time judging,
//! the person speaking, text turns, cycles, budget, compaction, messages.

use serde_json::json;

use super::scenarios::TOOLS;
use super::testkit::{DIALECTS, Dialect, Run, level, pending};
use super::{DetectorKind as D, Level as L, Settings};
use crate::transcript::Role;

/// Calls to undeclared tools are flagged; a request declaring no tools never is.
#[test]
fn unknown_tool_fires_at_3_and_10_but_not_without_declared_tools() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for i in 1..=10 {
            let v = r.call(
                "delete_all",
                json!({"n": i}),
                "Error: unknown tool delete_all",
                true,
            );
            let expect = match i {
                1 | 2 => None,
                3..=9 => Some(L::Warning),
                _ => Some(L::Critical),
            };
            assert_eq!(level(&v, D::UnknownTool), expect, "{d:?} {i}");
        }
        let mut r = Run::new(d, &[]);
        for i in 1..=10 {
            let v = r.call("delete_all", json!({"n": i}), "Error: unknown tool", true);
            assert_eq!(level(&v, D::UnknownTool), None);
        }
    }
}

/// Any six failures in a row are critical; one success resets the count.
/// Failures of one kind across tools (issue #12 point 2: a repeated failure
/// kind is the evidence both levels need).
#[test]
fn consecutive_failures_of_one_kind_critical_at_6_and_reset_by_a_success() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let tools = [
            "read_file",
            "edit_file",
            "search",
            "move_file",
            "run",
            "read_file",
        ];
        for (i, t) in tools.iter().enumerate() {
            let v = r.call(
                t,
                json!({"i": i}),
                &format!("Error: permission denied (attempt {})", i + 1),
                true,
            );
            let n = i + 1;
            let expect = match n {
                1 | 2 => None,
                3..=5 => Some(L::Warning),
                _ => Some(L::Critical),
            };
            assert_eq!(level(&v, D::ConsecutiveFailures), expect, "{d:?} {n}");
        }
        assert!(r.call("read_file", json!({"ok": 1}), "fine", false).is_empty());
        for i in 0..2 {
            let v = r.call("run", json!({"again": i}), &format!("fatal: thing {i}"), true);
            assert_eq!(level(&v, D::ConsecutiveFailures), None);
        }
    }
}

/// Unparsable arguments and canned format reminders are failures too.
#[test]
fn unparsable_arguments_and_canned_reminders_count_as_failures() {
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    r.b.raw_call("edit_file", "{\"path\": ", "Error parsing arguments");
    r.send();
    r.b.say(Role::Assistant, "I will now edit the file.").say(
        Role::User,
        "No tool calls found in the response. Every response MUST include a tool call.",
    );
    r.send();
    r.b.say(Role::Assistant, "Let me edit it.").say(
        Role::User,
        "No tool calls found in the response. Every response MUST include a tool call.",
    );
    let v = r.send();
    assert_eq!(level(&v, D::ConsecutiveFailures), Some(L::Warning), "{v:#?}");
}

/// A request sent twice (a retry) counts nothing twice, and its verdicts repeat.
#[test]
fn the_same_request_absorbed_twice_changes_no_counts() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for _ in 0..3 {
            r.call("read_file", json!({"path": "a.rs"}), "x", false);
        }
        let request = r.b.request();
        let first = r.session.judge_request(&r.s);
        for _ in 0..3 {
            let absorbed = r
                .session
                .absorb(&request, std::time::Duration::from_secs(99), &r.s);
            assert_eq!(absorbed.new_steps, 0, "{d:?}");
            assert_eq!(
                r.session.judge_request(&r.s),
                first,
                "{d:?}: verdicts repeat while the condition holds"
            );
        }
        assert_eq!(level(&first, D::IdenticalCall), Some(L::Warning));
        let v = r.call("read_file", json!({"path": "a.rs"}), "x", false);
        assert_eq!(v[0].count, 4, "{d:?}");
    }
}

/// Stream time: a pending call is judged as the next in the streak, without changing state.
#[test]
fn pending_calls_are_judged_as_continuing_the_streak_without_mutation() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for _ in 0..4 {
            r.call("read_file", json!({"path": "a.rs"}), "x", false);
        }
        let before = r.session.judge_request(&r.s);
        let now = std::time::Duration::from_secs(1000);
        let v = r
            .session
            .judge_pending(&[pending("read_file", json!({"path": "a.rs"}))], now, &r.s);
        assert_eq!(level(&v, D::IdenticalCall), Some(L::Critical), "{d:?}");
        let other = r
            .session
            .judge_pending(&[pending("read_file", json!({"path": "b.rs"}))], now, &r.s);
        assert!(other.is_empty(), "{other:#?}");
        assert_eq!(r.session.judge_request(&r.s), before);
    }
}

/// The person speaking restarts streaks; the agent's own canned reminders do not.
#[test]
fn the_person_speaking_restarts_streaks_but_canned_messages_do_not() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for _ in 0..3 {
            r.call("read_file", json!({"path": "a.rs"}), "x", false);
        }
        r.b.say(
            Role::User,
            "<system-reminder>todo list is empty</system-reminder>",
        );
        assert_eq!(
            level(
                &r.call("read_file", json!({"path": "a.rs"}), "x", false),
                D::IdenticalCall
            ),
            Some(L::Warning)
        );
        r.b.say(Role::Assistant, "Done reading.")
            .say(Role::User, "Please look at b.rs instead.");
        let v = r.call("read_file", json!({"path": "a.rs"}), "x", false);
        assert!(v.is_empty(), "{d:?}: {v:#?}");
    }
}

/// The same assistant text turn again and again is a monologue.
#[test]
fn repeated_message_warns_at_3_and_is_critical_at_5() {
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    for i in 1..=5 {
        r.b.say(Role::Assistant, "I need to check the file first.")
            .say(Role::User, "No tool calls found in the response.");
        let v = r.send();
        let expect = match i {
            1 | 2 => None,
            3 | 4 => Some(L::Warning),
            _ => Some(L::Critical),
        };
        assert_eq!(level(&v, D::RepeatedMessage), expect, "{i}: {v:#?}");
    }
}

/// A ping-pong of two calls warns at its 6th call and is critical at its 8th
/// with identical outcomes (thresholds in calls, issue #12 point 4).
#[test]
fn cycle_warns_at_6_calls_and_is_critical_at_8() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for i in 1..=5 {
            r.call("search", json!({"q": "x"}), "none", false);
            let v = r.call("read_file", json!({"path": "a.rs"}), "x", false);
            let expect = match i {
                1 | 2 => None,
                3 => Some(L::Warning),
                _ => Some(L::Critical),
            };
            assert_eq!(level(&v, D::Cycle), expect, "{d:?} {i}");
        }
    }
}

/// The budget is off by default and counts cycles since the person spoke when set.
#[test]
fn tool_budget_is_off_by_default_and_fires_when_configured() {
    let mut s = Settings::default();
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    for i in 0..40 {
        let v = r.call("read_file", json!({"i": i}), &format!("{i}"), false);
        assert!(v.is_empty());
    }
    s.detectors[D::ToolBudget.index()].at = [5, 8, 0];
    let mut r = Run::with(Dialect::OpenAi, TOOLS, s);
    for i in 1..=8 {
        let v = r.call("read_file", json!({"i": i}), &format!("{i}"), false);
        let expect = match i {
            1..=4 => None,
            5..=7 => Some(L::Warning),
            _ => Some(L::Critical),
        };
        assert_eq!(level(&v, D::ToolBudget), expect, "{i}");
    }
}

/// A loop that survives a compaction trips the breaker; compactions without work are a storm.
#[test]
fn post_compaction_loop_and_compaction_storm_break() {
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    for _ in 0..2 {
        r.call("read_file", json!({"path": "a.rs"}), "x", false);
    }
    r.session.note_compaction();
    let ids = r.b.next_id;
    r.b = super::testkit::Builder::new(Dialect::OpenAi, TOOLS);
    r.b.next_id = ids;
    r.b.t.messages_mut()[0]
        .set_text("This session is being continued from a previous conversation. Summary: reading a.rs");
    let mut v = Vec::new();
    for i in 1..=3 {
        v = r.call("read_file", json!({"path": "a.rs"}), "x", false);
        if i < 3 {
            assert_eq!(level(&v, D::PostCompaction), None, "{i}");
        }
    }
    assert_eq!(v[0].detector, D::PostCompaction);
    assert_eq!(v[0].level, L::Breaker);
    assert_eq!(v[0].error_code(), "compaction_loop_persisted");
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    r.call("read_file", json!({"path": "a.rs"}), "x", false);
    for n in 1..=3 {
        r.session.note_compaction();
        let v = r.send();
        assert_eq!(
            level(&v, D::CompactionStorm),
            (n == 3).then_some(L::Breaker),
            "{n}"
        );
    }
}

/// Every message says who wrote it and what to do.
#[test]
fn messages_name_detector_tool_arguments_count_and_an_alternative() {
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    let mut v = Vec::new();
    for _ in 0..3 {
        v = r.call("read_file", json!({"path": "a.rs"}), "x", false);
    }
    let m = &v[0].message;
    assert!(
        m.starts_with("[loopguard] identical_call (warning, count 3)"),
        "{m}"
    );
    assert!(
        m.contains("`read_file`")
            && m.contains(r#"{"path":"a.rs"}"#)
            && m.to_lowercase().contains("use the result"),
        "{m}"
    );
    assert_eq!(v[0].header_value(), "warn; detector=identical_call; count=3");
}

/// A run of format reminders with the model's empty turns left out (as some
/// agents and recordings send them) still counts one failure per reminder.
#[test]
fn a_run_of_canned_reminders_without_model_turns_counts_each() {
    let reminder = "No tool calls found in the response. Every response MUST include a tool call.";
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    r.b.say(Role::Assistant, "Thinking about it.");
    let mut v = Vec::new();
    for _ in 0..6 {
        r.b.say(Role::User, reminder);
        v = r.send();
    }
    assert_eq!(level(&v, D::ConsecutiveFailures), Some(L::Critical), "{v:#?}");
}

/// The person speaking in the same request as the loop's last result (no
/// model turn between: an interjection sent with the results) ends the
/// streak there: the request reaches the model with the person's words
/// instead of a verdict on the calls before them, and the next identical
/// call counts from one. Its twin without the person is blocked.
#[test]
fn the_person_speaking_after_the_last_result_lifts_that_request_verdict() {
    for d in DIALECTS {
        let mut twin = Run::new(d, TOOLS);
        let mut r = Run::new(d, TOOLS);
        for _ in 0..4 {
            twin.call("read_file", json!({"path": "a.rs"}), "x", false);
            r.call("read_file", json!({"path": "a.rs"}), "x", false);
        }
        let blocked = twin.call("read_file", json!({"path": "a.rs"}), "x", false);
        assert_eq!(level(&blocked, D::IdenticalCall), Some(L::Critical), "{d:?}");
        r.b.call("read_file", json!({"path": "a.rs"}), "x", false)
            .say(Role::User, "Stop reading a.rs, look at b.rs instead.");
        let v = r.send();
        assert!(v.is_empty(), "{d:?}: {v:#?}");
        let next = r.call("read_file", json!({"path": "a.rs"}), "x", false);
        assert!(next.is_empty(), "{d:?}: the streak restarted: {next:#?}");
    }
}

/// The same reply answered by one same screen every turn (a text-protocol
/// agent's terminal, or a repeated short user text) is a monologue too,
/// from the first time the screen comes back (a new-user test: no verdict
/// in 9 turns). The first showing of the screen is still a new text.
#[test]
fn repeated_message_with_one_same_screen_between_warns_and_blocks() {
    for screen in [
        "[Terminal]\nuser@host:~/proj$ ls\nREADME.md src tests\nuser@host:~/proj$",
        "ok",
    ] {
        let mut r = Run::new(Dialect::OpenAi, TOOLS);
        for i in 1..=7 {
            r.b.say(Role::Assistant, "I need to check the file first.")
                .say(Role::User, screen);
            // The reply before the screen's first showing is in the turn the
            // person's last new text ended: the count starts after it.
            let expect = match i {
                1..=3 => None,
                4 | 5 => Some(L::Warning),
                _ => Some(L::Critical),
            };
            assert_eq!(level(&r.send(), D::RepeatedMessage), expect, "{screen:?} {i}");
        }
    }
}

/// The twin: the same short reply after screens that differ (a step's own
/// output each time) is an agent at work.
#[test]
fn the_same_reply_after_screens_that_differ_stays_silent() {
    let mut r = Run::new(Dialect::OpenAi, TOOLS);
    for i in 1..=7 {
        r.b.say(Role::Assistant, "Command ran.")
            .say(Role::User, &format!("[Terminal]\n$ make step{i}\nstep {i} done"));
        assert_eq!(level(&r.send(), D::RepeatedMessage), None, "{i}");
    }
}
