//! CPU-heavy login work runs here, off the worker threads that relay traffic: PBKDF2 (SCRAM keys
//! of a plaintext password, for a server login or a client's ad-hoc secret) and TLS handshakes of
//! both legs (a client's accept, a server's connect).
//!
//! A worker thread runs every client and server of its share of the load; a PBKDF2 of 4096
//! iterations or a TLS handshake's key exchange and signature there is a millisecond or more in
//! which none of them is served, and a login storm (or a server asking for millions of iterations)
//! would stall queries for as long as it lasts. Here the work runs on a small runtime of its own,
//! threads named `sluice-auth`, half the cores (at least one), built on first use: a storm of
//! logins queues logins, the relay threads keep the other cores.
//!
//! - PBKDF2 (`run`): at most `size` derivations at once. A permit is held by the work itself, not
//!   by whoever waits for it: a login given up (its connect timed out) still counts until its
//!   derivation ends, so abandoned work cannot pile up beyond the bound.
//! - Socket work (`run_socket`, the TLS handshakes): the socket is taken off the calling worker's
//!   IO driver and registered with this runtime's, so the handshake's reads and writes wake these
//!   threads, never a worker; the caller moves the finished stream back. The CPU it may use is
//!   bounded by the threads; the handshakes in flight by `HANDSHAKES_PER_THREAD` per thread, so
//!   that under a storm they finish in turn instead of all slowing down together. That bound is
//!   wider than the threads because a handshake mostly waits for its peer: a few clients that stall
//!   mid-handshake must not hold every slot. A caller that gives up (client_login_timeout,
//!   server_connect_timeout, the client gone) drops its future, which ends the handshake and frees
//!   its slot.
//! - Priority: the threads run `NICE_STEPS` below the process's priority, so that where every core
//!   is busy the kernel gives the relay workers the larger share and a storm slows logins first.

use std::future::Future;
use std::io;
use std::sync::{Arc, OnceLock};

use tokio::net::TcpStream;
use tokio::runtime::{Handle, Runtime};
use tokio::sync::Semaphore;

/// Name of the authentication runtime's threads.
pub const THREAD_NAME: &str = "sluice-auth";

/// Socket work (TLS handshakes) in flight per authentication thread.
pub const HANDSHAKES_PER_THREAD: usize = 64;

/// How much lower the authentication threads' priority is than the process's (nice steps).
///
/// Where the cores are all busy (a small machine during a login storm: the storm's own clients,
/// PostgreSQL and the pooler on the same CPUs) the kernel shares them by weight; five steps gives a
/// handshake or a derivation about a third of a relay worker's share, so a storm queues logins
/// rather than the queries of clients already in. With a core to spare it changes nothing.
pub const NICE_STEPS: i32 = 5;

/// The calling thread's nice value (Linux keeps one per thread).
fn thread_nice() -> Option<i32> {
    // errno is cleared first because -1 is a valid answer.
    nix::errno::Errno::clear();
    // SAFETY: gettid has no preconditions; getpriority reads the calling thread's own value.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
    (nice != -1 || nix::errno::Errno::last_raw() == 0).then_some(nice)
}

/// Started on each authentication thread: lower its priority by `NICE_STEPS` (to at most 19).
/// Raising one's own nice value needs no privilege; a refusal leaves the thread as it was.
fn yield_to_the_relay() {
    let Some(nice) = thread_nice() else { return };
    // SAFETY: sets the calling thread's own nice value (its thread id, from gettid).
    let rc = unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::gettid() as libc::id_t,
            (nice + NICE_STEPS).min(19),
        )
    };
    if rc != 0 {
        tracing::debug!(
            "authentication thread keeps its priority: {}",
            io::Error::last_os_error()
        );
    }
}

/// The bounded pool of authentication work; cheap to clone (one per process, shared).
#[derive(Debug, Clone)]
pub struct AuthCpu {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    size: usize,
    /// PBKDF2 derivations at once.
    permits: Arc<Semaphore>,
    /// Handshakes in flight.
    sockets: Arc<Semaphore>,
    /// Built on first use (most tests and plaintext-only poolers never start it). None = it
    /// could not be built (threads refused): the work then runs where it did before this pool.
    runtime: OnceLock<Option<AuthRuntime>>,
}

/// The runtime, shut down without blocking when the last `AuthCpu` goes (which may happen inside
/// another runtime, where a plain drop would panic).
#[derive(Debug)]
struct AuthRuntime(Option<Runtime>);

impl Drop for AuthRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Aborts the spawned work when the caller stops waiting for it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl AuthCpu {
    /// At most `size` derivations at once (at least one), on `size` threads.
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        AuthCpu {
            inner: Arc::new(Inner {
                size,
                permits: Arc::new(Semaphore::new(size)),
                sockets: Arc::new(Semaphore::new(size * HANDSHAKES_PER_THREAD)),
                runtime: OnceLock::new(),
            }),
        }
    }

    /// Half the machine's cores, at least one.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::new(cores / 2)
    }

    /// How many may run at once.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    fn handle(&self) -> Option<Handle> {
        let rt =
            self.inner.runtime.get_or_init(|| {
                match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(self.inner.size)
                    .thread_name(THREAD_NAME)
                    .on_thread_start(yield_to_the_relay)
                    .enable_io()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => Some(AuthRuntime(Some(rt))),
                    Err(e) => {
                        tracing::error!("cannot start the authentication threads: {e}");
                        None
                    }
                }
            });
        rt.as_ref()?.0.as_ref().map(|rt| rt.handle().clone())
    }

    /// Run `work` on an authentication thread once a permit is free. None only when the runtime
    /// is shutting down (the work was not run, or its result is lost).
    pub async fn run<F, R>(&self, work: F) -> Option<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let permit = self.inner.permits.clone().acquire_owned().await.ok()?;
        let job = move || {
            let _held = permit;
            work()
        };
        // Not aborted when the caller goes: the permit stays with the work (see the module's
        // comment), and a running closure cannot be interrupted anyway.
        match self.handle() {
            Some(h) => h.spawn(async move { job() }).await.ok(),
            None => tokio::task::spawn_blocking(job).await.ok(),
        }
    }

    /// Run `work` with `tcp` on an authentication thread: the socket is registered with that
    /// runtime's IO driver while `work` runs. What `work` returns still holds the socket there;
    /// the caller moves it back (`Stream::move_to_current_worker`). Waits for a free slot first;
    /// dropping the returned future (a timeout, the client gone) ends `work` and frees the slot.
    pub async fn run_socket<W, Fut, T>(&self, tcp: TcpStream, work: W) -> io::Result<T>
    where
        W: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let Some(handle) = self.handle() else {
            return Ok(work(tcp).await);
        };
        let permit = self
            .inner
            .sockets
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| shutting_down())?;
        let std = tcp.into_std()?;
        let mut task = AbortOnDrop(handle.spawn(async move {
            let _held = permit;
            let tcp = TcpStream::from_std(std)?;
            Ok(work(tcp).await)
        }));
        match (&mut task.0).await {
            Ok(r) => r,
            Err(_) => Err(shutting_down()),
        }
    }
}

fn shutting_down() -> io::Error {
    io::Error::other("shutting down")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
                    (
                        std::thread::current().id(),
                        std::thread::current().name().map(str::to_string),
                    )
                })
                .await
            }));
        }
        for j in jobs {
            let (id, name) = j.await.unwrap().unwrap();
            assert_ne!(id, caller);
            assert_eq!(name.as_deref(), Some(THREAD_NAME));
        }
        assert!(most.load(Ordering::SeqCst) <= 2);
        assert_eq!(AuthCpu::new(0).size(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn authentication_threads_run_below_the_callers_priority() {
        let caller = thread_nice().unwrap();
        let cpu = AuthCpu::new(1);
        let theirs = cpu.run(thread_nice).await.unwrap().unwrap();
        assert_eq!(theirs, (caller + NICE_STEPS).min(19));
        // The caller (a relay worker) keeps its own.
        assert_eq!(thread_nice().unwrap(), caller);
    }

    async fn socket_pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// The socket's IO runs on an authentication thread, and the stream works back on the
    /// caller's runtime afterwards.
    #[tokio::test(flavor = "current_thread")]
    async fn socket_work_runs_on_the_auth_threads_and_the_socket_comes_back() {
        let cpu = AuthCpu::new(1);
        let (mut near, far) = socket_pair().await;
        near.write_all(b"ping").await.unwrap();
        let (far, thread) = cpu
            .run_socket(far, |mut s| async move {
                let mut b = [0u8; 4];
                s.read_exact(&mut b).await.unwrap();
                assert_eq!(&b, b"ping");
                s.write_all(b"pong").await.unwrap();
                (s, std::thread::current().name().map(str::to_string))
            })
            .await
            .unwrap();
        assert_eq!(thread.as_deref(), Some(THREAD_NAME));
        let mut s = crate::net::Stream::Tcp(far);
        s.move_to_current_worker().unwrap();
        let mut b = [0u8; 4];
        near.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"pong");
        s.write_all(b"back").await.unwrap();
        near.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"back");
    }

    /// A caller that stops waiting frees its slot: with one slot per thread taken by a stalled
    /// handshake that was given up, the next one still runs.
    #[tokio::test(flavor = "current_thread")]
    async fn giving_up_frees_the_slot() {
        let cpu = AuthCpu::new(1);
        let mut held = Vec::new();
        for _ in 0..HANDSHAKES_PER_THREAD {
            let (near, far) = socket_pair().await;
            let stalled = cpu.run_socket(far, |mut s| async move {
                let mut b = [0u8; 1];
                let _ = s.read(&mut b).await;
            });
            assert!(
                tokio::time::timeout(std::time::Duration::from_millis(20), stalled)
                    .await
                    .is_err()
            );
            held.push(near);
        }
        let (_near, far) = socket_pair().await;
        let done = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            cpu.run_socket(far, |_| async { 7 }),
        )
        .await;
        assert_eq!(done.unwrap().unwrap(), 7);
    }
}
