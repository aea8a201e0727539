//! The mock's response bodies: the `x-mock-*` controls (pace, chunking,
//! faults), and the body that sends a response's pieces as they say.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use http::HeaderMap;
use rand::{Rng, SeedableRng};

use super::{MockState, SendLog, header_str, now_us};

/// Per-request controls read from `x-mock-*` headers.
#[derive(Debug, Default)]
pub(super) struct Controls {
    pub(super) pace: Duration,
    pub(super) chunk: String,
    pub(super) seed: u64,
    pub(super) die_after: Option<usize>,
    pub(super) stall_after: Option<usize>,
    pub(super) truncate_after: Option<usize>,
    pub(super) delay_headers: Option<Duration>,
    pub(super) status: Option<u16>,
    pub(super) no_terminator: bool,
    pub(super) gzip: bool,
    /// Flip one bit in the last byte of the first piece (an event-stream
    /// message whose CRC no longer matches).
    pub(super) corrupt: bool,
    pub(super) id: Option<String>,
}

impl Controls {
    /// The controls of a request with `headers`, pacing `default_pace_ms`
    /// apart unless told otherwise.
    pub(super) fn read(headers: &HeaderMap, default_pace_ms: u64) -> Self {
        let num = |name: &str| header_str(headers, name).and_then(|v| v.trim().parse::<u64>().ok());
        let mut c = Self {
            pace: Duration::from_millis(num("x-mock-pace-ms").unwrap_or(default_pace_ms)),
            chunk: header_str(headers, "x-mock-chunk").unwrap_or("event").to_owned(),
            seed: num("x-mock-seed").unwrap_or(1),
            id: header_str(headers, "x-mock-id").map(str::to_owned),
            ..Self::default()
        };
        for fault in header_str(headers, "x-mock-fault").unwrap_or_default().split(',') {
            let (name, arg) = fault.trim().split_once(':').unwrap_or((fault.trim(), ""));
            let n = arg.trim().parse::<u64>().ok();
            match name {
                "die-after" => c.die_after = n.and_then(|n| usize::try_from(n).ok()),
                "stall-after" => c.stall_after = n.and_then(|n| usize::try_from(n).ok()),
                "truncate-after" => c.truncate_after = n.and_then(|n| usize::try_from(n).ok()),
                "delay-headers-ms" => c.delay_headers = n.map(Duration::from_millis),
                "status" => c.status = n.and_then(|n| u16::try_from(n).ok()),
                "no-terminator" => c.no_terminator = true,
                "gzip" => c.gzip = true,
                "corrupt" => c.corrupt = true,
                _ => {}
            }
        }
        c
    }
}

struct BodyState {
    pieces: std::vec::IntoIter<Vec<u8>>,
    pending: Vec<Bytes>,
    controls: Controls,
    rng: rand::rngs::StdRng,
    sent: usize,
    finished: bool,
    state: Arc<MockState>,
}

impl BodyState {
    fn log(&self, f: impl FnOnce(&mut SendLog)) {
        if let Some(id) = &self.controls.id {
            if let Ok(mut logs) = self.state.logs.lock() {
                f(logs.entry(id.clone()).or_default());
            }
        }
    }
}

impl Drop for BodyState {
    fn drop(&mut self) {
        if !self.finished {
            self.state.stats.responses_dropped.fetch_add(1, Ordering::SeqCst);
            self.log(|l| l.dropped = true);
        }
    }
}

fn split(piece: Vec<u8>, how: &str, rng: &mut rand::rngs::StdRng) -> Vec<Bytes> {
    match how {
        "bytes" => piece.into_iter().map(|b| Bytes::from(vec![b])).collect(),
        "random" => {
            let mut out = Vec::new();
            let mut rest = &piece[..];
            while !rest.is_empty() {
                let n = rng.random_range(1..=97).min(rest.len());
                out.push(Bytes::copy_from_slice(&rest[..n]));
                rest = &rest[n..];
            }
            out
        }
        _ => vec![Bytes::from(piece)],
    }
}

/// The body sending `pieces` as `controls` say (pace, chunking, faults),
/// logged into the mock's send log.
pub(super) fn paced_body(pieces: Vec<Vec<u8>>, controls: Controls, state: Arc<MockState>) -> Body {
    let pieces = if controls.chunk == "whole" {
        vec![pieces.concat()]
    } else {
        pieces
    };
    let rng = rand::rngs::StdRng::seed_from_u64(controls.seed);
    let st = BodyState {
        pieces: pieces.into_iter(),
        pending: Vec::new(),
        controls,
        rng,
        sent: 0,
        finished: false,
        state,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.finished {
            return None;
        }
        if let Some(bytes) = st.pending.pop() {
            // One write per piece: yield so the server flushes it alone.
            tokio::task::yield_now().await;
            return Some((Ok::<Bytes, std::io::Error>(bytes), st));
        }
        if st.controls.die_after == Some(st.sent) {
            // Let the server flush what was sent, then break the connection.
            tokio::time::sleep(Duration::from_millis(50)).await;
            st.finished = true;
            st.state.stats.responses_dropped.fetch_add(1, Ordering::SeqCst);
            return Some((
                Err(std::io::Error::other("mock: dying mid-stream as scripted")),
                st,
            ));
        }
        if st.controls.truncate_after == Some(st.sent) {
            st.pieces = Vec::new().into_iter();
        }
        if st.controls.stall_after == Some(st.sent) {
            std::future::pending::<()>().await;
        }
        let Some(piece) = st.pieces.next() else {
            st.finished = true;
            st.state.stats.responses_completed.fetch_add(1, Ordering::SeqCst);
            st.log(|l| l.completed = true);
            return None;
        };
        if st.sent > 0 && !st.controls.pace.is_zero() {
            tokio::time::sleep(st.controls.pace).await;
        } else {
            // One write per event: yield so the server flushes the previous one alone.
            tokio::task::yield_now().await;
        }
        st.sent += 1;
        let at = now_us();
        st.log(|l| l.sent_at_us.push(at));
        let mut parts = split(piece, &st.controls.chunk.clone(), &mut st.rng);
        parts.reverse();
        let first = parts.pop().unwrap_or_default();
        st.pending = parts;
        Some((Ok(first), st))
    });
    Body::from_stream(stream)
}
