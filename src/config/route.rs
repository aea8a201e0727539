//! `[[routes]]`: path prefixes, each with its provider, upstream and
//! escalation target (the `escalate_*` keys), validated into [`Route`]s.

use url::Url;

use super::escalate::RouteEscalation;
use super::problems::Problems;
use super::raw::{RawConfig, RawRoute};

/// The provider behind a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI or any OpenAI-compatible server.
    Openai,
    /// Google Gemini (AI Studio or Vertex).
    Gemini,
    /// Anthropic Messages.
    Anthropic,
    /// Ollama's native API (`/api/chat`, `/api/generate`).
    Ollama,
    /// Amazon Bedrock's runtime API (Claude through `InvokeModel`).
    Bedrock,
}

impl Provider {
    /// The name used in config, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Gemini => "gemini",
            Self::Anthropic => "anthropic",
            Self::Ollama => "ollama",
            Self::Bedrock => "bedrock",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "openai" => Some(Self::Openai),
            "gemini" => Some(Self::Gemini),
            "anthropic" => Some(Self::Anthropic),
            "ollama" => Some(Self::Ollama),
            "bedrock" => Some(Self::Bedrock),
            _ => None,
        }
    }
}

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix without a trailing slash (`""` for the root).
    pub prefix: String,
    /// Provider of the upstream.
    pub provider: Provider,
    /// Upstream base URL.
    pub upstream: Url,
    /// Remove the prefix before forwarding.
    pub strip_prefix: bool,
    /// Where the `escalate` action sends a looping session (`None`: the
    /// route has no escalation; the action then acts as `warn`).
    pub escalation: Option<RouteEscalation>,
}

/// `[[routes]]` validated, longest prefix first: each route's provider,
/// prefix and upstream, no prefix twice, and their escalation targets.
pub(super) fn validate_routes(raw: &RawConfig, problems: &mut Problems) -> Vec<Route> {
    if raw.routes.is_empty() {
        problems.push("routes", "at least one [[routes]] entry is needed");
    }
    let mut routes: Vec<Route> = Vec::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let base = format!("routes[{i}]");
        let provider = Provider::parse(&r.provider).unwrap_or_else(|| {
            problems.push(
                format!("{base}.provider"),
                format!(
                    "{:?} is not one of \"openai\", \"gemini\", \"anthropic\", \"ollama\", \"bedrock\"",
                    r.provider
                ),
            );
            Provider::Openai
        });
        if !r.prefix.is_empty() && !r.prefix.starts_with('/') {
            problems.push(
                format!("{base}.prefix"),
                format!("{:?} must start with '/'", r.prefix),
            );
        }
        let prefix = r.prefix.trim_end_matches('/').to_owned();
        let upstream = upstream_url(r, &base, problems);
        // The request path is appended to the upstream's: an upstream that
        // already ends with the prefix it keeps doubles it.
        if let Some(url) = &upstream {
            let path = url.path().trim_end_matches('/');
            if !r.strip_prefix && !prefix.is_empty() && path.ends_with(&prefix) {
                problems.notice(
                    format!("{base}.upstream"),
                    format!(
                        "its path ends with the route's prefix {prefix:?} and strip_prefix is false: a request for {prefix}/chat/completions goes to {path}{prefix}/chat/completions (drop the prefix from the upstream, or set strip_prefix = true)"
                    ),
                );
            }
        }
        if routes.iter().any(|other| other.prefix == prefix) {
            problems.push(
                format!("{base}.prefix"),
                format!("{:?} is used by an earlier route", r.prefix),
            );
        }
        if provider == Provider::Bedrock && r.escalate_model.is_some() {
            // Escalating rewrites the request, which the client signed.
            problems.push(
                format!("{base}.escalate_model"),
                "a bedrock route cannot escalate: its requests are SigV4-signed by the client",
            );
        }
        if let Some(upstream) = upstream {
            routes.push(Route {
                prefix,
                provider,
                upstream,
                strip_prefix: r.strip_prefix,
                escalation: escalation(r, &base, problems),
            });
        }
    }
    check_targets(&routes, &raw.routes, problems);
    routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
    routes
}

/// A route's `upstream`: an http:// or https:// URL with a host (`base` is
/// the route's key path).
fn upstream_url(r: &RawRoute, base: &str, problems: &mut Problems) -> Option<Url> {
    match Url::parse(&r.upstream) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Some(url),
        Ok(url) if url.host().is_some() => {
            problems.push(
                format!("{base}.upstream"),
                format!("{:?} is not an http:// or https:// URL", r.upstream),
            );
            None
        }
        _ => {
            problems.push(
                format!("{base}.upstream"),
                format!("{:?} is not a valid URL", r.upstream),
            );
            None
        }
    }
}

/// Validates a route's `escalate_*` keys (`base` is its key path).
fn escalation(raw: &RawRoute, base: &str, problems: &mut Problems) -> Option<RouteEscalation> {
    let Some(model) = raw.escalate_model.as_ref() else {
        for (key, set) in [
            ("escalate_upstream", raw.escalate_upstream.is_some()),
            ("escalate_credential_env", raw.escalate_credential_env.is_some()),
        ] {
            if set {
                problems.push(format!("{base}.{key}"), "needs escalate_model");
            }
        }
        return None;
    };
    if model.trim().is_empty() || model.contains(['/', ':', '?', '#']) {
        problems.push(
            format!("{base}.escalate_model"),
            format!("{model:?} is not a model name"),
        );
    }
    match (&raw.escalate_upstream, &raw.escalate_credential_env) {
        (Some(_), None) => problems.push(
            format!("{base}.escalate_credential_env"),
            "escalate_upstream needs its own credential: name the environment variable holding it",
        ),
        (None, Some(_)) => problems.push(
            format!("{base}.escalate_credential_env"),
            "only with escalate_upstream (on the same route the client's credential is used)",
        ),
        _ => {}
    }
    Some(RouteEscalation {
        model: model.clone(),
        upstream: raw
            .escalate_upstream
            .as_ref()
            .map(|p| p.trim_end_matches('/').to_owned()),
        credential_env: raw.escalate_credential_env.clone(),
    })
}

/// Checks that every `escalate_upstream` names another route of the same
/// provider; an unset credential variable is a notice (escalation then acts
/// as `warn` until it is set).
fn check_targets(routes: &[Route], raw: &[RawRoute], problems: &mut Problems) {
    for (i, r) in raw.iter().enumerate() {
        let Some(prefix) = r.escalate_upstream.as_deref().map(|p| p.trim_end_matches('/')) else {
            continue;
        };
        let own = r.prefix.trim_end_matches('/');
        let path = format!("routes[{i}].escalate_upstream");
        match routes.iter().find(|t| t.prefix == prefix) {
            None => problems.push(path, format!("{prefix:?} is not the prefix of a route")),
            Some(_) if prefix == own => problems.push(path, "names this route itself; leave it out"),
            Some(t) if Some(t.provider) != routes.iter().find(|x| x.prefix == own).map(|x| x.provider) => {
                problems.push(
                    path,
                    format!(
                        "{prefix:?} is a route of another provider ({})",
                        t.provider.name()
                    ),
                );
            }
            Some(_) => {}
        }
        if let Some(var) = &r.escalate_credential_env {
            if std::env::var_os(var).is_none() {
                problems.notice(
                    format!("routes[{i}].escalate_credential_env"),
                    format!(
                        "the environment variable {var} is not set: escalation on this route acts as warn"
                    ),
                );
            }
        }
    }
}
