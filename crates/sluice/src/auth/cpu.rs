//! CPU-heavy authentication work (PBKDF2: SCRAM keys of a plaintext password, for a server login or
//! a client's ad-hoc secret) runs here, off the worker threads that relay traffic, a few at a time.
//!
//! A worker thread runs every client and server of its share of the load; a PBKDF2 of 4096
//! iterations there is a couple of milliseconds in which none of them is served, and a login storm
//! (or a server asking for millions of iterations) would stall queries for as long as it lasts.
//! Here the work goes to tokio's blocking threads behind a semaphore of half the cores (at least
//! one): a storm of logins queues logins, the relay threads keep the other cores. A permit is held
//! by the work itself, not by whoever waits for it: a login given up (its connect timed out) still
//! counts until its derivation ends, so abandoned work cannot pile up beyond the bound.

use std::sync::Arc;

use tokio::sync::Semaphore;

/// The bounded pool of authentication work; cheap to clone (one per process, shared).
#[derive(Debug, Clone)]
pub struct AuthCpu {
    permits: Arc<Semaphore>,
    size: usize,
}

impl AuthCpu {
    /// At most `size` derivations at once (at least one).
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        AuthCpu {
            permits: Arc::new(Semaphore::new(size)),
            size,
        }
    }

    /// Half the machine's cores, at least one.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::new(cores / 2)
    }

    /// How many may run at once.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Run `work` on a blocking thread once a permit is free. None only when the runtime is
    /// shutting down (the work was not run, or its result is lost).
    pub async fn run<F, R>(&self, work: F) -> Option<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            let _held = permit;
            work()
        })
        .await
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "current_thread")]
    async fn never_more_than_its_size_at_once_and_never_on_the_callers_thread() {
        let cpu = AuthCpu::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let caller = std::thread::current().id();
        let mut jobs = Vec::new();
        for _ in 0..8 {
            let (cpu, running, most) = (cpu.clone(), running.clone(), most.clone());
            jobs.push(tokio::spawn(async move {
                cpu.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    std::thread::current().id()
                })
                .await
            }));
        }
        for j in jobs {
            assert_ne!(j.await.unwrap(), Some(caller));
        }
        assert!(most.load(Ordering::SeqCst) <= 2);
        assert_eq!(AuthCpu::new(0).size(), 1);
    }
}
