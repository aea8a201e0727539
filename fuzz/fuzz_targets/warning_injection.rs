//! Warning injection (the `warn` action) on arbitrary JSON request bodies of
//! each dialect: no panic, and a body it declines is left untouched.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [which, body @ ..] = input else { return };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let before = value.clone();
    if !common::dialect(*which).inject_warning(&mut value, "[loopguard] fuzz warning") {
        assert_eq!(value, before, "a declined injection changed the body");
    }
});
