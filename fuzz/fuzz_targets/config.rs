//! Config parsing and validation on arbitrary text: an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = loopguard::config::load_str(text, "<fuzz>");
    }
});
