//! Action planning (DESIGN §2): what loopguard does about a verdict, in one
//! pure place. At request time a decisive verdict becomes a
//! [`RequestDecision`] (forward, forward with the warning injected, answer
//! with a block, answer with an abort); at stream time it becomes a
//! [`Decision`] for the holder. The guard produces these; the proxy carries
//! them out; neither imports the other.

use bytes::Bytes;

use crate::detect::{Action, Verdict};
use crate::dialect::{Answer, Dialect, Mode, StreamEvent};
use crate::transcript::ToolCall;

/// What the response-time judge decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let it through (the verdict, if any, was only observed or warned).
    Pass,
    /// Withhold what is held (or cut the generation) and end the answer
    /// cleanly with `message` as text.
    Block(Cut),
    /// Stop with the dialect's error: HTTP 400 before headers, the in-stream
    /// error event after.
    Abort(Cut),
}

/// A block or abort: what to tell the agent and the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Text for the model and the person (prefixed `[loopguard]`).
    pub message: String,
    /// `x-loopguard-verdict` value: `<action>; detector=<name>; count=<n>`.
    pub header: String,
}

/// Judges what a response carries while it streams. Implemented by the
/// guard ([`crate::guard::stream::StreamReviewer`]); a judge that always answers [`Decision::Pass`] makes holding invisible.
pub trait StreamJudge: Send {
    /// A complete batch of tool calls the model emitted (not yet executed).
    fn calls(&mut self, calls: &[ToolCall]) -> Decision;
    /// Every event the response carried, in order (content detectors scan
    /// answer text, reasoning and tool-call arguments). A `Block` or `Abort`
    /// cuts the generation.
    fn event(&mut self, event: &StreamEvent) -> Decision;
    /// A copy of the response's bytes to record (`[recording]`), taken once
    /// before the response starts; `None` when nothing is recorded.
    fn recording(&mut self) -> Option<crate::recording::ResponseCopy> {
        None
    }
}

/// A judge that passes everything (detection off, or a bypassed request).
#[derive(Debug, Default)]
pub struct PassJudge;

impl StreamJudge for PassJudge {
    fn calls(&mut self, _calls: &[ToolCall]) -> Decision {
        Decision::Pass
    }
    fn event(&mut self, _event: &StreamEvent) -> Decision {
        Decision::Pass
    }
}

/// What to do with a request after request-time detection.
pub enum RequestDecision {
    /// Send it upstream.
    Forward {
        /// A replaced body (a warning was injected); `None`: as received.
        body: Option<Bytes>,
        /// The judge for the response.
        judge: Box<dyn StreamJudge>,
        /// The decisive verdict that let it go (observe, warn) as its
        /// `x-loopguard-verdict` value, for the request log.
        verdict: Option<String>,
        /// Escalated: another model (and maybe upstream) than the agent's.
        retarget: Option<crate::escalate::Retarget>,
    },
    /// Answer in the upstream's place.
    Answer {
        /// HTTP status (200 for a block, 400 for an abort).
        status: http::StatusCode,
        /// The answer.
        answer: Answer,
        /// `x-loopguard-verdict` value.
        verdict: String,
    },
}

impl std::fmt::Debug for RequestDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Forward { body, .. } => f.debug_struct("Forward").field("body", &body.is_some()).finish(),
            Self::Answer { status, verdict, .. } => f
                .debug_struct("Answer")
                .field("status", status)
                .field("verdict", verdict)
                .finish(),
        }
    }
}

/// What a request-time answer is written for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The request's dialect.
    pub dialect: Dialect,
    /// How the client asked for the answer.
    pub mode: Mode,
    /// The model the request named (echoed in a block answer).
    pub model: &'a str,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
}

/// The request-time plan for the decisive verdict (if any): `judge` goes
/// with a forwarded request; `inject` adds a warning to the body (`None`
/// when it has no tool result to carry it). An answer in the upstream's
/// place is counted in `loopguard_upstream_requests_avoided_total` by the
/// caller, when the decision goes out.
pub fn request(
    verdict: Option<&Verdict>,
    target: &Target<'_>,
    judge: Box<dyn StreamJudge>,
    inject: impl FnOnce(&str) -> Option<Bytes>,
) -> RequestDecision {
    let Some(verdict) = verdict else {
        return RequestDecision::Forward {
            body: None,
            judge,
            verdict: None,
            retarget: None,
        };
    };
    match verdict.action {
        Action::Observe => RequestDecision::Forward {
            body: None,
            judge,
            verdict: Some(verdict.header_value()),
            retarget: None,
        },
        // An escalation is a warning sent to another model: the guard
        // retargets the request afterwards.
        Action::Warn | Action::Escalate => RequestDecision::Forward {
            body: inject(&verdict.message),
            judge,
            verdict: Some(verdict.header_value()),
            retarget: None,
        },
        Action::Block => RequestDecision::Answer {
            status: http::StatusCode::OK,
            answer: target.dialect.block_answer(
                target.mode,
                target.model,
                &verdict.message,
                target.include_usage,
            ),
            verdict: verdict.header_value(),
        },
        Action::Abort => RequestDecision::Answer {
            status: http::StatusCode::BAD_REQUEST,
            answer: Answer {
                content_type: "application/json",
                body: target.dialect.abort_body(&abort_message(verdict)),
            },
            verdict: verdict.header_value(),
        },
    }
}

/// The stream-time decision for a decisive verdict.
pub fn stream(verdict: &Verdict) -> Decision {
    match verdict.action {
        // A stream-time warning is carried by the next request.
        Action::Observe | Action::Warn | Action::Escalate => Decision::Pass,
        Action::Block => Decision::Block(Cut {
            message: verdict.message.clone(),
            header: verdict.header_value(),
        }),
        Action::Abort => Decision::Abort(Cut {
            message: abort_message(verdict),
            header: verdict.header_value(),
        }),
    }
}

/// A stateful OpenAI Responses request (`previous_response_id`,
/// `conversation`, `store: true`) is never blocked: the server already holds
/// the withheld call and the agent's next turn would fail with "No tool
/// output found". Its blocks become aborts.
pub fn abort_instead_of_block(verdicts: &mut [Verdict]) {
    for v in verdicts.iter_mut().filter(|v| v.action == Action::Block) {
        v.action = Action::Abort;
    }
}

/// The message of an abort: the error code, then the verdict's message.
pub fn abort_message(verdict: &Verdict) -> String {
    format!("{}: {}", verdict.error_code(), verdict.message)
}
