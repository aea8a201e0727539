//! What the Redis store hands back, decoded: a Responses record's calls
//! (`state::record::decode`) and a session blob (`state::decode_session`),
//! on arbitrary bytes (another replica's write, an operator's, a damaged
//! store): never a panic. Oracles: a record's calls encoded again stay
//! within `MAX_RECORD_BYTES` and decode to as many calls; a session that
//! decodes encodes to a blob that decodes and encodes to the same session
//! again, compared in canonical form ([`canonical`]: the blob is a fixed
//! point but for the order of the sets it holds).
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
        assert_eq!(
            canonical(&blob),
            canonical(&again),
            "a session's blob changed on a second round trip"
        );
    }
});

/// Fields of the stored session that are sets (`HashSet`, each decode
/// seeded anew by `RandomState`): serde writes them in iteration order, so
/// the same set is written in another order after every decode. The
/// detector's `user_texts` is the one today (the first `redis_record`
/// finding, `fuzz/seeds/redis_record/session-regress-user-texts-order.json`: the
/// values were all there, in another order). A new set field fails this
/// oracle until it is named here.
const SETS: &[&str] = &["user_texts"];

/// The blob as a JSON value with the arrays of [`SETS`] sorted: what a
/// round trip must preserve. Objects compare without their order
/// (`serde_json`'s map equality), arrays with it: every other sequence in
/// the session (steps, tails, orders) must come back in its order.
fn canonical(blob: &[u8]) -> serde_json::Value {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    if let (true, serde_json::Value::Array(items)) =
                        (SETS.contains(&key.as_str()), &mut *field)
                    {
                        items.sort_by_key(serde_json::Value::as_u64);
                    }
                    walk(field);
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut value: serde_json::Value =
        serde_json::from_slice(blob).unwrap_or_else(|e| panic!("a session's own blob is not JSON: {e}"));
    walk(&mut value);
    value
}
