//! Detection v3 (issue #38): no progress is no new information. For each
//! class of loop v2 missed, a scenario rendered into all four dialects and
//! judged end to end by the built binary's `replay` and by the library
//! (they must agree, see the harness), with the legitimate twins it must
//! leave alone.

#[path = "detection/harness.rs"]
mod harness;

use harness::{ALL, Res, Scenario, Step, call, error, first_at, level_of, text, top};
use loopguard::detect::Level as L;
use serde_json::json;

const TOOLS: &[&str] = &[
    "bash",
    "apply_patch",
    "read_file",
    "edit_file",
    "fetch",
    "get_job",
    "BashOutput",
    "grep",
];

const LISTING: &str = "total 24\ndrwxr-xr-x 2 dev dev 4096 Dec  1 10:00 .\ndrwxr-xr-x 5 dev dev 4096 Dec  1 10:00 ..\n-rw-r--r-- 1 dev dev  812 Dec  1 10:00 app.py\n-rw-r--r-- 1 dev dev  240 Dec  1 10:00 util.py";
const SOURCE: &str = "import util\n\ndef main():\n    total = util.add(2, 3)\n    print('total is', total)\n\nif __name__ == '__main__':\n    main()";
const STATUS: &str = "On branch main\nChanges not staged for commit:\n  modified:   src/app.py\n\nno changes added to commit (use \"git add\" and/or \"git commit -a\")";

fn bash(command: &str, res: Res) -> Step {
    call("bash", json!({"command": command}), res)
}

// ---- point 1: novelty ----------------------------------------------------------

/// A long run of respelled shell calls whose results alternate between
/// three identical outputs: no two calls in a row are the same call, so no
/// streak forms; every result after the first three was already received.
#[test]
fn respelled_commands_with_alternating_outputs_are_warned_then_stopped() {
    let spellings = [
        ("ls -la src", LISTING),
        ("cat src/app.py", SOURCE),
        ("git status", STATUS),
        ("ls -al src/", LISTING),
        ("cat ./src/app.py", SOURCE),
        ("git status .", STATUS),
        ("ls -l -a ./src", LISTING),
        ("cat src/app.py | cat", SOURCE),
        ("ls src -la | cat", LISTING),
        ("git  status", STATUS),
        ("cat -- src/app.py", SOURCE),
        ("ls -a -l src/", LISTING),
        ("git status | cat", STATUS),
    ];
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for (command, out) in spellings {
            s.push(bash(command, text(out)));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "novelty"), Some(L::Critical), "{d:?}: {v:?}");
        // Three new results, then six stale ones: request 8 (0-based) warns;
        // ten stale ones: request 12 stops.
        assert_eq!(first_at(&v, L::Warning), Some(8), "{d:?}: {v:?}");
        assert_eq!(first_at(&v, L::Critical), Some(12), "{d:?}: {v:?}");
    }
}

/// Gemini CLI's shell results echo the command (`Command: …`): the echo of
/// a respelling does not make the same output new.
#[test]
fn respellings_whose_results_echo_the_command_are_warned() {
    let spellings = [
        "ls -la src",
        "ls -al src/",
        "ls -l -a ./src",
        "ls src -la | cat",
        "ls -a -l src/",
        "ls -la -- src",
    ];
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..9 {
            let command = spellings[i % spellings.len()];
            let out = format!(
                "Command: {command}\nDirectory: (root)\nStdout: {LISTING}\nStderr: (empty)\nExit Code: 0"
            );
            s.push(call(
                "run_shell_command",
                json!({"command": command}),
                Res::Json(json!({"output": out})),
            ));
            s.push(call("read_file", json!({"path": "src/app.py"}), text(SOURCE)));
        }
        let v = s.judge(d);
        assert!(level_of(&v, "novelty") >= Some(L::Warning), "{d:?}: {v:?}");
    }
}

/// Twin: the same three commands with their outputs changing (the agent
/// edits between looks, so each look shows something new) stay silent.
#[test]
fn respelled_looks_at_changing_outputs_stay_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..6 {
            s.push(call(
                "edit_file",
                json!({"path": "src/app.py", "old": format!("add({i}"), "new": format!("add({}", i + 1)}),
                text("Applied 1 edit."),
            ));
            s.push(bash(
                ["cat src/app.py", "cat ./src/app.py"][i % 2],
                text(SOURCE.replace("2, 3", &format!("{}, 3", i + 1))),
            ));
            s.push(bash(
                ["git status", "git status ."][i % 2],
                text(format!("{STATUS}\n{i} stash entries")),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Twin: a test run after each edit, failing the same way each time: the
/// edits change the code (each an acknowledgement from another edit), so the
/// run of stale results never forms; and v2's rules stay as they were.
#[test]
fn a_test_run_after_each_edit_stays_silent_even_when_it_fails_alike() {
    let failure = "Exit code: 1\n============ FAILURES ============\nE   AssertionError: assert 4 == 5\n1 failed, 11 passed";
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..10 {
            s.push(call(
                "edit_file",
                json!({"path": "src/app.py", "old": format!("v{i}"), "new": format!("v{}", i + 1)}),
                text("Applied 1 edit."),
            ));
            s.push(bash("pytest -q tests/test_app.py", text(failure)));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "novelty"), None, "{d:?}: {v:?}");
    }
}

/// Twin: Codex's JSON acknowledgement of a patch (with its metadata) after
/// each of several different fixes, the same test failing between them.
#[test]
fn different_patches_with_the_same_json_acknowledgement_stay_silent() {
    let failure =
        "Exit code: 1\nFAILED tests/test_calc.py::test_tax_de - assert 119.0 == 119.00\n1 failed, 4 passed";
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        s.push(bash("pytest -q", text(failure)));
        for i in 0..6 {
            let ack = json!({"output": "Success. Updated the following files:\nM src/calc.py\n", "metadata": {"exit_code": 0, "duration_seconds": 0.0}});
            s.push(call("apply_patch", json!({"input": format!("*** Begin Patch\n*** Update File: src/calc.py\n-    rate = {i}\n+    rate = {}\n*** End Patch", i + 1)}), Res::Json(ack)));
            s.push(bash("pytest -q", text(failure)));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "novelty"), None, "{d:?}: {v:?}");
    }
}

/// Twin: eight files of a package with the same licence header, read one
/// after the other: the same long result from other targets.
#[test]
fn the_same_content_from_other_files_stays_silent() {
    let header = "# Copyright 2024 Acme Corp.\n#\n# Licensed under the Apache License, Version 2.0 (the \"License\");\n# you may not use this file except in compliance with the License.\n# You may obtain a copy of the License at\n#\n#     http://www.apache.org/licenses/LICENSE-2.0\n";
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for m in [
            "core", "io", "models", "utils", "cli", "plugins", "server", "client", "db", "web",
        ] {
            s.push(call(
                "read_file",
                json!({"path": format!("acme/{m}/__init__.py")}),
                text(header),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// The loop goes on through the agent's text turns ("let me try again"):
/// a text turn is no news.
#[test]
fn a_loop_through_text_turns_is_still_counted() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..8 {
            s.push(bash(
                ["npm run build", "npm run build --silent"][i % 2],
                error("npm ERR! Missing script: \"build\""),
            ));
            s.push(bash(
                ["cat package.json", "cat ./package.json"][i % 2],
                text(SOURCE),
            ));
            s.push(Step::Said(
                "The build script seems to be missing. Let me try again.".to_owned(),
            ));
        }
        let v = s.judge(d);
        assert!(level_of(&v, "novelty") >= Some(L::Warning), "{d:?}: {v:?}");
    }
}

/// Twin: batch work — the same acknowledgement from calls to other targets.
#[test]
fn the_same_acknowledgement_from_other_targets_stays_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..14 {
            s.push(bash(&format!("git add src/mod{i}.py"), text("")));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Twin: `git status` between commits, paginated reads and a growing log.
#[test]
fn status_between_commits_pages_and_a_growing_log_stay_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let clean = "On branch main\nnothing to commit, working tree clean";
        for i in 0..8 {
            s.push(bash(&format!("git add src/part{i}.py"), text("")));
            s.push(bash(
                &format!("git commit -m 'part {i}'"),
                text(format!(
                    "[main {i}a1] part {i}\n 1 file changed, {} insertions(+)",
                    i + 3
                )),
            ));
            s.push(bash("git status", text(clean)));
            s.push(call(
                "read_file",
                json!({"path": "NOTES.md", "offset": i * 40, "limit": 40}),
                text(format!(
                    "line {} .. line {}: notes on part {i}",
                    i * 40,
                    i * 40 + 39
                )),
            ));
            s.push(bash(
                "cat build.log",
                text((0..=i).map(|k| format!("built part {k}\n")).collect::<String>()),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Twin: one turn of parallel guesses that all fail alike is exploration
/// (the run must span three assistant turns).
#[test]
fn parallel_guesses_in_one_turn_stay_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let guesses: Vec<(String, serde_json::Value, Res)> = (0..9)
            .map(|i| {
                let path = format!("src/guess{i}/config.yaml");
                (
                    "read_file".to_owned(),
                    json!({"path": path}),
                    error(format!("Error: ENOENT: no such file or directory, open '{path}'")),
                )
            })
            .collect();
        s.push(Step::Calls(guesses));
        s.push(bash("ls src", text(LISTING)));
        let v = s.judge(d);
        assert_eq!(level_of(&v, "novelty"), None, "{d:?}: {v:?}");
    }
}

// ---- point 2: echo-aware failure fingerprints ---------------------------------

/// The same failure reached with a random token in every call's arguments,
/// the token echoed back in the failure text: one failure, stopped.
#[test]
fn the_same_failure_echoing_a_random_token_is_stopped() {
    let tokens = [
        "qwzkfh", "mvbtrx", "plsndq", "zkcvwa", "hgfrty", "nbvcxz", "lkjhgq",
    ];
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for t in tokens {
            s.push(call(
                "fetch",
                json!({"url": format!("http://localhost:8080/api/session?nonce={t}")}),
                text(format!(
                    "Error: session rejected: nonce {t} is not valid for /api/session?nonce={t}"
                )),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), Some(L::Critical), "{d:?}: {v:?}");
        assert_eq!(level_of(&v, "error_repeat"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// The same 404 reached through URL variants by two tools in turn, with a
/// look at the same unchanged config between tries: no tool's streak, no
/// call twice, no run of failures (the look succeeds); `novelty` stops it.
#[test]
fn the_same_404_through_url_variants_and_two_tools_is_stopped() {
    let paths = ["/a", "/b", "/docs", "/docs/", "/api", "/v1", "/help", "/index"];
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for (i, p) in paths.iter().enumerate() {
            let url = format!("http://localhost:8080{p}");
            s.push(if i % 2 == 0 {
                call(
                    "fetch",
                    json!({"url": url}),
                    text(format!("HTTP 404: Not Found for {p}")),
                )
            } else {
                bash(
                    &format!("curl -sf {url}"),
                    text(format!(
                        "Exit code: 22\ncurl: (22) The requested URL returned error: 404 for {p}"
                    )),
                )
            });
            s.push(bash(
                ["cat config.yaml", "cat ./config.yaml"][i % 2],
                text(SOURCE),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "novelty"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// Twin: different failures with varying arguments stay different.
#[test]
fn different_failures_through_varying_arguments_are_not_one_failure() {
    let failures = [
        "Error: connection refused",
        "Error: certificate has expired",
        "Error: 401 Unauthorized",
        "Error: 429 Too Many Requests",
        "Error: DNS lookup failed",
        "Error: connection reset by peer",
    ];
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for (i, f) in failures.iter().enumerate() {
            s.push(call(
                "fetch",
                json!({"url": format!("https://svc{i}.example.com/health")}),
                text(format!("{f} (svc{i}.example.com)")),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "error_repeat"), None, "{d:?}: {v:?}");
        assert_eq!(level_of(&v, "novelty"), None, "{d:?}: {v:?}");
    }
}

// ---- point 3: volatile values inside JSON results -----------------------------

/// Polls whose JSON answers differ only in a counter and a token under
/// unremarkable keys are a poll without progress.
#[test]
fn polls_differing_only_in_a_json_counter_and_token_are_warned() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..11 {
            s.push(call(
                "BashOutput",
                json!({"bash_id": "bash_1"}),
                Res::Json(json!({"status": "running", "stdout": "waiting for the database lock", "poll": i, "etag": format!("W/{i}c{i}")})),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "poll_no_progress"), Some(L::Warning), "{d:?}: {v:?}");
    }
}

/// The same call answered with a JSON counter that changes every time:
/// identical results once the counter is masked.
#[test]
fn the_same_call_with_only_a_json_counter_changing_is_stopped() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..6 {
            s.push(call(
                "get_job",
                json!({"name": "nightly-build"}),
                Res::Json(json!({"job": "nightly-build", "state": "blocked", "reason": "quota exceeded", "seq": 9000 + i})),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "identical_call"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// Twin: a JSON progress counter that rises is progress, never masked.
#[test]
fn a_rising_json_progress_counter_stays_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..14 {
            s.push(call(
                "BashOutput",
                json!({"bash_id": "bash_1"}),
                Res::Json(json!({"status": "running", "stdout": "training", "progress": i * 7, "seq": i})),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

// ---- point 4: progress in waits -----------------------------------------------

/// A training job watched with `sleep` between looks at a progress line
/// that moves on: the waits return the same (empty) output every time, but
/// each look brings news, so the waits are no poll without progress.
#[test]
fn a_training_job_watched_with_sleep_and_a_moving_progress_line_stays_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        s.interval = 60.0;
        for i in 0..16 {
            s.push(bash("sleep 60", text("")));
            s.push(bash(
                "tail -n 1 train.log",
                text(format!(
                    "epoch 2 step {}/5000 loss 0.{}",
                    300 * (i + 1),
                    900 - 13 * i
                )),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Twin: a queue drained between waits, watched through a JSON status whose
/// counters move by more than one: each check is news, nothing is masked.
#[test]
fn a_queue_draining_between_waits_is_never_stopped() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        s.interval = 30.0;
        for i in 0..9 {
            s.push(bash("sleep 30", text("")));
            s.push(call(
                "get_job",
                json!({"queue": "emails"}),
                Res::Json(
                    json!({"queue": "emails", "workers": 2, "backlog": 1200 - 130 * i, "delivered": 130 * i}),
                ),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Its loop: the same waits while the progress line is stuck are a poll
/// without progress, as in v2.
#[test]
fn a_wait_whose_checks_return_the_same_line_is_warned() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        s.interval = 60.0;
        for _ in 0..12 {
            s.push(bash("sleep 60", text("")));
            s.push(bash(
                "tail -n 1 train.log",
                text("epoch 2 step 300/5000 loss 0.871"),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "poll_no_progress"), Some(L::Warning), "{d:?}: {v:?}");
    }
}

/// A CI poll that spans a compaction: the compacted agent starts its watch
/// anew, so six polls before and seven after are no streak of ten.
#[test]
fn a_ci_poll_spanning_a_compaction_is_not_warned() {
    let poll = || {
        call(
            "BashOutput",
            json!({"bash_id": "ci_watch"}),
            text("CI run 4471: in progress (3 of 7 jobs done)"),
        )
    };
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..6 {
            s.push(bash(
                &format!("git log -1 --format=%s HEAD~{i}"),
                text(format!("commit message {i}")),
            ));
        }
        s.push(bash(
            "git push origin main",
            text("To origin\n   1a2b3c4..5d6e7f8  main -> main"),
        ));
        s.repeat(poll(), 6);
        s.push(Step::Compacted(
            "This session is being continued from a previous conversation that ran out of context. The user asked to push the fix and wait for CI.".to_owned(),
        ));
        s.repeat(poll(), 7);
        let v = s.judge(d);
        assert_eq!(level_of(&v, "poll_no_progress"), None, "{d:?}: {v:?}");
        // Without the compaction, the same thirteen polls are warned.
        let mut whole = Scenario::new(TOOLS);
        whole.repeat(poll(), 13);
        assert_eq!(
            level_of(&whole.judge(d), "poll_no_progress"),
            Some(L::Warning),
            "{d:?}"
        );
    }
}
