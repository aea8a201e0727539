//! Admission, the first stage of a request: path checks, route match,
//! misroute check, the body read under its cap, and the side copy parsed in
//! the route's dialect (fail open: a body that does not parse is forwarded
//! unchanged, without detection).

use std::time::Instant;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;

use super::Answered;
use super::error::ProxyError;
use super::{body, counted};
use crate::config::{Config, Provider, Route};
use crate::dialect::ParsedRequest;
use crate::guard::Guard;
use crate::route;
use crate::session::chain::Parsed;

/// Compressed bytes past which an encoded request body is decoded, parsed
/// and judged off the async workers whatever its size as received (gzip of
/// repetitive JSON expands a hundredfold and more).
const ENCODED_OFFLOAD_ABOVE: usize = 4096;

/// A request let in: routed, its body read and (when its dialect is known)
/// parsed.
#[derive(Debug)]
pub(super) struct Admitted<'c> {
    /// Method, URI and headers as received.
    pub(super) parts: http::request::Parts,
    /// Path, without query.
    pub(super) path: String,
    /// Query, if any.
    pub(super) query: Option<String>,
    /// The route and upstream URL.
    pub(super) matched: route::Matched<'c>,
    /// The route's provider.
    pub(super) provider: Provider,
    /// The body as received.
    pub(super) body: Bytes,
    /// When the body was read: loopguard's own time on the request starts here.
    pub(super) body_read: Instant,
    /// The caller's credential hash ([`crate::session::key::tenant`]), when
    /// detection applies; empty otherwise.
    pub(super) tenant: String,
    /// The body decoded for parsing and its parse, when detection applies.
    pub(super) side: Option<(Bytes, ParsedRequest)>,
    /// What the parse holds of the parse-memory budget, until the request is done.
    pub(super) parse_budget: crate::budget::Reservation,
    /// What the body holds of `server.max_request_bytes_in_flight`, given
    /// back when the request is done (on drop).
    pub(super) _body_budget: crate::budget::Reservation,
    /// The request's span, while traces are on ([`crate::trace`]).
    pub(super) trace: Option<std::sync::Arc<crate::trace::Trace>>,
}

impl Admitted<'_> {
    /// The parsed body, when detection applies.
    pub(super) fn parsed(&self) -> Option<&ParsedRequest> {
        self.side.as_ref().map(|(_, p)| p)
    }

    /// Begins the request's span (`None` while traces are off): the model
    /// is the parsed body's, or Gemini's path segment `models/{model}:…`.
    pub(super) fn traced(&self, started: Instant) -> Option<std::sync::Arc<crate::trace::Trace>> {
        let dialect = self.matched.dialect;
        let from_path = || {
            (dialect == Some(crate::dialect::Dialect::Gemini))
                .then(|| {
                    self.path
                        .rsplit('/')
                        .next()
                        .and_then(|last| last.split(':').next())
                })
                .flatten()
        };
        crate::trace::begin(&crate::trace::Begin {
            started,
            method: &self.parts.method,
            headers: &self.parts.headers,
            route: &self.matched.route.prefix,
            provider: self.provider,
            dialect,
            upstream: &self.matched.upstream_url,
            model: self.parsed().and_then(|p| p.model.as_deref()).or_else(from_path),
        })
    }
}

/// Lets a request in, or answers it (HTTP 400 for an unsafe path or a
/// misrouted request, 404 without a route, 413 past the body cap).
pub(super) async fn admit<'c>(
    guard: &Guard,
    offload: &super::offload::Offload,
    config: &'c Config,
    request: Request,
) -> Result<Admitted<'c>, Answered> {
    let (parts, body) = request.into_parts();
    let query = parts.uri.query().map(str::to_owned);
    let (path, matched) = routed(config, &parts, query.as_deref())?;
    let provider = matched.route.provider;
    let body_budget = guard.reserve_body(config);
    let body = read_body(config, &matched, body, &body_budget).await?;

    // loopguard's own time on the request starts here: decoding, parsing and detection count.
    let body_read = Instant::now();
    // An encoded body is judged on what it decodes to, unknown until it is
    // decoded (a thousandfold for a hostile one): past a small compressed
    // size its decoding and parse go off the async workers too.
    let heavy = body.len() > config.server.offload_body_bytes
        || (body::is_encoded(&parts.headers) && body.len() > ENCODED_OFFLOAD_ABOVE);
    let budget = guard.reserve_parse(config);
    let tenant = matched
        .dialect
        .map(|_| crate::session::key::tenant(&parts.headers, query.as_deref()))
        .unwrap_or_default();
    let side = offload
        .run(heavy, || {
            matched.dialect.and_then(|d| {
                let request = SideRequest {
                    guard,
                    config,
                    of: crate::guard::BodyOf {
                        dialect: d,
                        route: matched.route.prefix.as_str(),
                        headers: &parts.headers,
                        query: query.as_deref(),
                        tenant: &tenant,
                    },
                    budget: &budget,
                };
                parse_side_copy(&request, &body)
            })
        })
        .await;
    Ok(Admitted {
        parts,
        path,
        query,
        matched,
        provider,
        body,
        body_read,
        tenant,
        side,
        parse_budget: budget,
        _body_budget: body_budget,
        trace: None,
    })
}

/// On a Bedrock route, the upstream URL with the path as the client sent it:
/// SigV4 signs the path's escapes (an SDK writes a model id's `:` as `%3A`,
/// and AWS checks the signature over the path it receives), so the decoded
/// spelling that is routed and judged would fail the signature. The path
/// was checked as safe already; it is kept only when it matches the same
/// route.
fn signed_path<'c>(
    config: &'c Config,
    raw: &str,
    query: Option<&str>,
    matched: route::Matched<'c>,
) -> route::Matched<'c> {
    if matched.route.provider != crate::config::Provider::Bedrock {
        return matched;
    }
    match route::resolve(&config.routes, raw, query) {
        Some(as_sent) if std::ptr::eq(as_sent.route, matched.route) => route::Matched {
            upstream_url: as_sent.upstream_url,
            ..matched
        },
        _ => matched,
    }
}

/// The request's normalised path and its route, or the answer that refuses
/// it: HTTP 400 for an unsafe path or a misrouted request, 404 without a
/// route.
fn routed<'c>(
    config: &'c Config,
    parts: &http::request::Parts,
    query: Option<&str>,
) -> Result<(String, route::Matched<'c>), Answered> {
    // What is routed, judged and forwarded is the normalised path.
    let path = match super::path::normalise(parts.uri.path()) {
        Ok(path) => path.into_owned(),
        Err(refused) => {
            let path = parts.uri.path().to_owned();
            let what = refused.describe();
            return Err(Box::new(counted(
                "-",
                "-",
                ProxyError::UnsafePath { path, what }.into_response_for(None),
            )));
        }
    };
    let Some(matched) = route::resolve(&config.routes, &path, query) else {
        let prefixes = config
            .routes
            .iter()
            .map(|r| r.prefix.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Box::new(counted(
            "-",
            "-",
            ProxyError::NoRoute { path, prefixes }.into_response_for(None),
        )));
    };
    if let Some(wanted) = route::misrouted(matched.route, &path, query, &parts.headers) {
        return Err(Box::new(misrouted(config, matched.route, wanted, &path)));
    }
    Ok((path, signed_path(config, parts.uri.path(), query, matched)))
}

/// Reads the request body under `server.max_request_bytes` and the client
/// body timeout, or answers (HTTP 413 past the cap; a client gone mid-body
/// is marked [`super::ClientGone`]).
async fn read_body(
    config: &Config,
    matched: &route::Matched<'_>,
    body: axum::body::Body,
    budget: &crate::budget::Reservation,
) -> Result<Bytes, Answered> {
    let read = body::read_limited(
        body,
        config.server.max_request_bytes,
        config.server.client_body_timeout,
        budget,
    )
    .await;
    read.map_err(|e| {
        let gone = matches!(e, ProxyError::BodyRead(_));
        let provider = Some(matched.route.provider);
        let mut response = counted(&matched.route.prefix, "-", e.into_response_for(provider));
        if gone {
            response.extensions_mut().insert(super::ClientGone);
        }
        Box::new(response)
    })
}

/// The HTTP 400 for a request that belongs to provider `wanted`, naming the
/// route to use: for a Vertex AI path (`…/publishers/…`), a route of that
/// provider to a Vertex host if there is one.
fn misrouted(config: &Config, route: &Route, wanted: Provider, path: &str) -> Response {
    // A client whose own path must reach the upstream unchanged (an SDK
    // at loopguard's root) needs a route that strips its prefix.
    let candidates: Vec<&Route> = config.routes.iter().filter(|r| r.provider == wanted).collect();
    let vertex = path.contains("/publishers/");
    let to_vertex = |r: &&&Route| {
        r.upstream
            .host_str()
            .is_some_and(|h| h.ends_with("aiplatform.googleapis.com"))
            == vertex
    };
    let hint = candidates
        .iter()
        .find(|r| r.strip_prefix && to_vertex(r))
        .or_else(|| candidates.iter().find(|r| r.strip_prefix))
        .or_else(|| candidates.first())
        .map(|r| format!(" (prefix {})", r.prefix))
        .unwrap_or_else(|| {
            format!(
                " (none is configured: add a [[routes]] entry with provider = \"{}\")",
                wanted.name()
            )
        });
    let response = ProxyError::Misrouted {
        wanted: wanted.name(),
        route: route.provider.name(),
        prefix: route.prefix.clone(),
        hint,
    }
    .into_response_for(Some(route.provider));
    counted(&route.prefix, "-", response)
}

/// What the side copy's parse needs to know of its request.
struct SideRequest<'r> {
    guard: &'r Guard,
    config: &'r Config,
    of: crate::guard::BodyOf<'r>,
    budget: &'r crate::budget::Reservation,
}

impl SideRequest<'_> {
    fn parse(&self, body: &[u8]) -> Result<Parsed, crate::dialect::DialectError> {
        self.guard
            .parse_request_within(self.config, &self.of, body, self.budget)
    }
}

/// Parses the request's side copy (through the guard, which reparses only
/// the history items the caller has not sent before) within the request's
/// parse-memory budget; failures, and a body past the budget even in its
/// lean form, are counted as fail-open and yield `None` (the body is
/// forwarded unchanged either way).
fn parse_side_copy(request: &SideRequest<'_>, body: &bytes::Bytes) -> Option<(bytes::Bytes, ParsedRequest)> {
    let limit = request.config.server.max_request_bytes;
    // A decoded copy is parse memory too: it may take what the budget has
    // room for, and holds its share until the request is done.
    let encoded = body::is_encoded(request.of.headers);
    let room = if encoded {
        limit.min(request.budget.room())
    } else {
        limit
    };
    let decoded = match body::decoded_for_parsing(request.of.headers, body, room) {
        Ok(decoded) if encoded && !request.budget.grow(decoded.len()) => {
            over_budget(decoded.len());
            return None;
        }
        Ok(decoded) => decoded,
        Err(body::DecodeError::TooLarge { .. }) if room < limit => {
            over_budget(body.len());
            return None;
        }
        Err(e) => {
            tracing::warn!(error = %e, "request body not decodable; no detection");
            crate::telemetry::fail_open("request_undecodable");
            return None;
        }
    };
    let parsed = request.parse(&decoded);
    // One lone surrogate escape would make every later request of the
    // conversation unparsable: parse a copy with it replaced.
    let retried = match &parsed {
        Err(crate::dialect::DialectError::Json(_)) => body::replace_lone_surrogates(&decoded)
            .map(bytes::Bytes::from)
            .and_then(|fixed| {
                let parsed = request.parse(&fixed).ok()?;
                tracing::debug!("request body parsed with its lone surrogate escapes replaced");
                Some((fixed, parsed))
            }),
        _ => None,
    };
    let (decoded, parsed) = match retried {
        Some((fixed, parsed)) => (fixed, Ok(parsed)),
        None => (decoded, parsed),
    };
    match parsed {
        Ok(Parsed::Full(parsed)) => Some((decoded, parsed)),
        Ok(Parsed::Lean(parsed)) => {
            metrics::counter!("loopguard_parse_lean_total").increment(1);
            tracing::debug!(
                bytes = decoded.len(),
                "request past its parse-memory budget: judged by call hashes"
            );
            Some((decoded, parsed))
        }
        Ok(Parsed::OverBudget) => {
            over_budget(decoded.len());
            None
        }
        Err(e) => {
            tracing::warn!(dialect = request.of.dialect.name(), error = %e, "request body not understood; no detection");
            crate::telemetry::fail_open("request_unparsable");
            None
        }
    }
}

/// A body past its parse-memory budget even in its lean form: counted as
/// `loopguard_fail_open_total{reason="request_parse_budget"}`, logged at
/// warn level once per process (then at debug level).
fn over_budget(bytes: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    metrics::counter!("loopguard_fail_open_total", "reason" => "request_parse_budget").increment(1);
    if WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::debug!(bytes, "request past its parse-memory budget; forwarded unjudged");
    } else {
        tracing::warn!(
            bytes,
            "request past its parse-memory budget (server.parse_budget_bytes, server.parse_budget_request_bytes); forwarded unjudged (logged once)"
        );
    }
}
