//! A pool of a database with failover (paused clock): servers whose host left rotation close at
//! their transaction boundary and are never handed out idle; a held connect that times out fails
//! only the clients that waited failover_timeout, and the rest are served by the next attempt.

use std::collections::VecDeque;

use super::*;
use crate::hosts::HostHealth;

/// Each connect takes the next planned outcome (a server after a delay, or NoHost after a delay);
/// servers carry a ticket of `host`.
struct HostConnector {
    host: Arc<HostHealth>,
    plan: Mutex<VecDeque<(Duration, bool)>>,
    opened: AtomicUsize,
    peers: Mutex<Vec<UnixStream>>,
}

impl Connector for Arc<HostConnector> {
    fn connect(
        &self,
        _t: Arc<ServerTarget>,
        _k: Option<ScramKeys>,
        _o: ConnectOptions,
    ) -> ConnectFuture {
        let me = self.clone();
        Box::pin(async move {
            let (delay, ok) = me
                .plan
                .lock()
                .pop_front()
                .unwrap_or((Duration::from_millis(10), true));
            let epoch = me.host.epoch();
            tokio::time::sleep(delay).await;
            if !ok {
                return Err(ServerError::NoHost("no primary".into()));
            }
            let (a, b) = UnixStream::pair()?;
            me.peers.lock().push(b);
            let id = me.opened.fetch_add(1, Ordering::SeqCst) as u64 + 1;
            let mut c = ServerConn::new(
                crate::ids::ServerId(id),
                Stream::Unix(a),
                me.host.addr.clone(),
            );
            c.host = Some(me.host.ticket(epoch, None));
            Ok(c)
        })
    }
}

fn host_pool(size: u32, plan: &[(u64, bool)]) -> (Arc<Pool>, Arc<HostConnector>) {
    let c = Arc::new(HostConnector {
        host: HostHealth::standalone(ServerAddr::Tcp {
            host: "pg1".into(),
            port: 5432,
        }),
        plan: Mutex::new(
            plan.iter()
                .map(|&(ms, ok)| (Duration::from_millis(ms), ok))
                .collect(),
        ),
        opened: AtomicUsize::new(0),
        peers: Mutex::default(),
    });
    let key = PoolKey {
        database: "db".into(),
        user: "u".into(),
    };
    let p = Pool::new(
        key,
        settings(size, 0),
        ConnCounter::new(),
        ConnCounter::new(),
        Arc::new(c.clone()),
        1,
    );
    p.client_joined();
    (p, c)
}

#[tokio::test(start_paused = true)]
async fn a_server_whose_host_left_closes_at_release_not_before() {
    let (pool, c) = host_pool(2, &[]);
    let s = pool.checkout().await.unwrap();
    c.host.suspect("connect failed");
    // Mid-transaction the server stays the client's.
    assert_eq!(pool.counts().active, 1);
    pool.release(s, true);
    assert_eq!(pool.counts().total, 0, "closed at its transaction boundary");
    let s = pool.checkout().await.unwrap();
    assert_eq!(c.opened.load(Ordering::SeqCst), 2);
    pool.release(s, true);
    assert_eq!(
        pool.counts().idle,
        1,
        "a server of the host's new epoch stays"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_servers_of_a_host_that_left_are_closed_not_handed_out() {
    let (pool, c) = host_pool(2, &[]);
    let a = pool.checkout().await.unwrap();
    let b = pool.checkout().await.unwrap();
    let first = a.id;
    pool.release(a, true);
    pool.release(b, true);
    assert_eq!(pool.counts().idle, 2);
    c.host.suspect("connect failed");
    let s = pool.checkout().await.unwrap();
    assert_ne!(s.id, first);
    assert_eq!(
        c.opened.load(Ordering::SeqCst),
        3,
        "a new server, not an idle one"
    );
    pool.maintain();
    assert_eq!(pool.counts().idle, 0, "the janitor closes the other");
}

#[tokio::test(start_paused = true)]
async fn a_held_connect_that_times_out_fails_only_clients_that_waited_that_long() {
    // One server at most: the first connect is held 5 s and gives up; the next one succeeds.
    let (pool, _c) = host_pool(1, &[(5000, false), (10, true)]);
    let p = pool.clone();
    let early = tokio::spawn(async move { p.checkout().await.map(|s| s.id) });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = pool.clone();
    let late = tokio::spawn(async move { p.checkout().await.map(|s| s.id) });
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let err = early
        .await
        .unwrap()
        .expect_err("held past failover_timeout");
    let n = err.client_notice();
    assert_eq!(
        (n.sqlstate.as_str(), n.message.as_str()),
        ("08006", "no primary")
    );
    // Joined 2 s before the attempt gave up: not failed, served by the next attempt.
    assert!(late.await.unwrap().is_ok(), "served by the next attempt");
}
