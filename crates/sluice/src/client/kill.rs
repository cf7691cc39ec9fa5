//! `KillSwitch`: how the admin console (KILL, KILL_CLIENT) tells one client task to disconnect.
//!
//! Only the client's own task ever waits on it, so one atomic flag and one registered waker do;
//! the task polls it beside every read and relay, once per transaction or more, where a general
//! cancellation token would take a lock and link a waiter each time.

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;

#[derive(Debug, Default)]
pub struct KillSwitch {
    killed: AtomicBool,
    waker: AtomicWaker,
}

impl KillSwitch {
    pub fn new() -> Self {
        KillSwitch::default()
    }

    /// Flip the switch and wake the client's task.
    pub fn cancel(&self) {
        self.killed.store(true, Ordering::Release);
        self.waker.wake();
    }

    pub fn is_cancelled(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // A cancel between the first check and the registration must not be missed.
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Completes once the switch is flipped.
    pub fn cancelled(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| self.poll_cancelled(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn cancel_wakes_the_waiting_task() {
        let k = Arc::new(KillSwitch::new());
        assert!(!k.is_cancelled());
        let waiter = tokio::spawn({
            let k = k.clone();
            async move { k.cancelled().await }
        });
        tokio::task::yield_now().await;
        k.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        // Already flipped: completes at once.
        k.cancelled().await;
    }
}
