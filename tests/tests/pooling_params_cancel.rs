//! Startup parameter tracking across a shared server and cancel requests, through the real
//! `sluice` binary.

mod pooling_common;

use std::time::{Duration, Instant};

use sluice_e2e::{free_port, metrics, sample, Anchor, Sluice};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use pooling_common::{connect, err_text, join, new_role, pid, psql, start, PW};

// ---------------------------------------------------------------------------------------------
// Startup parameter tracking
// ---------------------------------------------------------------------------------------------

async fn connect_params(s: &Sluice, user: &str, app: &str, tz: &str) -> Client {
    connect_with(s, user, &format!("-c TimeZone={tz}"), |cfg| {
        cfg.application_name(app);
    })
    .await
}

/// A client of database `app` with these `options`, and whatever else `more` sets.
async fn connect_with(
    s: &Sluice,
    user: &str,
    options: &str,
    more: impl FnOnce(&mut tokio_postgres::Config),
) -> Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(s.port)
        .user(user)
        .password(PW)
        .dbname("app")
        .options(options);
    more(&mut cfg);
    let (client, conn) = cfg
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {options}: {}\nlog:\n{}", err_text(&e), s.log()));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// The first column of the first row of a simple query.
async fn simple_first(c: &Client, sql: &str) -> String {
    c.simple_query(sql)
        .await
        .unwrap()
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap()
}

async fn settings(c: &Client) -> (String, String, i32) {
    let row = c
        .query_one(
            "SELECT current_setting('application_name'), current_setting('TimeZone'), pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    let tz_show = simple_first(c, "SHOW timezone").await;
    let tz: String = row.get(1);
    assert_eq!(tz, tz_show);
    (row.get(0), tz, row.get(2))
}

/// Sluice with one server in transaction mode and the metrics endpoint on the returned port.
fn start_one_server(u: &str) -> (Sluice, u16) {
    let mport = free_port();
    let s = start(
        &format!(
            "pool_mode = transaction\ndefault_pool_size = 1\nquery_wait_timeout = 10\n\
             [sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}"
        ),
        &[u],
    );
    (s, mport)
}

/// Hand-outs whose parameter SETs ran in a round trip of their own, and those sent ahead of the
/// request.
async fn param_sets(mport: u16) -> (f64, f64) {
    let m = metrics(mport).await;
    (
        sample(
            &m,
            "sluice_session_syncs_round_trip_total{database=\"app\"}",
        ),
        sample(&m, "sluice_session_syncs_ahead_total{database=\"app\"}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_follow_the_client_across_a_shared_server() {
    let u = new_role("params").await;
    let (s, mport) = start_one_server(&u);
    let a = connect_params(&s, &u, "client_a", "UTC").await;
    let b = connect_params(&s, &u, "client_b", "Asia/Tokyo").await;
    let mut pids = Vec::new();
    for _ in 0..3 {
        let (app, tz, p) = settings(&a).await;
        assert_eq!((app.as_str(), tz.as_str()), ("client_a", "UTC"));
        pids.push(p);
        let (app, tz, p) = settings(&b).await;
        assert_eq!((app.as_str(), tz.as_str()), ("client_b", "Asia/Tokyo"));
        pids.push(p);
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "not one shared server: {pids:?}"
    );
    // The server changed hands five times. A client's values go to a server in a round trip of
    // their own until a server has accepted them (at most once per client); later hand-outs
    // send the SETs in the same write as the request.
    let (round_trips, ahead) = param_sets(mport).await;
    assert!(round_trips <= 2.0, "{round_trips} round trips");
    assert!(round_trips + ahead >= 5.0, "{round_trips} + {ahead} syncs");
    // A SET of a tracked parameter follows the client too.
    a.batch_execute("SET TimeZone = 'Europe/Paris'")
        .await
        .unwrap();
    assert_eq!(settings(&b).await.1, "Asia/Tokyo");
    assert_eq!(settings(&a).await.1, "Europe/Paris");
    assert_eq!(settings(&b).await.1, "Asia/Tokyo");
}

async fn path(c: &Client) -> String {
    c.query_one("SHOW search_path", &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_is_read_with_the_standard_conforming_strings_its_server_will_have() {
    // `a` has standard_conforming_strings off: in its SQL a backslash escapes a quote, so the
    // query below is one string literal. Read with `b`'s setting (on), it would look like a
    // SET of search_path that `a` then carries to every later server.
    let u = new_role("scs").await;
    let (s, mport) = start_one_server(&u);
    let a = connect_params(&s, &u, "a", "UTC").await;
    a.batch_execute("SET standard_conforming_strings = off")
        .await
        .unwrap();
    let b = connect_params(&s, &u, "b", "UTC").await;
    let default_path = path(&b).await;
    // The server last ran `b` (on): `a`'s SET of off goes ahead of this request.
    let (_, ahead_before) = param_sets(mport).await;
    let text = simple_first(&a, r"SELECT 'x\'; SET search_path TO nowhere; SELECT \'y'").await;
    assert_eq!(text, "x'; SET search_path TO nowhere; SELECT 'y");
    assert!(
        param_sets(mport).await.1 > ahead_before,
        "no SET went ahead"
    );
    assert_eq!(path(&b).await, default_path);
    assert_eq!(path(&a).await, default_path);
}

async fn who(c: &Client) -> String {
    c.query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_role_is_set_before_the_request_goes() {
    // SET ROLE may stop being allowed (membership revoked): its replay runs and is answered
    // before the request, which must never run under the login role instead.
    let u = new_role("replay_role").await;
    let target = format!("{u}_target");
    psql(&format!("CREATE ROLE {target}; GRANT {target} TO {u}")).await;
    let (s, mport) = start_one_server(&u);
    let a = connect_params(&s, &u, "a", "UTC").await;
    let b = connect_params(&s, &u, "b", "UTC").await;
    assert_eq!(who(&a).await, u);
    a.batch_execute(&format!("SET ROLE {target}"))
        .await
        .unwrap();
    assert_eq!(who(&b).await, u);
    let before = param_sets(mport).await;
    assert_eq!(who(&a).await, target);
    let after = param_sets(mport).await;
    assert_eq!(after.1, before.1, "a role replay went ahead of the request");
    assert!(after.0 > before.0, "no round trip: {before:?} -> {after:?}");
    // Revoked meanwhile: the replay fails and the request does not run.
    psql(&format!("REVOKE {target} FROM {u}")).await;
    assert_eq!(who(&b).await, u);
    let e = a
        .batch_execute("CREATE TEMP TABLE must_not_exist (x int)")
        .await
        .expect_err("the role replay should have failed");
    assert!(
        err_text(&e).contains("invalid server parameter"),
        "{}",
        err_text(&e)
    );
    let c = connect_params(&s, &u, "c", "UTC").await;
    let rows = c
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = 'must_not_exist'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.get::<_, i64>(0), 0);
}

// ---------------------------------------------------------------------------------------------
// Cancel
// ---------------------------------------------------------------------------------------------

/// Run `SELECT pg_sleep(30)` on `c`, cancel it 400 ms later, and check it stopped with
/// query_canceled within 3 s; the client comes back for more.
async fn sleep_then_cancel(s: &Sluice, c: Client) -> Client {
    let token = c.cancel_token();
    let h = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = c.batch_execute("SELECT pg_sleep(30)").await;
        (c, r, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!h.is_finished());
    token
        .cancel_query(NoTls)
        .await
        .unwrap_or_else(|e| panic!("cancel_query: {e:?}\nlog:\n{}", s.log()));
    let (c, r, took) = join(h, Duration::from_secs(5), "cancelled query").await;
    let e = r.expect_err("pg_sleep(30) should have been cancelled");
    assert_eq!(
        e.code(),
        Some(&SqlState::QUERY_CANCELED),
        "{}",
        err_text(&e)
    );
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let u = new_role("cancel").await;
    let s = start("pool_mode = transaction\ndefault_pool_size = 1", &[&u]);
    let a = connect(&s, &u).await;
    let pa = pid(&a).await;
    let a = sleep_then_cancel(&s, a).await;
    // The pool is usable after: same client, same server (a cancel is not a disconnect), and others.
    assert_eq!(pid(&a).await, pa);
    let b = connect(&s, &u).await;
    assert_eq!(pid(&b).await, pa);
}

/// A cancel must not reach another client's query. PostgreSQL signals the backend twice for one
/// CancelRequest; when the cancelled query has already ended by the second signal, the signal
/// cancels whatever the backend runs next. In transaction pooling that is the next client's query
/// unless the pooler keeps the server out of the pool until the cancel has landed (PgBouncer's
/// `being_canceled`). One server, client `a` cancels its sleeps while `b` waits with short queries
/// for that same server, so each of `b`'s queries starts right after a cancelled one ends. The
/// same run against PgBouncer 1.25.2 shows the expectation is PgBouncer's (before Sluice held such
/// servers back, 80 of 151 and 12 of 168 of `b`'s queries were cancelled here, in two runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_never_reaches_the_next_clients_query() {
    cancel_never_reaches_the_next_query("transaction").await;
}

/// The same in statement pooling, where the server goes back after every statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_never_reaches_the_next_clients_query_in_statement_pooling() {
    cancel_never_reaches_the_next_query("statement").await;
}

async fn cancel_never_reaches_the_next_query(mode: &str) {
    let u = new_role(&format!("cancel_next_{mode}")).await;
    let extra = format!("pool_mode = {mode}\ndefault_pool_size = 1");
    let extra = extra.as_str();
    let s = start(extra, &[&u]);
    let (hits, ran, cancelled) = cancels_beside_queries(s.port, &u).await;
    assert!(hits > 100, "only {hits} of a's 150 sleeps were cancelled");
    assert!(ran > 50, "b ran only {ran} queries");
    assert_eq!(
        cancelled,
        0,
        "{cancelled} of b's {} queries were cancelled by a's cancels\nlog:\n{}",
        ran + cancelled,
        s.log()
    );
    let userlist = format!("\"{u}\" \"{PW}\"\n");
    if let Some(pgb) = Anchor::start(
        &format!("auth_type = md5\n{extra}"),
        "app = host={pg_host} port={pg_port} dbname=app",
        &userlist,
    ) {
        let (hits, ran, cancelled) = cancels_beside_queries(pgb.port, &u).await;
        assert!(
            hits > 100 && ran > 50,
            "PgBouncer: {hits} cancelled, b ran {ran}"
        );
        assert_eq!(cancelled, 0, "PgBouncer let {cancelled} through");
    }
}

/// A cancel for a client whose query still waits for a server (one server, held by another client)
/// finds nothing to cancel: PgBouncer 1.25.2 drops it, and so does Sluice; the query runs once it
/// gets the server. Pinned side by side so that a change to either shows up here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_for_a_queued_query_is_dropped_as_pgbouncer_drops_it() {
    let u = new_role("cancel_queued").await;
    let extra = "pool_mode = transaction\ndefault_pool_size = 1";
    let s = start(extra, &[&u]);
    let sluice = cancel_queued_query(s.port, &u).await;
    assert!(sluice.is_ok(), "Sluice: {sluice:?}");
    let userlist = format!("\"{u}\" \"{PW}\"\n");
    if let Some(pgb) = Anchor::start(
        &format!("auth_type = md5\n{extra}"),
        "app = host={pg_host} port={pg_port} dbname=app",
        &userlist,
    ) {
        let pgbouncer = cancel_queued_query(pgb.port, &u).await;
        assert_eq!(pgbouncer, sluice, "PgBouncer 1.25.2 answered otherwise");
    }
}

/// `b` holds the only server for 1.5 s; `a`'s `SELECT pg_sleep(0.5)` waits for it and is
/// cancelled 300 ms in: Ok(()) when it ran anyway (after b's), Err(SQLSTATE) otherwise.
async fn cancel_queued_query(port: u16, user: &str) -> Result<(), String> {
    let (a, b) = (connect_to(port, user).await, connect_to(port, user).await);
    let holder = tokio::spawn(async move { b.simple_query("SELECT pg_sleep(1.5)").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let token = a.cancel_token();
    let t0 = Instant::now();
    let queued = tokio::spawn(async move { a.simple_query("SELECT pg_sleep(0.5)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.expect("cancel_query");
    let answer = join(queued, Duration::from_secs(10), "queued query").await;
    let took = t0.elapsed();
    join(holder, Duration::from_secs(10), "holder")
        .await
        .expect("the holder's query");
    match answer {
        Ok(_) => {
            assert!(
                took >= Duration::from_millis(1700),
                "ran in {took:?}: not after b's"
            );
            Ok(())
        }
        Err(e) => Err(e
            .code()
            .map_or_else(|| err_text(&e), |c| c.code().to_string())),
    }
}

/// A client of database `app` on `port` (Sluice's or PgBouncer's), as `user`.
async fn connect_to(port: u16, user: &str) -> Client {
    let conn_str = format!("host=127.0.0.1 port={port} user={user} password={PW} dbname=app");
    let (c, conn) = tokio_postgres::connect(&conn_str, NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    c
}

/// `a` runs 150 sleeps, each cancelled 15 ms in, while `b` loops on short queries: (a's sleeps
/// cancelled, b's queries that ran, b's queries cancelled).
async fn cancels_beside_queries(port: u16, user: &str) -> (usize, usize, usize) {
    let (a, b) = (connect_to(port, user).await, connect_to(port, user).await);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut ran, mut cancelled) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match b.simple_query("SELECT pg_sleep(0.002)").await {
                    Ok(_) => ran += 1,
                    Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => cancelled += 1,
                    Err(e) => panic!("b: {}", err_text(&e)),
                }
            }
            (ran, cancelled)
        })
    };
    let mut hits = 0;
    for _ in 0..150 {
        let token = a.cancel_token();
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15)).await;
            token.cancel_query(NoTls).await
        });
        if let Err(e) = a.simple_query("SELECT pg_sleep(10)").await {
            assert_eq!(
                e.code(),
                Some(&SqlState::QUERY_CANCELED),
                "{}",
                err_text(&e)
            );
            hits += 1;
        }
        canceller.await.unwrap().expect("cancel_query");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ran, cancelled) = join(other, Duration::from_secs(10), "b").await;
    (hits, ran, cancelled)
}

/// A request behind statements sent ahead of it (another client's application_name was on the
/// server) can be cancelled: the client's cancel is linked to the server once their replies are in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_request_behind_statements_sent_ahead() {
    let u = new_role("cancel_ahead").await;
    let (s, mport) = start_one_server(&u);
    let a = connect_params(&s, &u, "a", "UTC").await;
    let b = connect_params(&s, &u, "b", "UTC").await;
    // Both clients' values accepted by the server once; then each hand-out sends SETs ahead.
    settings(&a).await;
    settings(&b).await;
    settings(&a).await;
    let before = param_sets(mport).await.1;
    let b = sleep_then_cancel(&s, b).await;
    assert!(param_sets(mport).await.1 > before, "no SETs went ahead");
    assert_eq!(settings(&b).await.0, "b");
    assert_eq!(settings(&a).await.0, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_path_and_read_only_are_tracked_by_default_as_pgbouncer_1_26() {
    // No track_extra_parameters in the file: PgBouncer 1.26's default tracks search_path and
    // default_transaction_read_only, so a client may send them at startup and keeps them on
    // every server it gets, while another client of the same server keeps the defaults.
    let u = new_role("track126").await;
    let (s, _) = start_one_server(&u);
    let a = connect_with(
        &s,
        &u,
        "-c search_path=a_schema -c default_transaction_read_only=on",
        |_| {},
    )
    .await;
    let b = connect_with(&s, &u, "-c application_name=b", |_| {}).await;
    let default_path = path(&b).await;
    assert_ne!(default_path, "a_schema");
    let mut pids = Vec::new();
    for _ in 0..2 {
        assert_eq!(path(&a).await, "a_schema");
        assert_eq!(
            simple_first(&a, "SHOW default_transaction_read_only").await,
            "on"
        );
        let err = a.batch_execute("CREATE TABLE track126 (x int)").await;
        assert_eq!(
            err.unwrap_err().code(),
            Some(&SqlState::READ_ONLY_SQL_TRANSACTION)
        );
        pids.push(simple_first(&a, "SELECT pg_backend_pid()").await);
        assert_eq!(path(&b).await, default_path);
        assert_eq!(
            simple_first(&b, "SHOW default_transaction_read_only").await,
            "off"
        );
        pids.push(simple_first(&b, "SELECT pg_backend_pid()").await);
    }
    assert!(
        pids.windows(2).all(|w| w[0] == w[1]),
        "not one shared server: {pids:?}"
    );
}
