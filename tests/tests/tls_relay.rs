//! The relay over TLS through the real binary: large messages with back-pressure on both legs,
//! named prepared statements whose rewritten Bind goes out in one TLS record, session state sent
//! ahead of a request, and TLS sockets that move between workers (servers at hand-out, clients
//! under worker packing).

mod tls_support;

use std::time::Duration;

use sluice_e2e::{RawConn, Sluice};
use tls_support::client::{Negotiation, PgTls};
use tls_support::{builder, ini, pg_with_ssl, Certs, DB_BY_IP};

/// Sluice in transaction mode with TLS towards clients and servers, and one logged-in client.
async fn tls_on_both_legs() -> (Sluice, PgTls) {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = require\n\
         pool_mode = transaction\n",
        DB_BY_IP,
    ))
    .start();
    let mut c = PgTls::connect(s.port, &Certs::get().ca.pem.cert, Negotiation::SslRequest)
        .await
        .unwrap();
    c.startup("trust_user", "app").await.unwrap();
    (s, c)
}

#[tokio::test]
async fn large_messages_cross_tls_on_both_legs() {
    let (_s, mut c) = tls_on_both_legs().await;
    for round in 0..3 {
        // 2 MB towards the server, 6 MB back: both TLS streams see back-pressure.
        let sql = format!("SELECT length('{}')", "y".repeat(2_000_000));
        assert_eq!(
            c.query(&sql).await.unwrap().as_deref(),
            Some("2000000"),
            "round {round}"
        );
        let big = c
            .query("SELECT repeat('x', 6000000)")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(big.len(), 6_000_000, "round {round}");
        assert_eq!(
            c.query("SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .await
                .unwrap()
                .as_deref(),
            Some("true")
        );
    }
}

/// A named prepared statement through transaction mode with TLS on both legs: each Bind's renamed
/// head and the rest of the message reach the server in one TLS write (`poll_write_pair`).
#[tokio::test]
async fn prepared_statements_cross_tls_on_both_legs() {
    let (_s, mut c) = tls_on_both_legs().await;
    let parse = RawConn::message(b'P', b"s1\0SELECT $1::text || repeat('y', 3)\0\0\0");
    let run = |arg: &str| {
        let mut bind = b"\0s1\0\0\0\0\x01".to_vec();
        bind.extend_from_slice(&(arg.len() as i32).to_be_bytes());
        bind.extend_from_slice(arg.as_bytes());
        bind.extend_from_slice(b"\0\0");
        let mut m = RawConn::message(b'B', &bind);
        m.extend(RawConn::message(b'E', b"\0\0\0\0\0"));
        m.extend(RawConn::message(b'S', b""));
        m
    };
    let mut first = parse;
    first.extend(run("a"));
    assert_eq!(c.send_batch(&first).await.unwrap().as_deref(), Some("ayyy"));
    for i in 0..20 {
        let arg = "x".repeat(i * 500);
        assert_eq!(
            c.send_batch(&run(&arg)).await.unwrap(),
            Some(format!("{arg}yyy")),
            "round {i}"
        );
    }
}

/// Two clients with their own application_name share one TLS server: at each hand-out the
/// statements that give the server the client's session go ahead of its request, in the same
/// TLS write (`RelayScratch::send_ahead`), and their replies never reach the client.
#[tokio::test]
async fn session_state_goes_ahead_of_the_request_over_tls() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = require\n\
         pool_mode = transaction\ndefault_pool_size = 1\n",
        DB_BY_IP,
    ))
    .start();
    let mut clients = Vec::new();
    for app in ["app_a", "app_b"] {
        let mut c = PgTls::connect(s.port, &Certs::get().ca.pem.cert, Negotiation::SslRequest)
            .await
            .unwrap();
        c.startup("trust_user", "app").await.unwrap();
        c.query(&format!("SET application_name = '{app}'"))
            .await
            .unwrap();
        clients.push((app, c));
    }
    let sql =
        "SELECT current_setting('application_name') || ' ' || ssl || ' ' || pg_backend_pid() \
               FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let mut pids = std::collections::HashSet::new();
    for round in 0..10 {
        for (app, c) in clients.iter_mut() {
            let got = c.query(sql).await.unwrap().unwrap();
            let mut parts = got.split(' ');
            assert_eq!(parts.next(), Some(*app), "round {round}: {got}");
            assert_eq!(parts.next(), Some("true"), "round {round}: {got}");
            pids.extend(parts.next().map(str::to_string));
        }
    }
    assert_eq!(pids.len(), 1, "one shared server: {pids:?}");
}

/// With two workers and one server, the server's TLS stream moves between the workers' IO
/// drivers at nearly every hand-out (see `workers`): every reply must still arrive, on the one
/// server connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_moves_between_workers_without_losing_a_reply() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust
client_tls_sslmode = require
server_tls_sslmode = require
         pool_mode = transaction
default_pool_size = 1
[sluice]
workers = 2
worker_spread_percent = 0
",
        DB_BY_IP,
    ))
    .start();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let port = s.port;
        tasks.push(tokio::spawn(async move {
            let mut c = PgTls::connect(port, &Certs::get().ca.pem.cert, Negotiation::SslRequest)
                .await
                .unwrap();
            c.startup("trust_user", "app").await.unwrap();
            let mut seen = std::collections::HashSet::new();
            for _ in 0..50 {
                let row = c
                    .query("SELECT pg_backend_pid() || ' ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                    .await
                    .unwrap()
                    .unwrap();
                seen.insert(row);
            }
            seen
        }));
    }
    let mut seen = std::collections::HashSet::new();
    for t in tasks {
        seen.extend(
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(seen.len(), 1, "one TLS server for all clients: {seen:?}");
    assert!(seen.iter().all(|r| r.ends_with(" true")), "{seen:?}");
}

/// Worker packing moves TLS clients too: once one worker is enough, clients of the other move to it
/// between transactions (their socket re-registered under rustls' state) and every query still
/// gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_move_between_workers_without_losing_a_reply() {
    let mport = sluice_e2e::free_port();
    let conf = |spread: u32| {
        ini(
            &format!(
                "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = disable\n\
                 pool_mode = transaction\n[sluice]\nworkers = 2\nworker_spread_percent = {spread}\n\
                 metrics_listen_addr = 127.0.0.1:{mport}\n"
            ),
            DB_BY_IP,
        )
    };
    let s = builder(&conf(0)).start();
    let mut clients = Vec::new();
    // Spread over both workers by the kernel's hash (all 12 on one: 1 in 2,048).
    for _ in 0..12 {
        let mut c = PgTls::connect(s.port, &Certs::get().ca.pem.cert, Negotiation::SslRequest)
            .await
            .unwrap();
        c.startup("trust_user", "app").await.unwrap();
        clients.push(c);
    }
    async fn all_answer(clients: &mut [PgTls], round: usize) {
        for (i, c) in clients.iter_mut().enumerate() {
            let want = (round * 100 + i).to_string();
            let got = c.query(&format!("SELECT {want}")).await.unwrap();
            assert_eq!(got.as_deref(), Some(want.as_str()));
        }
    }
    all_answer(&mut clients, 0).await;
    let (_, _, on_1, _) = sluice_e2e::workers_now(mport).await;
    assert!(on_1 > 0.0, "no TLS client on worker 1");
    s.rewrite_config(&conf(75));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let mut now = (0.0, 0.0, 0.0, 0.0);
    for round in 1..100 {
        all_answer(&mut clients, round).await;
        now = sluice_e2e::workers_now(mport).await;
        // All on worker 0: a client moving over has left worker 1 a moment before it counts on 0.
        if now.0 == 1.0 && now.1 == 12.0 && now.2 == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!((now.0, now.1, now.2), (1.0, 12.0, 0.0), "{}", s.log());
    assert!(now.3 >= on_1, "moves: {now:?}");
    all_answer(&mut clients, 200).await;
}

/// A TLS client that stops reading a large result, and that the pooler then ends
/// (query_timeout): its relay gave up on a write the TLS layer had partly taken. The bytes taken
/// go out and the connection closes (with no FATAL when they end mid-row, as they do here:
/// `server_lost.rs` shows why), and the pooler goes on serving. Before FlushedTls told a retry
/// from a new write, the FATAL's write was reported as the relay's and the writer panicked
/// (found by the TLS chaos soak; `net/tls_io.rs`'s unit tests cover the new write itself).
#[tokio::test]
async fn a_client_ended_while_its_tls_output_is_blocked_is_closed_cleanly() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = require\n\
         pool_mode = transaction\nquery_timeout = 1\n",
        DB_BY_IP,
    ))
    .start();
    let ca = &Certs::get().ca.pem.cert;
    let mut c = PgTls::connect(s.port, ca, Negotiation::SslRequest)
        .await
        .unwrap();
    c.startup("trust_user", "app").await.unwrap();
    // About 200 MB of rows, far more than the sockets and buffers between us hold.
    let sql = b"SELECT repeat('x', 2000) FROM generate_series(1, 100000)\0";
    c.send(&RawConn::message(b'Q', sql)).await.unwrap();
    // query_timeout ends the client while the relay waits for us to read.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !s.log().contains("query timeout") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.log().contains("query timeout"), "{}", s.log());
    let (_, closed) = c.read_until_close(Duration::from_secs(20)).await;
    assert!(closed, "the connection stayed open");
    assert!(!s.log().contains("panicked"), "{}", s.log());
    let mut other = PgTls::connect(s.port, ca, Negotiation::SslRequest)
        .await
        .unwrap();
    other.startup("trust_user", "app").await.unwrap();
    assert_eq!(other.query("SELECT 7").await.unwrap().as_deref(), Some("7"));
}
