//! `loopguard replay` end to end: recorded request bodies of every dialect go
//! through the real dialect parsers and the detectors; `--fail-on` sets the
//! exit code.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

fn write(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("loopguard-replay-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

fn replay(args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (out.status.code(), lines)
}

/// Successive OpenAI chat bodies with `n` identical reads, whose results
/// `result(i)` gives.
fn openai_session(steps: usize, result: impl Fn(usize) -> String) -> String {
    let mut lines = Vec::new();
    for n in 0..steps {
        let mut messages = vec![json!({"role": "user", "content": "read the config"})];
        for i in 0..n {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("c{i}"), "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"cat config.toml\"}"}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": result(i)}));
        }
        lines.push(json!({"model": "m", "messages": messages}).to_string());
    }
    lines.join("\n")
}

fn gemini_session(steps: usize) -> String {
    let mut lines = Vec::new();
    for n in 0..steps {
        let mut contents = vec![json!({"role": "user", "parts": [{"text": "read the config"}]})];
        for _ in 0..n {
            contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {"path": "config.toml"}}}]}));
            contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": "x = 1"}}}]}));
        }
        lines.push(json!({"contents": contents}).to_string());
    }
    lines.join("\n")
}

/// Successive OpenAI Responses bodies (Codex's shape: instructions, input items).
fn responses_session(steps: usize) -> String {
    let mut lines = Vec::new();
    for n in 0..steps {
        let mut input = vec![
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read the config"}]}),
        ];
        for i in 0..n {
            input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "exec_command", "arguments": "{\"cmd\":\"cat config.toml\"}"}));
            input
                .push(json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "x = 1"}));
        }
        lines.push(
            json!({"model": "m", "instructions": "You are Codex.", "input": input, "stream": true})
                .to_string(),
        );
    }
    lines.join("\n")
}

/// Successive Anthropic Messages bodies (Claude Code's shape).
fn anthropic_session(steps: usize) -> String {
    let mut lines = Vec::new();
    for n in 0..steps {
        let mut messages =
            vec![json!({"role": "user", "content": [{"type": "text", "text": "read the config"}]})];
        for i in 0..n {
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": format!("t{i}"), "name": "Read", "input": {"file_path": "config.toml"}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "x = 1"}]}));
        }
        lines.push(json!({"model": "claude", "max_tokens": 1024, "system": "You are Claude Code.", "messages": messages}).to_string());
    }
    lines.join("\n")
}

fn levels_at(lines: &[Value], detector: &str) -> Vec<(u64, String)> {
    lines
        .iter()
        .filter(|l| l["detector"] == detector)
        .map(|l| {
            (
                l["request"].as_u64().unwrap_or(0),
                l["level"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Identical reads with identical results: warning from the request carrying
/// the 3rd result, critical at the 5th — in both dialects.
#[test]
fn identical_reads_escalate_in_both_dialects() {
    let expected: Vec<(u64, String)> = vec![
        (3, "warning".into()),
        (4, "warning".into()),
        (5, "critical".into()),
        (6, "critical".into()),
    ];
    let openai = write("openai.jsonl", &openai_session(7, |_| "x = 1".to_owned()));
    let (code, lines) = replay(&[openai.to_str().unwrap_or_default()]);
    assert_eq!(code, Some(0));
    assert_eq!(levels_at(&lines, "identical_call"), expected, "{lines:?}");
    let gemini = write("gemini.jsonl", &gemini_session(7));
    let (_, lines) = replay(&[gemini.to_str().unwrap_or_default()]);
    assert_eq!(levels_at(&lines, "identical_call"), expected, "{lines:?}");
}

/// The same escalation from OpenAI Responses and Anthropic Messages bodies,
/// each dialect guessed from the body's shape.
#[test]
fn identical_reads_escalate_in_responses_and_anthropic_bodies() {
    let expected: Vec<(u64, String)> = vec![
        (3, "warning".into()),
        (4, "warning".into()),
        (5, "critical".into()),
        (6, "critical".into()),
    ];
    for (name, text) in [
        ("responses.jsonl", responses_session(7)),
        ("anthropic.jsonl", anthropic_session(7)),
    ] {
        let path = write(name, &text);
        let (code, lines) = replay(&["--fail-on", "critical", path.to_str().unwrap_or_default()]);
        assert_eq!(code, Some(3), "{name}");
        assert_eq!(levels_at(&lines, "identical_call"), expected, "{name}: {lines:?}");
    }
    let forced = write("forced.jsonl", &anthropic_session(6));
    let (code, _) = replay(&[
        "--dialect",
        "anthropic",
        "--fail-on",
        "critical",
        forced.to_str().unwrap_or_default(),
    ]);
    assert_eq!(code, Some(3));
}

/// A stateful Responses session (`store: true`) shows `abort` where others
/// show `block`, as `serve` acts; a `previous_response_id` chain cannot be
/// judged from its bodies, and replay says so instead of staying silent.
#[test]
fn stateful_responses_bodies_abort_and_chains_are_named() {
    let stored: Vec<String> = responses_session(6)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap_or_default();
            v["store"] = json!(true);
            v.to_string()
        })
        .collect();
    let path = write("stored.jsonl", &stored.join("\n"));
    let (_, lines) = replay(&[path.to_str().unwrap_or_default()]);
    let critical: Vec<&Value> = lines.iter().filter(|l| l["level"] == "critical").collect();
    assert!(!critical.is_empty(), "{lines:?}");
    assert!(critical.iter().all(|l| l["action"] == "abort"), "{critical:?}");

    let chain: Vec<String> = (0..6)
        .map(|i| {
            json!({"model": "m", "previous_response_id": format!("resp_{i}"), "input": [
                {"type": "function_call_output", "call_id": format!("c{i}"), "output": "x = 1"}]})
            .to_string()
        })
        .collect();
    let path = write("chain.jsonl", &chain.join("\n"));
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["replay", path.to_str().unwrap_or_default()])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("previous_response_id") && stderr.contains("cannot be judged"),
        "{stderr}"
    );
}

/// Codex-style results (a random `Chunk ID:` and a changing `Wall time:`
/// above identical output) count as no progress: critical at 5.
#[test]
fn codex_style_banners_do_not_hide_a_loop() {
    let result = |i: usize| {
        format!(
            "Chunk ID: {:08x}\nWall time: 0.{i}1 seconds\nProcess exited with code 0\nOutput:\nx = 1",
            (i as u64 + 7).wrapping_mul(2_654_435_761)
        )
    };
    let path = write("codex.jsonl", &openai_session(6, result));
    let (code, lines) = replay(&["--fail-on", "critical", path.to_str().unwrap_or_default()]);
    assert_eq!(code, Some(3), "{lines:?}");
    assert!(levels_at(&lines, "identical_call").contains(&(5, "critical".to_owned())));
}

/// A response file after the requests is judged as the model's next answer.
#[test]
fn a_trailing_response_is_judged_as_the_next_call() {
    let requests = write("resp.jsonl", &openai_session(5, |_| "x = 1".to_owned()));
    let response = write(
        "resp.json",
        &json!({"id": "r", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"cat config.toml\"}"}}]}}]})
        .to_string(),
    );
    let (_, lines) = replay(&[
        requests.to_str().unwrap_or_default(),
        response.to_str().unwrap_or_default(),
    ]);
    let last: Vec<&Value> = lines.iter().filter(|l| l["request"] == 4).collect();
    assert!(
        last.iter()
            .any(|l| l["detector"] == "identical_call" && l["level"] == "critical"),
        "the 5th call, in the response, is critical: {lines:?}"
    );
}

/// A recorded real trajectory that loops (the same edit re-issued 32 times)
/// fails `--fail-on critical`; one that makes progress does not.
#[test]
fn recorded_trajectories_are_judged() {
    let dir = std::env::var_os("LOOPGUARD_TRAJECTORIES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/trajectories"));
    let looping = dir.join("coder-gpt4__pallets__flask-4992.jsonl");
    let progress = dir.join("coder-gpt4__django__django-11099.jsonl");
    assert!(
        looping.exists(),
        "trajectories not found at {}: set LOOPGUARD_TRAJECTORIES",
        dir.display()
    );
    let (code, lines) = replay(&["--fail-on", "critical", looping.to_str().unwrap_or_default()]);
    assert_eq!(code, Some(3));
    assert!(lines.iter().any(|l| l["level"] == "breaker"));
    let (code, lines) = replay(&["--fail-on", "warning", progress.to_str().unwrap_or_default()]);
    assert_eq!(code, Some(0), "{lines:?}");
}

fn replay_text(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--summary` replays each file as its own session and prints one row per
/// file (requests, verdicts per level, first warning / critical / stop with
/// request index and detector) and the totals; `--json` gives the same as
/// one document; `--fail-on` still sets the exit code.
#[test]
fn summary_lists_each_file_with_its_first_verdicts_and_the_totals() {
    let looping = write("summary-loop.jsonl", &openai_session(7, |_| "x = 1".to_owned()));
    let progress = write(
        "summary-progress.jsonl",
        &openai_session(7, |i| format!("x = {i}")),
    );
    let (looping, progress) = (
        looping.to_str().unwrap_or_default(),
        progress.to_str().unwrap_or_default(),
    );
    let (code, table, stderr) = replay_text(&["--summary", looping, progress]);
    assert_eq!(code, Some(0), "{stderr}");
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 4, "header, two files, totals:\n{table}");
    assert!(
        rows[0].starts_with("file") && rows[0].contains("first critical"),
        "{table}"
    );
    let cells = |row: &str| row.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let loop_row = cells(rows[1]);
    assert_eq!(loop_row[0], looping);
    assert_eq!(&loop_row[1..5], ["7", "2", "2", "0"], "{table}");
    assert!(
        rows[1].contains("#3 identical_call") && rows[1].contains("#5 identical_call"),
        "{table}"
    );
    let twin = cells(rows[2]);
    assert_eq!(
        &twin[1..5],
        ["7", "1", "0", "0"],
        "new results (detection v2): never acted on; one observe-level note at twice the warning threshold:\n{table}"
    );
    assert!(
        rows[2].ends_with("-                           -"),
        "no first critical, no stop:\n{table}"
    );
    assert!(
        rows[3].starts_with("total") && rows[3].contains("2 of 2 files warned, 1 critical, 1 stopped"),
        "{table}"
    );

    let (code, json, _) = replay_text(&["--summary", "--json", "--fail-on", "critical", looping, progress]);
    assert_eq!(code, Some(3));
    let v: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(
        v["files"][0]["first_critical"],
        json!({"request": 5, "detector": "identical_call"})
    );
    assert_eq!(v["files"][1]["first_stop"], Value::Null);
    assert_eq!(v["totals"]["files_stopped"], 1);
}

/// A `--config` holding only `[loop_detection]` (no `[[routes]]`) is
/// accepted and its thresholds apply; with no semantic check configured,
/// stderr carries no notice about it.
#[test]
fn a_detection_only_config_is_accepted_and_no_semantic_notice_is_printed() {
    let config = write(
        "detection-only.toml",
        "[loop_detection.identical_call]\nwarning = 2\ncritical = 3\n",
    );
    let session = write("detection-only.jsonl", &openai_session(5, |_| "x = 1".to_owned()));
    let (code, stdout, stderr) = replay_text(&[
        "--config",
        config.to_str().unwrap_or_default(),
        session.to_str().unwrap_or_default(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let levels = levels_at(&lines, "identical_call");
    assert_eq!(levels.first(), Some(&(2, "warning".to_owned())), "{lines:?}");
    assert!(levels.contains(&(3, "critical".to_owned())), "{lines:?}");
    assert!(!stderr.contains("semantic check"), "{stderr}");
    let (_, _, stderr) = replay_text(&[session.to_str().unwrap_or_default()]);
    assert!(
        stderr.is_empty(),
        "no notice with the built-in defaults: {stderr}"
    );
}

/// A reader that stops early (`loopguard replay FILE | head -1`) ends the
/// output quietly: the write to a closed pipe panicked (exit 101, a
/// backtrace on stderr: a new-user test).
#[test]
fn a_reader_that_closes_the_pipe_ends_the_output_quietly() {
    use std::io::{BufRead, BufReader};
    let file = write("closed-pipe.jsonl", &openai_session(40, |_| "same".to_owned()));
    // Forty copies: more output than a pipe holds, so a write meets the
    // closed pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .args(std::iter::repeat_n(&file, 40))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run replay: {e}"));
    let Some(stdout) = child.stdout.take() else {
        panic!("no stdout");
    };
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.starts_with('{'), "{first}");
    // The read end is closed here; the rest of the output has nowhere to go.
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}
