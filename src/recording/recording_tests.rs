use std::os::unix::fs::PermissionsExt as _;
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use super::format::{Step, read};
use super::writer::Writer;
use super::*;
use crate::config::recording::Keep;

fn lane(n: u64) -> LaneId {
    LaneId {
        session: format!("session{n}"),
        lane: n,
    }
}

fn request(lane: LaneId, n: usize, verdicts: Vec<(DetectorKind, Level)>) -> Record {
    let mut messages =
        vec![serde_json::json!({"role": "user", "content": "read it, key sk-abcdefghijklmnopqrstuvwx"})];
    for i in 0..n {
        messages.push(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
        );
        messages.push(serde_json::json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "x"}));
    }
    let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
    Record::Request {
        lane,
        dialect: Dialect::OpenaiChat,
        route: "/openai".to_owned(),
        t: Duration::from_millis(n as u64 * 100),
        body: Bytes::from(body),
        summarizer: false,
        verdicts,
    }
}

fn config(dir: &std::path::Path, max_bytes: u64, sessions: Keep) -> RecordingConfig {
    RecordingConfig {
        enabled: true,
        dir: dir.to_owned(),
        max_bytes,
        sessions,
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loopguard-rec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

use std::path::PathBuf;

fn files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

/// A full channel drops the record at once (counted), never waits for the writer.
#[test]
fn a_full_channel_drops_instead_of_waiting() {
    let (tx, rx) = sync_channel(1);
    let recorder = Recorder::with_sender(tx, 1 << 20);
    assert!(recorder.send(request(lane(1), 0, Vec::new())));
    let records: Vec<Record> = (1..100).map(|n| request(lane(1), n, Vec::new())).collect();
    // Nobody reads the channel: a send that waited would never return.
    let started = Instant::now();
    for record in records {
        assert!(!recorder.send(record), "a record was taken");
    }
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(rx.try_iter().count(), 1);
}

/// Each request line holds only what it adds; the reader rebuilds every
/// body whole; secrets are masked; the file is 0600 and the directory 0700.
#[test]
fn requests_record_what_they_add_and_read_back_whole() {
    let dir = temp_dir("add");
    let mut writer = Writer::open(&config(&dir, 1 << 30, Keep::All)).unwrap();
    for n in 0..4 {
        writer.write(request(lane(1), n, Vec::new()));
    }
    let paths = files(&dir);
    assert_eq!(paths.len(), 1);
    let mode = std::fs::metadata(&paths[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    let text = std::fs::read_to_string(&paths[0]).unwrap();
    assert!(!text.contains("sk-abcdefghijklmnopqrstuvwx"), "{text}");
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let keeps: Vec<u64> = lines[1..].iter().map(|l| l["keep"].as_u64().unwrap()).collect();
    assert_eq!(keeps, [0, 1, 3, 5]);
    let added: Vec<usize> = lines[1..]
        .iter()
        .map(|l| l["items"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(added, [1, 2, 2, 2]);
    assert!(
        lines[2].get("head").is_none(),
        "an unchanged head is not repeated"
    );
    let (_, steps) = read(&text).unwrap();
    let bodies: Vec<serde_json::Value> = steps
        .iter()
        .map(|s| match s {
            Step::Request { body, .. } => serde_json::from_slice(body).unwrap(),
            Step::Response { .. } => panic!("no response recorded"),
        })
        .collect();
    assert_eq!(bodies.len(), 4);
    assert_eq!(bodies[3]["messages"].as_array().unwrap().len(), 7);
    assert_eq!(bodies[3]["messages"][0]["content"], "read it, key [REDACTED]");
    assert_eq!(bodies[3]["model"], "m");
}

/// Past `max_bytes` the oldest files are deleted first.
#[test]
fn the_oldest_files_go_first_past_max_bytes() {
    let dir = temp_dir("evict");
    let mut writer = Writer::open(&config(&dir, 1500, Keep::All)).unwrap();
    for n in 1..=6 {
        writer.write(request(lane(n), 3, Vec::new()));
        std::thread::sleep(Duration::from_millis(3));
    }
    let left = files(&dir);
    let total: u64 = left.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert!(total <= 1500, "{total}");
    assert!(left.len() < 6 && !left.is_empty(), "{left:?}");
    let names: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
    assert!(
        names.iter().any(|n| n.ends_with("-0000000000000006.rec.jsonl")),
        "the newest stays: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n.ends_with("-0000000000000001.rec.jsonl")),
        "the oldest went: {names:?}"
    );
    // Each session's file is named by a hash of its whole key.
    let sessions: std::collections::HashSet<&str> = names
        .iter()
        .filter_map(|n| n.rsplit('/').next()?.split('-').nth(1))
        .collect();
    assert_eq!(sessions.len(), names.len(), "{names:?}");
}

/// `sessions = "verdicts"`: a lane without a verdict leaves no file; one
/// with a verdict is written with its whole history from its first request.
#[test]
fn verdict_sessions_keep_their_history_and_others_leave_nothing() {
    let dir = temp_dir("verdicts");
    let mut writer = Writer::open(&config(&dir, 1 << 30, Keep::Verdicts)).unwrap();
    for n in 0..3 {
        writer.write(request(lane(1), n, Vec::new()));
        writer.write(request(lane(2), n, Vec::new()));
    }
    assert!(files(&dir).is_empty());
    writer.write(request(
        lane(2),
        3,
        vec![(DetectorKind::IdenticalCall, Level::Warning)],
    ));
    let paths = files(&dir);
    assert_eq!(paths.len(), 1);
    let text = std::fs::read_to_string(&paths[0]).unwrap();
    assert!(text.contains("session2"));
    let (_, steps) = read(&text).unwrap();
    assert_eq!(steps.len(), 4, "the lane's whole history");
}
