//! Accepting clients: the listen socket (its backlog), the file-descriptor
//! limit, the connection cap, the header read timeout, accept failures
//! logged, and graceful shutdown; each connection is served by hyper-util's
//! HTTP/1 + HTTP/2 builder.
//!
//! The numbers (defaults in `[server]`): `listen_backlog` 4096 (the kernel
//! caps it at `net.core.somaxconn`), `max_connections` 4096 (past it, new
//! connections wait in the backlog), `client_header_timeout_secs` 30. Each
//! proxied stream holds two descriptors (client and upstream), so at start
//! the soft `RLIMIT_NOFILE` is raised to the hard limit, and a warning says
//! when that is below what `max_connections` needs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{Semaphore, watch};

/// How a listener accepts and serves connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Listen backlog (pending connections the kernel queues).
    pub backlog: u32,
    /// Most connections served at once.
    pub max_connections: usize,
    /// Longest time a client may take to send a request's headers.
    pub header_timeout: Duration,
}

/// Descriptors kept free of connections (listeners, logs, the upstream pool's idle sockets).
const SPARE_FDS: u64 = 256;

/// Binds `addr` with `backlog` (`SO_REUSEADDR` set, as the standard library does).
///
/// # Errors
/// The OS error when the socket cannot be created, bound or put to listen.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Raises the soft file-descriptor limit to the hard one and logs it; warns
/// when it is below two descriptors per connection allowed, plus spares.
pub fn raise_fd_limit(max_connections: usize) {
    let wanted = (max_connections as u64)
        .saturating_mul(2)
        .saturating_add(SPARE_FDS);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < wanted => tracing::warn!(
            fd_limit = limit,
            wanted,
            "the file-descriptor limit is below two per connection (server.max_connections); raise the hard limit (ulimit -Hn) or lower max_connections"
        ),
        Ok(limit) => tracing::info!(fd_limit = limit, "file-descriptor limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the file-descriptor limit"),
    }
}

/// Serves `app` on `listener` until `stop` turns true, then stops accepting
/// and waits up to `drain` for the connections in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    serve_with_slots(listener, app, limits, slots, stop, drain).await;
}

/// [`serve`] with the connection cap's `slots` shared with other listeners
/// (the proxy workers share one `max_connections`).
pub async fn serve_with_slots(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let mut warned_full = false;
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(permit) = permit else { break };
        if slots.available_permits() == 0 && !warned_full {
            warned_full = true;
            tracing::warn!(
                max_connections = limits.max_connections,
                "connection cap reached: new connections wait in the listen backlog"
            );
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(e) => {
                // EMFILE / ENFILE and the like: the connection stays queued; try again shortly.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
        let conn = graceful.watch(conn.into_owned());
        crate::task::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!("drain timeout reached; closing remaining connections");
    }
}
