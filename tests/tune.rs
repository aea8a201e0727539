//! `loopguard tune` end to end through the binary: two sessions, two
//! settings; the table and the JSON values, with labels.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

fn write(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("loopguard-tune-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// Successive OpenAI chat bodies: `steps` requests, call `i` reading `path(i)`.
fn session(steps: usize, path: impl Fn(usize) -> String) -> String {
    (0..steps)
        .map(|n| {
            let mut messages = vec![json!({"role": "user", "content": "read the config"})];
            for i in 0..n {
                let args = json!({"path": path(i)}).to_string();
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": format!("c{i}"), "type": "function", "function": {"name": "read_file", "arguments": args}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("content of {}", path(i))}));
            }
            json!({"model": "m", "messages": messages}).to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn tune(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("tune")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A loop (7 identical reads: warned from request 3, stopped at 5) and a
/// progress run (7 different files): raising `identical_call.critical` to
/// 7 stops nothing and changes the loop's outcome only; labels give recall
/// and no false positive.
#[test]
fn tune_compares_settings_over_sessions_with_labels() {
    let looping = write("loop.jsonl", &session(7, |_| "config.toml".to_owned()));
    let progress = write("progress.jsonl", &session(7, |i| format!("src/file{i}.rs")));
    let labels = write(
        "labels.txt",
        &format!(
            "# session label\n{} loop\n{} progress\n",
            looping
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            progress
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    );
    let files = [
        looping.to_string_lossy().into_owned(),
        progress.to_string_lossy().into_owned(),
    ];
    let labels = labels.to_string_lossy().into_owned();
    let mut args = vec![
        "--set",
        "identical_call.critical=5,7",
        "--labels",
        &labels,
        "--json",
    ];
    args.extend(files.iter().map(String::as_str));
    let (_, out) = tune(&args);
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc["sessions"], 2);
    let rows = doc["settings"].as_array().cloned().unwrap_or_default();
    let settings: Vec<&str> = rows.iter().map(|r| r["setting"].as_str().unwrap_or("")).collect();
    assert_eq!(
        settings,
        ["base", "identical_call.critical=5", "identical_call.critical=7"]
    );
    let pick = |i: usize, k: &str| rows[i][k].clone();
    assert_eq!((pick(0, "warned"), pick(0, "stopped")), (json!(1), json!(1)));
    assert_eq!(pick(0, "median_first_warning"), json!(3.0));
    assert_eq!(pick(0, "median_first_critical"), json!(5.0));
    assert_eq!(pick(1, "changed"), json!([]));
    assert_eq!((pick(2, "warned"), pick(2, "stopped")), (json!(1), json!(0)));
    let loop_name = looping
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    assert_eq!(pick(2, "changed"), json!([loop_name]));
    let recall = pick(0, "recall");
    assert_eq!(
        (
            recall["loops"].clone(),
            recall["loops_warned"].clone(),
            recall["loops_stopped"].clone()
        ),
        (json!(1), json!(1), json!(1))
    );
    assert_eq!(
        (recall["progress"].clone(), recall["progress_warned"].clone()),
        (json!(1), json!(0))
    );
    assert_eq!(pick(2, "recall")["loops_stopped"], 0);

    let mut args = vec!["--set", "identical_call.critical=5,7", "--labels", &labels];
    args.extend(files.iter().map(String::as_str));
    let (_, table) = tune(&args);
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert_eq!(lines[1][..7], ["base", "1", "1", "0", "3", "5", "0"], "{table}");
    assert_eq!(
        lines[3][..7],
        ["identical_call.critical=7", "1", "0", "0", "3", "-", "1"],
        "{table}"
    );
    assert!(lines[3].join(" ").contains("1/0 of 1 0/0 of 1"), "{table}");
}
