//! Recording of real sessions (`[recording]`, opt-in), in the form
//! `loopguard replay` and `loopguard tune` read directly.
//!
//! The request path only hands records to a bounded channel
//! ([`Recorder::send`], never blocking: when the channel is full the record
//! is dropped and counted in `loopguard_recording_dropped_total`); a writer
//! thread ([`writer`]) does the rest — splitting bodies, finding what each
//! request adds, redacting, writing, evicting. One file per session lane;
//! its format is in [`mod@format`].

pub mod format;
pub mod mask;
pub mod writer;

use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::recording::RecordingConfig;
use crate::detect::{DetectorKind, Level};
use crate::dialect::{Dialect, Mode};

/// Records the channel holds before new ones are dropped.
pub const CHANNEL: usize = 1024;

/// A session lane: the session key and the lane id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LaneId {
    /// The session key (a hash).
    pub session: String,
    /// The lane within the session.
    pub lane: u64,
}

/// One thing to record, as the request path hands it over.
#[derive(Debug)]
pub enum Record {
    /// A request detection ran on (the body as received, decoded).
    Request {
        /// Its lane.
        lane: LaneId,
        /// Its dialect.
        dialect: Dialect,
        /// The route prefix.
        route: String,
        /// Session clock (the detectors' `now`).
        t: Duration,
        /// The body.
        body: Bytes,
        /// An explicit summarizer request (header or path), not judged.
        summarizer: bool,
        /// The request-time verdicts `serve` gave.
        verdicts: Vec<(DetectorKind, Level)>,
    },
    /// The upstream's response to the lane's last request.
    Response {
        /// Its lane.
        lane: LaneId,
        /// Session clock when the response ended.
        t: Duration,
        /// Its framing.
        mode: Mode,
        /// Its bytes, or `None` past `max_response_bytes`.
        body: Option<Vec<u8>>,
        /// Bytes the upstream sent.
        bytes: u64,
    },
    /// A stream-time verdict `serve` gave.
    Verdict {
        /// Its lane.
        lane: LaneId,
        /// Session clock.
        t: Duration,
        /// The detector.
        detector: DetectorKind,
        /// The level.
        level: Level,
    },
}

/// The request path's handle on the writer (cheap to clone).
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: SyncSender<Record>,
    max_response_bytes: usize,
}

impl Recorder {
    /// Starts the writer thread for `config` (the directory is created mode
    /// 0700), with a channel of `channel` records; responses are kept up to
    /// `max_response_bytes`.
    ///
    /// # Errors
    /// The directory could not be created or read.
    pub fn start(
        config: &RecordingConfig,
        channel: usize,
        max_response_bytes: usize,
    ) -> std::io::Result<Self> {
        let writer = writer::Writer::open(config)?;
        let (tx, rx) = sync_channel(channel);
        std::thread::Builder::new()
            .name("loopguard-recorder".to_owned())
            .spawn(move || writer.run(&rx))?;
        metrics::counter!("loopguard_recording_dropped_total").increment(0);
        Ok(Self {
            tx,
            max_response_bytes,
        })
    }

    /// A recorder whose records go to `tx` (tests of the request-path side).
    pub fn with_sender(tx: SyncSender<Record>, max_response_bytes: usize) -> Self {
        Self {
            tx,
            max_response_bytes,
        }
    }

    /// Hands a record to the writer without waiting; returns whether it was
    /// taken (a full channel drops it, counted).
    pub fn send(&self, record: Record) -> bool {
        match self.tx.try_send(record) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                metrics::counter!("loopguard_recording_dropped_total").increment(1);
                false
            }
        }
    }

    /// A copy of the response of `lane` starting at `t` (session clock),
    /// fed by the tap and sent, stamped with its end time, when dropped.
    pub fn response(&self, lane: LaneId, t: Duration) -> ResponseCopy {
        ResponseCopy {
            recorder: self.clone(),
            lane: Some(lane),
            t,
            started: Instant::now(),
            mode: Mode::Whole,
            buf: Vec::new(),
            bytes: 0,
            over: false,
        }
    }
}

/// The bytes of one response as they pass the tap, up to the cap; sent to
/// the writer when dropped (the response ended, broke off or the client left).
#[derive(Debug)]
pub struct ResponseCopy {
    recorder: Recorder,
    lane: Option<LaneId>,
    t: Duration,
    started: Instant,
    mode: Mode,
    buf: Vec<u8>,
    bytes: u64,
    over: bool,
}

impl ResponseCopy {
    /// Sets the response's framing.
    pub fn framed(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Appends a chunk (past the cap only its length is counted).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        if self.over {
            return;
        }
        if self.buf.len() + chunk.len() > self.recorder.max_response_bytes {
            self.over = true;
            self.buf = Vec::new();
            return;
        }
        self.buf.extend_from_slice(chunk);
    }
}

impl Drop for ResponseCopy {
    fn drop(&mut self) {
        let Some(lane) = self.lane.take() else { return };
        let body = (!self.over).then(|| std::mem::take(&mut self.buf));
        self.recorder.send(Record::Response {
            lane,
            t: self.t + self.started.elapsed(),
            mode: self.mode,
            body,
            bytes: self.bytes,
        });
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
#[path = "recording_tests.rs"]
mod tests;
