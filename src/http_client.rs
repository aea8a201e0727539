//! The upstream HTTP client: rustls with the `ring` provider, connection
//! pooling, a connect timeout, no redirects, no automatic decompression, and
//! the standard `HTTPS_PROXY` / `NO_PROXY` variables honoured. Plain-HTTP
//! upstreams go through [`crate::upstream_pool`] instead, unless a variable
//! sends plain HTTP through a proxy ([`plain_http_proxied`]).

use std::time::Duration;

/// Installs rustls' `ring` crypto provider for the process (idempotent).
pub fn install_crypto_provider() {
    // An error only means a provider is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds the client used for every upstream request.
///
/// # Errors
/// When the TLS backend cannot be initialised.
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
}

/// The variables that send plain-HTTP requests through a proxy (reqwest
/// honours them): while one is set and not empty, plain-HTTP upstreams go
/// through reqwest too, not [`crate::upstream_pool`]. `NO_PROXY` is not
/// consulted: with a proxy variable set, every plain-HTTP upstream takes
/// reqwest's path, which applies it.
pub const PLAIN_HTTP_PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// Whether plain-HTTP requests may go through a proxy: one of
/// [`PLAIN_HTTP_PROXY_VARS`] is set and not empty, as `var` reads them.
pub fn plain_http_proxied(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    PLAIN_HTTP_PROXY_VARS
        .iter()
        .any(|k| var(k).is_some_and(|v| !v.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_variable_sends_plain_http_through_reqwest() {
        assert!(!plain_http_proxied(|_| None));
        assert!(!plain_http_proxied(|_| Some("".into())));
        assert!(plain_http_proxied(
            |k| (k == "http_proxy").then(|| "http://p:3128".into())
        ));
        assert!(plain_http_proxied(
            |k| (k == "ALL_PROXY").then(|| "socks5://p".into())
        ));
        assert!(!plain_http_proxied(
            |k| (k == "HTTPS_PROXY").then(|| "http://p:3128".into())
        ));
    }
}
