//! Transaction mode with a request larger than one read: the relay must read the rest of a Query
//! it inspects before it may release the server (it used to release at once and relink forever).

use std::time::Duration;

use sluice_e2e::Sluice;

#[tokio::test]
async fn large_simple_query_in_transaction_mode() {
    let s = Sluice::builder(&Sluice::basic_ini(
        "auth_type = trust\npool_mode = transaction\nserver_tls_sslmode = disable\n",
        "app = host={pg_host} port={pg_port} dbname=app",
    ))
    .userlist("\"trust_user\" \"x\"\n")
    .start();
    let c = s.connect("trust_user", "x", "app").await.unwrap();
    for n in [10_000usize, 100_000, 3_000_000] {
        let sql = format!("SELECT length('{}')", "y".repeat(n));
        let rows = tokio::time::timeout(Duration::from_secs(10), c.simple_query(&sql))
            .await
            .unwrap_or_else(|_| panic!("{n}-byte query hangs\n{}", s.log()))
            .unwrap();
        let got = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(got, Some(n.to_string()));
    }
}

/// tcp_socket_buffer (PgBouncer's test suite runs with 4096) is set before each connection's
/// handshake, on the server leg and through the listening socket on the client leg: set after it,
/// under a window scale agreed for the default buffer, every transfer stalled on delayed ACKs (a
/// 4 MB query took minutes, a pg_basebackup did not finish). A hang bound, not a speed figure.
#[tokio::test]
async fn a_small_tcp_socket_buffer_does_not_stall_transfers() {
    let s = Sluice::builder(&Sluice::basic_ini(
        "auth_type = trust\npool_mode = transaction\ntcp_socket_buffer = 4096\n",
        "app = host={pg_host} port={pg_port} dbname=app",
    ))
    .userlist("\"trust_user\" \"x\"\n")
    .start();
    let c = s.connect("trust_user", "x", "app").await.unwrap();
    let n = 4_000_000usize;
    for sql in [
        format!("SELECT length('{}')::text", "y".repeat(n)),
        format!("SELECT length(repeat('y', {n}) || '')::text, repeat('z', {n})"),
    ] {
        let rows = tokio::time::timeout(Duration::from_secs(30), c.simple_query(&sql))
            .await
            .unwrap_or_else(|_| panic!("a {n}-byte transfer stalls\n{}", s.log()))
            .unwrap();
        let got = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(got, Some(n.to_string()));
    }
}
