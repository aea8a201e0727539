//! The history splitter and hash chain: parsing a request after an earlier
//! one of the same scope (reusing its parsed items, and splitting it after
//! the earlier body's bytes when it repeats them) gives exactly the whole
//! parse; and the same request within a small parse-memory budget (lean
//! form, one huge item parsed a slice at a time) neither panics nor holds
//! more than its budget. Input: dialect byte (its high bits pick the budget,
//! 1 KiB to 2 MiB), then the two bodies separated by a 0xFF byte.
#![no_main]

mod common;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use loopguard::detect::Settings;
use loopguard::budget::ByteBudget;
use loopguard::session::chain::ChainStore;

/// Built once: building the settings compiles their patterns.
static SETTINGS: LazyLock<Settings> = LazyLock::new(Settings::default);

fuzz_target!(|input: &[u8]| {
    let [which, data @ ..] = input else { return };
    let dialect = common::dialect(*which);
    let (first, second) = match data.iter().position(|b| *b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    // Small bodies resume after the first one's bytes too.
    let store = ChainStore::new(Duration::from_secs(60)).with_byte_prefix_from(8);
    let _ = store.parse(dialect, b"scope", first);
    let chained = store.parse(dialect, b"scope", second).ok();
    let whole = dialect.parse_request(second).ok();
    assert_eq!(chained, whole, "the chain parse differs from the whole parse");

    let limit = 1024_usize << ((which >> 2) % 12);
    let budget = Arc::new(ByteBudget::default()).reserve(limit, limit);
    let _ =
        ChainStore::new(Duration::from_secs(60)).parse_within(dialect, b"scope", second, &budget, &SETTINGS);
    assert!(
        budget.held() <= limit,
        "{} bytes held past a budget of {limit}",
        budget.held()
    );
});
