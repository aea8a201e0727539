//! `loopguard replay`: runs the detectors offline over recorded request
//! bodies, so an operator can try thresholds on real traffic before
//! deploying them.
//!
//! Inputs, in order: `.json` files (one request body each) and `.jsonl`
//! files (one session's successive request bodies, one per line); a last
//! `.sse` file, or a last `.json` file shaped like a response (`choices` /
//! `candidates`), is the response to the last request. Output: one JSON line
//! per verdict, `{"request": i, "detector", "level", "action", "count",
//! "message"}` with `i` 0-based.
//!
//! A recording (`[recording]`, first line `{"loopguard_recording":1,…}`) is
//! a session of its own, given alone: its requests at their recorded times
//! and its responses as they streamed ([`super::recorded`]); its lines add
//! `"at": "request" | "stream"`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::detect::{Level, ReplayLine, Settings, replay};
use crate::dialect::Mode;
use crate::dialect::{Dialect, StreamEvent};
use crate::proxy::tap::Tap;

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A body could not be parsed in its dialect.
    #[error("{path}{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// `:N` for a JSONL line, else empty.
        line: String,
        /// What went wrong.
        message: String,
    },
    /// A recording that could not be read, or one given with other files.
    #[error("{path}: {message}")]
    Recording {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Nothing to replay.
    #[error("no request bodies given (.json or .jsonl files)")]
    Empty,
    /// The LLM judge could not be set up (its calls' own failures give no
    /// verdict and are logged, as in live traffic).
    #[error("semantic check: {0}")]
    Judge(String),
}

fn read(path: &Path) -> Result<String, ReplayError> {
    std::fs::read_to_string(path).map_err(|source| ReplayError::Read {
        path: path.to_owned(),
        source,
    })
}

fn is_response(body: &serde_json::Value) -> bool {
    body.get("choices").is_some()
        || body.get("candidates").is_some()
        || body.get("object").and_then(|o| o.as_str()) == Some("response")
        || body.get("stop_reason").is_some()
}

fn parse_body(
    text: &str,
    dialect: Option<Dialect>,
    path: &Path,
    line: &str,
) -> Result<(Dialect, crate::dialect::ParsedRequest), ReplayError> {
    let err = |message: String| ReplayError::Parse {
        path: path.to_owned(),
        line: line.to_owned(),
        message,
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
    let dialect = dialect
        .or_else(|| Dialect::guess(&value))
        .ok_or_else(|| err("cannot tell the dialect from the body: pass --dialect".to_owned()))?;
    let parsed = dialect
        .parse_request(text.as_bytes())
        .map_err(|e| err(e.to_string()))?;
    Ok((dialect, parsed))
}

/// What a request body says beyond its transcript that changes a replay.
#[derive(Debug, Default, Clone, Copy)]
struct Flags {
    /// A stateful Responses request: blocks become aborts, as in `serve`.
    stateful: bool,
    /// It chains to an earlier response (`previous_response_id`).
    chained: bool,
}

impl Flags {
    fn of(parsed: &crate::dialect::ParsedRequest) -> Self {
        let responses = parsed.responses.as_ref();
        Self {
            stateful: responses.is_some_and(|r| r.stateful),
            chained: responses.is_some_and(|r| r.previous_response_id.is_some()),
        }
    }
}

fn response_events(bytes: &[u8], dialect: Dialect, framing: Mode) -> Vec<StreamEvent> {
    let mut tap = Tap::new(dialect, framing, usize::MAX);
    let mut frames = Vec::new();
    tap.feed(bytes, &mut frames);
    let _ = tap.finish(bytes.len() as u64, &mut frames);
    frames.into_iter().flat_map(|f| f.events).collect()
}

/// Reads the files and replays them; `dialect` forces the dialect.
///
/// # Errors
/// [`ReplayError`] naming the file (and line) that could not be read or parsed.
pub fn run(
    settings: &Settings,
    files: &[PathBuf],
    dialect: Option<Dialect>,
    interval: Duration,
) -> Result<Vec<ReplayLine>, ReplayError> {
    replay_files(settings, files, dialect, interval).map(|r| r.lines)
}

/// A replay's result: how many requests it judged and the verdict lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Request bodies replayed.
    pub requests: usize,
    /// The verdict lines, in request order.
    pub lines: Vec<ReplayLine>,
}

/// As [`run`], with the number of requests replayed.
///
/// # Errors
/// As [`run`].
pub fn replay_files(
    settings: &Settings,
    files: &[PathBuf],
    dialect: Option<Dialect>,
    interval: Duration,
) -> Result<Replayed, ReplayError> {
    if let Some(recording) = files.iter().find(|p| is_recording_file(p)) {
        return replay_recording(settings, recording, files.len());
    }
    let Bodies {
        requests,
        flags,
        response,
    } = read_bodies(files, dialect)?;
    if requests.is_empty() {
        return Err(ReplayError::Empty);
    }
    let chained = flags.iter().filter(|f| f.chained).count();
    if chained > 0 {
        eprintln!(
            "loopguard replay: {chained} request(s) chain to an earlier response (previous_response_id) and carry only \
             the items new since; the tool calls they answer are in those responses, which request bodies do not \
             hold, so such a chain cannot be judged from its bodies alone (loopguard serve follows it live)"
        );
    }
    let mut lines = replay(settings, &requests, interval, response.as_deref());
    for line in &mut lines {
        if flags.get(line.request).is_some_and(|f| f.stateful) && line.action == crate::detect::Action::Block
        {
            // As `serve` does: a stateful request is aborted where others are blocked.
            line.action = crate::detect::Action::Abort;
        }
    }
    if settings.semantic_check.enabled {
        let judged = crate::semantic::rerun::run(settings, &requests).map_err(ReplayError::Judge)?;
        lines.extend(judged);
        lines.sort_by_key(|l| l.request);
    }
    Ok(Replayed {
        requests: requests.len(),
        lines,
    })
}

/// A recording replayed: alone, as the session it is.
fn replay_recording(settings: &Settings, recording: &Path, files: usize) -> Result<Replayed, ReplayError> {
    if files > 1 {
        return Err(ReplayError::Recording {
            path: recording.to_path_buf(),
            message: "a recording is a session of its own: replay it alone (or use `loopguard tune`)"
                .to_owned(),
        });
    }
    let parsed = read_recording(recording)?;
    Ok(Replayed {
        requests: parsed
            .steps
            .iter()
            .filter(|s| matches!(s, super::recorded::ParsedStep::Request { .. }))
            .count(),
        lines: super::recorded::judge(&parsed, settings),
    })
}

/// What the files of a replay hold: request bodies in order, what each
/// request is (stateful, chained), and the response they end with, if any.
struct Bodies {
    requests: Vec<crate::transcript::Transcript>,
    flags: Vec<Flags>,
    response: Option<Vec<StreamEvent>>,
}

/// Reads the replay's files: `.json` bodies, `.jsonl` lines of bodies, and
/// a response last (an `.sse` stream, or a `.json` response body).
fn read_bodies(files: &[PathBuf], dialect: Option<Dialect>) -> Result<Bodies, ReplayError> {
    let mut requests = Vec::new();
    let mut flags: Vec<Flags> = Vec::new();
    let mut seen_dialect = dialect;
    let mut response = None;
    for (i, path) in files.iter().enumerate() {
        let last = i + 1 == files.len();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if ext == "sse" {
            let bytes = std::fs::read(path).map_err(|source| ReplayError::Read {
                path: path.clone(),
                source,
            })?;
            let d = seen_dialect.unwrap_or_default();
            response = Some(response_events(&bytes, d, Mode::Sse));
            continue;
        }
        let text = read(path)?;
        if ext == "jsonl" {
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let (d, parsed) = parse_body(line, seen_dialect, path, &format!(":{}", n + 1))?;
                seen_dialect = Some(d);
                flags.push(Flags::of(&parsed));
                requests.push(parsed.transcript);
            }
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| ReplayError::Parse {
            path: path.clone(),
            line: String::new(),
            message: e.to_string(),
        })?;
        if last && is_response(&value) && !requests.is_empty() {
            let d = seen_dialect.unwrap_or_default();
            response = Some(response_events(text.as_bytes(), d, Mode::Whole));
            continue;
        }
        let (d, parsed) = parse_body(&text, seen_dialect, path, "")?;
        seen_dialect = Some(d);
        flags.push(Flags::of(&parsed));
        requests.push(parsed.transcript);
    }
    Ok(Bodies {
        requests,
        flags,
        response,
    })
}

/// Whether `path` is a recording: its first line is a recording header.
pub fn is_recording_file(path: &Path) -> bool {
    use std::io::BufRead as _;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = String::new();
    std::io::BufReader::new(file).read_line(&mut first).is_ok()
        && crate::recording::format::is_recording(first.trim_end())
}

/// Reads and parses a recording file.
///
/// # Errors
/// [`ReplayError::Read`] or [`ReplayError::Recording`].
pub fn read_recording(path: &Path) -> Result<super::recorded::Parsed, ReplayError> {
    let text = read(path)?;
    super::recorded::parse(&text).map_err(|message| ReplayError::Recording {
        path: path.to_owned(),
        message,
    })
}

/// Whether any line reaches `level`.
pub fn reaches(lines: &[ReplayLine], level: Level) -> bool {
    lines.iter().any(|l| l.level >= level)
}
