//! `KillSwitch`: how the admin console (KILL, KILL_CLIENT, SUSPEND's suspend_timeout) and the
//! janitor (client_login_timeout) tell one client task to disconnect, and why.
//!
//! Only the client's own task ever waits on it, so one atomic and one waker do. The waker is
//! kept, not taken, by a wake-up: the logged-in session registers its task once per run (`arm`)
//! and then polls the switch beside every wait and relay with one atomic load
//! (`cancelled_armed`), where registering per poll cost two atomic read-modify-writes each time,
//! four polls per transaction. Login and the admin console register per poll (`cancelled`).

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::error::{sqlstate, ClientNotice};

/// Why a client was told to disconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum KillReason {
    /// KILL_CLIENT.
    Admin = 1,
    /// It had not stopped with its buffers flushed when SUSPEND's suspend_timeout ran out.
    SuspendTimeout = 2,
    /// Still logging in when client_login_timeout ran out (the janitor's sweep,
    /// `ClientRegistry::expire_logins`).
    LoginTimeout = 3,
    /// KILL [db]: PgBouncer 1.25.2 tells the clients "database removed" (compared side by side).
    Kill = 4,
}

impl KillReason {
    /// What the client and the disconnect log line see (PgBouncer's wording).
    pub fn message(self) -> &'static str {
        match self {
            KillReason::Admin => "admin forced disconnect",
            KillReason::SuspendTimeout => "suspend_timeout",
            KillReason::LoginTimeout => "client_login_timeout",
            KillReason::Kill => "database removed",
        }
    }
}

const ALIVE: u8 = 0;

/// `repr(C)`: the flag, read on every wait, first (see `ClientEntry`).
#[derive(Debug, Default)]
#[repr(C)]
pub struct KillSwitch {
    /// ALIVE, or the `KillReason` of the first cancel.
    state: AtomicU8,
    /// The client task's waker, woken by reference (it stays registered). Locked only to
    /// register and to wake: never per transaction.
    waker: Mutex<Option<Waker>>,
}

impl KillSwitch {
    pub fn new() -> Self {
        KillSwitch::default()
    }

    /// Flip the switch (KILL_CLIENT) and wake the client's task.
    pub fn cancel(&self) {
        self.cancel_because(KillReason::Admin);
    }

    /// Flip the switch for `reason` (the first reason given wins) and wake the client's task.
    pub fn cancel_because(&self, reason: KillReason) {
        let _ =
            self.state
                .compare_exchange(ALIVE, reason as u8, Ordering::AcqRel, Ordering::Acquire);
        self.nudge();
    }

    /// Wake the client's task without flipping the switch, so that it looks again at shared state
    /// it does not otherwise wait on (SUSPEND: a task blocked reading must notice it).
    pub fn nudge(&self) {
        if let Some(w) = self.waker.lock().as_ref() {
            w.wake_by_ref();
        }
    }

    fn register(&self, waker: &Waker) {
        let mut slot = self.waker.lock();
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) != ALIVE
    }

    /// Why the switch was flipped (Admin when it was not).
    pub fn reason(&self) -> KillReason {
        match self.state.load(Ordering::Acquire) {
            2 => KillReason::SuspendTimeout,
            3 => KillReason::LoginTimeout,
            4 => KillReason::Kill,
            _ => KillReason::Admin,
        }
    }

    /// The FATAL the client gets when its switch was flipped.
    pub fn notice(&self) -> ClientNotice {
        ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, self.reason().message())
    }

    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        self.register(cx.waker());
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

    /// Register the calling task as the one to wake, until another task arms or registers.
    pub async fn arm(&self) {
        poll_fn(|cx| {
            self.register(cx.waker());
            Poll::Ready(())
        })
        .await
    }

    /// `cancelled` for the task that called `arm`: one load per poll, no registration. Only
    /// for futures polled by that task with its own waker (plain `select!` branches).
    pub fn cancelled_armed(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |_| {
            if self.is_cancelled() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
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
        assert_eq!(k.notice().message, "admin forced disconnect");
    }

    /// An armed task that waits on `cancelled_armed` alone is woken by a cancel also after
    /// nudges: a wake-up keeps the waker (it used to be taken, which would strand this task).
    #[tokio::test]
    async fn an_armed_task_is_woken_after_nudges() {
        let k = Arc::new(KillSwitch::new());
        let (armed_tx, armed_rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let k = k.clone();
            async move {
                k.arm().await;
                let _ = armed_tx.send(());
                k.cancelled_armed().await;
            }
        });
        armed_rx.await.unwrap();
        k.nudge();
        k.nudge();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a nudge is not a cancel");
        k.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken by the cancel")
            .unwrap();
    }

    #[test]
    fn the_first_reason_wins() {
        let k = KillSwitch::new();
        k.cancel_because(KillReason::SuspendTimeout);
        k.cancel();
        assert!(k.is_cancelled());
        assert_eq!(k.reason(), KillReason::SuspendTimeout);
        assert_eq!(k.notice().message, "suspend_timeout");
    }
}
