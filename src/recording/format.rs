//! The recording file format: JSON lines, one file per session lane.
//!
//! ```text
//! {"loopguard_recording":1,"dialect":"openai-chat","route":"/openai","session":"…","lane":"…","started_unix_ms":…}
//! {"kind":"request","t_us":…,"keep":0,"head":{…},"items":[…],"summarizer":false,"verdicts":[…]}
//! {"kind":"verdict","t_us":…,"at":"stream","detector":"identical_call","level":"warning"}
//! {"kind":"response","t_us":…,"mode":"sse","body":"data: …","bytes":…}
//! ```
//!
//! The first line names the lane. A request line holds what the request
//! adds to the history: the lane's previous history cut to its first `keep`
//! items, then `items`, is this request's history (the body's `messages`,
//! `contents` or `input` array); `head` is the rest of the body, left out
//! when it equals the previous request's. A body that does not split (a
//! Responses `input` string) is a whole `body` instead. `t_us` is the
//! session clock (the detectors' `now`, microseconds since the process
//! started), so a replay needs no `--interval`. A response line holds the
//! upstream's response (`mode` `sse`, `whole` or `array`); past
//! `server.max_response_bytes` it holds `"truncated":true` and no body.
//! `verdicts` and `verdict` lines are what `serve` said live (request-time
//! and stream-time); a replay judges anew and ignores them. Every string
//! of a body is redacted (credential shapes masked); headers are never
//! written.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Format version (1).
    pub loopguard_recording: u32,
    /// Dialect name.
    pub dialect: String,
    /// Route prefix.
    pub route: String,
    /// Session key (a hash).
    pub session: String,
    /// Lane id, hex.
    pub lane: String,
    /// Wall clock when the file was started, Unix milliseconds.
    pub started_unix_ms: u64,
}

/// A verdict as `serve` gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveVerdict {
    /// Detector name.
    pub detector: String,
    /// Level name.
    pub level: String,
}

/// One line after the header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Line {
    /// A request.
    Request {
        /// Session clock, microseconds.
        t_us: u64,
        /// Items of the previous history kept (absent with `body`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keep: Option<usize>,
        /// The body without its history; absent: as the previous request's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head: Option<Map<String, Value>>,
        /// The items added after the kept ones.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        items: Vec<Value>,
        /// The whole body, when it did not split.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<Value>,
        /// An explicit summarizer request (not judged).
        #[serde(default)]
        summarizer: bool,
        /// Request-time verdicts `serve` gave.
        #[serde(default)]
        verdicts: Vec<LiveVerdict>,
    },
    /// The upstream's response to the last request.
    Response {
        /// Session clock when it ended, microseconds.
        t_us: u64,
        /// `sse`, `whole` or `array`.
        mode: String,
        /// The bytes as text (absent when truncated).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        /// Past `max_response_bytes`: not kept.
        #[serde(default)]
        truncated: bool,
        /// Bytes the upstream sent.
        #[serde(default)]
        bytes: u64,
    },
    /// A stream-time verdict `serve` gave.
    Verdict {
        /// Session clock, microseconds.
        t_us: u64,
        /// `stream`.
        at: String,
        /// Detector name.
        detector: String,
        /// Level name.
        level: String,
    },
}

/// The name of a framing in a response line.
pub fn mode_name(mode: crate::dialect::Mode) -> &'static str {
    match mode {
        crate::dialect::Mode::Sse => "sse",
        crate::dialect::Mode::Whole => "whole",
        crate::dialect::Mode::JsonArray => "array",
        crate::dialect::Mode::Ndjson => "ndjson",
        crate::dialect::Mode::EventStream => "eventstream",
    }
}

/// The framing a response line names (`whole` for anything unknown).
pub fn mode_of(name: &str) -> crate::dialect::Mode {
    match name {
        "sse" => crate::dialect::Mode::Sse,
        "array" => crate::dialect::Mode::JsonArray,
        "ndjson" => crate::dialect::Mode::Ndjson,
        "eventstream" => crate::dialect::Mode::EventStream,
        _ => crate::dialect::Mode::Whole,
    }
}

/// Whether `first_line` starts a recording.
pub fn is_recording(first_line: &str) -> bool {
    serde_json::from_str::<Header>(first_line).is_ok()
}

/// One step of a recording, reconstructed.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A request: its whole body again.
    Request {
        /// Session clock, microseconds.
        t_us: u64,
        /// The body.
        body: Vec<u8>,
        /// An explicit summarizer request.
        summarizer: bool,
    },
    /// A response to the last request.
    Response {
        /// Session clock, microseconds.
        t_us: u64,
        /// Its framing.
        mode: crate::dialect::Mode,
        /// Its bytes (`None`: truncated).
        body: Option<Vec<u8>>,
    },
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FormatError {
    /// 1-based line.
    pub line: usize,
    /// What went wrong.
    pub message: String,
}

/// Reads a recording: its header and its steps, each request's body
/// rebuilt from what the requests before it kept.
///
/// # Errors
/// [`FormatError`] naming the line that is not a recording line.
pub fn read(text: &str) -> Result<(Header, Vec<Step>), FormatError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let err = |line: usize, message: String| FormatError {
        line: line + 1,
        message,
    };
    let (n, first) = lines.next().ok_or_else(|| err(0, "empty recording".to_owned()))?;
    let header: Header = serde_json::from_str(first).map_err(|e| err(n, e.to_string()))?;
    let key = crate::dialect::Dialect::ALL
        .into_iter()
        .find(|d| d.name() == header.dialect)
        .ok_or_else(|| err(n, format!("unknown dialect {:?}", header.dialect)))?
        .history_key();
    let mut history: Vec<Value> = Vec::new();
    let mut envelope: Map<String, Value> = Map::new();
    let mut steps = Vec::new();
    for (n, text) in lines {
        let line: Line = serde_json::from_str(text).map_err(|e| err(n, e.to_string()))?;
        match line {
            Line::Request {
                t_us,
                keep,
                head,
                items,
                body,
                summarizer,
                ..
            } => {
                let body = if let Some(body) = body {
                    history.clear();
                    envelope.clear();
                    serde_json::to_vec(&body)
                } else {
                    let keep = keep.unwrap_or(0);
                    if keep > history.len() {
                        return Err(err(n, format!("keeps {keep} items of {}", history.len())));
                    }
                    history.truncate(keep);
                    history.extend(items);
                    if let Some(head) = head {
                        envelope = head;
                    }
                    let mut whole = envelope.clone();
                    whole.insert(key.to_owned(), Value::Array(history.clone()));
                    serde_json::to_vec(&whole)
                }
                .map_err(|e| err(n, e.to_string()))?;
                steps.push(Step::Request {
                    t_us,
                    body,
                    summarizer,
                });
            }
            Line::Response { t_us, mode, body, .. } => steps.push(Step::Response {
                t_us,
                mode: mode_of(&mode),
                body: body.map(String::into_bytes),
            }),
            Line::Verdict { .. } => {}
        }
    }
    Ok((header, steps))
}
