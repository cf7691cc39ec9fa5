//! The pool advisor (SHOW ADVICE, /advice): each rule's situation made with pgbench on the real
//! PostgreSQL, with `stats_period = 1` so that a few seconds give the rules their windows (and the
//! cluster's own max_connections for the rules that need it); and a healthy run that gets no advice.

mod bad_input_common;

use std::time::Duration;

use sluice_e2e::{
    free_port, http_get, metrics, pgbench, pgbench_script, sample, Console, ConsoleResult, Sluice,
};

use bad_input_common::{DB_LINE, USERLIST};

fn start(extra: &str) -> (Sluice, u16) {
    start_with(extra, DB_LINE)
}

fn start_with(extra: &str, databases: &str) -> (Sluice, u16) {
    let mport = free_port();
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = trust\nadmin_users = trust_user\npool_mode = transaction\n\
             stats_period = 1\n{extra}"
        ),
        databases,
    ) + &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n");
    (Sluice::builder(&ini).userlist(USERLIST).start(), mport)
}

/// The evidence of the first finding of `rule`.
fn evidence(r: &ConsoleResult, rule: &str) -> String {
    let i = r.col("rule");
    r.find("evidence", |row| row[i].as_deref() == Some(rule))
        .unwrap_or_else(|| panic!("no {rule}: {:?}", r.rows))
}

/// Whether this test runs as root (then Sluice, its child, may read PostgreSQL's /proc entries).
fn root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
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
    // Capped by what PostgreSQL accepts: the harness's cluster has max_connections = 200.
    let ev = evidence(&r, "pool_too_small");
    assert!(ev.contains("max_connections 200"), "{ev}");
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
    // What the idle backends cost PostgreSQL: measured in /proc where Sluice may read it, and the
    // server's work_mem (4 MB by default) from the server itself.
    let ev = evidence(&r, "pool_too_large");
    assert!(ev.contains("MB private memory per idle backend"), "{ev}");
    assert!(ev.contains("work_mem 4 MB"), "{ev}");
    if root() {
        assert!(ev.contains("measured: Private_Dirty of"), "{ev}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_query_after_every_transaction_and_pinned_clients_are_found() {
    let (s, _) = start("default_pool_size = 4\nserver_reset_query_always = 1");
    // Clients pinned by an advisory lock held across transactions, and by LISTEN.
    let pinned = s.connect("trust_user", "", "app").await.unwrap();
    pinned
        .simple_query("SELECT pg_advisory_lock(4242)")
        .await
        .unwrap();
    let listener = s.connect("trust_user", "", "app").await.unwrap();
    listener.simple_query("LISTEN advice_test").await.unwrap();
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
    // The statement kinds that pinned them, counted per kind.
    let ev = evidence(&r, "clients_pinned");
    assert!(ev.starts_with("2 clients"), "{ev}");
    assert!(ev.contains("session advisory locks: 1"), "{ev}");
    assert!(ev.contains("LISTEN: 1"), "{ev}");
    drop(listener);
    pinned
        .simple_query("SELECT pg_advisory_unlock(4242)")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_that_may_open_more_than_max_connections_are_found() {
    // Two databases on the one cluster (max_connections = 200, 3 reserved for superusers), 120
    // servers each at most: 240 > 197.
    let dbs = format!("{DB_LINE}\napp2 = host={{pg_host}} port={{pg_port}} dbname=app");
    let (s, mport) = start_with("default_pool_size = 120", &dbs);
    for db in ["app", "app2"] {
        let c = s.connect("trust_user", "", db).await.unwrap();
        c.simple_query("SELECT 1").await.unwrap();
    }
    let r = advice(&s).await;
    let ev = evidence(&r, "pool_sizes_exceed_max_connections");
    assert!(ev.contains("240 connections"), "{ev}");
    assert!(ev.contains("accepts 197 (max_connections 200"), "{ev}");
    let i = r.col("rule");
    let change = r
        .find("change", |row| {
            row[i].as_deref() == Some("pool_sizes_exceed_max_connections")
        })
        .unwrap();
    // 120 * 197 / 240 = 98 per pool.
    assert!(
        change.starts_with("[pgbouncer] default_pool_size = 98;"),
        "{change}"
    );
    // The dashboard's process panel shows the server's max_connections.
    let (code, body) = http_get(mport, "/dashboard.json").await;
    assert_eq!(code, 200);
    assert!(body.contains("\"max_connections\":200"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statement_cache_churn_is_found() {
    // pgbench -M prepared cycles through four statements; each server keeps two.
    let (s, mport) = start("default_pool_size = 2\nmax_prepared_statements = 2");
    let script = s.socket_dir.join(format!("churn-{}.sql", s.port));
    std::fs::write(&script, "SELECT 1;\nSELECT 2;\nSELECT 3;\nSELECT 4;\n").unwrap();
    let args: Vec<String> = [
        "-n",
        "-M",
        "prepared",
        "-f",
        &script.display().to_string(),
        "-c",
        "2",
        "-j",
        "2",
        "-T",
        "4",
        "-h",
        "127.0.0.1",
        "-p",
        &s.port.to_string(),
        "-U",
        "trust_user",
        "app",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (st, out, err) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        pgbench(&refs, "")
    })
    .await
    .unwrap();
    assert!(st.success(), "pgbench failed:\n{out}\n{err}\n{}", s.log());
    let r = advice(&s).await;
    let ev = evidence(&r, "prepared_statement_cache_churn");
    assert!(ev.contains("max_prepared_statements 2"), "{ev}");
    let i = r.col("rule");
    assert_eq!(
        r.find("change", |row| row[i].as_deref()
            == Some("prepared_statement_cache_churn"))
            .as_deref(),
        Some("[pgbouncer] max_prepared_statements = 4")
    );
    // The count behind it, on /metrics.
    let evicted = sample(
        &metrics(mport).await,
        "sluice_prepared_evictions_total{database=\"app\"}",
    );
    assert!(evicted >= 10.0, "{evicted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_above_what_is_busy_is_found() {
    let (s, _) = start("default_pool_size = 10\nmin_pool_size = 6");
    // One client, mostly idle: well under half of the 6 servers kept open is ever busy.
    load(&s, "SELECT 1;", 1, 4).await;
    let r = advice(&s).await;
    let rule = r.col("rule");
    let change = r
        .find("change", |row| {
            row[rule].as_deref() == Some("min_pool_size_above_load")
        })
        .unwrap_or_else(|| panic!("no min_pool_size_above_load: {:?}", r.rows));
    assert!(
        change.starts_with("[pgbouncer] min_pool_size = "),
        "{change}"
    );
    assert!(
        evidence(&r, "min_pool_size_above_load").contains("min_pool_size 6"),
        "{:?}",
        r.rows
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_near_max_client_conn_are_found() {
    let (s, _) = start("max_client_conn = 10");
    let mut held = Vec::new();
    for _ in 0..9 {
        held.push(s.connect("trust_user", "", "app").await.unwrap());
    }
    let r = advice(&s).await;
    assert!(
        evidence(&r, "max_client_conn_near_limit").contains("of max_client_conn 10"),
        "{:?}",
        r.rows
    );
    drop(held);
}

/// An application reading an insert's id in a transaction of its own (`SELECT lastval()` after
/// the INSERT), on a server another client inserted on in between: the read went behind a
/// DISCARD SEQUENCES, and the advisor names the application change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_reads_in_their_own_transaction_are_found() {
    let (s, _) = start("default_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute(
        "DROP TABLE IF EXISTS advice_ids; CREATE TABLE advice_ids(id serial PRIMARY KEY)",
    )
    .await
    .unwrap();
    for _ in 0..3 {
        a.batch_execute("INSERT INTO advice_ids DEFAULT VALUES")
            .await
            .unwrap();
        b.batch_execute("INSERT INTO advice_ids DEFAULT VALUES")
            .await
            .unwrap();
        let e = a
            .simple_query("SELECT lastval()")
            .await
            .expect_err("B's id is not A's");
        assert_eq!(e.code().map(|c| c.code()), Some("55000"), "{e:?}");
    }
    // Two stats periods close (stats_period = 1).
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let r = advice(&s).await;
    assert!(
        rules(&r).contains(&"sequence_reads_discarded".to_string()),
        "{:?}",
        r.rows
    );
    let ev = evidence(&r, "sequence_reads_discarded");
    assert!(ev.starts_with("3 requests over the last"), "{ev}");
}
