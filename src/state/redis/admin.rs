//! The admin API's calls: a session's delete for every replica, one
//! session read and the stored sessions listed. Never paused while the
//! store is down (an operator gets Redis's answer).

use super::Shared;
use crate::session::Session;

impl Shared {
    /// Deletes session `key` for every replica (a tombstone the others see
    /// on their next load). `Some(true)` when there was one to delete.
    pub async fn delete(&self, key: &str) -> Option<bool> {
        let skey = self.session_key(key);
        let skey = &skey;
        // Names this delete's tombstone: made again after a lost answer,
        // the call finds its own and still says there was a session.
        let token = format!("{:016x}", rand::random::<u64>());
        let token = &token;
        let n: i64 = self
            .call("delete", move |mut conn| async move {
                self.delete
                    .key(skey)
                    .arg(self.ttl_secs)
                    .arg(token)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Some(n == 1)
    }

    /// The session stored under `key`, for the admin API: `Some(None)` when
    /// none is (or it was deleted), `None` when the store failed.
    pub async fn get(&self, key: &str) -> Option<Option<Session>> {
        let skey = self.session_key(key);
        let skey = &skey;
        let blob: Option<Vec<u8>> = self
            .call("get", move |mut conn| async move {
                redis::cmd("HGET").arg(skey).arg("d").query_async(&mut conn).await
            })
            .await?;
        Some(blob.and_then(|b| crate::state::decode_session(&b).ok()))
    }

    /// Up to `limit` stored sessions (key, session), for the admin API.
    pub async fn list(&self, limit: usize) -> Option<Vec<Session>> {
        let pattern = format!("{}s:*", self.prefix);
        let pattern = &pattern;
        let keys: Vec<String> = self
            .call("list", move |mut conn| async move {
                let mut out = Vec::new();
                let mut cursor: u64 = 0;
                loop {
                    let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(200)
                        .query_async(&mut conn)
                        .await?;
                    out.extend(batch);
                    cursor = next;
                    if cursor == 0 || out.len() >= limit {
                        break;
                    }
                }
                out.truncate(limit);
                Ok(out)
            })
            .await?;
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let keys = &keys;
        let blobs: Vec<Option<Vec<u8>>> = self
            .call("list", move |mut conn| async move {
                let mut pipe = redis::pipe();
                for k in keys {
                    pipe.hget(k, "d");
                }
                pipe.query_async(&mut conn).await
            })
            .await?;
        Some(
            blobs
                .into_iter()
                .flatten()
                .filter_map(|b| crate::state::decode_session(&b).ok())
                .collect(),
        )
    }
}
