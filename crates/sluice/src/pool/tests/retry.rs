//! Failed server logins and server_login_retry (PgBouncer 1.25's rules: a new pool's clients wait
//! for the next try, server_login_retry after a server's refusal; a pool that has had a server
//! fails fast with the cached error and retries on demand), and pools freed by pool_idle_timeout; paused clock, fake
//! connector of the parent module.

use super::*;

/// A new pool whose logins the server refuses: the first client gets the server's error; the
/// next waits for the next try, server_login_retry after the first (the janitor's pass starts
/// it), and gets that one's error: one try per server_login_retry, not one per client, as
/// PgBouncer 1.25.2 (compared side by side).
#[tokio::test(start_paused = true)]
async fn login_rejection_of_a_new_pool_is_tried_again_after_server_login_retry() {
    let f = fake(10);
    *f.fail.lock() = Some(ErrorFields {
        severity: "FATAL".into(),
        code: "28P01".into(),
        message: "password authentication failed".into(),
        ..Default::default()
    });
    let pool = pool_with(settings(2, 0), &f, ConnCounter::new());
    match pool.checkout().await {
        Err(PoolError::Rejected(n)) => assert_eq!(n.sqlstate, "28P01"),
        other => panic!("expected rejection, got {:?}", other.map(|s| s.id)),
    }
    let p = pool.clone();
    let next = tokio::spawn(async move { p.checkout().await.map(|s| s.id) });
    tokio::time::sleep(Duration::from_secs(14)).await;
    pool.maintain();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        f.tried.load(Ordering::SeqCst),
        1,
        "no new try before server_login_retry"
    );
    assert!(
        !next.is_finished(),
        "the next client waits for the next try"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    pool.maintain();
    match next.await.unwrap() {
        Err(PoolError::Rejected(n)) => assert_eq!(n.sqlstate, "28P01"),
        other => panic!("expected rejection, got {other:?}"),
    }
    assert_eq!(f.tried.load(Ordering::SeqCst), 2);
    *f.fail.lock() = None;
    tokio::time::sleep(Duration::from_secs(16)).await;
    let p = pool.clone();
    let works = tokio::spawn(async move { p.checkout().await.map(|s| s.id) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    pool.maintain();
    assert!(works.await.unwrap().is_ok());
}

#[tokio::test(start_paused = true)]
async fn failing_logins_after_a_server_fast_fail_and_retry_after_server_login_retry() {
    let f = fake(10);
    let pool = pool_with(settings(2, 0), &f, ConnCounter::new());
    drop(pool.checkout().await.unwrap());
    // The server goes; its next logins are refused.
    pool.close_idle(crate::server::log::reason::PAUSE_MODE);
    *f.fail.lock() = Some(ErrorFields {
        severity: "FATAL".into(),
        code: "53300".into(),
        message: "sorry, too many clients already".into(),
        ..Default::default()
    });
    match pool.checkout().await {
        Err(PoolError::Rejected(n)) => assert_eq!(n.sqlstate, "53300"),
        other => panic!("expected rejection, got {:?}", other.map(|s| s.id)),
    }
    match pool.checkout().await {
        Err(PoolError::LoginFailing(m)) => assert_eq!(m, "sorry, too many clients already"),
        other => panic!("expected the cached error, got {:?}", other.map(|s| s.id)),
    }
    assert_eq!(
        f.tried.load(Ordering::SeqCst),
        2,
        "no new try before the retry time"
    );
    *f.fail.lock() = None;
    tokio::time::sleep(Duration::from_secs(16)).await;
    // Still the cached error (the last try failed), but this request starts a new try...
    assert!(matches!(
        pool.checkout().await,
        Err(PoolError::LoginFailing(_))
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(f.tried.load(Ordering::SeqCst), 3);
    // ... whose server the next client gets.
    assert!(pool.checkout().await.is_ok());
}

/// pool_idle_timeout: a pool without clients and servers leaves the registry after the timeout;
/// one with a client stays, and a paused database keeps its pools.
#[tokio::test(start_paused = true)]
async fn idle_pools_are_freed_after_pool_idle_timeout() {
    let fake = Arc::new(FakeConnector::default());
    let pools = super::registry::PoolRegistry::new(Arc::new(fake), 1);
    let unused = pools.get_or_create("db", "u", || settings(2, 0));
    let used = pools.get_or_create("db", "v", || settings(2, 0));
    used.client_joined();
    let paused = pools.get_or_create("kept", "u", || settings(2, 0));
    let timeout = Some(Duration::from_secs(1));
    let is_paused = |db: &str| db == "kept";
    pools.free_idle_pools(timeout, &is_paused);
    assert_eq!(pools.all().len(), 3, "noted, not freed yet");
    tokio::time::sleep(Duration::from_secs(1)).await;
    pools.free_idle_pools(timeout, &is_paused);
    let left: Vec<String> = pools.all().iter().map(|p| p.key.to_string()).collect();
    assert_eq!(left, ["db/v", "kept/u"]);
    assert!(unused.is_removed() && !used.is_removed() && !paused.is_removed());
    // None (0): nothing more is freed.
    used.client_left();
    tokio::time::sleep(Duration::from_secs(5)).await;
    pools.free_idle_pools(None, &is_paused);
    assert_eq!(pools.all().len(), 2);
}
