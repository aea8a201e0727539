//! AWS event-stream decoder (Bedrock) and the Bedrock payload reader: no
//! panic; messages tile the stream (each ends past the one before, within
//! the input); the same messages in one push or in small chunks; memory
//! stays within the cap on hostile lengths (a cap of 4 KiB: nothing past it
//! is ever buffered); every decoded message re-encodes (string headers
//! only) to a message that decodes to the same headers and payload; each
//! payload read as a Bedrock `chunk` and parsed as an Anthropic event, and
//! read as a `ConverseStream` event and parsed as one, never panics.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loopguard::dialect::{Dialect, bedrock, bedrock_converse};
use loopguard::eventstream::{Decoder, Message, encode};

const CAP: usize = 4096;

fn decode(data: &[u8], pieces: &[&[u8]]) -> (Vec<Message>, bool) {
    let mut decoder = Decoder::new(CAP);
    let mut out = Vec::new();
    let mut failed = false;
    for piece in pieces {
        if decoder.push(piece, &mut out).is_err() {
            failed = true;
        }
        assert!(decoder.buffered() <= CAP + piece.len().max(12), "bounded buffer");
    }
    let mut at = 0;
    for m in &out {
        assert!(m.end > at && m.end <= data.len() as u64, "{m:?}");
        at = m.end;
    }
    (out, failed || decoder.finish().is_err())
}

fuzz_target!(|input: &[u8]| {
    let [seed, data @ ..] = input else { return };
    let (whole, whole_failed) = decode(data, &[data]);
    let (chunked, chunked_failed) = decode(data, &common::chunks(data, *seed));
    assert_eq!(whole, chunked, "chunking changed the messages");
    assert_eq!(whole_failed, chunked_failed);
    let mut parser = Dialect::Bedrock.stream_parser();
    let mut converse = Dialect::BedrockConverse.stream_parser();
    let mut events = Vec::new();
    for m in &whole {
        let headers: Vec<(&str, &str)> = m.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let again = encode(&headers, &m.payload);
        let (back, failed) = decode(&again, &[&again]);
        if !failed
            && headers
                .iter()
                .all(|(k, v)| k.len() < 256 && v.len() <= usize::from(u16::MAX))
        {
            assert_eq!(back.len(), 1);
            assert_eq!(back[0].headers, m.headers);
            assert_eq!(back[0].payload, m.payload);
        }
        if let Some(payload) = bedrock::payload_of(m) {
            let _ = parser.payload(&payload, &mut events);
        }
        if let Some(payload) = bedrock_converse::payload_of(m) {
            let _ = converse.payload(&payload, &mut events);
        }
    }
    parser.end(&mut events);
    converse.end(&mut events);
});
