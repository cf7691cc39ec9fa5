//! Worker threads: one single-threaded tokio runtime per core (`[sluice] workers`), each with its
//! own IO driver and timers. Each worker accepts TCP clients on its own SO_REUSEPORT socket (the
//! Unix socket's clients are handed out round-robin from worker 0), and the client's task, the
//! servers it opens and their sockets stay on that worker; the pools stay shared
//! (one set of limits for the process), and an idle server is preferably handed to a client of the
//! worker that owns its socket.
//!
//! Why not tokio's work-stealing runtime: on a busy pooler every message wakes a task, and a
//! multi-thread runtime then often unparks a second worker (a futex call and a context switch) and
//! moves tasks between CPUs; a client and its server on one thread cost the same four socket
//! calls per transaction as a single-threaded pooler.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Builder, Handle, Runtime};

thread_local! {
    /// Index of the worker running on this thread (0 on the main thread and outside workers).
    /// Thread identity, not shared state: it is set once when a worker thread starts.
    static WORKER_ID: Cell<u16> = const { Cell::new(0) };
}

/// The worker running the current task (0 when not on a worker thread).
pub fn current() -> u16 {
    WORKER_ID.with(|w| w.get())
}

/// Handles of the worker runtimes. Empty (the default) = spawn on the current runtime, as the
/// tests do with their own runtime.
#[derive(Default)]
pub struct Workers {
    handles: OnceLock<Vec<Handle>>,
    next: AtomicUsize,
}

impl Workers {
    /// Record the workers' handles (index = worker id); the first call wins.
    pub fn install(&self, handles: Vec<Handle>) {
        let _ = self.handles.set(handles);
    }

    /// Run `fut` on worker `worker` (on the current runtime when no workers are installed).
    pub fn spawn_on<F>(&self, worker: usize, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match self.handles.get().and_then(|h| h.get(worker)) {
            Some(h) => {
                h.spawn(fut);
            }
            None => {
                tokio::spawn(fut);
            }
        }
    }

    /// The worker for the next client, round-robin; `None` = the current one (no workers
    /// installed, or the turn fell on the calling worker).
    pub fn next_other(&self) -> Option<&Handle> {
        let handles = self.handles.get().filter(|h| h.len() > 1)?;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % handles.len();
        (i != current() as usize).then(|| &handles[i])
    }
}

/// Build worker 0's runtime (for the calling thread) and start `n - 1` more threads, each running
/// its own runtime until the process exits. Returns worker 0's runtime and every worker's handle.
pub fn start(n: usize) -> io::Result<(Runtime, Vec<Handle>)> {
    let main = Builder::new_current_thread().enable_all().build()?;
    let mut handles = vec![main.handle().clone()];
    for id in 1..n.max(1) {
        let rt = Builder::new_current_thread().enable_all().build()?;
        handles.push(rt.handle().clone());
        std::thread::Builder::new()
            .name(format!("sluice-worker-{id}"))
            .spawn(move || {
                WORKER_ID.with(|w| w.set(id as u16));
                rt.block_on(keep_a_wakeup_planned());
            })?;
    }
    Ok((main, handles))
}

/// How often a worker wakes with nothing to do (worker 0 runs the pool janitor, more often).
const WORKER_TICK: Duration = Duration::from_secs(1);

/// A worker's own timer tick, so that its IO driver always has a wake-up planned.
///
/// Tokio wakes a worker's driver through its eventfd whenever a timer is set earlier than the
/// driver's next planned wake-up, also when the worker itself is running and sets it. A worker with
/// no timer of its own has no wake-up planned between logins, so each client's login timeout cost a
/// `write` and an extra `epoll_wait` (seen with strace: 0.4 of each per login on worker 1). With a
/// tick planned at most a second ahead, timers set further out cost no system call.
async fn keep_a_wakeup_planned() {
    let mut tick = tokio::time::interval(WORKER_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
    }
}
