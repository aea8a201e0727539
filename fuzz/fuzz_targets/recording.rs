//! The recording reader (`recording::format::read`, through the replay's
//! `tools::recorded::parse`) and the replay's judging of what it read, on
//! arbitrary text: an error, never a panic; a text that reads starts with a
//! line `is_recording` accepts; every rebuilt request body is JSON.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use loopguard::detect::Settings;
use loopguard::recording::format::{self, Step};
use loopguard::tools::recorded;

/// Built once: the defaults compile their patterns (half the time of a run).
static SETTINGS: LazyLock<Settings> = LazyLock::new(Settings::default);

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((_, steps)) = format::read(text) else {
        assert!(recorded::parse(text).is_err(), "parse accepted what read refused");
        return;
    };
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    assert!(
        format::is_recording(first),
        "read accepted a header is_recording refuses"
    );
    for step in &steps {
        if let Step::Request { body, .. } = step {
            assert!(
                serde_json::from_slice::<serde_json::Value>(body).is_ok(),
                "a rebuilt body is not JSON"
            );
        }
    }
    if let Ok(parsed) = recorded::parse(text) {
        let _ = recorded::judge(&parsed, &SETTINGS);
    }
});
