//! A response on a dialect path that the upstream encoded (gzip, deflate, zstd)
//! although loopguard asked for `Accept-Encoding: identity`: its bytes go
//! to the client unchanged and never held (they cannot be cut at event
//! boundaries), while a side copy is decoded and parsed so the detectors
//! still see its calls. Verdicts found here act on the next request.
//! Counted as `loopguard_fail_open_total{reason="response_encoded"}`.
//!
//! Bounded cost: the side copy decodes at most `max_response_bytes` (a
//! compressed stream can expand a thousandfold: past the cap detection
//! stops for that response, counted as `response_too_large`, while its
//! bytes keep going to the client), and a chunk of more than
//! `OFFLOAD_ABOVE` compressed bytes is decoded and judged off the async
//! worker ([`super::offload::blocking_now`]).

use std::io::Write;

use http::HeaderMap;
use http::header::CONTENT_ENCODING;

use super::stream::Observer;
use super::tap::{Frame, Tap};
use crate::dialect::{Dialect, Mode, StreamEvent};
use crate::plan::StreamJudge;
use crate::transcript::ToolCall;

/// Compressed bytes in one chunk past which its decoding and judgement run
/// off the async worker (at a thousandfold expansion, a 1 MiB answer).
const OFFLOAD_ABOVE: usize = 1024;

/// The decoded side copy goes straight into the tap, in the decoder's own
/// small pieces (a highly compressed chunk is never decoded whole), up to
/// `cap` bytes.
struct TapSink {
    tap: Tap,
    frames: Vec<Frame>,
    decoded: u64,
    cap: u64,
    over_cap: bool,
}

impl Write for TapSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.decoded + buf.len() as u64 > self.cap {
            self.over_cap = true;
            return Err(std::io::Error::other("decoded side copy past max_response_bytes"));
        }
        self.decoded += buf.len() as u64;
        self.tap.feed(buf, &mut self.frames);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Decoder {
    Gzip(flate2::write::MultiGzDecoder<TapSink>),
    Deflate(flate2::write::ZlibDecoder<TapSink>),
    Zstd(zstd::stream::write::Decoder<'static, TapSink>),
}

impl Decoder {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Gzip(d) => d.write_all(bytes),
            Self::Deflate(d) => d.write_all(bytes),
            Self::Zstd(d) => d.write_all(bytes),
        }
    }

    fn try_finish(&mut self) -> std::io::Result<()> {
        match self {
            Self::Gzip(d) => d.try_finish(),
            Self::Deflate(d) => d.try_finish(),
            Self::Zstd(d) => d.flush(),
        }
    }

    fn sink(&mut self) -> &mut TapSink {
        match self {
            Self::Gzip(d) => d.get_mut(),
            Self::Deflate(d) => d.get_mut(),
            Self::Zstd(d) => d.get_mut(),
        }
    }
}

/// The response's content coding, when it is not identity.
pub fn coding(headers: &HeaderMap) -> Option<String> {
    headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty() && v != "identity")
}

/// Decodes and judges a side copy of an encoded response.
pub struct SideJudge {
    decoder: Option<Decoder>,
    judge: Box<dyn StreamJudge>,
    batch: Vec<ToolCall>,
}

impl SideJudge {
    /// For a response with content coding `coding` (gzip, x-gzip, deflate, zstd;
    /// any other is passed through without parsing) framed as `mode`, its
    /// side copy decoded up to `max_json_bytes` (`max_response_bytes`).
    /// Counts the fail-open.
    pub fn new(
        coding: &str,
        dialect: Dialect,
        mode: Mode,
        max_json_bytes: usize,
        judge: Box<dyn StreamJudge>,
    ) -> Self {
        crate::telemetry::fail_open("response_encoded");
        let sink = TapSink {
            tap: Tap::new(dialect, mode, max_json_bytes),
            frames: Vec::new(),
            decoded: 0,
            cap: max_json_bytes as u64,
            over_cap: false,
        };
        let decoder = match coding {
            "gzip" | "x-gzip" => Some(Decoder::Gzip(flate2::write::MultiGzDecoder::new(sink))),
            "deflate" => Some(Decoder::Deflate(flate2::write::ZlibDecoder::new(sink))),
            "zstd" => zstd::stream::write::Decoder::new(sink).ok().map(Decoder::Zstd),
            other => {
                tracing::debug!(coding = other, "encoded response not decodable: no detection");
                None
            }
        };
        Self {
            decoder,
            judge,
            batch: Vec::new(),
        }
    }

    fn judge_frames(&mut self) {
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        let frames = std::mem::take(&mut decoder.sink().frames);
        for event in frames.iter().flat_map(|f| f.events.iter()) {
            // The bytes already went out: a decision cannot cut them, but
            // its verdict is recorded for the next request.
            let _ = self.judge.event(event);
            match event {
                StreamEvent::ToolCallComplete { call, .. } => self.batch.push(call.clone()),
                StreamEvent::Finish { .. } | StreamEvent::Done | StreamEvent::Error { .. } => {
                    self.judge_batch()
                }
                _ => {}
            }
        }
    }

    fn judge_batch(&mut self) {
        if !self.batch.is_empty() {
            let _ = self.judge.calls(&self.batch);
            self.batch.clear();
        }
    }
}

impl SideJudge {
    fn decode_and_judge(&mut self, bytes: &[u8]) {
        if let Some(decoder) = self.decoder.as_mut() {
            if let Err(e) = decoder.write_all(bytes) {
                if decoder.sink().over_cap {
                    crate::telemetry::fail_open("response_too_large");
                    tracing::debug!("encoded response decodes past max_response_bytes: no more detection");
                } else {
                    tracing::debug!(error = %e, "encoded response does not decode: no more detection");
                }
                self.decoder = None;
                return;
            }
        }
        self.judge_frames();
    }
}

impl Observer for SideJudge {
    fn chunk(&mut self, bytes: &[u8]) {
        if bytes.len() > OFFLOAD_ABOVE {
            super::offload::blocking_now(|| self.decode_and_judge(bytes));
        } else {
            self.decode_and_judge(bytes);
        }
    }

    fn end(&mut self) {
        if let Some(decoder) = self.decoder.as_mut() {
            if decoder.try_finish().is_ok() {
                let sink = decoder.sink();
                let total = sink.decoded;
                let mut frames = std::mem::take(&mut sink.frames);
                let _ = sink.tap.finish(total, &mut frames);
                sink.frames = frames;
            }
        }
        self.judge_frames();
        self.judge_batch();
    }
}
