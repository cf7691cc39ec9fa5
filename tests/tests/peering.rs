//! Peering (`peer_id`, `[peers]`): two Sluice processes on one TCP port (so_reuseport), each with
//! its own Unix socket. A cancel that reaches the process that does not have the client is
//! forwarded to its peer and cancels the right query; keys carry the peer id (PgBouncer's layout).

mod bad_input_common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_e2e::{Console, Sluice};
use tokio::net::UnixStream;
use tokio_postgres::{Client, NoTls};

use bad_input_common::{DB_LINE, USERLIST};

fn ini(id: u16, own: &Path, other: &Path, other_id: u16) -> String {
    Sluice::basic_ini(
        &format!(
            "auth_type = trust\nadmin_users = trust_user\npool_mode = transaction\n\
             default_pool_size = 30\nso_reuseport = 1\npeer_id = {id}\n\n[peers]\n\
             {id} = host={own} port={{port}}\n{other_id} = host={other} port={{port}}\n",
            own = own.display(),
            other = other.display(),
        ),
        DB_LINE,
    )
    .replace(
        "unix_socket_dir = {dir}",
        &format!("unix_socket_dir = {}", own.display()),
    )
}

/// A client logged in through the Unix socket in `dir` (so it is that process's client).
async fn client_via(dir: &Path, port: u16) -> Client {
    let (c, conn) = tokio_postgres::Config::new()
        .host_path(dir)
        .port(port)
        .user("trust_user")
        .dbname("app")
        .connect(NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_that_reach_the_wrong_process_are_forwarded_to_its_peer() {
    let base = tempfile::Builder::new()
        .prefix("sluice-e2e-peers-")
        .tempdir()
        .unwrap();
    let (da, db) = (base.path().join("a"), base.path().join("b"));
    for d in [&da, &db] {
        std::fs::create_dir(d).unwrap();
    }
    let a = Sluice::builder(&ini(1, &da, &db, 2))
        .userlist(USERLIST)
        .start();
    let b = Sluice::builder(&ini(2, &db, &da, 1))
        .userlist(USERLIST)
        .port(a.port)
        .start();
    let port = a.port;
    // B's start returned as soon as the shared port accepted, which A already does: wait for B's
    // own socket.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !db.join(format!(".s.PGSQL.{port}")).exists() {
        assert!(Instant::now() < deadline, "B never listened:\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 100 cancels, each sent to the process the client is not on: 10 clients on each process,
    // 5 rounds.
    let mut clients = Vec::new();
    for i in 0..20 {
        let (own, other) = if i % 2 == 0 { (&da, &db) } else { (&db, &da) };
        clients.push((Arc::new(client_via(own, port).await), other.clone()));
    }
    let t0 = Instant::now();
    let mut cancelled = 0;
    for _round in 0..5 {
        let mut running = Vec::new();
        for (c, _) in &clients {
            let c = c.clone();
            running.push(tokio::spawn(async move {
                c.simple_query("SELECT pg_sleep(20)").await
            }));
        }
        // Every query is running on a server before the cancels go out.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (c, other) in &clients {
            let sock = UnixStream::connect(other.join(format!(".s.PGSQL.{port}")))
                .await
                .unwrap();
            c.cancel_token()
                .cancel_query_raw(sock, NoTls)
                .await
                .unwrap();
        }
        for r in running {
            let r = tokio::time::timeout(Duration::from_secs(10), r)
                .await
                .expect("a query was not cancelled")
                .unwrap();
            let e = r.expect_err("the query finished instead of being cancelled");
            assert_eq!(
                e.as_db_error().map(|d| d.code().code()),
                Some("57014"),
                "{e:?}\nA:\n{}\nB:\n{}",
                a.log(),
                b.log()
            );
            cancelled += 1;
        }
    }
    eprintln!(
        "{cancelled} cancels through the wrong process in {:?}",
        t0.elapsed()
    );
    assert_eq!(cancelled, 100);

    // The clients still work, and each process shows its peers and the peer pool it used.
    for (c, _) in &clients {
        c.simple_query("SELECT 1").await.unwrap();
    }
    let mut con = Console::connect(a.port, "trust_user", "").await.unwrap();
    let peers = con.query("SHOW PEERS").await.unwrap();
    assert_eq!(peers.rows.len(), 2, "{:?}", peers.rows);
    // Over TCP the console lands on either process: each forwarded to the other.
    let pools = con.query("SHOW PEER_POOLS").await.unwrap();
    assert_eq!(pools.rows.len(), 1, "{:?}", pools.rows);
    let peer = pools.rows[0][0].clone().unwrap();
    assert!(peer == "1" || peer == "2", "{peer}");
}
