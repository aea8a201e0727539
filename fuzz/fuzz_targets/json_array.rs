//! Streamed JSON array splitter: no panic; elements in order, each its own
//! bytes; the same elements and outcome in one push or in small chunks.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loopguard::json_array::{ArrayElement, ArraySplitter, SplitError};

fn split(data: &[u8], pieces: &[&[u8]]) -> (Vec<ArrayElement>, Result<(), SplitError>) {
    let mut splitter = ArraySplitter::new();
    let mut elements = Vec::new();
    let mut result = Ok(());
    for piece in pieces {
        result = splitter.push(piece, &mut elements);
        if result.is_err() {
            break;
        }
    }
    let end = result.and_then(|()| splitter.finish());
    let mut at = 0;
    for e in &elements {
        assert!(
            e.start >= at && e.end > e.start && e.end <= data.len() as u64,
            "{e:?}"
        );
        let bytes = &data[e.start as usize..e.end as usize];
        assert_eq!(
            e.text,
            String::from_utf8_lossy(bytes),
            "an element is its own bytes"
        );
        at = e.end;
    }
    (elements, end)
}

fuzz_target!(|input: &[u8]| {
    let [seed, data @ ..] = input else { return };
    let whole = split(data, &[data]);
    let chunked = split(data, &common::chunks(data, *seed));
    assert_eq!(whole, chunked, "chunking changed the split");
});
