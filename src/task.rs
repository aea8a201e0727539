//! Background tasks: every task loopguard starts goes through [`spawn`] (or
//! [`spawn_on`] from outside the runtime), never a bare `tokio::spawn`
//! (`clippy.toml` forbids it), so that the tasks alive can be counted in one
//! place ([`live`]).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Counts a task alive from its start to its end (or its drop).
struct Alive;

impl Alive {
    fn start() -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Self
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tasks started through this module that have not ended yet.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Spawns `future` on the current tokio runtime, counted.
///
/// # Panics
/// As `tokio::spawn`: when called outside a tokio runtime.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let alive = Alive::start();
    #[expect(clippy::disallowed_methods, reason = "the one wrapper around tokio::spawn")]
    tokio::spawn(async move {
        let _alive = alive;
        future.await
    })
}

/// Spawns `future` on the runtime behind `handle`, counted.
pub fn spawn_on<F>(handle: &Handle, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let alive = Alive::start();
    #[expect(clippy::disallowed_methods, reason = "the one wrapper around Handle::spawn")]
    handle.spawn(async move {
        let _alive = alive;
        future.await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_is_counted_until_it_ends() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let before = live();
        let task = spawn(async move {
            let _ = rx.await;
        });
        assert!(live() > before);
        let _ = tx.send(());
        let _ = task.await;
        assert_eq!(live(), before);
    }
}
