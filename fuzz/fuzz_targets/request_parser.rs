//! Each dialect's request parser (selected by the first byte) on arbitrary
//! bodies: no panic, and the split-then-parse path agrees with the whole parse.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loopguard::dialect::split::assemble;

fuzz_target!(|input: &[u8]| {
    let [which, body @ ..] = input else { return };
    let dialect = common::dialect(*which);
    let whole = dialect.parse_request(body);
    if let Some(Ok(split)) = dialect.split_request(body) {
        if let (Ok(items), Ok(whole)) = (split.parse_items(&[], 0), &whole) {
            let head = split.head.clone();
            assert_eq!(
                &assemble(head, items),
                whole,
                "split parse differs from the whole parse"
            );
        }
    }
});
