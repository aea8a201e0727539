//! Unit tests of configuration loading and validation.
use super::*;

/// Every error `text` gets on load, rendered as `check-config` prints it
/// (panics when it loads).
fn errors_of(text: &str) -> Vec<String> {
    let err = load_str(text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected errors"));
    err.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn default_config_is_valid_and_routes_longest_prefix_first() {
    let loaded = load_str(DEFAULT_TOML, "<default>").unwrap_or_else(|e| panic!("{e}"));
    let prefixes: Vec<&str> = loaded.config.routes.iter().map(|r| r.prefix.as_str()).collect();
    assert!(prefixes.contains(&"/v1") && prefixes.contains(&"/v1beta") && prefixes.contains(&"/gemini"));
    let lens: Vec<usize> = prefixes.iter().map(|p| p.len()).collect();
    let mut sorted = lens.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(lens, sorted);
}

#[test]
fn every_problem_is_reported_with_its_key_path() {
    let text = r#"
[server]
listen = "nowhere"
bypass_header = "bad header"

[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "https://api.openai.com"

[[routes]]
prefix = "/x"
provider = "acme"
upstream = "htp:/x"
"#;
    assert_eq!(
        errors_of(text),
        vec![
            "server.listen: \"nowhere\" is not a socket address (host:port, e.g. 127.0.0.1:8080)",
            "server.bypass_header: \"bad header\" is not a valid header name",
            "routes[1].provider: \"acme\" is not one of \"openai\", \"gemini\", \"anthropic\", \"ollama\", \"bedrock\"",
            "routes[1].upstream: \"htp:/x\" is not a valid URL",
        ]
    );
}

#[test]
fn the_two_listeners_need_different_addresses() {
    let text = DEFAULT_TOML.replace(
        "admin_listen = \"127.0.0.1:9090\"",
        "admin_listen = \"127.0.0.1:8080\"",
    );
    let err = load_str(&text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(err.to_string().contains("server.admin_listen"), "{err}");
}

#[test]
fn every_unknown_key_is_reported_at_once_with_its_key_path() {
    let text = "[server]\nlisten_addr = \"x\"\n\n[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"https://a\"\nstrip = true\n\n[loop_detection.identical_call]\nwarn = 3\n\n[loop_detection.bogus]\nx = 1\n";
    let err = load_str(text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected errors"));
    let paths: Vec<&str> = err.errors.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "server.listen_addr",
            "routes[0].strip",
            "loop_detection.identical_call.warn",
            "loop_detection.bogus"
        ],
        "{err}"
    );
    assert!(err.errors[0].message.contains("listen_addr"), "{err}");
    assert!(err.errors[1].message.contains("strip"), "{err}");
}

#[test]
fn the_removed_fail_mode_is_an_unknown_key() {
    let err = load_str("[server]\nfail_mode = \"open\"\n", "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(
        err.to_string()
            .contains("server.fail_mode: unknown key `fail_mode`"),
        "{err}"
    );
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let err = load_str("[server]\nlisten_addr = \"x\"\n", "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(err.to_string().contains("listen_addr"), "{err}");
}

#[test]
fn environment_overrides_listen_and_upstreams() {
    let mut config = load_str(DEFAULT_TOML, "<default>")
        .unwrap_or_else(|e| panic!("{e}"))
        .config;
    apply_env(&mut config, |k| match k {
        "LOOPGUARD_LISTEN" => Some("0.0.0.0:9999".to_owned()),
        "LOOPGUARD_GEMINI_UPSTREAM" => Some("http://127.0.0.1:1234".to_owned()),
        _ => None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.server.listen.port(), 9999);
    for r in &config.routes {
        if r.provider == Provider::Gemini {
            assert_eq!(r.upstream.as_str(), "http://127.0.0.1:1234/");
        }
    }
}

/// The cap on request bodies in flight must hold one body of the largest
/// size accepted.
#[test]
fn the_bodies_in_flight_hold_at_least_one_largest_body() {
    let config = load_str(DEFAULT_TOML, "t.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .config;
    assert_eq!(config.server.max_request_bytes_in_flight, 128 << 20);
    let text = DEFAULT_TOML.replace(
        "max_request_bytes_in_flight = 134217728",
        "max_request_bytes_in_flight = 1048576",
    );
    let err = load_str(&text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(
        err.to_string().contains(
            "server.max_request_bytes_in_flight: 1048576 is under server.max_request_bytes (67108864)"
        ),
        "{err}"
    );
}

/// The parse-memory budget: one request's share must fit in the total, and
/// neither may be 0; the defaults judge a 20 MB history of 5,000 calls in full.
#[test]
fn the_parse_budget_of_one_request_fits_in_the_total() {
    let config = load_str(DEFAULT_TOML, "t.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .config;
    assert_eq!(config.server.parse_budget_bytes, 128 << 20);
    assert_eq!(config.server.parse_budget_request_bytes, 96 << 20);
    let text = DEFAULT_TOML.replace(
        "parse_budget_request_bytes = 100663296",
        "parse_budget_request_bytes = 268435456",
    );
    let err = load_str(&text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(
        err.to_string()
            .contains("server.parse_budget_request_bytes: 268435456 is over server.parse_budget_bytes"),
        "{err}"
    );
    let text = DEFAULT_TOML.replace("parse_budget_bytes = 134217728", "parse_budget_bytes = 0");
    let err = load_str(&text, "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(
        err.to_string()
            .contains("server.parse_budget_bytes: must be greater than 0"),
        "{err}"
    );
}

/// A session TTL of 0 is refused (sessions were forgotten at once: a
/// new-user test); an upstream of another scheme says so.
#[test]
fn a_zero_session_ttl_and_a_non_http_upstream_are_refused() {
    let text = r#"
[[routes]]
prefix = "/v1"
provider = "openai"
upstream = "ftp://example.com"

[sessions]
idle_ttl_secs = 0
"#;
    assert_eq!(
        errors_of(text),
        vec![
            "routes[0].upstream: \"ftp://example.com\" is not an http:// or https:// URL",
            "sessions.idle_ttl_secs: must be at least 1, got 0 (a session would be forgotten before its next request)",
        ]
    );
}

/// The parse cache's size: MiB, 0 allowed (keeps none), a typo's size
/// refused.
#[test]
fn the_parse_cache_size_is_read_in_mib_and_bounded() {
    let with = |mib: u64| {
        format!(
            "[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"http://127.0.0.1:1\"\n[sessions]\nparse_cache_mib = {mib}\n"
        )
    };
    let loaded = load_str(&with(512), "t.toml").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(loaded.config.sessions.parse_cache_bytes, 512 << 20);
    let loaded = load_str(&with(0), "t.toml").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(loaded.config.sessions.parse_cache_bytes, 0);
    let err = load_str(&with(1 << 30), "t.toml")
        .err()
        .unwrap_or_else(|| panic!("expected errors"));
    assert!(
        err.errors.iter().any(|e| e
            .to_string()
            .starts_with("sessions.parse_cache_mib: must be at most")),
        "{err:?}"
    );
}

/// An upstream whose path ends with the prefix the route keeps gets a
/// notice: the prefix would be doubled (`/v1/v1/…`). Its twin, the same
/// upstream with `strip_prefix`, does not.
#[test]
fn an_upstream_that_doubles_the_prefix_gets_a_notice() {
    let route = |strip: bool| {
        format!(
            "[[routes]]\nprefix = \"/v1\"\nprovider = \"openai\"\nupstream = \"http://127.0.0.1:8000/v1/\"\nstrip_prefix = {strip}\n"
        )
    };
    let doubled = load_str(&route(false), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        doubled
            .notices
            .iter()
            .any(|n| n.path == "routes[0].upstream" && n.message.contains("goes to /v1/v1/chat/completions")),
        "{:?}",
        doubled.notices
    );
    let stripped = load_str(&route(true), "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert!(stripped.notices.is_empty(), "{:?}", stripped.notices);
}
