//! What the Redis store hands back, decoded: a Responses record's calls
//! (`state::record::decode`) and a session blob (`state::decode_session`),
//! on arbitrary bytes (another replica's write, an operator's, a damaged
//! store): never a panic. Oracles: a record's calls encoded again stay
//! within `MAX_RECORD_BYTES` and decode to as many calls; a session that
//! decodes encodes to a blob that decodes to the same blob again.
//!
//! Layout: byte 0 even: a response record; odd: a session blob.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use loopguard::detect::Settings;
use loopguard::state::record::{self, MAX_CALLS, MAX_RECORD_BYTES};

/// Built once: the defaults compile their patterns (half the time of a run).
static SETTINGS: LazyLock<Settings> = LazyLock::new(Settings::default);

fuzz_target!(|input: &[u8]| {
    let [which, data @ ..] = input else { return };
    if which % 2 == 0 {
        let calls = record::decode(data);
        let again = record::encode(&calls, &SETTINGS);
        assert!(again.len() <= MAX_RECORD_BYTES, "record of {} bytes", again.len());
        assert_eq!(record::decode(&again).len(), calls.len().min(MAX_CALLS));
    } else if let Ok(session) = loopguard::state::decode_session(data) {
        let Ok(blob) = serde_json::to_vec(&session) else {
            return;
        };
        let back = loopguard::state::decode_session(&blob)
            .unwrap_or_else(|e| panic!("a session's own blob does not decode: {e}"));
        let Ok(again) = serde_json::to_vec(&back) else {
            return;
        };
        assert_eq!(blob, again, "a session's blob changed on a second round trip");
    }
});
