//! The response driver for paths of a known dialect: reads the upstream's
//! body, runs it through the [`Holder`], and hands the client its headers
//! (possibly replaced by a verdict) and body.
//!
//! The driver runs as its own task so that response headers can be held
//! while it reads: the handler waits for the driver's [`Head`] (or for
//! `header_hold_ms`, or for the whole body of a non-streaming answer) and
//! then answers. A client that goes away closes the body channel, which the
//! driver notices at once and drops the upstream request.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::hold::{Holder, Output};
use super::stream::RequestLog;
use super::tap::TapEnd;
use crate::plan::{Cut, Decision, StreamJudge};

/// What the driver tells the handler about the response headers.
#[derive(Debug)]
pub enum Head {
    /// Send the upstream's status and headers; `verdict` adds an
    /// `x-loopguard-verdict` header.
    Pass {
        /// Value for `x-loopguard-verdict`, when a verdict changed the body.
        verdict: Option<String>,
    },
    /// Answer with this instead of the upstream's response (abort before
    /// headers: HTTP 400 in the dialect's error shape).
    Abort(Cut),
}

/// The driver's clocks.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Longest silence of the upstream between two reads.
    pub idle: Duration,
    /// How often keep-alive bytes are written while a call is held after the
    /// headers went out (`server.keepalive_secs`).
    pub keepalive: Duration,
}

/// One item of the client's body: bytes, or an error that aborts the response.
pub type BodyItem = Result<Bytes, std::io::Error>;

/// Runs one streamed response to the end. See the module docs.
///
/// Each turn waits for the upstream's next chunk (or the client's leaving,
/// or a keep-alive's turn, or the idle timeout), runs it through the holder
/// and forwards what the holder gives out.
pub async fn drive(
    upstream: reqwest::Response,
    holder: Box<Holder>,
    judge: Box<dyn StreamJudge>,
    head_tx: oneshot::Sender<Head>,
    body_tx: mpsc::Sender<BodyItem>,
    timing: Timing,
    log: RequestLog,
) {
    let mut stream = upstream.bytes_stream();
    let mut d = Driver::new(holder, judge, head_tx, body_tx, timing, log);
    loop {
        let keepalive_due = d.keepalive_due();
        let wait = d.wait(keepalive_due);
        let next = tokio::select! {
            () = d.body_tx.closed() => {
                d.outcome = "client_disconnected";
                break;
            }
            next = tokio::time::timeout(wait, stream.next()) => next,
        };
        let (out, end) = match next {
            Ok(Some(Ok(chunk))) => d.push(&chunk),
            Ok(None) => d.finish(),
            Ok(Some(Err(e))) => {
                d.broke_off(e).await;
                break;
            }
            Err(_) if d.last_read.elapsed() < d.timing.idle => {
                // The keep-alive's turn, not the upstream's silence.
                if keepalive_due && d.keep_alive().await.is_break() {
                    break;
                }
                continue;
            }
            Err(_) => {
                d.idle_timeout().await;
                break;
            }
        };
        if d.forward(out, end).await.is_break() {
            break;
        }
    }
    finish_log(&d.holder, &d.log, d.spent, d.verdict.as_deref(), d.outcome);
}

/// What [`drive`] keeps across its turns.
struct Driver {
    holder: Box<Holder>,
    judge: Box<dyn StreamJudge>,
    /// `None` once the head was sent.
    head_tx: Option<oneshot::Sender<Head>>,
    body_tx: mpsc::Sender<BodyItem>,
    timing: Timing,
    log: RequestLog,
    /// The request log's `outcome`.
    outcome: &'static str,
    /// The `x-loopguard-verdict` of a cut, once one was decided.
    verdict: Option<String>,
    /// When bytes last went to the client.
    last_write: Instant,
    /// When the upstream last sent bytes. Idle means the upstream's silence:
    /// only its bytes reset this clock, never loopguard's own keep-alives.
    last_read: Instant,
    /// Time spent in the holder (framing, parsing, judging): loopguard's own share.
    spent: Duration,
}

impl Driver {
    fn new(
        holder: Box<Holder>,
        judge: Box<dyn StreamJudge>,
        head_tx: oneshot::Sender<Head>,
        body_tx: mpsc::Sender<BodyItem>,
        timing: Timing,
        log: RequestLog,
    ) -> Self {
        Self {
            holder,
            judge,
            head_tx: Some(head_tx),
            body_tx,
            timing,
            log,
            outcome: "complete",
            verdict: None,
            last_write: Instant::now(),
            last_read: Instant::now(),
            spent: Duration::ZERO,
        }
    }

    /// Keep-alive bytes are due while a call is held after the headers went
    /// out: when the driver sent them, or when the handler stopped waiting
    /// for them (`header_hold_ms`) and closed the channel.
    fn keepalive_due(&self) -> bool {
        let headers_out = self.head_tx.as_ref().is_none_or(oneshot::Sender::is_closed);
        self.holder.holding() && headers_out
    }

    /// How long to wait for the upstream this turn: until the idle timeout,
    /// or the next keep-alive if that comes first.
    fn wait(&self, keepalive_due: bool) -> Duration {
        let idle_left = self.timing.idle.saturating_sub(self.last_read.elapsed());
        if keepalive_due {
            self.timing
                .keepalive
                .saturating_sub(self.last_write.elapsed())
                .min(idle_left)
        } else {
            idle_left
        }
    }

    /// A chunk of the upstream's body, through the holder.
    fn push(&mut self, chunk: &[u8]) -> (Output, Option<TapEnd>) {
        self.last_read = Instant::now();
        let t = Instant::now();
        let out = self.holder.push(chunk, self.judge.as_mut());
        self.spent += t.elapsed();
        (out, None)
    }

    /// The upstream's body ended: the holder finishes.
    fn finish(&mut self) -> (Output, Option<TapEnd>) {
        let t = Instant::now();
        let (out, end) = self.holder.finish(self.judge.as_mut());
        self.spent += t.elapsed();
        (out, Some(end))
    }

    /// Writes keep-alive bytes (breaks when the client is gone).
    async fn keep_alive(&mut self) -> ControlFlow<()> {
        if let Some(bytes) = self.holder.keepalive() {
            if self.body_tx.send(Ok(bytes)).await.is_err() {
                self.outcome = "client_disconnected";
                return ControlFlow::Break(());
            }
        }
        self.last_write = Instant::now();
        ControlFlow::Continue(())
    }

    /// The upstream's body broke off: the client's response is aborted.
    async fn broke_off(&mut self, e: reqwest::Error) {
        // Errors name the URL, whose query may carry a `?key=` credential.
        let e = e.without_url();
        tracing::warn!(route = %self.log.route, error = %e, "upstream body broke off; aborting the client's response");
        self.abort("upstream_broke_off", format!("upstream body broke off: {e}"))
            .await;
    }

    /// The upstream went silent for `idle`: the client's response is aborted.
    async fn idle_timeout(&mut self) {
        tracing::warn!(route = %self.log.route, idle_secs = self.timing.idle.as_secs(), "upstream idle timeout; aborting the client's response");
        self.abort("upstream_idle_timeout", "upstream idle timeout".to_owned())
            .await;
    }

    /// Sends the head (if not sent yet), what the holder kept, then an error
    /// that aborts the client's body.
    async fn abort(&mut self, outcome: &'static str, message: String) {
        self.outcome = outcome;
        send_head(&mut self.head_tx, None);
        flush(&mut self.holder, &self.body_tx).await;
        let _ = self.body_tx.send(Err(std::io::Error::other(message))).await;
    }

    /// Acts on one step of the holder: its verdict, the headers, the bytes
    /// it released, and the end (breaks when the response is over).
    async fn forward(&mut self, out: Output, end: Option<TapEnd>) -> ControlFlow<()> {
        if self.take_verdict(out.cut.as_ref()).is_break() {
            return ControlFlow::Break(());
        }
        if out.headers_ready || end.is_some() {
            let header = if out.cut.is_some() {
                self.verdict.clone()
            } else {
                None
            };
            send_head(&mut self.head_tx, header);
        }
        self.release(out.release).await;
        if out.stop_upstream {
            metrics::counter!("loopguard_generation_cut_total").increment(1);
            return ControlFlow::Break(());
        }
        match end {
            Some(end) => {
                if let TapEnd::Truncated(reason) = end {
                    self.truncated(&reason).await;
                }
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    }

    /// A verdict's header is kept; an abort before the headers went out
    /// replaces the whole answer (breaks), after them it ends the stream
    /// with an in-stream error.
    fn take_verdict(&mut self, cut: Option<&Decision>) -> ControlFlow<()> {
        match cut {
            Some(Decision::Abort(cut)) => {
                self.verdict = Some(cut.header.clone());
                if let Some(tx) = self.head_tx.take() {
                    if tx.send(Head::Abort(cut.clone())).is_ok() {
                        self.outcome = "aborted";
                        return ControlFlow::Break(());
                    }
                }
                self.outcome = "aborted_in_stream";
            }
            Some(Decision::Block(cut)) => {
                self.verdict = Some(cut.header.clone());
                self.outcome = "blocked";
            }
            Some(Decision::Pass) | None => {}
        }
        ControlFlow::Continue(())
    }

    /// Sends released bytes to the client (stops at the first that cannot go).
    async fn release(&mut self, release: Vec<Bytes>) {
        for bytes in release {
            if self.body_tx.send(Ok(bytes)).await.is_err() {
                self.outcome = "client_disconnected";
                break;
            }
            self.last_write = Instant::now();
        }
    }

    /// The upstream's stream ended early: the client's body is aborted.
    async fn truncated(&mut self, reason: &str) {
        tracing::warn!(route = %self.log.route, %reason, "upstream stream ended early; aborting the client's response");
        self.outcome = "upstream_truncated";
        let _ = self
            .body_tx
            .send(Err(std::io::Error::other(format!(
                "upstream stream truncated: {reason}"
            ))))
            .await;
    }
}

/// Counts a parse failure as fail-open and writes the request log line.
fn finish_log(holder: &Holder, log: &RequestLog, spent: Duration, verdict: Option<&str>, outcome: &str) {
    if let Some(reason) = holder.tap().failure() {
        crate::telemetry::fail_open(reason);
    }
    let seen = holder.tap().seen();
    let overhead = log.overhead + spent;
    metrics::histogram!("loopguard_overhead_seconds").record(overhead.as_secs_f64());
    tracing::info!(
        session = log.session.as_deref().unwrap_or(""),
        overhead_us = u64::try_from(overhead.as_micros()).unwrap_or(u64::MAX),
        route = %log.route,
        dialect = log.dialect,
        status = log.status,
        duration_ms = u64::try_from(log.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        events = seen.events,
        request_messages = log.request_messages.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
        text_chars = seen.text_chars,
        tool_calls = %seen.tool_calls.join(","),
        finish = %seen.finish.join(","),
        verdict = verdict.or(log.verdict.as_deref()).unwrap_or(""),
        outcome,
        "request"
    );
    if let Some(trace) = &log.trace {
        let meta = holder.tap().meta();
        trace.finish(&crate::trace::End {
            // An abort before the headers answered HTTP 400 in the upstream's place.
            status: if outcome == "aborted" { 400 } else { log.status },
            outcome,
            verdict: verdict.or(log.verdict.as_deref()),
            response_model: meta.and_then(|m| m.model.as_deref().or(m.model_version.as_deref())),
            tokens: seen.tokens,
            finish_reasons: &seen.finish,
            tool_calls: &seen.calls,
        });
    }
}

/// How a whole (non-streaming) answer ended.
pub enum Whole {
    /// Send this body (the upstream's, or a block's replacement).
    Answer {
        /// `x-loopguard-verdict` value when a verdict changed the body.
        verdict: Option<String>,
        /// The body.
        body: Bytes,
    },
    /// Answer HTTP 400 in the dialect's error shape.
    Abort(Cut),
    /// The upstream's body broke off or went silent: what happened.
    Broken(String),
    /// The answer is over `max_response_bytes`: `prefix` (what was read)
    /// and the rest of `upstream` pass unjudged, as they come (fail open).
    Stream {
        /// The bytes already read.
        prefix: Bytes,
        /// The rest of the upstream's body.
        upstream: super::stream::Upstream,
        /// For the request log line, written when the body ends.
        log: RequestLog,
    },
}

impl std::fmt::Debug for Whole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answer { verdict, body } => f
                .debug_struct("Answer")
                .field("verdict", verdict)
                .field("body_len", &body.len())
                .finish(),
            Self::Abort(cut) => f.debug_tuple("Abort").field(cut).finish(),
            Self::Broken(why) => f.debug_tuple("Broken").field(why).finish(),
            Self::Stream { prefix, .. } => f
                .debug_struct("Stream")
                .field("prefix_len", &prefix.len())
                .finish(),
        }
    }
}

/// Reads a whole (non-streaming) answer inline, judges it, and says what to
/// send. The client waits for all of it anyway, so no task or channel is
/// needed; a client that goes away drops this future and the upstream with it.
pub async fn whole(
    upstream: reqwest::Response,
    mut holder: Box<Holder>,
    mut judge: Box<dyn StreamJudge>,
    idle: Duration,
    log: RequestLog,
) -> Whole {
    let mut stream: super::stream::Upstream = Box::pin(upstream.bytes_stream());
    let mut body = Vec::new();
    let mut spent = Duration::ZERO;
    let mut cut: Option<Decision> = None;
    let result = loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                let t = Instant::now();
                let out = holder.push(&chunk, judge.as_mut());
                spent += t.elapsed();
                body.extend(out.release.iter().flat_map(|b| b.iter().copied()));
                cut = cut.or(out.cut);
                if holder.passing_through() {
                    crate::telemetry::fail_open("response_too_large");
                    let log = RequestLog {
                        overhead: log.overhead + spent,
                        ..log
                    };
                    return Whole::Stream {
                        prefix: Bytes::from(body),
                        upstream: stream,
                        log,
                    };
                }
            }
            Ok(None) => {
                let t = Instant::now();
                let (out, _) = holder.finish(judge.as_mut());
                spent += t.elapsed();
                body.extend(out.release.iter().flat_map(|b| b.iter().copied()));
                cut = cut.or(out.cut);
                break None;
            }
            Ok(Some(Err(e))) => break Some(format!("upstream body broke off: {}", e.without_url())),
            Err(_) => break Some(format!("upstream sent nothing for {} s", idle.as_secs())),
        }
    };
    let (whole, verdict, outcome) = match (result, cut) {
        (Some(reason), _) => {
            tracing::warn!(route = %log.route, %reason, "upstream answer incomplete");
            (Whole::Broken(reason), None, "upstream_broke_off")
        }
        (None, Some(Decision::Abort(c))) => {
            let header = c.header.clone();
            (Whole::Abort(c), Some(header), "aborted")
        }
        (None, Some(Decision::Block(c))) => (
            Whole::Answer {
                verdict: Some(c.header.clone()),
                body: Bytes::from(body),
            },
            Some(c.header),
            "blocked",
        ),
        (None, _) => (
            Whole::Answer {
                verdict: None,
                body: Bytes::from(body),
            },
            None,
            "complete",
        ),
    };
    finish_log(&holder, &log, spent, verdict.as_deref(), outcome);
    whole
}

async fn flush(holder: &mut Holder, body_tx: &mpsc::Sender<BodyItem>) {
    if let Some(bytes) = holder.flush() {
        let _ = body_tx.send(Ok(bytes)).await;
    }
}

fn send_head(head_tx: &mut Option<oneshot::Sender<Head>>, verdict: Option<String>) {
    if let Some(tx) = head_tx.take() {
        let _ = tx.send(Head::Pass { verdict });
    }
}
