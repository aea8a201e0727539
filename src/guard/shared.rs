//! Request-time detection over the shared state ([`crate::state`]): one
//! load before the verdict, detection on the process copy, a
//! compare-and-set write (detection re-run on the fresh state after a
//! conflict) before the request goes upstream; any store failure leaves the
//! request judged on this replica's copy.

use std::sync::Arc;

use super::{Guard, RequestView, lane_id};
use crate::config::Config;
use crate::detect::compaction::RequestSummary;
use crate::plan::RequestDecision;
use crate::session::StoredResponse;
use crate::session::key::{self, BodyIds};
use crate::state::{MAX_RETRIES, Outbox, Saved, Shared, count_error};

/// Where a request's session is looked for in the store.
struct Probe {
    key: String,
    tenant: String,
    response_id: Option<String>,
    lane: u64,
    fingerprint: bool,
}

impl Guard {
    /// The shared store, with `[state] backend = "redis"`.
    pub fn shared(&self) -> Option<&Arc<Shared>> {
        self.shared.as_ref()
    }

    /// [`Guard::on_request`] over the shared state, plus the outbox the
    /// response's additions go to (write it with [`Outbox::flush`] before
    /// the response ends). Without a shared store, exactly `on_request`.
    pub async fn on_request_shared(
        &self,
        config: &Config,
        request: &RequestView<'_>,
    ) -> (RequestDecision, Option<String>, Option<Arc<Outbox>>) {
        let plain = |outbox: Option<Arc<Outbox>>| {
            let (decision, key) = self.on_request_with(config, request, outbox.clone());
            (decision, key, outbox)
        };
        let Some(shared) = &self.shared else {
            return plain(None);
        };
        let Some(probe) = self.probe(config, request) else {
            return plain(None);
        };
        let outbox = Outbox::new(Arc::clone(shared), Arc::clone(&self.store));
        let Some(loaded) = shared
            .load(
                &probe.key,
                &probe.tenant,
                probe.response_id.as_deref(),
                probe.fingerprint.then_some(probe.lane),
            )
            .await
        else {
            // Store down or slow: this replica's copy decides.
            return plain(Some(outbox));
        };
        let effective = loaded
            .response
            .as_ref()
            .map_or_else(|| probe.key.clone(), |(session, _)| session.clone());
        let _held = shared.lock(&effective).await;
        if let (Some((session, calls)), Some(id)) = (loaded.response, &probe.response_id) {
            self.store.note_response(
                id,
                StoredResponse {
                    tenant: probe.tenant.clone(),
                    session,
                    calls,
                },
            );
        }
        match &loaded.session {
            Some((version, blob)) => crate::state::install(&self.store, &effective, *version, blob),
            None if self.store.get(&effective).is_some() => {
                crate::state::install(&self.store, &effective, 0, &[]);
            }
            None => {}
        }
        if let Some((lane_key, version, blob)) = &loaded.lane {
            crate::state::install(&self.store, lane_key, *version, blob);
            self.store.note_lane(&probe.tenant, probe.lane, lane_key);
        }
        let mut attempts = 0;
        loop {
            let (decision, key) = self.on_request_with(config, request, Some(Arc::clone(&outbox)));
            let Some(key) = key else {
                return (decision, None, Some(outbox));
            };
            outbox.set_session(&key);
            let lane_index = probe.fingerprint.then_some((probe.tenant.as_str(), probe.lane));
            let Some((expected, blob)) = crate::state::snapshot(&self.store, &key) else {
                return (decision, Some(key), Some(outbox));
            };
            match shared.save(&key, lane_index, expected, &blob).await {
                Some(Saved::Written(version)) => {
                    crate::state::set_version(&self.store, &key, version);
                    return (decision, Some(key), Some(outbox));
                }
                Some(Saved::Conflict(version, fresh)) if attempts < MAX_RETRIES => {
                    attempts += 1;
                    tracing::debug!(session = %key, version, attempts, "state version conflict; detection runs again on the stored state");
                    crate::state::install(&self.store, &key, version, fresh.as_deref().unwrap_or_default());
                }
                Some(Saved::Conflict(..)) => {
                    count_error("conflict");
                    return (decision, Some(key), Some(outbox));
                }
                None => return (decision, Some(key), Some(outbox)),
            }
        }
    }

    /// The store keys for a request, `None` when detection does not run
    /// for it (disabled, bypassed). Mirrors [`Guard::locate`]'s key choice
    /// before a chained response is resolved (the load script does that).
    fn probe(&self, config: &Config, request: &RequestView<'_>) -> Option<Probe> {
        let header_pairs = request
            .headers
            .iter()
            .filter_map(|(n, v)| v.to_str().ok().map(|v| (n.as_str(), v)));
        let (_, settings) = config.loop_detection.select(header_pairs);
        let bypass = config
            .server
            .bypass_header
            .as_deref()
            .is_some_and(|h| request.headers.contains_key(h));
        if !settings.enabled || bypass {
            return None;
        }
        let summary = RequestSummary::of(&request.parsed.transcript, settings);
        let lane = lane_id(&request.route.prefix, &summary);
        let ids = || -> BodyIds { request.parsed.ids.clone() };
        let key = key::resolve(
            request.headers,
            request.query,
            config.sessions.header.as_str(),
            ids,
            &request.route.prefix,
            &summary,
        );
        Some(Probe {
            fingerprint: key.source == key::KeySource::Fingerprint,
            key: key.key,
            tenant: key.tenant,
            response_id: request
                .parsed
                .responses
                .as_ref()
                .and_then(|r| r.previous_response_id.clone()),
            lane,
        })
    }
}
