//! Scenario tests of the streak detectors, through `SessionState`, in both dialect shapes: no-progress loops that must be caught and work that must stay silent.

use serde_json::json;

use super::testkit::{DIALECTS, Run, level, top};
use super::{DetectorKind as D, Level as L};

pub(super) const TOOLS: &[&str] = &[
    "read_file",
    "edit_file",
    "search",
    "move_file",
    "run",
    "BashOutput",
];

/// The headline ladder: identical no-progress calls warn at 3, block at 5, break at 30.
#[test]
fn identical_no_progress_streak_warns_at_3_is_critical_at_5_and_breaks_at_30() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for i in 1..=31 {
            let v = r.call("read_file", json!({"path": "a.rs"}), "fn main() {}", false);
            let expect = match i {
                1 | 2 => None,
                3 | 4 => Some(L::Warning),
                5..=29 => Some(L::Critical),
                _ => Some(L::Breaker),
            };
            assert_eq!(top(&v), expect, "{d:?} call {i}: {v:#?}");
            if i >= 30 {
                assert_eq!(level(&v, D::CircuitBreaker), Some(L::Breaker));
                assert_eq!(v[0].detector, D::CircuitBreaker);
                assert!(v[0].message.starts_with("[loopguard] circuit_breaker"));
            }
            if (3..30).contains(&i) {
                assert!(level(&v, D::IdenticalCall).is_some());
            }
        }
    }
}

/// A broken streak (another call or another result in the middle) never reaches critical.
#[test]
fn four_identical_one_different_four_identical_is_never_critical() {
    for d in DIALECTS {
        for different_result in [false, true] {
            let mut r = Run::new(d, TOOLS);
            for i in 0..9 {
                let v = if i == 4 && !different_result {
                    r.call("read_file", json!({"path": "b.rs"}), "other", false)
                } else if i == 4 {
                    r.call("read_file", json!({"path": "a.rs"}), "changed content", false)
                } else {
                    r.call("read_file", json!({"path": "a.rs"}), "same content", false)
                };
                assert!(
                    top(&v) < Some(L::Critical),
                    "{d:?} {different_result} call {i}: {v:#?}"
                );
            }
        }
    }
}

/// Productive batch work over many files must stay silent.
#[test]
fn batch_over_12_files_is_silent() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for f in 0..12 {
            let path = format!("src/mod{f}.rs");
            let new = format!("src/new/mod{f}.rs");
            let steps = [
                r.call(
                    "search",
                    json!({"query": "TODO", "path": path}),
                    &format!("{path}:3: TODO"),
                    false,
                ),
                r.call("move_file", json!({"from": path, "to": new}), "moved", false),
                r.call(
                    "search",
                    json!({"query": "TODO", "path": new}),
                    &format!("{new}:3: TODO"),
                    false,
                ),
                r.call(
                    "edit_file",
                    json!({"path": new, "old": "TODO", "new": "done"}),
                    "ok",
                    false,
                ),
            ];
            for v in steps {
                assert!(v.is_empty(), "{d:?} file {f}: {v:#?}");
            }
        }
    }
}

/// Editing the same file repeatedly with new content, and edit → build loops whose output changes, is work.
#[test]
fn repeated_edits_and_edit_build_with_changing_output_are_never_critical_nor_generic_repeat() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for i in 0..6 {
            let v = r.call(
                "edit_file",
                json!({"path": "a.rs", "content": format!("v{i}")}),
                "File edited.",
                false,
            );
            assert!(v.is_empty(), "{v:#?}");
        }
        for i in 0..15 {
            let e = r.call(
                "edit_file",
                json!({"path": "a.rs", "content": format!("fix {i}")}),
                "File edited.",
                false,
            );
            let b = r.call(
                "run",
                json!({"cmd": "cargo build"}),
                &format!("error[E0308]: mismatched types at line {}", 10 + i),
                i % 3 == 0,
            );
            for v in [e, b] {
                assert!(top(&v) < Some(L::Critical), "{d:?} round {i}: {v:#?}");
                assert_eq!(level(&v, D::GenericRepeat), None, "{d:?} round {i}");
            }
        }
    }
}

/// Codex result headers and Claude Code dedup notices are noise, not progress.
#[test]
fn codex_headers_and_claude_dedup_notices_count_as_no_progress() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let mut last = Vec::new();
        for i in 0..5 {
            let out = format!(
                "Chunk ID: {:x}\nWall time: {}.{} seconds\nProcess exited with code 0\nOutput:\nsame",
                0xabc123 * (i + 7),
                i,
                i * 7
            );
            last = r.call("run", json!({"cmd": "ls"}), &out, false);
        }
        assert_eq!(level(&last, D::IdenticalCall), Some(L::Critical), "{d:?}");
        let mut r = Run::new(d, TOOLS);
        for i in 0..5 {
            let out = if i == 0 {
                "1\tfn main() {}"
            } else {
                "Wasted call — file unchanged since your last Read. Use the earlier result."
            };
            last = r.call("read_file", json!({"path": "a.rs"}), out, false);
        }
        assert_eq!(level(&last, D::IdenticalCall), Some(L::Critical), "{d:?}");
    }
}

/// A shared banner is not a shared error: the fingerprint is the first error line.
#[test]
fn different_failures_behind_the_same_banner_are_not_error_repeat() {
    let errors = [
        "ImportError: no module x",
        "AssertionError: 1 != 2",
        "KeyError: 'name'",
        "TypeError: bad operand",
        "ValueError: empty",
    ];
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for (i, e) in errors.iter().enumerate() {
            let out =
                format!("Exit code: 1\n============ test session starts ============\nplatform linux\n{e}");
            let v = r.call("run", json!({"cmd": format!("pytest tests/t{i}.py")}), &out, true);
            assert_eq!(level(&v, D::ErrorRepeat), None, "{d:?} {i}: {v:#?}");
        }
    }
}

/// Polls of a job that makes progress, or not for long, are never critical.
#[test]
fn polling_rules_growing_output_short_stall_and_long_stall() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let mut log = String::new();
        for i in 0..15 {
            log.push_str(&format!("step {i}\n"));
            let v = r.call("BashOutput", json!({"bash_id": "1"}), &log, false);
            assert!(v.is_empty(), "{d:?} growing {i}: {v:#?}");
        }
        let mut r = Run::new(d, TOOLS);
        r.call(
            "run",
            json!({"cmd": "make", "background": true}),
            "started 1",
            false,
        );
        for i in 0..8 {
            let v = r.call("BashOutput", json!({"bash_id": "1"}), "building…", false);
            assert!(v.is_empty(), "{d:?} after launch {i}: {v:#?}");
        }
        let mut r = Run::new(d, TOOLS);
        r.step_secs = 3;
        for i in 1..=20 {
            let v = r.call("BashOutput", json!({"bash_id": "1"}), "building…", false);
            assert_eq!(
                level(&v, D::PollNoProgress),
                (i >= 10).then_some(L::Warning),
                "{d:?} fast {i}"
            );
            assert_eq!(
                level(&v, D::IdenticalCall),
                None,
                "polls are judged by poll_no_progress only"
            );
        }
        let mut r = Run::new(d, TOOLS);
        r.step_secs = 100;
        let mut v = Vec::new();
        for _ in 0..20 {
            v = r.call("BashOutput", json!({"bash_id": "1"}), "building…", false);
        }
        assert_eq!(level(&v, D::PollNoProgress), Some(L::Critical), "{d:?} slow");
    }
}

/// Reading one file in consecutive ranges is progress.
#[test]
fn reading_one_file_in_consecutive_ranges_is_silent() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for i in 0..20 {
            let v = r.call(
                "read_file",
                json!({"path": "big.rs", "offset": i * 100, "limit": 100}),
                &format!("lines {}..", i * 100),
                false,
            );
            assert!(v.is_empty(), "{d:?} {i}: {v:#?}");
        }
    }
}

/// Read/edit ping-pong where the edit keeps failing the same way is stopped
/// at its 8th call (issue #12 point 4).
#[test]
fn read_edit_ping_pong_with_the_same_failure_is_critical_at_the_8th_call() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let mut v = Vec::new();
        for i in 1..=4 {
            r.call("read_file", json!({"path": "a.rs"}), "fn a() {}", false);
            v = r.call(
                "edit_file",
                json!({"path": "a.rs", "old": "fn b", "new": "fn c"}),
                "Error: old_string not found in a.rs",
                true,
            );
            if i < 4 {
                assert!(top(&v) < Some(L::Critical), "{d:?} round {i}: {v:#?}");
            }
        }
        assert_eq!(top(&v), Some(L::Critical), "{d:?}: {v:#?}");
        assert_eq!(level(&v, D::Cycle), Some(L::Critical));
    }
}

/// Rotating trivial arguments does not hide the same error.
#[test]
fn same_error_with_rotating_arguments_is_error_repeat_critical_at_5() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        for i in 1..=5 {
            let out = format!(
                "Traceback (most recent call last):\n  File \"t.py\", line {}\nImportError: cannot import name 'x' from 'y' (0x{:x})",
                10 + i,
                0xdead0 + i
            );
            let v = r.call("run", json!({"cmd": "python t.py", "attempt": i}), &out, true);
            let expect = match i {
                1 | 2 => None,
                3 | 4 => Some(L::Warning),
                _ => Some(L::Critical),
            };
            assert_eq!(level(&v, D::ErrorRepeat), expect, "{d:?} {i}: {v:#?}");
        }
    }
}

/// The warning's advice fits the streak: identical results → use the result
/// already received; changing results → say what you wait for or change course.
#[test]
fn identical_call_advice_follows_whether_the_results_change() {
    for d in DIALECTS {
        let mut same = Run::new(d, TOOLS);
        let mut changing = Run::new(d, TOOLS);
        let (mut v_same, mut v_changing) = (Vec::new(), Vec::new());
        for i in 0..3 {
            v_same = same.call("run", json!({"cmd": "make"}), "ok", false);
            // Changing, with one repeated result as the evidence a warning needs.
            let result = ["build 0", "build 0", "build 1"][i];
            v_changing = changing.call("run", json!({"cmd": "make"}), result, false);
        }
        let message = |v: &[crate::detect::Verdict]| {
            v.iter()
                .find(|x| x.detector == D::IdenticalCall)
                .map(|x| x.message.clone())
                .unwrap_or_default()
        };
        assert!(
            message(&v_same).contains("already received"),
            "{d:?}: {}",
            message(&v_same)
        );
        assert!(
            message(&v_changing).contains("check less often"),
            "{d:?}: {}",
            message(&v_changing)
        );
    }
}

/// The message of an error streak of calls with other arguments says so:
/// it said the last call "failed 5 times in a row" after one try (a
/// new-user test: `cat` on five paths that do not exist). A streak of one
/// same call keeps its wording.
#[test]
fn an_error_streak_of_different_calls_is_worded_as_such() {
    let mut r = Run::new(DIALECTS[0], TOOLS);
    let mut last = Vec::new();
    for path in [
        "config.yml",
        "config.yaml",
        "conf/config.yml",
        "settings.yml",
        "app.yml",
    ] {
        last = r.call(
            "run",
            json!({"command": format!("cat {path}")}),
            &format!("cat: {path}: No such file or directory\nexit code 1"),
            true,
        );
    }
    let Some(found) = last.iter().find(|v| v.detector == D::ErrorRepeat) else {
        panic!("no error_repeat verdict: {last:#?}");
    };
    assert!(
        found.message.contains(
            "and the 4 calls before it (4 of them with other arguments) failed with the same error, 5 in a row"
        ),
        "{}",
        found.message
    );
    let mut same = Run::new(DIALECTS[0], TOOLS);
    for _ in 0..5 {
        last = same.call(
            "run",
            json!({"command": "cat app.yml"}),
            "cat: app.yml: No such file or directory\nexit code 1",
            true,
        );
    }
    let Some(found) = last.iter().find(|v| v.detector == D::ErrorRepeat) else {
        panic!("no error_repeat verdict: {last:#?}");
    };
    assert!(
        found
            .message
            .contains("failed 5 times in a row with the same error"),
        "{}",
        found.message
    );
}
