//! Read routing's sibling pools (paused clock, fake connector): one per standby host, made once;
//! their servers count in the pool's SHOW POOLS figures and its database's shared limit; a
//! reload forgets them, the pool's removal removes them.

use super::*;

fn standby() -> ServerAddr {
    ServerAddr::Tcp {
        host: "10.0.0.2".into(),
        port: 5432,
    }
}

#[tokio::test(start_paused = true)]
async fn a_standby_sibling_is_made_once_and_counted_in_the_pool() {
    let f = fake(10);
    let db = ConnCounter::new();
    let pool = pool_with(settings(5, 0), &f, db.clone());
    let r = pool.reader(&standby()).unwrap();
    assert!(Arc::ptr_eq(&r, &pool.reader(&standby()).unwrap()));
    assert!(r.reader(&standby()).is_none(), "a sibling has no siblings");
    assert_eq!(r.settings().target.addrs, vec![standby()]);
    assert_eq!(
        r.settings().target.attrs,
        sluice_config::TargetSessionAttrs::Standby
    );
    let on_primary = pool.checkout().await.unwrap();
    let on_standby = r.checkout().await.unwrap();
    let c = pool.counts();
    assert_eq!((c.active, c.total, c.clients), (2, 2, 1));
    assert_eq!(db.current(), 2, "one database limit for both hosts");
    r.release(on_standby, true);
    pool.release(on_primary, true);
    let c = pool.counts();
    assert_eq!((c.idle, c.total), (2, 2));
    assert_eq!(pool.servers_book.all().len(), 2, "SHOW SERVERS lists both");

    // A reload: the next read gets a sibling with the new settings; the old one's idle server
    // closes.
    pool.update_settings(settings(5, 0));
    let r2 = pool.reader(&standby()).unwrap();
    assert!(!Arc::ptr_eq(&r, &r2));
    assert_eq!(r.counts().total, 0);
    drop(r);
    pool.mark_removed();
    assert!(r2.is_removed());
    assert!(pool.reader(&standby()).is_none());
}
