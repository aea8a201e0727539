//! The upstream HTTP client: rustls with the `ring` provider, connection
//! pooling, a connect timeout, no redirects, no automatic decompression, and
//! the standard `HTTPS_PROXY` / `NO_PROXY` variables honoured.

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
