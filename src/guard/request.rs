//! The request as the guard sees it ([`RequestView`]) and what it tells:
//! the answer's mode, the model, an explicit summarizer signal, a chained
//! Responses request; and the body with a warning injected.

use bytes::Bytes;
use http::HeaderMap;

use crate::config::Route;
use crate::detect::Settings;
use crate::detect::compaction::RequestSummary;
use crate::dialect::{Dialect, Mode, ParsedRequest};
use crate::session::key;
use crate::transcript::Transcript;

/// The request as the guard needs it.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The matched route.
    pub route: &'a Route,
    /// The dialect.
    pub dialect: Dialect,
    /// Path (without query).
    pub path: &'a str,
    /// Query string.
    pub query: Option<&'a str>,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The caller's credential hash, [`key::tenant`] of `headers` and
    /// `query` (computed once per request by its caller).
    pub tenant: &'a str,
    /// The body decoded for parsing.
    pub decoded: &'a Bytes,
    /// The parsed body.
    pub parsed: &'a ParsedRequest,
    /// The request's parse-memory budget: injecting a warning parses the
    /// whole body again, within it. `None`: unbounded.
    pub budget: Option<&'a crate::budget::Reservation>,
    /// Its summary, lane and key when already computed (by the shared
    /// store's probe, [`crate::guard::shared`]); `None`: detection computes
    /// them.
    pub resolved: Option<&'a Resolved>,
    /// The request's span, while traces are on: its verdicts become events.
    pub trace: Option<&'a std::sync::Arc<crate::trace::Trace>>,
}

/// What locating a request's session computes from the request alone: its
/// summary, lane and session key (before a chained Responses id is
/// followed, which replaces the key).
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The summary the compaction classifier and the lane go by.
    pub summary: RequestSummary,
    /// The lane: route, system text and tool set.
    pub lane: u64,
    /// The session key.
    pub key: key::SessionKey,
}

impl Resolved {
    /// Computes them for `request`, whose history is `transcript` and whose
    /// credential hash is `tenant` ([`key::tenant`]).
    pub fn of(
        request: &RequestView<'_>,
        transcript: &Transcript,
        tenant: String,
        session_header: &str,
        settings: &Settings,
    ) -> Self {
        let summary = RequestSummary::of(transcript, settings);
        let lane = super::lane_id(&request.route.prefix, &summary);
        let ids = || -> key::BodyIds { request.parsed.ids.clone() };
        let mut key = key::resolve_for(
            tenant,
            request.headers,
            session_header,
            ids,
            &request.route.prefix,
            &summary,
        );
        if let (key::KeySource::Fingerprint, Some(id)) = (key.source, request.previous_response_id()) {
            key = key::chain_root(&key, id);
        }
        Self { summary, lane, key }
    }
}

/// Codex's per-turn metadata header (JSON, with a `request_kind`).
const CODEX_TURN_METADATA: http::HeaderName = http::HeaderName::from_static("x-codex-turn-metadata");
/// Claude Code's header on its compaction requests.
const CLAUDE_CODE_COMPACTION: http::HeaderName = http::HeaderName::from_static("x-claude-code-compaction");

impl RequestView<'_> {
    /// How the client asked for the answer.
    pub fn mode(&self) -> Mode {
        self.dialect.mode(self.path, self.query, self.parsed.stream)
    }

    /// The model asked for: the body's `model`, else the one the path
    /// names (see [`crate::dialect::Dialect::path_model`]).
    pub(super) fn model(&self) -> String {
        self.parsed
            .model
            .clone()
            .unwrap_or_else(|| self.dialect.path_model(self.path).to_owned())
    }

    /// The request carries an explicit summarizer signal on the wire: Codex's
    /// `POST …/responses/compact` or `"request_kind":"compaction"` in its
    /// `x-codex-turn-metadata` header, a `compaction_trigger` item, Claude
    /// Code's `x-claude-code-compaction` header.
    pub(super) fn explicit_summarizer(&self) -> bool {
        let codex_compaction = self
            .headers
            .get(&CODEX_TURN_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
            .is_some_and(|m| m["request_kind"] == "compaction");
        self.parsed.summarizer
            || codex_compaction
            || self.path.trim_end_matches('/').ends_with("/responses/compact")
            || self.headers.contains_key(&CLAUDE_CODE_COMPACTION)
    }

    /// The Responses `previous_response_id` the request chains to, if any.
    pub(super) fn previous_response_id(&self) -> Option<&str> {
        self.parsed
            .responses
            .as_ref()
            .and_then(|r| r.previous_response_id.as_deref())
    }

    /// A Responses request chained with `previous_response_id` carries only
    /// the items new since that response (the server holds the rest).
    pub(super) fn carries_only_new(&self) -> bool {
        self.previous_response_id().is_some()
    }

    /// The body with the warning injected, or `None` when it has no tool result
    /// to carry it or the items to parse do not fit the request's budget
    /// (then the request is forwarded unchanged). Only the item that carries
    /// the warning is written again ([`crate::dialect::splice`]); a body that
    /// does not split is parsed whole, changed and written again.
    pub(super) fn inject(&self, warning: &str) -> Option<Bytes> {
        use crate::dialect::splice::{Spliced, inject_warning};
        match inject_warning(self.dialect, self.decoded, warning, self.budget) {
            Spliced::Injected(body) => return Some(Bytes::from(body)),
            Spliced::NoCarrier => {
                tracing::debug!("no tool result to carry the warning; forwarded unchanged");
                return None;
            }
            Spliced::NotDone => {}
        }
        let cost = crate::budget::estimate(self.decoded);
        if let Some(budget) = self.budget {
            if !budget.grow(cost) {
                tracing::debug!("no parse budget left to carry the warning; forwarded unchanged");
                return None;
            }
        }
        let injected = self.inject_parsed(warning);
        if let Some(budget) = self.budget {
            budget.shrink(cost);
        }
        injected
    }

    fn inject_parsed(&self, warning: &str) -> Option<Bytes> {
        let mut value: serde_json::Value = serde_json::from_slice(self.decoded).ok()?;
        if !self.dialect.inject_warning(&mut value, warning) {
            tracing::debug!("no tool result to carry the warning; forwarded unchanged");
            return None;
        }
        serde_json::to_vec(&value).ok().map(Bytes::from)
    }
}
