//! Route matching: an incoming path to a configured route, its upstream URL
//! and, for paths of a known dialect, the dialect.

use http::HeaderMap;
use url::Url;

use crate::config::{Provider, Route};
use crate::dialect::Dialect;

/// A request matched to a route.
#[derive(Debug, Clone)]
pub struct Matched<'a> {
    /// The route that matched (the longest prefix).
    pub route: &'a Route,
    /// The full upstream URL: base + path (prefix removed with
    /// `strip_prefix`) + the query, unchanged.
    pub upstream_url: Url,
    /// The dialect when the path is one loopguard parses, and it belongs to
    /// the route's provider; `None` means "proxy unchanged, no detection".
    pub dialect: Option<Dialect>,
}

/// Finds the route for `path` (routes are sorted longest prefix first) and
/// builds the upstream URL.
///
/// A prefix matches whole path segments: `/v1` matches `/v1` and `/v1/…`,
/// never `/v1beta/…`.
pub fn resolve<'a>(routes: &'a [Route], path: &str, query: Option<&str>) -> Option<Matched<'a>> {
    let route = routes.iter().find(|r| segment_prefix(path, &r.prefix))?;
    let forwarded_path = if route.strip_prefix {
        &path[route.prefix.len()..]
    } else {
        path
    };
    let mut url = route.upstream.clone();
    let base = url.path().trim_end_matches('/').to_owned();
    let joined = if forwarded_path.is_empty() {
        if base.is_empty() { "/".to_owned() } else { base }
    } else {
        format!("{base}{forwarded_path}")
    };
    url.set_path(&joined);
    url.set_query(query);
    let dialect = Dialect::from_path(path).filter(|d| d.provider() == route.provider.name());
    Some(Matched {
        route,
        upstream_url: url,
        dialect,
    })
}

fn segment_prefix(path: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || path == prefix
        || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// A request that clearly belongs to another provider than its route's:
/// returns that provider, so the caller can answer HTTP 400 naming the base
/// URL to use instead of sending it to the wrong upstream.
///
/// "Clearly" means path and headers agree: an Anthropic Messages path with an
/// `anthropic-version` header (or `…/v1/messages` with Anthropic's `x-api-key`
/// header; OpenAI's thread messages live at `…/threads/{id}/messages` and
/// authenticate with a bearer token), or a Gemini method path with a Gemini
/// API key (`x-goog-api-key` or `?key=`), arriving on a route of another
/// provider. A Vertex AI model path names its publisher, which is enough on
/// its own (Vertex authenticates with a Google bearer token, no key header):
/// `…/publishers/anthropic/models/{m}:rawPredict` (or `:streamRawPredict`) is
/// Anthropic's, `…/publishers/google/models/{m}:generateContent` (or
/// `:streamGenerateContent`) Gemini's.
pub fn misrouted(route: &Route, path: &str, query: Option<&str>, headers: &HeaderMap) -> Option<Provider> {
    let path_trimmed = path.trim_end_matches('/');
    let dialect = Dialect::from_path(path);
    let vertex_claude = dialect == Some(Dialect::Anthropic) && path.contains(VERTEX_ANTHROPIC);
    let anthropic = vertex_claude
        || (path_trimmed.ends_with("/messages")
            && (headers.contains_key("anthropic-version")
                || (path_trimmed.ends_with("/v1/messages") && headers.contains_key("x-api-key"))));
    if anthropic && route.provider != Provider::Anthropic {
        return Some(Provider::Anthropic);
    }
    let gemini_key = headers.contains_key("x-goog-api-key")
        || query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("key=")));
    let vertex_gemini = path.contains(VERTEX_GOOGLE);
    if dialect.is_some_and(|d| d.provider() == Provider::Gemini.name())
        && (gemini_key || vertex_gemini)
        && route.provider != Provider::Gemini
    {
        return Some(Provider::Gemini);
    }
    None
}

/// The path segment that names Anthropic as a Vertex AI model's publisher.
const VERTEX_ANTHROPIC: &str = "/publishers/anthropic/models/";
/// The path segment that names Google as a Vertex AI model's publisher.
const VERTEX_GOOGLE: &str = "/publishers/google/models/";

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, provider: Provider, upstream: &str, strip: bool) -> Route {
        Route {
            prefix: prefix.to_owned(),
            provider,
            upstream: Url::parse(upstream).unwrap_or_else(|e| panic!("{e}")),
            strip_prefix: strip,
            escalation: None,
        }
    }

    fn routes() -> Vec<Route> {
        let mut r = vec![
            route("/v1", Provider::Openai, "https://api.openai.com", false),
            route(
                "/v1beta",
                Provider::Gemini,
                "https://generativelanguage.googleapis.com",
                false,
            ),
            route(
                "/gemini",
                Provider::Gemini,
                "https://generativelanguage.googleapis.com",
                true,
            ),
            route(
                "/anthropic",
                Provider::Anthropic,
                "https://api.anthropic.com/base/",
                true,
            ),
        ];
        r.sort_by_key(|x| std::cmp::Reverse(x.prefix.len()));
        r
    }

    #[test]
    fn prefix_matches_whole_segments_only() {
        let routes = routes();
        let m = resolve(&routes, "/v1beta/models/g:streamGenerateContent", Some("alt=sse"))
            .unwrap_or_else(|| panic!("no match"));
        assert_eq!(m.route.prefix, "/v1beta");
        assert_eq!(
            m.upstream_url.as_str(),
            "https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse"
        );
        assert_eq!(m.dialect, Some(Dialect::Gemini));
        assert!(resolve(&routes, "/v1x/chat/completions", None).is_none());
    }

    #[test]
    fn path_is_appended_unchanged_or_stripped() {
        let routes = routes();
        let m = resolve(&routes, "/v1/chat/completions", None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(
            m.upstream_url.as_str(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(m.dialect, Some(Dialect::OpenaiChat));
        let m = resolve(&routes, "/gemini/v1/models/g:generateContent", None)
            .unwrap_or_else(|| panic!("no match"));
        assert_eq!(
            m.upstream_url.as_str(),
            "https://generativelanguage.googleapis.com/v1/models/g:generateContent"
        );
        let m = resolve(&routes, "/anthropic/v1/messages", Some("beta=true"))
            .unwrap_or_else(|| panic!("no match"));
        assert_eq!(
            m.upstream_url.as_str(),
            "https://api.anthropic.com/base/v1/messages?beta=true"
        );
    }

    #[test]
    fn other_paths_and_foreign_dialects_get_no_detection() {
        let routes = routes();
        let m = resolve(&routes, "/v1/models", None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(m.dialect, None);
        // A Gemini method path on the OpenAI route is proxied without detection.
        let m = resolve(&routes, "/v1/models/g:generateContent", None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(m.dialect, None);
    }

    #[test]
    fn anthropic_request_on_the_openai_route_is_misrouted() {
        let routes = routes();
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-version", http::HeaderValue::from_static("2023-06-01"));
        let m = resolve(&routes, "/v1/messages", None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(
            misrouted(m.route, "/v1/messages", None, &headers),
            Some(Provider::Anthropic)
        );
        assert_eq!(misrouted(m.route, "/v1/messages", None, &HeaderMap::new()), None);
        let mut key_only = HeaderMap::new();
        key_only.insert("x-api-key", http::HeaderValue::from_static("sk-ant-x"));
        assert_eq!(
            misrouted(m.route, "/v1/messages", None, &key_only),
            Some(Provider::Anthropic),
            "Anthropic's key header alone tells it"
        );
        let thread = "/v1/threads/thread_1/messages";
        let m = resolve(&routes, thread, None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(
            misrouted(m.route, thread, None, &key_only),
            None,
            "OpenAI thread messages"
        );
        let m = resolve(&routes, "/v1/models/g:generateContent", Some("key=abc"))
            .unwrap_or_else(|| panic!("no match"));
        assert_eq!(
            misrouted(
                m.route,
                "/v1/models/g:generateContent",
                Some("key=abc"),
                &HeaderMap::new()
            ),
            Some(Provider::Gemini)
        );
    }

    /// Vertex AI paths name their publisher: Claude's on a Gemini route,
    /// Gemini's on an Anthropic route, are misrouted with no key header (a
    /// Google bearer token is all they carry); each on its own provider's
    /// route keeps its dialect.
    #[test]
    fn vertex_paths_are_told_apart_by_publisher() {
        let mut routes = routes();
        routes.push(route(
            "/vertex",
            Provider::Gemini,
            "https://us-central1-aiplatform.googleapis.com",
            true,
        ));
        routes.push(route(
            "/vertex-claude",
            Provider::Anthropic,
            "https://us-east5-aiplatform.googleapis.com",
            true,
        ));
        routes.sort_by_key(|x| std::cmp::Reverse(x.prefix.len()));
        let mut bearer = HeaderMap::new();
        bearer.insert("authorization", http::HeaderValue::from_static("Bearer ya29.x"));
        let claude =
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x:streamRawPredict";
        let gemini = "/v1/projects/p/locations/us-central1/publishers/google/models/g:streamGenerateContent";

        let path = format!("/vertex-claude{claude}");
        let m = resolve(&routes, &path, None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(m.dialect, Some(Dialect::Anthropic));
        assert_eq!(
            m.upstream_url.as_str(),
            format!("https://us-east5-aiplatform.googleapis.com{claude}")
        );
        assert_eq!(misrouted(m.route, &path, None, &bearer), None);

        let path = format!("/vertex{gemini}");
        let m = resolve(&routes, &path, Some("alt=sse")).unwrap_or_else(|| panic!("no match"));
        assert_eq!(m.dialect, Some(Dialect::Gemini));
        assert_eq!(misrouted(m.route, &path, Some("alt=sse"), &bearer), None);

        let path = format!("/vertex{claude}");
        let m = resolve(&routes, &path, None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(m.dialect, None, "Claude's path on the Gemini route");
        assert_eq!(
            misrouted(m.route, &path, None, &bearer),
            Some(Provider::Anthropic)
        );
        let path = format!("/vertex-claude{gemini}");
        let m = resolve(&routes, &path, None).unwrap_or_else(|| panic!("no match"));
        assert_eq!(misrouted(m.route, &path, None, &bearer), Some(Provider::Gemini));
    }
}
