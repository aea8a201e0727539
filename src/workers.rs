//! Proxy workers: the proxy listener served by `server.workers` runtimes of
//! one worker thread each (one per core by default), each with its own
//! listener on the proxy address (`SO_REUSEPORT`: the kernel spreads new
//! connections over them) and its own upstream client, hence its own
//! connection pool. A request therefore stays on one thread from accept to
//! the upstream and back: the server connection task, the handler and the
//! upstream connection task wake each other without crossing threads (a
//! third of the samples of a multi-threaded runtime's profile were such
//! hand-offs, issue #14).
//!
//! Sessions, the configuration and the bounded pool for large bodies are
//! shared by all workers. A large body's parse and judgement still leave the
//! worker (`block_in_place` hands the worker's other connections to a fresh
//! thread meanwhile, see [`crate::proxy::offload`]), so one big request
//! never stalls the connections that share its worker.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot, watch};

use crate::guard::Guard;
use crate::listen::Limits;
use crate::proxy::offload::Offload;
use crate::reload::SharedConfig;

/// What every worker shares.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The configuration in force.
    pub config: SharedConfig,
    /// Sessions and detectors.
    pub guard: Arc<Guard>,
    /// The bounded pool for large bodies.
    pub offload: Arc<Offload>,
}

/// The running workers (see [`start`]).
#[derive(Debug)]
pub struct Workers {
    stops: Vec<watch::Sender<bool>>,
    done: Vec<oneshot::Receiver<()>>,
}

/// Binds `count` listeners (at least 1) on `addr` with `SO_REUSEPORT` and
/// returns them with the address bound (its port chosen by the first when
/// `addr` has port 0).
///
/// # Errors
/// The OS error of the first socket that cannot be bound.
pub fn bind(
    addr: SocketAddr,
    backlog: u32,
    count: usize,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    let first = crate::listen::bind_shared(addr, backlog)?;
    let bound = first.local_addr()?;
    let mut listeners = vec![first.into_std()?];
    for _ in 1..count.max(1) {
        listeners.push(crate::listen::bind_shared(bound, backlog)?.into_std()?);
    }
    Ok((bound, listeners))
}

/// Starts one worker per listener: a runtime with one worker thread that
/// serves the proxy on that listener until [`Workers::stop`].
///
/// # Errors
/// When a runtime or its thread cannot be started.
pub fn start(
    listeners: Vec<std::net::TcpListener>,
    shared: &Shared,
    limits: Limits,
    drain: Duration,
) -> std::io::Result<Workers> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut workers = Workers {
        stops: Vec::new(),
        done: Vec::new(),
    };
    for (i, listener) in listeners.into_iter().enumerate() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, done_rx) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("loopguard-worker-{i}"))
            .enable_all()
            .build()?;
        let shared = shared.clone();
        let slots = Arc::clone(&slots);
        std::thread::Builder::new()
            .name(format!("loopguard-worker-{i}-main"))
            .spawn(move || {
                // The accept loop is a task, so it runs on the worker thread
                // with the connections it spawns (block_on's future would
                // run on this thread instead).
                let served = runtime.spawn(serve_one(listener, shared, limits, slots, stop_rx, drain));
                let _ = runtime.block_on(served);
                let _ = done_tx.send(());
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        workers.stops.push(stop_tx);
        workers.done.push(done_rx);
    }
    Ok(workers)
}

async fn serve_one(
    listener: std::net::TcpListener,
    shared: Shared,
    limits: Limits,
    slots: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(error = %e, "a proxy worker cannot take its listener");
            return;
        }
    };
    let app = match crate::server::proxy_app_shared(&shared) {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %e, "a proxy worker cannot build its upstream client");
            return;
        }
    };
    crate::listen::serve_with_slots(listener, app, limits, slots, stop, drain).await;
}

impl Workers {
    /// How many workers run.
    pub fn len(&self) -> usize {
        self.stops.len()
    }

    /// No worker runs.
    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Stops accepting on every worker and waits until each has drained
    /// (each applies the drain timeout itself).
    pub async fn stop(self) {
        for stop in &self.stops {
            let _ = stop.send(true);
        }
        for done in self.done {
            let _ = done.await;
        }
    }
}
