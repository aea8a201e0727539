//! Detection v2 (issue #12): for each cause a scenario rendered into all four
//! dialects (OpenAI chat, OpenAI Responses, Gemini, Anthropic), judged end to
//! end by the built binary's `replay` and by the library through the real
//! dialect parsers, with its legitimate twin that must stay quiet.

#[path = "detection/harness.rs"]
mod harness;

use harness::{ALL, Res, Scenario, Step, call, error, first_at, level_of, observed, text, top};
use loopguard::detect::Level as L;
use serde_json::json;

const TOOLS: &[&str] = &[
    "bash",
    "read_file",
    "edit_file",
    "fetch",
    "run_shell_command",
    "Bash",
    "exec",
];

// ---- point 1: results are read in every shape -------------------------------

/// Gemini CLI's shell tool reports `Exit Code: 1` inside `output`; the same
/// failure whatever the arguments is `error_repeat` in every dialect.
#[test]
fn exit_code_nested_in_a_json_result_is_a_failure_in_every_dialect() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..5 {
            let out = format!(
                "Command: pytest -k case{i}\nDirectory: (root)\nStdout: collected 3 items\nStderr: ModuleNotFoundError: No module named 'app'\nExit Code: 1"
            );
            s.push(call(
                "run_shell_command",
                json!({"command": format!("pytest -k case{i}")}),
                Res::Json(json!({"output": out})),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "error_repeat"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// An SDK tool's `{"result": "Error: …"}` is a failure, fingerprinted by its error line.
#[test]
fn sdk_result_error_text_is_a_failure_in_every_dialect() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..5 {
            s.push(call(
                "fetch",
                json!({"url": format!("http://localhost:80{i}/health")}),
                Res::Json(json!({"result": format!("Error: connection refused (port 80{i})")})),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "error_repeat"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// Cline's wrapper: a failure; its fingerprint ignores the SEARCH block it
/// echoes from the call, so a slightly different block is the same failure.
#[test]
fn cline_failure_wrapper_with_echoed_search_block_is_one_failure() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..5 {
            let block = format!("def total(items):\n    return sum(items)  # v{i}\n");
            let result = format!(
                "The tool execution failed with the following error:\n<error>\nThe SEARCH block:\n{block}...does not match anything in the file.\n</error>"
            );
            s.push(call("edit_file", json!({"path": "calc.py", "diff": format!("<<<<<<< SEARCH\n{block}=======\nnew\n>>>>>>> REPLACE")}), text(result)));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "error_repeat"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// An exit-code marker alone says the step failed, not which error: five
/// different failures with the same `<returncode>1</returncode>` are not one
/// repeated error, and not no-progress evidence.
#[test]
fn different_failures_with_the_same_exit_code_are_different_errors() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let outputs = [
            "  File \"<stdin>\", line 3\n    print(x\nSyntaxError: '(' was never closed",
            "grep: src/models.py: No such file or directory",
            "patch does not apply",
            "1 failed, 3 passed",
            "sed: -e expression #1, char 5: unterminated `s' command",
        ];
        for (i, out) in outputs.iter().enumerate() {
            s.push(call(
                "bash",
                json!({"command": format!("step {i}")}),
                text(format!("<returncode>1</returncode>\n<output>\n{out}\n</output>")),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "error_repeat"), None, "{d:?}: {v:?}");
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Volatile values inside result text (UUIDs, timestamps, durations, pids,
/// random tokens, id keys in any case style) do not defeat "same result".
#[test]
fn volatile_values_in_result_text_do_not_hide_a_loop() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..5 {
            let out = format!(
                "started worker pid {} at 2026-12-01T20:0{i}:11Z\nrun a1b2c3d{i}-4b1c-4e2a-9d3e-12345678abc{i} tmp{i}x9k2q{i}z\nstatus: pending (took 0.{i}4s)",
                4000 + i,
            );
            s.push(call(
                "bash",
                json!({"command": "ci status"}),
                Res::Json(json!({"output": out, "requestId": format!("r{i}"), "TraceID": i})),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "identical_call"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

// ---- point 2: a warning needs no-progress evidence --------------------------

/// A job polled while its output changes is progress: silent to the agent
/// (from the 6th call only logged, action `observe`).
#[test]
fn same_call_with_changing_results_stays_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..8 {
            s.push(call(
                "bash",
                json!({"command": "tail -n 3 build.log"}),
                text(format!("compiling crate {} of 40", 10 + i)),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
        let logged = observed(&v);
        assert!(
            !logged.is_empty() && logged.iter().all(|x| *x == "identical_call"),
            "{d:?}: {v:?}"
        );
    }
}

/// A wait-then-check loop whose output grows is progress: silent.
#[test]
fn ping_pong_with_growing_output_stays_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..8 {
            s.push(call(
                "bash",
                json!({"command": "make -j2 2>&1 | tail -1"}),
                text(format!("[{}%] Building", 10 * i)),
            ));
            s.push(call(
                "read_file",
                json!({"path": "out/progress.txt"}),
                text("x".repeat(i + 1)),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// Three different failures during normal diagnosis: silent; the same
/// failure kind again and again: flagged.
#[test]
fn different_failures_are_diagnosis_repeated_ones_are_not() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        s.push(call(
            "bash",
            json!({"command": "pytest"}),
            text("Exit code: 1\nImportError: cannot import name 'x'"),
        ));
        s.push(call(
            "read_file",
            json!({"path": "a.py"}),
            error("Error: file not found: a.py"),
        ));
        s.push(call(
            "bash",
            json!({"command": "python -c 'import app'"}),
            text("Exit code: 1\nNameError: name 'y' is not defined"),
        ));
        s.push(call(
            "edit_file",
            json!({"path": "b.py"}),
            error("TypeError: expected str"),
        ));
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");

        let mut s = Scenario::new(TOOLS);
        for i in 0..6 {
            let (tool, args) = if i % 2 == 0 {
                ("bash", json!({"command": format!("pytest -x t{i}")}))
            } else {
                ("exec", json!({"cmd": format!("pytest t{i}")}))
            };
            s.push(call(
                tool,
                args,
                text("Exit code: 1\nImportError: cannot import name 'x'"),
            ));
        }
        let v = s.judge(d);
        assert!(
            level_of(&v, "consecutive_failures") >= Some(L::Warning),
            "{d:?}: {v:?}"
        );
    }
}

// ---- point 3: waiting is not looping -----------------------------------------

fn wait_scenario(minutes: u64, interval: f64) -> Scenario {
    let mut s = Scenario::new(TOOLS);
    s.interval = interval;
    let n = (minutes * 60) as f64 / interval;
    for _ in 0..n as usize {
        s.push(call(
            "bash",
            json!({"command": "sleep 60 && gh run view 4242 --json status"}),
            text("{\"status\":\"in_progress\"}"),
        ));
    }
    s
}

/// A 25-minute CI wait whose answer never changes stays below critical.
#[test]
fn a_25_minute_wait_stays_below_critical() {
    for d in ALL {
        let v = wait_scenario(25, 90.0).judge(d);
        assert!(top(&v) < Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// A wait argument of the tool (OpenClaw's `yieldMs`) makes a poll too.
#[test]
fn a_wait_argument_makes_a_poll() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        s.interval = 60.0;
        for _ in 0..20 {
            s.push(call(
                "exec",
                json!({"command": "npm test", "yieldMs": 30000}),
                text("still running"),
            ));
        }
        let v = s.judge(d);
        assert!(top(&v) < Some(L::Critical), "{d:?}: {v:?}");
        assert_eq!(level_of(&v, "identical_call"), None, "{d:?}: {v:?}");
    }
}

/// Past the wall-time ceiling (30 minutes) the same wait is stuck.
#[test]
fn a_wait_past_the_ceiling_is_critical() {
    for d in ALL {
        let v = wait_scenario(40, 100.0).judge(d);
        assert_eq!(
            level_of(&v, "poll_no_progress"),
            Some(L::Critical),
            "{d:?}: {v:?}"
        );
    }
}

// ---- point 4: ping-pong is stopped early --------------------------------------

/// Period 2 with identical results is critical by its 8th call, period 3 by its 12th.
#[test]
fn ping_pong_with_identical_results_is_stopped_by_call_8_and_12() {
    for d in ALL {
        for period in [2usize, 3] {
            let mut s = Scenario::new(TOOLS);
            for i in 0..4 * period {
                let j = i % period;
                s.push(call(
                    "read_file",
                    json!({"path": format!("f{j}.py")}),
                    text(format!("contents {j}")),
                ));
            }
            let v = s.judge(d);
            let at = first_at(&v, L::Critical);
            assert!(at.is_some_and(|r| r < 4 * period), "{d:?} period {period}: {v:?}");
        }
    }
}

/// Edit → test alternation with changing results stays silent.
#[test]
fn edit_test_alternation_with_changing_results_stays_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..10 {
            s.push(call(
                "edit_file",
                json!({"path": "a.py", "patch": format!("fix {i}")}),
                text(format!("applied fix {i}")),
            ));
            s.push(call(
                "bash",
                json!({"command": "pytest"}),
                text(format!("{} failed, {} passed", 10 - i, i)),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

// ---- point 5: exact matching is dodged ------------------------------------------

/// (a) Claude Code's `Bash` `description` and `timeout` do not identify the call.
#[test]
fn free_text_arguments_do_not_identify_a_call() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..5 {
            s.push(call("Bash", json!({"command": "npm test", "description": format!("Run the tests, attempt {i}"), "timeout": 1000 * (i + 1)}), text("1 failing")));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "identical_call"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// (a) twin: a different working directory or background flag is another call.
#[test]
fn arguments_that_change_what_runs_still_identify_a_call() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..6 {
            s.push(call("Bash", json!({"command": "npm test", "workdir": format!("packages/p{i}"), "run_in_background": i % 2 == 0}), text("ok")));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// (b) Neutral rewrites (whitespace, quoting, flag order and bundling, a
/// trailing slash, a comment) with identical results are repeats.
#[test]
fn near_duplicate_calls_with_identical_results_are_repeats() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let commands = [
            "ls -la src/",
            "ls  -al src",
            "ls -a -l 'src'",
            "ls -l -a \"src/\"  # again",
            "ls -al src/",
        ];
        for c in commands {
            s.push(call("bash", json!({"command": c}), text("main.rs\nlib.rs")));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "identical_call"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// (b) twin: a differing path is never a neutral rewrite.
#[test]
fn a_different_path_is_never_a_near_duplicate() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for dir in ["src/a", "src/b", "src/c", "src/d", "src/e", "src/f"] {
            s.push(call(
                "bash",
                json!({"command": format!("ls -la {dir}")}),
                text("mod.rs"),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// (c) Varying URLs, the same 404 (hermes-agent#60084): no progress.
#[test]
fn same_failure_with_varying_arguments_is_no_progress() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..5 {
            let url = format!("https://docs.example.com/api/v{i}/guide");
            s.push(call(
                "fetch",
                json!({"url": url}),
                text(format!("404 Not Found: {url}")),
            ));
        }
        let v = s.judge(d);
        assert_eq!(level_of(&v, "error_repeat"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// (c) twin: identical successes on different targets (a batch edit) are progress.
#[test]
fn identical_successes_on_different_targets_stay_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..12 {
            s.push(call(
                "edit_file",
                json!({"path": format!("src/mod{i}.rs"), "old": "foo", "new": "bar"}),
                text("The file was edited successfully."),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

// ---- point 7: who is the person, and what is a failure -----------------------------

/// A skill body loaded into the conversation is not the person: a loop that
/// spans it is still counted.
#[test]
fn a_loop_spanning_a_skill_load_is_still_counted() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let read = call("read_file", json!({"path": "a.py"}), text("print(1)"));
        s.repeat(read.clone(), 3);
        s.push(Step::User(
            "Base directory for this skill: /home/user/.claude/skills/pdf\n\n# PDF\n\nUse this skill to read PDF files.".into(),
        ));
        s.repeat(read, 2);
        let v = s.judge(d);
        assert_eq!(level_of(&v, "identical_call"), Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// Twin: the person speaking mid-streak restarts it.
#[test]
fn the_person_speaking_restarts_a_streak() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let read = call("read_file", json!({"path": "a.py"}), text("print(1)"));
        s.repeat(read.clone(), 3);
        s.push(Step::User("Please look at b.py instead, a.py is fine.".into()));
        s.repeat(read, 2);
        let v = s.judge(d);
        assert!(top(&v) < Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// The person speaking right after the loop's last result (an interjection
/// sent with the results, no model turn between) lifts the verdict: the
/// request carrying the person's words reaches the model unjudged, where
/// the request before it, the same history without them, was blocked.
#[test]
fn the_person_speaking_after_the_last_result_is_not_blocked() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let read = call("read_file", json!({"path": "a.py"}), text("print(1)"));
        s.repeat(read, 5);
        s.push(Step::User("Stop re-reading a.py; the bug is in b.py.".into()));
        let v = s.judge(d);
        let at = |request: usize| v.iter().filter(|x| x.request == request).map(|x| x.level).max();
        assert_eq!(at(4), Some(L::Critical), "{d:?}: the 5th read is blocked: {v:?}");
        assert_eq!(at(5), None, "{d:?}: the person's request is not: {v:?}");
    }
}

/// A text-protocol agent writing six files with heredocs: each screen is the
/// same empty prompt, and the agent's short acknowledgement repeats; neither
/// is a failure: silent.
#[test]
fn six_heredoc_file_writes_in_text_form_stay_silent() {
    for d in ALL {
        let mut s = Scenario::new(&[]);
        for i in 0..6 {
            s.push(Step::Said(format!("THOUGHT: write module {i}\n```bash\ncat <<'EOF' > src/m{i}.py\ndef f{i}():\n    return {i}\nEOF\n```")));
            s.push(Step::User(
                "<returncode>0</returncode>\n<output>\n</output>".into(),
            ));
            s.push(Step::Said("The command ran successfully with no output.".into()));
            s.push(Step::User(
                "<returncode>0</returncode>\n<output>\n</output>".into(),
            ));
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

/// A format reminder that matches `canned_patterns`, again and again, is a failure.
#[test]
fn a_canned_reminder_again_and_again_is_a_failure() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for _ in 0..6 {
            s.push(Step::Said("I will now fix it.".into()));
            s.push(Step::User(
                "No tool calls found in the response. Every response MUST include at least one tool call."
                    .into(),
            ));
        }
        let v = s.judge(d);
        assert!(top(&v) >= Some(L::Critical), "{d:?}: {v:?}");
    }
}

// ---- point 10: server-side tools repeat too ----------------------------------------

/// The same server-side search again and again is a repeated call.
#[test]
fn repeated_server_side_searches_are_counted() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        let step = Step::ServerSearch {
            query: "rust borrow checker error E0502".into(),
            result: "Found 3 results.".into(),
        };
        s.repeat(step, 5);
        let v = s.judge(d);
        assert!(top(&v) >= Some(L::Critical), "{d:?}: {v:?}");
    }
}

/// Twin: searches for different things stay silent.
#[test]
fn different_server_side_searches_stay_silent() {
    for d in ALL {
        let mut s = Scenario::new(TOOLS);
        for i in 0..6 {
            s.push(Step::ServerSearch {
                query: format!("topic {i}"),
                result: format!("Found {i} results."),
            });
        }
        let v = s.judge(d);
        assert_eq!(top(&v), None, "{d:?}: {v:?}");
    }
}

// ---- point 6: low-entropy chanting ---------------------------------------------------

fn chunks(text: &str, size: usize) -> Vec<String> {
    text.as_bytes()
        .chunks(size)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect()
}

/// `Yes,` 200 times (aider#1841) and `nynyny…` (gemini-cli#5813) are chanting
/// in every dialect's stream.
#[test]
fn low_entropy_chanting_is_caught_in_every_dialect() {
    for d in ALL {
        for text in [
            format!("Sure. {}", "Yes, ".repeat(200)),
            format!("ok {}", "ny".repeat(400)),
        ] {
            let v = harness::judge_answer(d, &chunks(&text, 37));
            assert_eq!(
                level_of(&v, "content_chanting"),
                Some(L::Critical),
                "{d:?} {}: {v:?}",
                &text[..20]
            );
        }
    }
}

/// Twin: repetitive but legitimate output (base64 padding, separator lines,
/// zero-filled CSV and hex arrays, progress bars, tables, lists, code) is not.
#[test]
fn repetitive_legitimate_output_is_not_chanting() {
    let mut csv = String::from("a,b,c,d\n");
    for _ in 0..60 {
        csv.push_str("0,0,0,0,0,0,0,0\n");
    }
    let texts = [
        format!("Here is the blob: QUJD{}", "=".repeat(300)),
        format!("Results\n{}\nDone", "-=".repeat(300)),
        csv,
        format!("static const uint8_t zeros[] = {{{}}};", "0x00, ".repeat(120)),
        format!("Progress: [{}{}] 60%", "#".repeat(240), ".".repeat(160)),
        format!("| col | col |\n|-----|-----|\n{}", "|     |     |\n".repeat(60)),
        (0..60).map(|i| format!("- item {i}\n")).collect::<String>(),
        format!("```\n{}```\n", "}\n".repeat(200)),
        format!("data = [{}]", "null, ".repeat(100)),
    ];
    for d in ALL {
        for text in &texts {
            let v = harness::judge_answer(d, &chunks(text, 41));
            assert_eq!(
                level_of(&v, "content_chanting"),
                None,
                "{d:?} {:?}: {v:?}",
                &text[..30.min(text.len())]
            );
        }
    }
}
