//! The response writer: holding, and what loopguard writes for a block or an
//! abort (at a batch of calls or mid-stream), for each dialect and framing,
//! on arbitrary bodies in arbitrary chunks. No panic; with a judge that
//! passes everything the client gets exactly the upstream's bytes.
//! Input: dialect, framing, behaviour, chunking seed, then the body.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loopguard::dialect::{Mode, StreamEvent};
use loopguard::plan::{Cut, Decision, StreamJudge};
use loopguard::proxy::hold::Holder;
use loopguard::proxy::tap::Tap;
use loopguard::transcript::ToolCall;

/// Decides by script: `calls` for every batch, `at_event` for the n-th event.
struct Scripted {
    calls: Decision,
    at_event: Option<(usize, Decision)>,
    events: usize,
}

impl StreamJudge for Scripted {
    fn calls(&mut self, _calls: &[ToolCall]) -> Decision {
        self.calls.clone()
    }
    fn event(&mut self, _event: &StreamEvent) -> Decision {
        self.events += 1;
        match &self.at_event {
            Some((n, decision)) if *n == self.events => decision.clone(),
            _ => Decision::Pass,
        }
    }
}

fn decision(b: u8) -> Decision {
    let cut = Cut {
        message: "[loopguard] fuzz: stopped".to_owned(),
        header: "block; detector=identical_call; count=5".to_owned(),
    };
    match b % 3 {
        0 => Decision::Pass,
        1 => Decision::Block(cut),
        _ => Decision::Abort(cut),
    }
}

fuzz_target!(|input: &[u8]| {
    let [which, framing, behaviour, seed, body @ ..] = input else {
        return;
    };
    let dialect = common::dialect(*which);
    let mode = match framing % 3 {
        0 => Mode::Sse,
        1 => Mode::Whole,
        _ => Mode::JsonArray,
    };
    let on_calls = decision(*behaviour);
    let at_event =
        (behaviour & 0x10 != 0).then(|| (usize::from((behaviour >> 5) & 3) + 1, decision(behaviour >> 2)));
    let quiet = on_calls == Decision::Pass && at_event.as_ref().is_none_or(|(_, d)| *d == Decision::Pass);
    let max_held = if behaviour & 0x80 != 0 { 256 } else { 1 << 20 };
    let mut judge = Scripted {
        calls: on_calls,
        at_event,
        events: 0,
    };
    let mut holder = Holder::new(
        Tap::new(dialect, mode, 1 << 20),
        dialect,
        mode,
        seed & 1 == 0,
        max_held,
    );
    let mut out = Vec::new();
    let mut stopped = false;
    for piece in common::chunks(body, *seed) {
        let o = holder.push(piece, &mut judge);
        out.extend(o.release.iter().flat_map(|b| b.to_vec()));
        if o.stop_upstream {
            stopped = true;
            break;
        }
    }
    if !stopped {
        let (o, _) = holder.finish(&mut judge);
        out.extend(o.release.iter().flat_map(|b| b.to_vec()));
    }
    if quiet {
        assert!(!stopped, "a quiet judge stopped the upstream");
        assert_eq!(out, body, "a quiet judge changed the bytes");
    }
});
