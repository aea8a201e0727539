//! The writer thread: turns [`Record`]s into recording files (format in
//! [`super::format`]), off the request path.
//!
//! Per lane it keeps the chain hashes of the last request's history items
//! ([`crate::session::chain::chain_hashes`]; 16 bytes an item), so a request
//! line holds only the items after the prefix it shares with the lane's
//! previous request ([`crate::session::chain::common_prefix`]). Every string
//! of a body is masked with the semantic check's redactor, a streamed
//! answer's deltas joined first ([`super::mask`]). Files are created mode 0600.
//!
//! Limits: the directory's recordings together stay under `max_bytes` (the
//! oldest file is deleted first, the lane it belonged to starts a new file
//! at its next request); at most [`MAX_LANES`] lanes are followed (the
//! longest idle is let go, its file closed). With `sessions = "verdicts"`
//! a lane's lines wait in memory until its first verdict, at most
//! [`MAX_PENDING_LANE`] bytes a lane and [`MAX_PENDING`] in all; a lane past
//! them is dropped (counted as `loopguard_recording_dropped_total`) and
//! recorded afresh from its next request: every request carries the whole
//! history, so a recording can start at any request.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use xxhash_rust::xxh3::xxh3_64;

use super::format::{Header, Line, LiveVerdict, mode_name};
use super::{LaneId, Record};
use crate::config::recording::{Keep, RecordingConfig};
use crate::dialect::Dialect;
use crate::session::chain::{chain_hashes, common_prefix};

/// Lanes followed at once.
pub const MAX_LANES: usize = 4096;
/// Bytes of lines one lane may wait with before its first verdict.
pub const MAX_PENDING_LANE: usize = 8 << 20;
/// Bytes of waiting lines over all lanes.
pub const MAX_PENDING: usize = 64 << 20;
/// Seed of the writer's chain hashes (any: they are compared only with each other).
const SEED: u64 = 0x6c67_7265_636f_7264;

/// One followed lane.
#[derive(Debug)]
struct Lane {
    /// Its open file (`None` while its lines wait for a verdict).
    file: Option<(PathBuf, File)>,
    /// Lines waiting for the lane's first verdict (`sessions = "verdicts"`).
    pending: Vec<u8>,
    /// The chain hashes of the last request's history items.
    hashes: Vec<u128>,
    /// Hash of the last request's head.
    head: Option<u64>,
    /// The header line to start a file with.
    header: Option<String>,
    last: Instant,
}

/// The writer's state.
#[derive(Debug)]
pub struct Writer {
    dir: PathBuf,
    max_bytes: u64,
    keep: Keep,
    lanes: HashMap<LaneId, Lane>,
    /// Files of the directory, oldest first, with their sizes.
    files: VecDeque<(PathBuf, u64)>,
    total: u64,
    pending: usize,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn micros(t: std::time::Duration) -> u64 {
    u64::try_from(t.as_micros()).unwrap_or(u64::MAX)
}

impl Writer {
    /// A writer over `config.dir` (created mode 0700), counting the
    /// recordings already there toward `max_bytes`.
    ///
    /// # Errors
    /// The directory could not be created or listed.
    pub fn open(config: &RecordingConfig) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&config.dir)?;
        let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(&config.dir)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".rec.jsonl"))
            .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
            .collect();
        // Names start with the creation time: sorted by name is oldest first.
        files.sort();
        let total = files.iter().map(|(_, n)| n).sum();
        Ok(Self {
            dir: config.dir.clone(),
            max_bytes: config.max_bytes,
            keep: config.sessions,
            lanes: HashMap::new(),
            files: files.into(),
            total,
            pending: 0,
        })
    }

    /// Writes records until every sender is gone.
    pub fn run(mut self, rx: &Receiver<Record>) {
        while let Ok(record) = rx.recv() {
            self.write(record);
        }
    }

    /// Writes one record.
    pub fn write(&mut self, record: Record) {
        match record {
            Record::Request {
                lane,
                dialect,
                route,
                t,
                body,
                summarizer,
                verdicts,
            } => {
                let got_verdict = !verdicts.is_empty();
                self.follow(&lane, dialect, &route);
                let Some(state) = self.lanes.get_mut(&lane) else {
                    return;
                };
                let fresh = state.file.is_none() && state.pending.is_empty();
                let line = request_line(state, dialect, &body, fresh, micros(t), summarizer, verdicts);
                self.append(&lane, &line, got_verdict);
            }
            Record::Response {
                lane,
                t,
                mode,
                body,
                bytes,
            } => {
                let line = Line::Response {
                    t_us: micros(t),
                    mode: mode_name(mode).to_owned(),
                    truncated: body.is_none(),
                    body: body.map(|b| super::mask::response(&b, mode)),
                    bytes,
                };
                self.append(&lane, &line, false);
            }
            Record::Verdict {
                lane,
                t,
                detector,
                level,
            } => {
                let line = Line::Verdict {
                    t_us: micros(t),
                    at: "stream".to_owned(),
                    detector: detector.name().to_owned(),
                    level: level.name().to_owned(),
                };
                self.append(&lane, &line, true);
            }
        }
    }

    /// Follows `lane` (letting the longest idle go past [`MAX_LANES`]).
    fn follow(&mut self, lane: &LaneId, dialect: Dialect, route: &str) {
        if !self.lanes.contains_key(lane) && self.lanes.len() >= MAX_LANES {
            let idle = self
                .lanes
                .iter()
                .min_by_key(|(_, l)| l.last)
                .map(|(k, _)| k.clone());
            if let Some(idle) = idle {
                self.forget(&idle);
            }
        }
        let state = self.lanes.entry(lane.clone()).or_insert_with(|| Lane {
            file: None,
            pending: Vec::new(),
            hashes: Vec::new(),
            head: None,
            header: None,
            last: Instant::now(),
        });
        state.last = Instant::now();
        if state.header.is_none() {
            let header = Header {
                loopguard_recording: 1,
                dialect: dialect.name().to_owned(),
                route: route.to_owned(),
                session: lane.session.clone(),
                lane: format!("{:016x}", lane.lane),
                started_unix_ms: unix_ms(),
            };
            state.header = serde_json::to_string(&header).ok();
        }
    }

    fn forget(&mut self, lane: &LaneId) {
        if let Some(state) = self.lanes.remove(lane) {
            self.pending -= state.pending.len();
        }
    }

    /// Appends a line to the lane's file (or its waiting lines); a verdict
    /// makes the lane's waiting lines a file.
    fn append(&mut self, lane: &LaneId, line: &Line, verdict: bool) {
        let Some(state) = self.lanes.get_mut(lane) else {
            return;
        };
        let Ok(mut text) = serde_json::to_string(line) else {
            return;
        };
        text.push('\n');
        if state.file.is_none() && self.keep == Keep::Verdicts && !verdict {
            if state.pending.len() + text.len() > MAX_PENDING_LANE || self.pending + text.len() > MAX_PENDING
            {
                tracing::warn!(session = %lane.session, "recording: lane waiting for a verdict grew too large; dropped");
                metrics::counter!("loopguard_recording_dropped_total").increment(1);
                self.forget(lane);
                return;
            }
            if state.pending.is_empty() {
                if let Some(header) = &state.header {
                    state.pending.extend_from_slice(header.as_bytes());
                    state.pending.push(b'\n');
                    self.pending += header.len() + 1;
                }
            }
            state.pending.extend_from_slice(text.as_bytes());
            self.pending += text.len();
            return;
        }
        let mut out = std::mem::take(&mut state.pending);
        self.pending -= out.len();
        if state.file.is_none() {
            if out.is_empty() {
                if let Some(header) = &state.header {
                    out.extend_from_slice(header.as_bytes());
                    out.push(b'\n');
                }
            }
            let name = format!(
                "{}-{:016x}-{:016x}.rec.jsonl",
                unix_ms(),
                // The whole key hashed: its first characters are the
                // credential's hash, the same for every session of a key.
                xxh3_64(lane.session.as_bytes()),
                lane.lane
            );
            let path = self.dir.join(name);
            match OpenOptions::new()
                .create_new(true)
                .append(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => {
                    state.file = Some((path.clone(), file));
                    self.files.push_back((path, 0));
                }
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "recording: cannot create the file");
                    metrics::counter!("loopguard_recording_dropped_total").increment(1);
                    self.forget(lane);
                    return;
                }
            }
        }
        out.extend_from_slice(text.as_bytes());
        let Some((path, file)) = state.file.as_mut() else {
            return;
        };
        if let Err(e) = file.write_all(&out) {
            tracing::warn!(error = %e, "recording: write failed; lane dropped");
            metrics::counter!("loopguard_recording_dropped_total").increment(1);
            self.forget(lane);
            return;
        }
        let path = path.clone();
        if let Some(entry) = self.files.iter_mut().rev().find(|(p, _)| *p == path) {
            entry.1 += out.len() as u64;
        }
        self.total += out.len() as u64;
        self.evict();
    }

    /// Deletes the oldest files until the total is under `max_bytes` (the
    /// newest file is kept even when it alone is larger).
    fn evict(&mut self) {
        while self.total > self.max_bytes && self.files.len() > 1 {
            let Some((path, size)) = self.files.pop_front() else {
                break;
            };
            self.total = self.total.saturating_sub(size);
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(error = %e, path = %path.display(), "recording: cannot delete an old file");
            }
            // Its lane, if still followed, starts a new file at its next request.
            let owner = self
                .lanes
                .iter()
                .find(|(_, l)| l.file.as_ref().is_some_and(|(p, _)| *p == path))
                .map(|(k, _)| k.clone());
            if let Some(owner) = owner {
                self.forget(&owner);
            }
        }
    }
}

/// The request line: what the request adds to the lane's history.
fn request_line(
    state: &mut Lane,
    dialect: Dialect,
    body: &[u8],
    fresh: bool,
    t_us: u64,
    summarizer: bool,
    verdicts: Vec<(crate::detect::DetectorKind, crate::detect::Level)>,
) -> Line {
    let verdicts = verdicts
        .into_iter()
        .map(|(d, l)| LiveVerdict {
            detector: d.name().to_owned(),
            level: l.name().to_owned(),
        })
        .collect();
    let split = crate::dialect::split::split_object(body, dialect.history_key());
    let Ok((mut envelope, items)) = split else {
        state.hashes.clear();
        state.head = None;
        let mut whole: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        super::mask::value(&mut whole);
        return Line::Request {
            t_us,
            keep: None,
            head: None,
            items: Vec::new(),
            body: Some(whole),
            summarizer,
            verdicts,
        };
    };
    let hashes = chain_hashes(SEED, 0, &items);
    let keep = if fresh {
        0
    } else {
        common_prefix(&state.hashes, &hashes)
    };
    let added = items[keep..]
        .iter()
        .map(|raw| {
            let mut v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            super::mask::value(&mut v);
            v
        })
        .collect();
    state.hashes = hashes;
    let head_hash = serde_json::to_vec(&envelope).map(|b| xxh3_64(&b)).ok();
    let head = if fresh || head_hash != state.head {
        let mut value = Value::Object(std::mem::take(&mut envelope));
        super::mask::value(&mut value);
        match value {
            Value::Object(map) => Some(map),
            _ => Some(Map::new()),
        }
    } else {
        None
    };
    state.head = head_hash;
    Line::Request {
        t_us,
        keep: Some(keep),
        head,
        items: added,
        body: None,
        summarizer,
        verdicts,
    }
}
