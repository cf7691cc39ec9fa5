//! Pool behaviour on tokio's paused clock with a fake connector: hand-off, limits, waits, reserve,
//! login failures, idle closing. No sockets to PostgreSQL; servers are Unix socket pairs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_config::PoolMode;
use sluice_protocol::{ErrorFields, ScramKeys};
use tokio::net::UnixStream;

use super::connector::{ConnectFuture, Connector};
use super::counter::ConnCounter;
use super::rules::{PoolLimits, ServerTimeouts};
use super::*;
use crate::error::ServerError;
use crate::net::socket::TcpTuning;
use crate::net::Stream;
use crate::server::connect::ConnectOptions;
use crate::server::{ServerAddr, ServerTarget};
use crate::workers::cross::CrossEvent;

mod config;
mod failover;
mod lifetime;
mod readers;
mod retry;
mod workers;

/// Opens "servers" after `delay`; fails with a login error while `fail` is set.
#[derive(Default)]
struct FakeConnector {
    delay: Duration,
    fail: Mutex<Option<ErrorFields>>,
    opened: AtomicUsize,
    /// Every connect, failed or not.
    tried: AtomicUsize,
    peers: Mutex<Vec<UnixStream>>,
}

impl Connector for Arc<FakeConnector> {
    fn connect(
        &self,
        _t: Arc<ServerTarget>,
        _k: Option<ScramKeys>,
        _o: ConnectOptions,
    ) -> ConnectFuture {
        let me = self.clone();
        Box::pin(async move {
            me.tried.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(me.delay).await;
            if let Some(f) = me.fail.lock().clone() {
                return Err(ServerError::Login(Box::new(f)));
            }
            let (a, b) = UnixStream::pair()?;
            me.peers.lock().push(b);
            let id = me.opened.fetch_add(1, Ordering::SeqCst) as u64 + 1;
            Ok(ServerConn::new(
                crate::ids::ServerId(id),
                Stream::Unix(a),
                ServerAddr::Unix {
                    path: "/fake".into(),
                },
            ))
        })
    }
}

fn settings(pool_size: u32, reserve: u32) -> PoolSettings {
    PoolSettings {
        mode: PoolMode::Transaction,
        limits: PoolLimits {
            pool_size,
            min_pool_size: 0,
            reserve_pool_size: reserve,
            reserve_pool_timeout: Duration::from_secs(3),
        },
        timeouts: ServerTimeouts {
            lifetime: Some(Duration::from_secs(3600)),
            idle_timeout: Some(Duration::from_secs(600)),
        },
        check_delay: Duration::from_secs(30),
        check_query: None,
        reset_query: None,
        reset_always: false,
        query_wait_timeout: Some(Duration::from_secs(120)),
        relay: super::RelayTimeouts::default(),
        login_retry: Duration::from_secs(15),
        round_robin: false,
        max_db_connections: 0,
        max_user_connections: 0,
        connect: ConnectOptions {
            login: Default::default(),
            connect_timeout: Duration::from_secs(15),
            tcp: TcpTuning::default(),
            max_packet_size: 1 << 30,
            tls: Arc::new(crate::tls::ServerTls::disabled()),
            dns_ttl: Default::default(),
            log: Default::default(),
        },
        target: Arc::new(ServerTarget::new(
            vec![],
            "db".into(),
            "u".into(),
            None,
            vec![],
            None,
        )),
        generation: 1,
        forced_user: false,
        route_reads: Default::default(),
        session: super::SessionKnobs {
            max_prepared: 0,
            pin_session_state: true,
            max_pinned_clients: 0,
            refuse_simple_query: false,
        },
        listed_secret: None,
    }
}

fn pool_with(s: PoolSettings, fake: &Arc<FakeConnector>, db: Arc<ConnCounter>) -> Arc<Pool> {
    let key = PoolKey {
        database: "db".into(),
        user: "u".into(),
    };
    let p = Pool::new(key, s, db, ConnCounter::new(), Arc::new(fake.clone()), 1);
    p.client_joined();
    p
}

fn fake(delay_ms: u64) -> Arc<FakeConnector> {
    Arc::new(FakeConnector {
        delay: Duration::from_millis(delay_ms),
        ..Default::default()
    })
}

#[tokio::test(start_paused = true)]
async fn reuses_a_released_server() {
    let f = fake(10);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let s = pool.checkout().await.unwrap();
    let id = s.id;
    pool.release(s, true);
    let s = pool.checkout().await.unwrap();
    assert_eq!(s.id, id);
    assert_eq!(f.opened.load(Ordering::SeqCst), 1);
    assert_eq!(pool.counts().active, 1);
    drop(s);
    assert_eq!(
        pool.counts().total,
        0,
        "a dropped checkout closes the server"
    );
}

#[tokio::test(start_paused = true)]
async fn pool_size_queues_and_release_hands_over() {
    let f = fake(10);
    let pool = pool_with(settings(1, 0), &f, ConnCounter::new());
    let first = pool.checkout().await.unwrap();
    let p2 = pool.clone();
    let waiter = tokio::spawn(async move { p2.checkout().await.map(|s| s.id) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(pool.counts().waiting, 1);
    assert_eq!(pool.counts().max_wait, Duration::from_secs(1));
    assert_eq!(
        f.opened.load(Ordering::SeqCst),
        1,
        "pool_size=1 never opens a second server"
    );
    let id = first.id;
    pool.release(first, true);
    assert_eq!(waiter.await.unwrap().unwrap(), id);
}

/// The janitor's part in these tests: `maintain` every period (query_wait_timeout is its job).
fn run_janitor(pool: &Arc<Pool>) -> tokio::task::JoinHandle<()> {
    let p = pool.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(crate::runtime::janitor::JANITOR_PERIOD).await;
            p.maintain();
        }
    })
}

#[tokio::test(start_paused = true)]
async fn query_wait_timeout_fails_the_waiter() {
    let f = fake(10);
    let mut s = settings(1, 0);
    s.query_wait_timeout = Some(Duration::from_secs(2));
    let pool = pool_with(s, &f, ConnCounter::new());
    let janitor = run_janitor(&pool);
    let _held = pool.checkout().await.unwrap();
    let start = Instant::now();
    let err = pool.checkout().await.err().unwrap();
    assert!(matches!(err, PoolError::WaitTimeout));
    // Not before the limit, and at the janitor's first pass after it.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(2)
            && waited <= Duration::from_secs(2) + crate::runtime::janitor::JANITOR_PERIOD,
        "{waited:?}"
    );
    assert_eq!(pool.counts().waiting, 0);
    janitor.abort();
}

#[tokio::test(start_paused = true)]
async fn reserve_pool_after_reserve_pool_timeout() {
    let f = fake(10);
    let pool = pool_with(settings(1, 1), &f, ConnCounter::new());
    let _held = pool.checkout().await.unwrap();
    let p2 = pool.clone();
    let waiter = tokio::spawn(async move { p2.checkout().await.map(|_| Instant::now()) });
    let start = Instant::now();
    // The janitor re-evaluates growth periodically.
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        pool.maintain();
    }
    let got = waiter.await.unwrap().unwrap();
    let waited = got - start;
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_millis(3400),
        "{waited:?}"
    );
    assert_eq!(f.opened.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn max_db_connections_is_shared_between_pools() {
    let f = fake(10);
    let db = ConnCounter::new();
    let mut s = settings(5, 0);
    s.max_db_connections = 1;
    let a = pool_with(s, &f, db.clone());
    let mut s = settings(5, 0);
    s.max_db_connections = 1;
    s.query_wait_timeout = Some(Duration::from_secs(1));
    let key = PoolKey {
        database: "db".into(),
        user: "other".into(),
    };
    let b = Pool::new(
        key,
        s,
        db.clone(),
        ConnCounter::new(),
        Arc::new(f.clone()),
        1,
    );
    let _janitor = run_janitor(&b);
    let held = a.checkout().await.unwrap();
    assert!(matches!(b.checkout().await, Err(PoolError::WaitTimeout)));
    assert!(b.counts().total == 0 && db.current() == 1);
    drop(held);
    assert!(b.checkout().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn pause_holds_clients_and_gives_servers_up() {
    let f = fake(1);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let a = pool.checkout().await.unwrap();
    pool.set_paused(true);
    let p2 = pool.clone();
    let waiter = tokio::spawn(async move { p2.checkout().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let c = pool.counts();
    assert_eq!((c.waiting, c.active), (1, 1));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        pool.counts().max_wait >= Duration::from_millis(1500),
        "maxwait = oldest waiter's age"
    );
    pool.release(a, true);
    let c = pool.counts();
    assert_eq!(
        (c.active, c.idle, c.total),
        (0, 0, 0),
        "a paused pool closes released servers"
    );
    pool.set_paused(false);
    waiter.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn reconnect_closes_servers_when_released() {
    let f = fake(1);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let a = pool.checkout().await.unwrap();
    let b = pool.checkout().await.unwrap();
    pool.release(b, true);
    assert_eq!(pool.servers_book.all().len(), 2);
    pool.reconnect(crate::server::log::reason::CONFIG_CHANGED);
    assert_eq!(pool.counts().idle, 0, "idle servers close at once");
    assert_eq!(
        pool.close_needed_count(),
        1,
        "the active one is due to close"
    );
    pool.release(a, true);
    assert_eq!(pool.close_needed_count(), 0);
    assert!(
        pool.servers_book.all().is_empty(),
        "records leave with their connections"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_servers_close_after_server_idle_timeout_but_not_below_min() {
    let f = fake(1);
    let mut s = settings(5, 0);
    s.limits.min_pool_size = 1;
    let pool = pool_with(s, &f, ConnCounter::new());
    let a = pool.checkout().await.unwrap();
    let b = pool.checkout().await.unwrap();
    pool.release(a, true);
    pool.release(b, true);
    let parked = |p: &Pool| {
        let c = p.counts();
        c.idle + c.used
    };
    assert_eq!(pool.counts().idle, 2);
    tokio::time::sleep(Duration::from_secs(599)).await;
    pool.maintain();
    assert_eq!(
        pool.counts().used,
        2,
        "idle past server_check_delay = sv_used"
    );
    assert_eq!(parked(&pool), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    pool.maintain();
    assert_eq!(parked(&pool), 1, "min_pool_size keeps one");
}

#[tokio::test(start_paused = true)]
async fn new_generation_replaces_idle_servers() {
    let f = fake(1);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let a = pool.checkout().await.unwrap();
    let old = a.id;
    pool.release(a, true);
    let mut s = settings(5, 0);
    s.generation = 2;
    pool.update_settings(s);
    let b = pool.checkout().await.unwrap();
    assert_ne!(b.id, old);
}

#[tokio::test(start_paused = true)]
async fn a_dead_idle_server_is_skipped() {
    let f = fake(1);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let a = pool.checkout().await.unwrap();
    let old = a.id;
    pool.release(a, true);
    f.peers.lock().clear(); // the "server" hangs up while idle
                            // Hand-outs trust tokio's readiness for briefly idle servers: let the IO driver turn once.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let b = pool.checkout().await.unwrap();
    assert_ne!(b.id, old);
}

#[tokio::test(start_paused = true)]
async fn a_long_idle_server_is_checked_with_the_kernel() {
    let f = fake(1);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let a = pool.checkout().await.unwrap();
    let old = a.id;
    pool.release(a, true);
    tokio::time::sleep(ASK_KERNEL_AFTER_IDLE).await;
    f.peers.lock().clear(); // hangs up just before the hand-out
    let b = pool.checkout().await.unwrap();
    assert_ne!(b.id, old);
}

#[tokio::test(start_paused = true)]
async fn wait_time_counts_only_an_actual_wait() {
    let f = fake(10);
    let pool = pool_with(settings(1, 0), &f, ConnCounter::new());
    let wait_us = |p: &Arc<Pool>| crate::stats::Counter::get(&p.stats.wait_time_us);
    // The first checkout waits for the connect (10 ms on the paused clock).
    let first = pool.checkout().await.unwrap();
    assert_eq!(wait_us(&pool), 10_000);
    pool.release(first, true);
    // An idle server handed out at once: no wait recorded.
    let again = pool.checkout().await.unwrap();
    assert_eq!(wait_us(&pool), 10_000);
    // A queued client waits for the release, 1 s later.
    let p2 = pool.clone();
    let waiter = tokio::spawn(async move { p2.checkout().await.map(|s| s.id) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    pool.release(again, true);
    waiter.await.unwrap().unwrap();
    assert_eq!(wait_us(&pool), 1_010_000);
    assert_eq!(pool.stats.server_assignments.load(Ordering::Relaxed), 3);
}

#[tokio::test(start_paused = true)]
async fn an_idle_server_is_handed_out_without_a_future_unless_it_needs_a_check() {
    let f = fake(10);
    let mut s = settings(1, 0);
    s.check_query = Some("SELECT 1".into());
    let pool = pool_with(s, &f, ConnCounter::new());
    let settings = pool.settings();
    // Nothing idle yet: the request is put in line at once (one pass through the lock) and a
    // server is opened for it; the async way waits for it with that place in line.
    let queued = pool
        .try_checkout_now(Instant::now(), &settings)
        .err()
        .expect("nothing idle");
    assert!(queued.is_some());
    let c = pool.counts();
    assert_eq!((c.waiting, c.connecting), (1, 1));
    let (first, _) = pool
        .checkout_at(Instant::now(), &settings, queued)
        .await
        .unwrap();
    assert_eq!(pool.counts().waiting, 0);
    let id = first.id;
    pool.release(first, true);
    let now = Instant::now();
    let server = pool
        .try_checkout_now(now, &settings)
        .ok()
        .expect("idle server");
    assert_eq!(server.id, id);
    let c = pool.counts();
    assert_eq!((c.active, c.idle, c.used), (1, 0, 0));
    assert_eq!(pool.stats.server_assignments.load(Ordering::Relaxed), 2);
    pool.release(server, true);
    // Idle past server_check_delay: left idle for the async path, which runs the check.
    tokio::time::sleep(settings.check_delay).await;
    assert!(matches!(
        pool.try_checkout_now(Instant::now(), &settings),
        Err(None)
    ));
    let c = pool.counts();
    assert_eq!((c.active, c.idle + c.used), (0, 1));
    // A paused pool hands nothing out this way.
    pool.set_paused(true);
    assert!(matches!(
        pool.try_checkout_now(Instant::now(), &settings),
        Err(None)
    ));
    assert_eq!(pool.counts().waiting, 0);
}

/// server_check_delay = 0 checks every server a client released, but not one straight from its
/// login (PgBouncer parks a new server idle, not "used").
#[tokio::test(start_paused = true)]
async fn check_delay_zero_checks_a_released_server_not_a_fresh_one() {
    let f = fake(10);
    let mut s = settings(1, 0);
    s.check_query = Some("SELECT 1".into());
    s.check_delay = Duration::ZERO;
    let pool = pool_with(s, &f, ConnCounter::new());
    let settings = pool.settings();
    let fresh = pool.checkout().await.unwrap();
    // The pooler's own look (the welcome's): not a client's use.
    pool.give_back_unused(fresh);
    let server = pool
        .try_checkout_now(Instant::now(), &settings)
        .ok()
        .expect("a server no client used yet needs no check");
    pool.release(server, true);
    assert!(
        matches!(pool.try_checkout_now(Instant::now(), &settings), Err(None)),
        "a released server is left for the path that checks it"
    );
}

#[test]
fn registry_finds_pools_by_borrowed_names() {
    let fake = Arc::new(FakeConnector::default());
    let pools = super::registry::PoolRegistry::new(Arc::new(fake), 1);
    let made = AtomicUsize::new(0);
    let make = || {
        made.fetch_add(1, Ordering::SeqCst);
        settings(2, 0)
    };
    let a = pools.get_or_create("db", "u", make);
    let again = pools.get_or_create("db", "u", make);
    assert!(Arc::ptr_eq(&a, &again), "same names, same pool");
    // The owned key finds what the borrowed names created, and names that only concatenate
    // alike ("db"+"u" vs "d"+"bu") are another pool.
    let key = PoolKey {
        database: "db".into(),
        user: "u".into(),
    };
    assert!(Arc::ptr_eq(&pools.get(&key).unwrap(), &a));
    let other = pools.get_or_create("d", "bu", make);
    assert!(!Arc::ptr_eq(&other, &a));
    assert_eq!(made.load(Ordering::SeqCst), 2);
    assert_eq!(pools.all().len(), 2);
}

/// autodb_idle_timeout: an auto-database without clients and servers is noted idle at once (SHOW
/// DATABASES leaves it out) and freed after the timeout, unless paused; a client keeps it; the next
/// login makes a new pool.
#[tokio::test(start_paused = true)]
async fn idle_auto_databases_are_freed_after_the_timeout() {
    let fake = Arc::new(FakeConnector::default());
    let pools = super::registry::PoolRegistry::new(Arc::new(fake), 1);
    let paused = AtomicBool::new(false);
    let is_paused = |_: &str| paused.load(Ordering::SeqCst);
    let auto = super::registry::AutoDatabases {
        is_auto: &|db| db != "app",
        idle_timeout: Some(Duration::from_secs(10)),
        paused: &is_paused,
    };
    let _app = pools.get_or_create("app", "u", || settings(2, 0));
    let a = pools.get_or_create("auto", "u", || settings(2, 0));
    a.client_joined();
    crate::runtime::janitor::tick(&pools, &auto, None);
    assert!(!pools.is_idle_auto("auto"));
    a.client_left();
    crate::runtime::janitor::tick(&pools, &auto, None);
    assert!(pools.is_idle_auto("auto") && !pools.is_idle_auto("app"));
    paused.store(true, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(11)).await;
    crate::runtime::janitor::tick(&pools, &auto, None);
    assert!(!a.is_removed(), "a paused database is kept");
    paused.store(false, Ordering::SeqCst);
    crate::runtime::janitor::tick(&pools, &auto, None);
    assert!(a.is_removed());
    assert_eq!(pools.all().len(), 1, "only app's pool is left");
    assert!(!pools.is_idle_auto("auto"));
    let again = pools.get_or_create("auto", "u", || settings(2, 0));
    assert!(!Arc::ptr_eq(&a, &again));
}

/// Every way a server can come back dirty ends with it closed, never handed to the next client:
/// inside a transaction or with unread bytes (refused at check-in: `ServerConn::is_clean`), and
/// with bytes or a hang-up arriving on its socket while it idles (a FATAL after a message the
/// pooler let through; refused at hand-out: `Stream::is_quiet`).
#[tokio::test(start_paused = true)]
async fn a_dirty_server_is_never_handed_to_another_client() {
    use tokio::io::AsyncWriteExt;
    let f = fake(0);
    let pool = pool_with(settings(1, 0), &f, ConnCounter::new());
    let mut prev = pool.checkout().await.unwrap().id;
    let dirty: [fn(&mut ServerConn); 2] = [
        |s| s.status = sluice_protocol::TransactionStatus::InTransaction,
        |s| s.rbuf.extend_from_slice(b"Z\0\0\0\x05I"),
    ];
    // (The checkout above was dropped unreleased: closed. Each round takes a fresh one.)
    for make_dirty in dirty {
        let mut s = pool.checkout().await.unwrap();
        assert_ne!(s.id, prev);
        make_dirty(&mut s);
        prev = s.id;
        pool.release(s, true);
        let next = pool.checkout().await.unwrap();
        assert_ne!(next.id, prev, "a dirty server was handed out again");
        prev = next.id;
        drop(next);
    }
    // Idle, then the server speaks (a FATAL) or hangs up: closed at the next hand-out.
    for hang_up in [false, true] {
        let s = pool.checkout().await.unwrap();
        let id = s.id;
        pool.release(s, true);
        let mut peer = f.peers.lock().pop().expect("the server's peer socket");
        if hang_up {
            drop(peer);
        } else {
            peer.write_all(b"E\0\0\0\x08SFATAL\0").await.unwrap();
            f.peers.lock().push(peer);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let next = pool.checkout().await.unwrap();
        assert_ne!(
            next.id, id,
            "a server with unread bytes or a hang-up was handed out"
        );
        drop(next);
    }
}

/// An idle server whose socket hangs up or speaks is closed by the janitor's pass, not left
/// counted as idle until a hand-out finds it (PgBouncer drops it when its socket says so).
#[tokio::test(start_paused = true)]
async fn the_janitor_closes_an_idle_server_that_hung_up_or_spoke() {
    use tokio::io::AsyncWriteExt;
    let f = fake(0);
    let pool = pool_with(settings(2, 0), &f, ConnCounter::new());
    for hang_up in [false, true] {
        let s = pool.checkout().await.unwrap();
        pool.release(s, true);
        assert_eq!(pool.counts().idle, 1);
        let mut peer = f.peers.lock().pop().expect("the server's peer socket");
        if hang_up {
            drop(peer);
        } else {
            peer.write_all(b"E\0\0\0\x08SFATAL\0").await.unwrap();
            f.peers.lock().push(peer);
        }
        // The IO driver sees it (the paused clock advances while the runtime idles).
        tokio::time::sleep(Duration::from_millis(50)).await;
        pool.maintain();
        assert_eq!(pool.counts().idle, 0, "hang_up = {hang_up}");
    }
    // A quiet idle server stays.
    let s = pool.checkout().await.unwrap();
    pool.release(s, true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    pool.maintain();
    assert_eq!(pool.counts().idle, 1);
}

/// The hand-kept counts come back however a state ends: a pooler query whose task is dropped
/// mid-way (its client gone) leaves no sv_tested behind, a connect dropped with its task no
/// sv_login.
#[tokio::test(start_paused = true)]
async fn tested_and_connecting_counts_end_with_their_state_however_it_ends() {
    let f = fake(0);
    let pool = pool_with(settings(5, 0), &f, ConnCounter::new());
    let s = pool.checkout().await.unwrap();
    {
        let _testing = super::states::Testing::begin(&pool, &s);
        assert_eq!(pool.counts().tested, 1);
        // Dropped without `end`: the future running the query was cancelled.
    }
    assert_eq!(pool.counts().tested, 0);
    pool.state.lock().connecting += 1;
    let connecting = super::states::Connecting::adopt(&pool);
    assert_eq!(pool.counts().connecting, 1);
    drop(connecting);
    assert_eq!(pool.counts().connecting, 0);
    pool.release(s, true);
}
