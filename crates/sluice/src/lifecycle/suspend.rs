//! The SUSPEND gate: while it is closed, the listeners stop accepting, idle clients stop reading,
//! and linked relays stop reading both sides once what they already read has been written out
//! ("parked"). SUSPEND waits until every client is parked; RESUME opens the gate and wakes them.
//!
//! The flag is one atomic because the relay checks it on every poll-loop iteration; the parked
//! set (client id -> waker) sits behind a mutex touched only while suspended. Closing the gate
//! wakes nobody by itself: SUSPEND then nudges every client task so that it looks at the gate.

use crate::ids::ClientId;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::sync::watch;

#[derive(Debug)]
pub struct SuspendGate {
    suspended: AtomicBool,
    /// Clients that reached their stopped state since SUSPEND, with the waker RESUME calls.
    parked: Mutex<HashMap<ClientId, Waker>>,
    /// The same flag for tasks that wait on it with `.await` (the accept loops).
    watch: watch::Sender<bool>,
}

impl Default for SuspendGate {
    fn default() -> Self {
        SuspendGate {
            suspended: AtomicBool::new(false),
            parked: Mutex::new(HashMap::new()),
            watch: watch::Sender::new(false),
        }
    }
}

impl SuspendGate {
    /// The hot-path check: one relaxed load (a stale `false` only delays parking by one read).
    #[inline]
    pub fn is_suspended(&self) -> bool {
        self.suspended.load(Ordering::Relaxed)
    }

    /// Close the gate (SUSPEND). Clients park as they reach a stopped state.
    pub fn suspend(&self) {
        let mut parked = self.parked.lock();
        parked.clear();
        self.suspended.store(true, Ordering::Release);
        drop(parked);
        self.watch.send_replace(true);
    }

    /// Open the gate (RESUME) and wake every parked client.
    pub fn resume(&self) {
        let wakers: Vec<Waker> = {
            let mut parked = self.parked.lock();
            // Cleared under the lock that `park` checks it under: no client parks after this.
            self.suspended.store(false, Ordering::Release);
            parked.drain().map(|(_, w)| w).collect()
        };
        for w in wakers {
            w.wake();
        }
        self.watch.send_replace(false);
    }

    /// Client `id` has reached its stopped state (nothing buffered, not reading). True = stay
    /// stopped: the waker is woken on RESUME. False = not suspended (any more): go on.
    pub fn park(&self, id: ClientId, cx: &mut Context<'_>) -> bool {
        let mut parked = self.parked.lock();
        if !self.suspended.load(Ordering::Acquire) {
            return false;
        }
        match parked.get_mut(&id) {
            Some(w) if w.will_wake(cx.waker()) => {}
            Some(w) => w.clone_from(cx.waker()),
            None => {
                parked.insert(id, cx.waker().clone());
            }
        }
        true
    }

    /// Park client `id` until RESUME (returns at once when not suspended).
    pub async fn parked_until_resume(&self, id: ClientId) {
        poll_fn(|cx| {
            if self.park(id, cx) {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }

    /// Completes when a poll finds the gate closed. It registers no waker of its own: SUSPEND
    /// wakes every client task (`KillSwitch::nudge`), and that poll finds the gate closed.
    pub fn closed_on_wake(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |_| {
            if self.is_suspended() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// Whether client `id` is parked in the current SUSPEND.
    pub fn is_parked(&self, id: ClientId) -> bool {
        self.parked.lock().contains_key(&id)
    }

    /// Keep the clients of `all` (by `id`) that have not parked, under one lock.
    pub fn unparked<T>(&self, mut all: Vec<T>, id: impl Fn(&T) -> ClientId) -> Vec<T> {
        let parked = self.parked.lock();
        all.retain(|c| !parked.contains_key(&id(c)));
        all
    }

    /// Completes once the gate is open (at once if it is).
    pub async fn resumed(&self) {
        let mut rx = self.watch.subscribe();
        let _ = rx.wait_for(|s| !*s).await;
    }

    /// Completes once the gate is closed.
    pub async fn suspended(&self) {
        let mut rx = self.watch.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn parked_clients_wake_on_resume() {
        let g = Arc::new(SuspendGate::default());
        // Not suspended: parking returns at once and records nothing.
        g.parked_until_resume(ClientId(1)).await;
        assert!(!g.is_parked(ClientId(1)));
        g.suspend();
        assert!(g.is_suspended());
        let waiter = tokio::spawn({
            let g = g.clone();
            async move { g.parked_until_resume(ClientId(7)).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !g.is_parked(ClientId(7)) {
            assert!(tokio::time::Instant::now() < deadline, "never parked");
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        assert_eq!(g.unparked(vec![3u64, 7, 9], |c| ClientId(*c)), vec![3, 9]);
        g.resume();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by resume")
            .unwrap();
        assert!(!g.is_parked(ClientId(7)), "resume forgets the parked set");
    }

    #[tokio::test]
    async fn listeners_wait_for_the_gate() {
        let g = Arc::new(SuspendGate::default());
        g.resumed().await;
        g.suspend();
        g.suspended().await;
        let still_closed = tokio::time::timeout(Duration::from_millis(50), g.resumed()).await;
        assert!(still_closed.is_err(), "resumed() waits while suspended");
        let t = tokio::spawn({
            let g = g.clone();
            async move { g.resumed().await }
        });
        g.resume();
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("resumed")
            .unwrap();
    }
}
