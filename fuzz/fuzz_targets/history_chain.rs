//! The history splitter and hash chain: parsing a request after an earlier
//! one of the same scope (reusing its parsed items) gives exactly the whole
//! parse. Input: dialect byte, then the two bodies separated by a 0xFF byte.
#![no_main]

mod common;

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use loopguard::session::chain::ChainStore;

fuzz_target!(|input: &[u8]| {
    let [which, data @ ..] = input else { return };
    let dialect = common::dialect(*which);
    let (first, second) = match data.iter().position(|b| *b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let store = ChainStore::new(Duration::from_secs(60));
    let _ = store.parse(dialect, b"scope", first);
    let chained = store.parse(dialect, b"scope", second).ok();
    let whole = dialect.parse_request(second).ok();
    assert_eq!(chained, whole, "the chain parse differs from the whole parse");
});
