//! server_lifetime = 0 ("use once") and the timeouts of a client waiting for a server; paused
//! clock, fake connector of the parent module.

use super::*;

fn use_once() -> PoolSettings {
    let mut s = settings(1, 0);
    s.timeouts.lifetime = Some(Duration::ZERO);
    s
}

#[tokio::test(start_paused = true)]
async fn a_zero_lifetime_server_serves_one_client_then_closes() {
    let f = fake(10);
    let pool = pool_with(use_once(), &f, ConnCounter::new());
    let janitor = run_janitor(&pool);
    // A new pool's first client: the pooler reads the new server's parameters and gives it back.
    let welcome = pool.checkout_for_pooler().await.unwrap();
    let id = welcome.id;
    pool.give_back_unused(welcome);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        pool.counts().idle,
        1,
        "an unused server outlives a lifetime of 0"
    );
    // The client's first request gets that same server; once released, it closes.
    let s = pool.checkout().await.unwrap();
    assert_eq!(s.id, id);
    pool.release(s, true);
    assert_eq!(pool.counts().total, 0, "used once, then closed");
    let s = pool.checkout().await.unwrap();
    assert_ne!(s.id, id);
    assert_eq!(f.opened.load(Ordering::SeqCst), 2);
    janitor.abort();
}

#[tokio::test(start_paused = true)]
async fn query_timeout_fails_a_waiter_before_query_wait_timeout() {
    let f = fake(10);
    let mut s = settings(1, 0);
    s.relay.query_timeout = Some(Duration::from_secs(3));
    s.query_wait_timeout = Some(Duration::from_secs(120));
    let pool = pool_with(s, &f, ConnCounter::new());
    let janitor = run_janitor(&pool);
    let _held = pool.checkout().await.unwrap();
    let start = Instant::now();
    let err = pool.checkout().await.err().unwrap();
    assert!(matches!(err, PoolError::QueryTimeout), "{err:?}");
    assert_eq!(err.client_notice().message, "query_timeout");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(3)
            && waited <= Duration::from_secs(3) + crate::runtime::janitor::JANITOR_PERIOD,
        "{waited:?}"
    );
    janitor.abort();
}
