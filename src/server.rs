//! Listeners: the proxy (every path goes to [`crate::proxy::handle`]) and the
//! admin listener (see [`crate::admin`]), with graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::admin::{self, AdminState};
use std::path::PathBuf;

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::guard::Guard;
use crate::proxy;
use crate::reload::{Reloader, SharedConfig};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The upstream client could not be built.
    #[error("cannot build the upstream client: {0}")]
    Client(#[from] reqwest::Error),
    /// Serving failed.
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// The proxy app for a configuration and guard (exposed for tests and benchmarks).
///
/// # Errors
/// When the upstream client cannot be built.
pub fn proxy_app(config: SharedConfig, guard: Guard) -> Result<Router, reqwest::Error> {
    crate::workers::app(&crate::workers::Shared {
        config,
        guard: Arc::new(guard),
        offload: Arc::new(proxy::offload::Offload::for_this_machine()),
    })
}

fn bind(addr: SocketAddr, backlog: u32) -> Result<TcpListener, ServeError> {
    crate::listen::bind(addr, backlog).map_err(|source| ServeError::Bind { addr, source })
}

/// Binds both listeners, prints one line `loopguard listening proxy=ADDR
/// admin=ADDR` on stdout (the actual ports, useful with port 0), and serves
/// until SIGTERM or Ctrl-C; then stops accepting and lets in-flight requests
/// finish for up to `server.drain_timeout_secs`.
///
/// # Errors
/// [`ServeError`] when a listener cannot be bound or serving fails.
pub async fn serve(
    config: Config,
    config_path: Option<PathBuf>,
    metrics: Option<PrometheusHandle>,
) -> Result<(), ServeError> {
    // Traces: off without an endpoint; a failure to start them never stops
    // the proxy (fail open, logged).
    if let Err(e) = crate::trace::install(&config.telemetry) {
        tracing::error!(error = %e, "traces: not exporting");
    }
    let config = Arc::new(config);
    let shared: SharedConfig = Arc::new(ArcSwap::from(Arc::clone(&config)));
    let reloader = Reloader::new(config_path, Arc::clone(&shared));
    let limits = crate::listen::Limits {
        backlog: config.server.listen_backlog,
        max_connections: config.server.max_connections,
        header_timeout: config.server.client_header_timeout,
    };
    crate::listen::raise_fd_limit(limits.max_connections);
    let workers = config.server.worker_count();
    let listen = config.server.listen;
    let (proxy_addr, proxy_listeners) = crate::workers::bind(listen, limits.backlog, workers)
        .map_err(|source| ServeError::Bind { addr: listen, source })?;
    let admin_listener = bind(config.server.admin_listen, 128)?;
    let admin_addr = admin_listener.local_addr()?;
    let ready = Arc::new(AtomicBool::new(false));
    let (shared_state, admin) = apps(&config, &shared, metrics, &ready, &reloader)?;
    crate::task::spawn(reload_on_sighup(reloader));

    // The admin listener outlives the proxy's drain, so /readyz answers 503
    // (and /metrics stays readable) while in-flight streams finish.
    let (admin_stop_tx, admin_stop_rx) = tokio::sync::watch::channel(false);
    let drain = config.server.drain_timeout;
    let proxy_workers = crate::workers::start(proxy_listeners, &shared_state, limits, drain)?;
    let admin_limits = crate::listen::Limits {
        backlog: 128,
        max_connections: 256,
        ..limits
    };
    let admin_task = crate::task::spawn(crate::listen::serve(
        admin_listener,
        admin,
        admin_limits,
        admin_stop_rx,
        std::time::Duration::from_secs(1),
    ));
    ready.store(true, Ordering::Release);
    println!("loopguard listening proxy={proxy_addr} admin={admin_addr}");
    tracing::info!(%proxy_addr, %admin_addr, routes = config.routes.len(), workers = proxy_workers.len(), "loopguard listening");
    warn_if_admin_exposed(&config, admin_addr);

    shutdown_signal().await;
    tracing::info!(
        drain_secs = config.server.drain_timeout.as_secs(),
        "shutting down: draining in-flight requests"
    );
    ready.store(false, Ordering::Release);
    // The drain timeout is applied (and reported) by each worker's listener.
    proxy_workers.stop().await;
    // The spans of the requests just drained go out before the process ends.
    crate::trace::flush(config.telemetry.export_timeout).await;
    let _ = admin_stop_tx.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), admin_task).await;
    Ok(())
}

/// The proxy's shared state (its guard, the offload pool) and the admin
/// app. Fails, before anything listens, when the upstream client cannot be
/// built.
fn apps(
    config: &Config,
    shared: &SharedConfig,
    metrics: Option<PrometheusHandle>,
    ready: &Arc<AtomicBool>,
    reloader: &Reloader,
) -> Result<(crate::workers::Shared, Router), ServeError> {
    let guard = Guard::new(config);
    let store = Arc::clone(guard.store());
    let state_store = guard.shared().cloned();
    let shared_state = crate::workers::Shared {
        config: Arc::clone(shared),
        guard: Arc::new(guard),
        offload: Arc::new(proxy::offload::Offload::for_this_machine()),
    };
    // Fails here, before anything listens, when the client cannot be built.
    drop(crate::workers::app(&shared_state)?);
    let admin = admin::app(AdminState {
        metrics,
        ready: Arc::clone(ready),
        store,
        shared: state_store,
        config: Arc::clone(shared),
        reloader: reloader.clone(),
    });
    Ok((shared_state, admin))
}

/// Warns when the admin listener is reachable from other hosts.
fn warn_if_admin_exposed(config: &Config, admin_addr: SocketAddr) {
    if !admin_addr.ip().is_loopback() {
        tracing::warn!(
            %admin_addr,
            allowed_hosts = ?config.server.admin_allowed_hosts,
            "the admin listener is not on loopback: the session API (tool names, redacted arguments) is readable by anyone who reaches it; keep it on loopback or firewall it"
        );
    }
}

async fn reload_on_sighup(reloader: Reloader) {
    #[cfg(unix)]
    {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: reload only through POST /admin/reload");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            let _ = reloader.reload();
        }
    }
    #[cfg(not(unix))]
    drop(reloader);
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
