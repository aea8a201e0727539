//! The process copy and the stored form: a session's blob taken from the
//! process store, its version noted after a write (or the write noted as
//! unanswered), and a stored blob installed in its place.

use std::sync::PoisonError;

use crate::session::{Session, Store};
use crate::state::{MAX_STATE_BYTES, count_error};

/// The process copy's version and JSON, `None` when there is no session or
/// it is past [`MAX_STATE_BYTES`] (then it stays on this replica).
pub(crate) fn snapshot(store: &Store, key: &str) -> Option<(u64, Vec<u8>)> {
    let session = store.get(key)?;
    let guard = session.lock().unwrap_or_else(PoisonError::into_inner);
    let blob = serde_json::to_vec(&*guard).ok()?;
    if blob.len() > MAX_STATE_BYTES {
        count_error("oversize");
        tracing::warn!(
            session = key,
            bytes = blob.len(),
            "session state past the store's cap; kept on this replica only"
        );
        return None;
    }
    Some((guard.version, blob))
}

/// Notes that session `key`'s copy was written as `version` (no write of
/// it is left unanswered).
pub(super) fn set_version(store: &Store, key: &str, version: u64) {
    if let Some(session) = store.get(key) {
        let mut local = session.lock().unwrap_or_else(PoisonError::into_inner);
        local.version = version;
        local.unacked.clear();
    }
}

/// Notes that the write of `blob` for session `key` was never answered
/// (see [`Session::unacked`]).
pub(super) fn note_unacked(store: &Store, key: &str, blob: &[u8]) {
    if let Some(session) = store.get(key) {
        let mut local = session.lock().unwrap_or_else(PoisonError::into_inner);
        if local.unacked.len() >= crate::state::MAX_UNACKED {
            local.unacked.remove(0);
        }
        local.unacked.push(crate::detect::outcome::hash64(blob));
    }
}

/// Puts the stored state of session `key` (version `version`; an empty
/// blob: deleted) in the process store, unless the process copy already is
/// that version, or is the successor of what is stored: this replica's
/// own write whose answer never came, landed late (then the copy takes the
/// version). `true` when the copy was replaced.
pub(crate) fn install(store: &Store, key: &str, version: u64, blob: &[u8]) -> bool {
    let (session, _) = store.get_or_create(key);
    let mut local = session.lock().unwrap_or_else(PoisonError::into_inner);
    if version == 0 {
        // Nothing stored (expired, or the store lost its data): the process
        // copy stands and is written as the first version.
        local.version = 0;
        return false;
    }
    if local.version == version {
        return false;
    }
    if !local.unacked.is_empty()
        && !blob.is_empty()
        && local.unacked.contains(&crate::detect::outcome::hash64(blob))
    {
        local.version = version;
        local.unacked.clear();
        return false;
    }
    let fresh = if blob.is_empty() {
        None
    } else {
        match crate::state::decode_session(blob) {
            Ok(s) => Some(s),
            Err(e) => {
                count_error("decode");
                tracing::warn!(session = key, error = %e, "stored session unreadable; starting it afresh");
                None
            }
        }
    };
    *local = fresh.unwrap_or_else(|| Session::empty(key));
    local.key = key.to_owned();
    local.version = version;
    true
}
