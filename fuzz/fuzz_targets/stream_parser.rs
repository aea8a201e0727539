//! Each dialect's response stream parser (selected by the first byte) on
//! arbitrary payloads (one per line): no panic, whatever the order.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [which, data @ ..] = input else { return };
    let mut parser = common::dialect(*which).stream_parser();
    let mut events = Vec::new();
    for payload in data.split(|b| *b == b'\n') {
        let _ = parser.payload(&String::from_utf8_lossy(payload), &mut events);
    }
    parser.end(&mut events);
});
