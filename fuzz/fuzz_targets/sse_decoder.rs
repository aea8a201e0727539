//! SSE decoder: no panic; the events tile the stream; the same events
//! whether the bytes come in one push or in small chunks.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loopguard::sse::{SseDecoder, SseEvent};

fn decode(data: &[u8], cap: Option<usize>, pieces: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = cap.map_or_else(SseDecoder::new, SseDecoder::with_max_event_bytes);
    let mut events = Vec::new();
    for piece in pieces {
        decoder.push(piece, &mut events);
    }
    events.extend(decoder.finish());
    let mut at = 0;
    for e in &events {
        assert_eq!(e.start, at, "events tile the stream");
        assert!(e.end > e.start && e.end <= data.len() as u64, "{e:?}");
        at = e.end;
    }
    events
}

fuzz_target!(|input: &[u8]| {
    let [seed, cap, data @ ..] = input else { return };
    let cap = (*cap != 0).then(|| usize::from(*cap) * 4);
    let whole = decode(data, cap, &[data]);
    let chunked = decode(data, cap, &common::chunks(data, *seed));
    assert_eq!(whole, chunked, "chunking changed the events");
});
