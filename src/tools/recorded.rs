//! Replaying a recording (`[recording]`, format in
//! [`crate::recording::format`]) as `serve` judged it live: each request at
//! its recorded time through the same steps as the guard (summarizer
//! requests skipped, compaction recognised against the lane's previous
//! request, stateful Responses blocks made aborts), and each recorded
//! response fed through the real holder, whose batches of tool calls are
//! judged at stream time as they were live — so a block cuts the rest of
//! the response as it did then. Stream-time verdicts are judged at the
//! response's recorded end time. A response recorded as truncated (past
//! `max_response_bytes`) is not judged. Requests chaining to an earlier
//! response (`previous_response_id`) are judged on their bodies alone.

use std::time::Duration;

use crate::detect::compaction::{Classification, RequestSummary, classify_summarized};
use crate::detect::{Action, ContentScanner, ReplayLine, SessionState, Settings, Verdict, decisive};
use crate::dialect::{Dialect, ParsedRequest, StreamEvent};
use crate::plan::{Decision, StreamJudge};
use crate::proxy::hold::Holder;
use crate::proxy::tap::Tap;
use crate::recording::format::Step;
use crate::transcript::ToolCall;

/// A recording parsed once: the dialect and each step with its parse, ready
/// to be judged under any settings ([`judge`]).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The lane's dialect.
    pub dialect: Dialect,
    /// The steps in order.
    pub steps: Vec<ParsedStep>,
}

/// One step of a parsed recording.
#[derive(Debug, Clone)]
pub enum ParsedStep {
    /// A request (`None`: its body did not parse; it is counted, not judged).
    Request {
        /// Session clock.
        t: Duration,
        /// The parse.
        parsed: Option<Box<ParsedRequest>>,
        /// An explicit summarizer request.
        summarizer: bool,
    },
    /// A response with its bytes.
    Response {
        /// Session clock.
        t: Duration,
        /// Framing.
        mode: crate::dialect::Mode,
        /// Bytes (`None`: truncated when recorded).
        body: Option<Vec<u8>>,
    },
}

/// Parses a recording's text.
///
/// # Errors
/// The text is not a recording (the line and why).
pub fn parse(text: &str) -> Result<Parsed, String> {
    let (header, steps) = crate::recording::format::read(text).map_err(|e| e.to_string())?;
    let dialect = Dialect::ALL
        .into_iter()
        .find(|d| d.name() == header.dialect)
        .ok_or_else(|| format!("unknown dialect {:?}", header.dialect))?;
    let steps = steps
        .into_iter()
        .map(|step| match step {
            Step::Request {
                t_us,
                body,
                summarizer,
            } => ParsedStep::Request {
                t: Duration::from_micros(t_us),
                parsed: dialect.parse_request(&body).ok().map(Box::new),
                summarizer,
            },
            Step::Response { t_us, mode, body } => ParsedStep::Response {
                t: Duration::from_micros(t_us),
                mode,
                body,
            },
        })
        .collect();
    Ok(Parsed { dialect, steps })
}

impl Parsed {
    /// Requests recorded.
    pub fn requests(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, ParsedStep::Request { .. }))
            .count()
    }
}

/// Judges a parsed recording under `settings`: every verdict, with its
/// 0-based request index and `at` (`request` or `stream`).
pub fn judge(parsed: &Parsed, settings: &Settings) -> Vec<ReplayLine> {
    let mut state = SessionState::new();
    let mut previous: Option<RequestSummary> = None;
    let mut lines = Vec::new();
    let mut index: Option<usize> = None;
    let mut stateful = false;
    let mut include_usage = false;
    for step in &parsed.steps {
        match step {
            ParsedStep::Request {
                t,
                parsed: request,
                summarizer,
            } => {
                let i = index.map_or(0, |i| i + 1);
                index = Some(i);
                let Some(request) = request else { continue };
                if !settings.enabled || *summarizer || request.summarizer {
                    stateful = false;
                    continue;
                }
                let responses = request.responses.as_ref();
                stateful = responses.is_some_and(|r| r.stateful);
                include_usage = request.include_usage;
                let chained = responses.is_some_and(|r| r.previous_response_id.is_some());
                let transcript = &request.transcript;
                let summary = RequestSummary::of(transcript, settings);
                let classification = if chained {
                    Classification::Continuation
                } else {
                    classify_summarized(previous.as_ref(), &summary, transcript, settings)
                };
                match classification {
                    Classification::Summarizer => continue,
                    Classification::Compacted(_) => state.note_compaction(),
                    Classification::FreshStart => state.reset(),
                    Classification::Continuation => {}
                }
                previous = Some(summary);
                if chained {
                    state.absorb_new(transcript, *t, settings);
                } else {
                    state.absorb(transcript, *t, settings);
                }
                let mut verdicts = state.judge_request(settings);
                if stateful {
                    crate::plan::abort_instead_of_block(&mut verdicts);
                }
                lines.extend(verdicts.into_iter().map(|v| at(i, v, "request")));
            }
            ParsedStep::Response { t, mode, body } => {
                let (Some(i), Some(body)) = (index, body) else {
                    continue;
                };
                if !settings.enabled {
                    continue;
                }
                let mut judge = Judge {
                    state: &state,
                    settings,
                    now: *t,
                    scanner: ContentScanner::new(settings),
                    chanting_reported: false,
                    stateful,
                    verdicts: Vec::new(),
                };
                let tap = Tap::new(parsed.dialect, *mode, usize::MAX);
                let mut holder = Holder::new(tap, parsed.dialect, *mode, include_usage, usize::MAX);
                let out = holder.push(body, &mut judge);
                if out.cut.is_none() {
                    let _ = holder.finish(&mut judge);
                }
                lines.extend(judge.verdicts.into_iter().map(|v| at(i, v, "stream")));
            }
        }
    }
    lines
}

fn at(request: usize, verdict: Verdict, when: &'static str) -> ReplayLine {
    let mut line = ReplayLine::of(request, verdict);
    line.at = Some(when);
    line
}

/// The stream-time judge of a replayed response, as the guard's
/// [`crate::guard::stream::StreamReviewer`] judges it live.
struct Judge<'a> {
    state: &'a SessionState,
    settings: &'a Settings,
    now: Duration,
    scanner: ContentScanner,
    chanting_reported: bool,
    stateful: bool,
    verdicts: Vec<Verdict>,
}

impl StreamJudge for Judge<'_> {
    fn calls(&mut self, calls: &[ToolCall]) -> Decision {
        let mut verdicts = self.state.judge_pending(calls, self.now, self.settings);
        if self.stateful {
            crate::plan::abort_instead_of_block(&mut verdicts);
        }
        let decision = decisive(&verdicts).map_or(Decision::Pass, crate::plan::stream);
        self.verdicts.extend(verdicts);
        decision
    }

    fn event(&mut self, event: &StreamEvent) -> Decision {
        if self.chanting_reported {
            return Decision::Pass;
        }
        let Some(verdict) = self.scanner.observe(event).cloned() else {
            return Decision::Pass;
        };
        self.chanting_reported = true;
        let decision = crate::plan::stream(&verdict);
        self.verdicts.push(verdict);
        decision
    }
}

/// Whether a line stops the call (block or abort).
pub fn stops(line: &ReplayLine) -> bool {
    matches!(line.action, Action::Block | Action::Abort)
}
