//! Proxy workers: the proxy listener served by `server.workers` runtimes of
//! one worker thread each (one per core by default), each accepting on the
//! one proxy socket (a free worker takes the next connection) and each with
//! its own upstream client, hence its own
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

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot, watch};

use crate::guard::Guard;
use crate::listen::Limits;
use crate::proxy::offload::Offload;
use crate::reload::SharedConfig;

thread_local! {
    /// The index of the proxy worker whose runtime owns this thread.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The index of the proxy worker running the caller (`None` off the proxy
/// workers: the admin listener, tests). Set on every thread a worker's
/// runtime starts, including the thread that takes a worker's place during
/// `block_in_place`, so per-worker resources (the shared store's
/// connection, [`crate::state::Shared::connect_worker`]) are found from any
/// of them.
pub fn current() -> Option<usize> {
    CURRENT.with(Cell::get)
}

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

/// Binds the proxy socket on `addr` and returns the address bound with
/// `count` handles (at least 1) to that one socket, one per worker. One
/// socket, one accept queue: a connection goes to a worker that is
/// accepting, so a worker waiting at the connection cap never holds a
/// connection back while another could serve it (with a socket per worker,
/// `SO_REUSEPORT`, the kernel queues a connection on a fixed worker).
///
/// # Errors
/// The OS error when the socket cannot be bound or a handle duplicated.
pub fn bind(
    addr: SocketAddr,
    backlog: u32,
    count: usize,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    let socket = crate::listen::bind(addr, backlog)?.into_std()?;
    let bound = socket.local_addr()?;
    let mut listeners = Vec::with_capacity(count.max(1));
    for _ in 1..count.max(1) {
        listeners.push(socket.try_clone()?);
    }
    listeners.push(socket);
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
            .thread_name(format!("lg-worker-{i}"))
            .on_thread_start(move || CURRENT.with(|c| c.set(Some(i))))
            .enable_all()
            .build()?;
        let shared = shared.clone();
        let slots = Arc::clone(&slots);
        std::thread::Builder::new()
            .name(format!("lg-start-{i}"))
            .spawn(move || {
                // The accept loop is a task, so it runs on the worker thread
                // with the connections it spawns (block_on's future would
                // run on this thread instead).
                let served = runtime.spawn(serve_one(i, listener, shared, limits, slots, stop_rx, drain));
                // Dropped with the runtime when the worker stops.
                drop(runtime.spawn(anchor()));
                let _ = runtime.block_on(served);
                let _ = done_tx.send(());
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        workers.stops.push(stop_tx);
        workers.done.push(done_rx);
    }
    Ok(workers)
}

/// How often a worker's anchor timer fires ([`anchor`]): at most the
/// shortest timeout a request starts by default (`header_hold_ms`, 1.5 s).
const ANCHOR_PERIOD: Duration = Duration::from_secs(1);

/// Keeps a timer due within [`ANCHOR_PERIOD`] pending on the worker's
/// runtime, so that the timers a request starts (the client header read's
/// timeout, `first_byte_timeout_secs`, `header_hold_ms`) never fall before
/// the time driver's next wake-up. tokio (1.54) wakes its I/O driver
/// (an eventfd write, then one more `epoll_wait`) whenever a timer is
/// registered earlier than that wake-up, even from the driver's own thread
/// while it runs tasks (tokio-rs/tokio#5207; the open fix, #8383, covers the
/// current-thread runtime only, and the workers need the multi-thread one
/// for `block_in_place`). Without the anchor, an idle worker has no timer
/// pending, so every request's first timer woke it once more. The cost: a
/// worker wakes about twice a second (the wheel moves the timer from its
/// 64 ms level to its 1 ms level before it fires) while it runs, traffic or
/// not. A timeout configured under a second still wakes the driver when it
/// is registered.
async fn anchor() {
    let mut tick = tokio::time::interval(ANCHOR_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

async fn serve_one(
    index: usize,
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
    if let Some(store) = shared.guard.shared() {
        store.connect_worker(index);
    }
    let app = match app(&shared) {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %e, "a proxy worker cannot build its upstream client");
            return;
        }
    };
    crate::listen::serve_with_slots(listener, app, limits, slots, stop, drain).await;
}

/// The proxy app over shared sessions, configuration and offload pool,
/// with upstream clients (and connection pools) of its own: one per
/// proxy worker.
///
/// # Errors
/// When the upstream client cannot be built.
pub fn app(shared: &Shared) -> Result<axum::Router, reqwest::Error> {
    let connect_timeout = shared.config.load().server.connect_timeout;
    let client = crate::http_client::client(connect_timeout)?;
    let pool = (!crate::http_client::plain_http_proxied(|k| std::env::var_os(k)))
        .then(|| crate::upstream_pool::Pool::new(connect_timeout));
    let state = Arc::new(crate::proxy::ProxyState {
        config: Arc::clone(&shared.config),
        client,
        pool,
        guard: Arc::clone(&shared.guard),
        offload: Arc::clone(&shared.offload),
    });
    Ok(axum::Router::new()
        .fallback(crate::proxy::handle)
        .with_state(state))
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
