//! `WakeGated`: a future that is polled only after its own waker fired.
//!
//! A task waiting on several futures at once (`tokio::select!`) polls every one of them at each
//! wake-up, whichever of them woke it. The accept loop waits on a new connection and on three stop
//! conditions (watch channels: active workers, SUSPEND, the lifecycle phase) that change a few
//! times per run; polling the three at every accepted connection cost ~700 instructions per login.
//! Behind a `WakeGated` they are polled once, and then only when one of them woke the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;

pub struct WakeGated<F> {
    inner: Pin<Box<F>>,
    gate: Arc<Gate>,
    /// The waker the inner future is polled with: it opens the gate, then wakes the task.
    waker: Waker,
}

struct Gate {
    /// The inner future asked to be polled (true at first: it has not registered anything yet).
    woken: AtomicBool,
    /// The task polling the `WakeGated`.
    task: Mutex<Option<Waker>>,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().as_ref() {
            task.wake_by_ref();
        }
    }
}

impl<F: Future> WakeGated<F> {
    /// Boxed once here (a stretch of accepting makes one), not per poll.
    pub fn new(inner: F) -> Self {
        let gate = Arc::new(Gate {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        WakeGated {
            inner: Box::pin(inner),
            waker: Waker::from(gate.clone()),
            gate,
        }
    }
}

impl<F: Future> Future for WakeGated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        {
            // Stored before the gate is looked at: a wake-up from now on reaches this task.
            let mut task = this.gate.task.lock();
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        // Closed again before polling: a wake-up during or after this poll opens it for the next.
        if !this.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Pending until `ready` is set; counts its polls and keeps its last waker.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        ready: AtomicBool,
        waker: Mutex<Option<Waker>>,
    }

    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn polls_the_inner_future_only_when_it_woke_the_task() {
        let probe = Arc::new(Probe::default());
        let inner = {
            let probe = probe.clone();
            std::future::poll_fn(move |cx| {
                probe.polls.fetch_add(1, Ordering::SeqCst);
                *probe.waker.lock() = Some(cx.waker().clone());
                if probe.ready.load(Ordering::SeqCst) {
                    Poll::Ready(7)
                } else {
                    Poll::Pending
                }
            })
        };
        let mut gated = WakeGated::new(inner);
        let task = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        // The first poll goes through; later ones, with no wake-up of the inner, do not.
        for _ in 0..5 {
            assert!(Pin::new(&mut gated).poll(&mut cx).is_pending());
        }
        assert_eq!(probe.polls.load(Ordering::SeqCst), 1);
        // The inner's wake-up wakes the task and lets the next poll through.
        probe.ready.store(true, Ordering::SeqCst);
        probe.waker.lock().take().unwrap().wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut gated).poll(&mut cx), Poll::Ready(7));
        assert_eq!(probe.polls.load(Ordering::SeqCst), 2);
    }
}
