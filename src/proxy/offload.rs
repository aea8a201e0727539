//! Heavy work off the async workers: the parse and request-time judgement
//! of a large body (over `server.offload_body_bytes`, default 256 KiB) run
//! as blocking work, at most [`Offload::permits`] at a time, so `/healthz`,
//! small requests and streams keep being served while a 50 MB history with
//! 100k tool calls is processed. Small bodies (the common case) are handled
//! inline: a thread hand-off would cost more than their parse.
//!
//! Heavy steps of an upstream's answer (a whole JSON answer or one chunk
//! over that size, a batch of more than a thousand tool calls) run as
//! blocking work too, at once ([`blocking_now`]).
//!
//! The blocking work runs through `tokio::task::block_in_place`: the worker
//! thread running the request becomes a blocking thread and the runtime
//! hands its other tasks to a fresh worker, so the number of threads
//! serving async tasks never drops. Waiting for a permit is asynchronous.

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Semaphore;

/// The bounded pool for large bodies.
#[derive(Debug)]
pub struct Offload {
    permits: Semaphore,
    count: usize,
}

impl Offload {
    /// A pool running at most `permits` (at least 1) heavy jobs at once.
    pub fn new(permits: usize) -> Self {
        let count = permits.max(1);
        Self {
            permits: Semaphore::new(count),
            count,
        }
    }

    /// A pool sized for this machine: one job less than its cores (at
    /// least 1), so one core stays for the async workers.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self::new(cores.saturating_sub(1))
    }

    /// How many heavy jobs may run at once.
    pub fn permits(&self) -> usize {
        self.count
    }

    /// Runs `work`: inline when not `heavy`; else, once a permit is free,
    /// as blocking work (inline on a current-thread runtime, which has no
    /// other worker to hand its tasks to).
    pub async fn run<T>(&self, heavy: bool, work: impl FnOnce() -> T) -> T {
        if !heavy {
            return work();
        }
        let _permit = self.permits.acquire().await;
        let multi = Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        metrics::counter!("loopguard_offloaded_total").increment(1);
        if multi {
            tokio::task::block_in_place(work)
        } else {
            work()
        }
    }
}

/// Runs `work` now as blocking work (inline on a current-thread runtime or
/// outside a runtime): for a heavy step of an upstream answer, which must
/// not wait for a permit (its stream would stall), so it is not bounded by
/// the pool's permits but by the number of huge answers in flight. Counted
/// in `loopguard_offloaded_total` with the request bodies.
pub fn blocking_now<T>(work: impl FnOnce() -> T) -> T {
    let multi = Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        metrics::counter!("loopguard_offloaded_total").increment(1);
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heavy_jobs_run_at_most_permits_at_once_and_workers_keep_serving() {
        let pool = Arc::new(Offload::new(1));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..3)
            .map(|_| {
                let (pool, running, most) = (Arc::clone(&pool), Arc::clone(&running), Arc::clone(&most));
                crate::task::spawn(async move {
                    pool.run(true, || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(150));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await;
                })
            })
            .collect();
        // While the heavy jobs block their threads, a small task still runs promptly.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = std::time::Instant::now();
        let quick = crate::task::spawn(async { 1 + 1 });
        assert_eq!(quick.await.ok(), Some(2));
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
        for job in jobs {
            let _ = job.await;
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_current_thread_runtime_runs_the_work_inline() {
        let pool = Offload::new(2);
        assert_eq!(pool.run(true, || 7).await, 7);
        assert_eq!(pool.run(false, || 8).await, 8);
    }
}
