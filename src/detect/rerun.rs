//! Offline replay: run the detectors over a recorded session (`loopguard replay`).
//!
//! Given settings, a session's successive request transcripts (taken
//! `interval` apart, default 10 s, since recordings carry no clock) and
//! optionally the stream events of the response to the last request, produce
//! the verdict lines the CLI prints, one per verdict:
//! `{"request": i, "detector", "level", "action", "count", "message"}` with
//! `i` the 0-based index of the request. Compaction is recognised between
//! requests with [`super::compaction::classify`]; summarizer requests are
//! skipped. Response verdicts (pending calls, chanting) carry the index of
//! the last request.

use std::time::Duration;

use serde::Serialize;

use super::compaction::{Classification, RequestSummary, classify};
use super::content_chanting::ContentScanner;
use super::session::SessionState;
use super::settings::Settings;
use super::verdict::{Action, DetectorKind, Level, Verdict, rank};
use crate::dialect::StreamEvent;
use crate::transcript::Transcript;

/// The default interval between recorded requests.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// One printed verdict line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayLine {
    /// 0-based index of the request (the last one for response verdicts).
    pub request: usize,
    /// Detector name.
    pub detector: DetectorKind,
    /// Level.
    pub level: Level,
    /// Configured action.
    pub action: Action,
    /// The count that reached the threshold.
    pub count: u32,
    /// The `[loopguard] …` message.
    pub message: String,
    /// When `serve` would have judged it: `request` or `stream` (given for
    /// recordings, whose responses are judged as they streamed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<&'static str>,
}

impl ReplayLine {
    /// The line of verdict `v` of request `request`.
    pub fn of(request: usize, v: Verdict) -> Self {
        Self {
            request,
            detector: v.detector,
            level: v.level,
            action: v.action,
            count: v.count,
            message: v.message,
            at: None,
        }
    }
}

/// Replays a session: every verdict of every request, ranked per request,
/// then those of the response to the last request.
pub fn replay(
    settings: &Settings,
    requests: &[Transcript],
    interval: Duration,
    response: Option<&[StreamEvent]>,
) -> Vec<ReplayLine> {
    let mut session = SessionState::new();
    let mut previous: Option<RequestSummary> = None;
    let mut lines = Vec::new();
    let mut now = Duration::ZERO;
    for (i, transcript) in requests.iter().enumerate() {
        now = interval * u32::try_from(i).unwrap_or(u32::MAX);
        match classify(previous.as_ref(), transcript, settings) {
            Classification::Summarizer => continue,
            Classification::Compacted(_) => session.note_compaction(),
            Classification::FreshStart => session.reset(),
            Classification::Continuation => {}
        }
        previous = Some(RequestSummary::of(transcript, settings));
        let verdicts = session.on_request(transcript, now, settings);
        lines.extend(verdicts.into_iter().map(|v| ReplayLine::of(i, v)));
    }
    if let Some(events) = response {
        let last = requests.len().saturating_sub(1);
        let mut scanner = ContentScanner::new(settings);
        let mut calls = Vec::new();
        for event in events {
            scanner.observe(event);
            if let StreamEvent::ToolCallComplete { call, .. } = event {
                calls.push(call.clone());
            }
        }
        let mut verdicts = session.judge_pending(&calls, now + interval / 2, settings);
        verdicts.extend(scanner.verdict().cloned());
        rank(&mut verdicts);
        lines.extend(verdicts.into_iter().map(|v| ReplayLine::of(last, v)));
    }
    lines
}
