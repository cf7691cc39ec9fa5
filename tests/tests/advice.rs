//! The pool advisor (SHOW ADVICE, /advice): each rule's situation made with pgbench on the real
//! PostgreSQL, with `stats_period = 1` so that a few seconds give the rules their windows; and a
//! healthy run that gets no advice.

mod bad_input_common;

use std::time::Duration;

use sluice_e2e::{free_port, http_get, pgbench_script, Console, ConsoleResult, Sluice};

use bad_input_common::{DB_LINE, USERLIST};

fn start(extra: &str) -> (Sluice, u16) {
    let mport = free_port();
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = trust\nadmin_users = trust_user\npool_mode = transaction\n\
             stats_period = 1\n{extra}"
        ),
        DB_LINE,
    ) + &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n");
    (Sluice::builder(&ini).userlist(USERLIST).start(), mport)
}

/// pgbench with `sql` as its one-statement script, `clients` clients for `secs` seconds.
async fn load(s: &Sluice, sql: &str, clients: u32, secs: u32) {
    let (st, out, err) = pgbench_script(
        s.socket_dir.clone(),
        sql,
        s.port,
        "trust_user",
        "app",
        clients,
        secs,
    )
    .await;
    assert!(st.success(), "pgbench failed:\n{out}\n{err}\n{}", s.log());
}

async fn advice(s: &Sluice) -> ConsoleResult {
    let mut c = Console::connect(s.port, "trust_user", "").await.unwrap();
    c.query("SHOW ADVICE").await.unwrap()
}

fn rules(r: &ConsoleResult) -> Vec<String> {
    let i = r.col("rule");
    r.rows.iter().map(|row| row[i].clone().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_too_small_for_its_load_is_found_with_the_size_to_set() {
    let (s, mport) = start("default_pool_size = 2");
    load(&s, "SELECT pg_sleep(0.02);", 12, 4).await;
    let r = advice(&s).await;
    assert!(
        rules(&r).contains(&"pool_too_small".to_string()),
        "{:?}",
        r.rows
    );
    let change = r
        .find("change", |row| row[2].as_deref() == Some("pool_too_small"))
        .unwrap();
    let size: u32 = change
        .strip_prefix("[pgbouncer] default_pool_size = ")
        .unwrap_or_else(|| panic!("{change}"))
        .parse()
        .unwrap();
    assert!((3..=12).contains(&size), "{change}");
    assert_eq!(
        r.find("database", |row| row[2].as_deref()
            == Some("pool_too_small"))
            .as_deref(),
        Some("app")
    );
    // The same finding as JSON on the metrics listener.
    let (code, body) = http_get(mport, "/advice").await;
    assert_eq!(code, 200);
    assert!(body.contains("\"rule\":\"pool_too_small\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_pool_gets_no_advice() {
    let (s, mport) = start("default_pool_size = 5");
    load(&s, "SELECT pg_sleep(0.005);", 2, 4).await;
    let r = advice(&s).await;
    assert!(r.rows.is_empty(), "{:?}", r.rows);
    assert_eq!(http_get(mport, "/advice").await.1.trim(), "[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regular_use_of_the_reserve_pool_is_found() {
    let (s, _) = start("default_pool_size = 2\nreserve_pool_size = 3\nreserve_pool_timeout = 0.05");
    load(&s, "SELECT pg_sleep(0.02);", 10, 4).await;
    let r = advice(&s).await;
    assert!(
        rules(&r).contains(&"reserve_pool_in_use".to_string()),
        "{:?}",
        r.rows
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_mostly_idle_make_the_pool_too_large() {
    let (s, _) = start("default_pool_size = 10");
    // A burst opens 8 servers, then a trickle keeps one barely busy.
    load(&s, "SELECT pg_sleep(0.05);", 8, 1).await;
    load(&s, "SELECT 1;", 1, 4).await;
    let r = advice(&s).await;
    assert!(
        rules(&r).contains(&"pool_too_large".to_string()),
        "{:?}",
        r.rows
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_query_after_every_transaction_and_pinned_clients_are_found() {
    let (s, _) = start("default_pool_size = 4\nserver_reset_query_always = 1");
    // A client pinned by an advisory lock held across transactions.
    let pinned = s.connect("trust_user", "", "app").await.unwrap();
    pinned
        .simple_query("SELECT pg_advisory_lock(4242)")
        .await
        .unwrap();
    load(&s, "SELECT 1;", 2, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = advice(&s).await;
    let found = rules(&r);
    assert!(
        found.contains(&"reset_query_in_transaction_mode".to_string()),
        "{:?}",
        r.rows
    );
    assert!(
        found.contains(&"clients_pinned".to_string()),
        "{:?}",
        r.rows
    );
    pinned
        .simple_query("SELECT pg_advisory_unlock(4242)")
        .await
        .unwrap();
}
