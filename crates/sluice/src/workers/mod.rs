//! Worker threads: one single-threaded tokio runtime per core (`[sluice] workers`), each with its
//! own IO driver and timers. Each worker accepts TCP clients on its own SO_REUSEPORT socket (the
//! Unix socket's clients are handed out from worker 0), and the client's task, the servers it opens
//! and their sockets stay on that worker; the pools stay shared (one set of limits for the
//! process), and an idle server is preferably handed to a client of the worker that owns its socket.
//!
//! Worker packing (`packing.rs`, `balance.rs`, `steer.rs`): only the first `active` workers take
//! new clients, and clients of the others move at their next transaction boundary; the balancer
//! grows `active` when a worker gets busier than `[sluice] worker_spread_percent` of a CPU and
//! shrinks it when the load fits on fewer, so a lightly loaded pooler wakes one thread per request
//! instead of several half-idle ones.
//!
//! Why not tokio's work-stealing runtime: on a busy pooler every message wakes a task, and a
//! multi-thread runtime then often unparks a second worker (a futex call and a context switch) and
//! moves tasks between CPUs; a client and its server on one thread cost the same four socket
//! calls per transaction as a single-threaded pooler.

pub mod balance;
pub mod cross;
pub mod packing;
pub mod steer;

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Builder, Handle, Runtime};
use tokio::sync::watch;

thread_local! {
    /// Index of the worker running on this thread (0 on the main thread and outside workers).
    /// Thread identity, not shared state: it is set once when a worker thread starts.
    static WORKER_ID: Cell<u16> = const { Cell::new(0) };
}

/// The worker running the current task (0 when not on a worker thread).
pub fn current() -> u16 {
    WORKER_ID.with(|w| w.get())
}

/// Pretend the calling thread is worker `id` (pool tests of per-worker shards).
#[cfg(test)]
pub fn set_current_for_test(id: u16) {
    WORKER_ID.with(|w| w.set(id));
}

/// One worker as the others see it.
#[derive(Default)]
pub struct WorkerSlot {
    /// Pool clients whose session runs on this worker.
    pub clients: AtomicUsize,
    /// Server connections whose socket lives on this worker (all pools), as of the balancer's
    /// last period: where moving clients should go while clients queue (`packing::destination`).
    pub servers: AtomicUsize,
    /// Clients this worker should still hand to another (after `active` grew).
    shed: AtomicUsize,
    /// CPU time of the worker's thread over the last balancing period, per mille of one CPU.
    pub busy_permille: AtomicU32,
    /// The thread's CPU-time clock (`pthread_getcpuclockid`), when the OS gave one.
    cpu_clock: Option<libc::clockid_t>,
}

impl WorkerSlot {
    /// CPU time the worker's thread has used.
    pub fn cpu_time(&self) -> Option<Duration> {
        let clock = self.cpu_clock?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; the clock id came from pthread_getcpuclockid
        // for a worker thread, which lives as long as the process.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
}

/// Handles of the worker runtimes and the packing state. Empty (the default) = spawn on the
/// current runtime, as the tests do with their own runtime; clients then never move.
#[derive(Default)]
pub struct Workers {
    handles: OnceLock<Vec<Handle>>,
    slots: OnceLock<Box<[WorkerSlot]>>,
    /// Workers 0..active take new clients (see `packing`).
    active: AtomicUsize,
    /// `active` for the accept loops that steer their SO_REUSEPORT group (`steer.rs`).
    active_watch: OnceLock<watch::Sender<usize>>,
    next: AtomicUsize,
    /// Clients moved from one worker to another.
    pub moves: AtomicU64,
}

/// A started set of workers: worker 0's runtime (for the calling thread) and every worker's
/// handle and CPU clock.
pub struct Started {
    pub runtime: Runtime,
    pub handles: Vec<Handle>,
    pub clocks: Vec<Option<libc::clockid_t>>,
}

impl Workers {
    /// Record the workers (index = worker id); the first call wins. `packed`: start with one
    /// active worker (the balancer adds more under load), else every worker is active.
    pub fn install(
        &self,
        started_handles: Vec<Handle>,
        clocks: Vec<Option<libc::clockid_t>>,
        packed: bool,
    ) {
        let n = started_handles.len();
        let slots: Box<[WorkerSlot]> = (0..n)
            .map(|i| WorkerSlot {
                cpu_clock: clocks.get(i).copied().flatten(),
                ..Default::default()
            })
            .collect();
        let active = if packed { 1 } else { n.max(1) };
        self.active.store(active, Ordering::Relaxed);
        let _ = self.active_watch.set(watch::Sender::new(active));
        let _ = self.slots.set(slots);
        let _ = self.handles.set(started_handles);
    }

    /// Number of workers (1 when none are installed).
    pub fn count(&self) -> usize {
        self.handles.get().map_or(1, |h| h.len().max(1))
    }

    /// Workers currently taking clients.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed).max(1)
    }

    pub fn slots(&self) -> &[WorkerSlot] {
        self.slots.get().map_or(&[], |s| s)
    }

    /// Follow changes of the active count (for the accept loops that steer new connections).
    pub fn watch_active(&self) -> Option<watch::Receiver<usize>> {
        self.active_watch.get().map(|w| w.subscribe())
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

    /// The worker for the next Unix-socket client, round-robin over the active ones; `None` = the
    /// current one (no workers installed, or the turn fell on the calling worker).
    pub fn next_other(&self) -> Option<&Handle> {
        let handles = self.handles.get().filter(|h| h.len() > 1)?;
        let active = self.active().min(handles.len());
        let i = self.next.fetch_add(1, Ordering::Relaxed) % active;
        (i != current() as usize).then(|| &handles[i])
    }

    /// A pool client starts (or resumes) its session on the calling worker.
    pub fn enter(&self) -> usize {
        let w = current() as usize;
        if let Some(s) = self.slots().get(w) {
            s.clients.fetch_add(1, Ordering::Relaxed);
        }
        w
    }

    /// The client counted by `enter` on `worker` ended or moved away.
    pub fn leave(&self, worker: usize) {
        if let Some(s) = self.slots().get(worker) {
            s.clients.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Where a client between transactions should move, if anywhere: off a worker that is no longer
    /// active, or off one that still owes clients to the workers added last. Two relaxed loads in
    /// the common case (called once per transaction).
    pub fn move_target(&self) -> Option<usize> {
        let slots = self.slots.get().filter(|s| s.len() > 1)?;
        let me = current() as usize;
        let active = self.active();
        if me < active {
            let shed = &slots.get(me)?.shed;
            if shed.load(Ordering::Relaxed) == 0 {
                return None;
            }
            shed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .ok()?;
        }
        let clients: Vec<usize> = slots
            .iter()
            .map(|s| s.clients.load(Ordering::Relaxed))
            .collect();
        let servers: Vec<usize> = slots
            .iter()
            .map(|s| s.servers.load(Ordering::Relaxed))
            .collect();
        let to = packing::destination(&clients, &servers, active, me)?;
        self.moves.fetch_add(1, Ordering::Relaxed);
        Some(to)
    }

    /// Ask worker `from` to hand `n` clients to the lightest active workers, at their next
    /// transaction boundaries (`move_target`); a request still being served is left as it is.
    pub fn shed_from(&self, from: usize, n: usize) {
        if let Some(slot) = self.slots().get(from) {
            let _ = slot
                .shed
                .compare_exchange(0, n, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Make `active` workers take clients: new connections are steered to them, clients of the
    /// others move at their next transaction boundary, and when workers were added, the ones
    /// already active hand them a fair share of their clients.
    pub fn set_active(&self, active: usize) {
        let slots = self.slots();
        let active = active.clamp(1, slots.len().max(1));
        let before = self.active.swap(active, Ordering::Relaxed);
        let clients: Vec<usize> = slots
            .iter()
            .map(|s| s.clients.load(Ordering::Relaxed))
            .collect();
        for (slot, shed) in slots
            .iter()
            .zip(packing::shed_counts(&clients, before, active))
        {
            slot.shed.store(shed, Ordering::Relaxed);
        }
        if let Some(w) = self.active_watch.get() {
            w.send_replace(active);
        }
    }
}

/// Build worker 0's runtime (for the calling thread) and start `n - 1` more threads, each running
/// its own runtime until the process exits.
pub fn start(n: usize) -> io::Result<Started> {
    let main = Builder::new_current_thread().enable_all().build()?;
    let mut handles = vec![main.handle().clone()];
    // SAFETY: pthread_self is always valid for the calling thread.
    let mut clocks = vec![cpu_clock(unsafe { libc::pthread_self() })];
    for id in 1..n.max(1) {
        // IO and timers: signals are caught on worker 0 (main.rs). (Tokio layers its signal
        // driver, and its process driver when that feature is compiled in, on every runtime with
        // IO; Sluice spawns no processes, so the workspace leaves tokio's `process` feature out: its
        // driver took two process-wide locks after every park of every worker.)
        let rt = Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        handles.push(rt.handle().clone());
        let thread = std::thread::Builder::new()
            .name(format!("sluice-worker-{id}"))
            .spawn(move || {
                WORKER_ID.with(|w| w.set(id as u16));
                rt.block_on(keep_a_wakeup_planned());
            })?;
        clocks.push(cpu_clock(
            std::os::unix::thread::JoinHandleExt::as_pthread_t(&thread),
        ));
    }
    Ok(Started {
        runtime: main,
        handles,
        clocks,
    })
}

/// The CPU-time clock of a running thread.
fn cpu_clock(thread: libc::pthread_t) -> Option<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `thread` is a live thread (worker threads run until the process exits).
    let rc = unsafe { libc::pthread_getcpuclockid(thread, &mut clock) };
    (rc == 0).then_some(clock)
}

/// How often a worker wakes with nothing to do (worker 0 runs the pool janitor, more often).
const WORKER_TICK: Duration = Duration::from_secs(1);

/// A worker's own timer tick, so that its IO driver always has a wake-up planned.
///
/// Tokio wakes a worker's driver through its eventfd whenever a timer is set earlier than the
/// driver's next planned wake-up, also when the worker itself is running and sets it. A worker with
/// no timer of its own has no wake-up planned between its clients' timers, so each one (it was each
/// login's timeout then; client_idle_timeout, connect and FATAL-flush bounds now) cost a `write`
/// and an extra `epoll_wait` (seen with strace: 0.4 of each per login on worker 1). With a tick
/// planned at most a second ahead, timers set further out cost no system call.
async fn keep_a_wakeup_planned() {
    let mut tick = tokio::time::interval(WORKER_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
    }
}
