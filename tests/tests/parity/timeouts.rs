//! Timeouts side by side: idle_transaction_timeout per user in [users] (over the global value),
//! server_connect_timeout against a server that never answers (and query_timeout ending a
//! client's wait for it), server_login_retry while the server refuses logins (what clients see,
//! and how often the pooler tries again), and the SHOW CONFIG rows of the keys this group covers.
//! A fake server in the test (`FakeServer`) stands for the server that never answers or refuses
//! every login, and counts the attempts.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_e2e::{error_fields, PgCluster, RawConn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{bad_input_common, console, pair_with, report, USERS};

/// What the fake server does with each new connection (switched while it runs).
#[derive(Clone, Copy, PartialEq)]
#[repr(u8)]
pub(super) enum Behaviour {
    /// Relay to the test's PostgreSQL.
    Pass = 0,
    /// Accept, read, never answer.
    Silent = 1,
    /// Decline TLS, answer the startup packet with FATAL 53300 and close.
    Refuse = 2,
    /// Accept and close at once.
    Close = 3,
}

/// A server on a free port of 127.0.0.1 that counts the connections it gets: a relay to the
/// test's PostgreSQL, or a server that never answers or refuses every login.
pub(super) struct FakeServer {
    pub(super) port: u16,
    accepted: Arc<AtomicUsize>,
    mode: Arc<AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

/// FATAL 53300, as PostgreSQL answers a login over max_connections.
fn too_many_clients() -> Vec<u8> {
    let mut body = Vec::new();
    for (k, v) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', "53300"),
        (b'M', "sorry, too many clients already"),
    ] {
        body.push(k);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    RawConn::message(b'E', &body)
}

impl FakeServer {
    pub(super) async fn start(how: Behaviour) -> FakeServer {
        Self::start_at("127.0.0.1:0", how).await
    }

    /// On `addr` (`127.0.0.2:<port>`: a second host with the same port).
    pub(super) async fn start_at(addr: &str, how: Behaviour) -> FakeServer {
        let l = TcpListener::bind(addr).await.unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let mode = Arc::new(AtomicU8::new(how as u8));
        let (count, m) = (accepted.clone(), mode.clone());
        let pg_port = PgCluster::get().port;
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut s, _)) = l.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                match m.load(Ordering::SeqCst) {
                    0 => {
                        tokio::spawn(async move {
                            if let Ok(mut pg) = TcpStream::connect(("127.0.0.1", pg_port)).await {
                                let _ = tokio::io::copy_bidirectional(&mut s, &mut pg).await;
                            }
                        });
                    }
                    1 => held.push(s),
                    3 => drop(s),
                    _ => {
                        tokio::spawn(async move {
                            let mut buf = [0u8; 1024];
                            // An SSLRequest is declined ('N'), then the startup packet comes.
                            if let Ok(8) = s.read(&mut buf).await {
                                let _ = s.write_all(b"N").await;
                                let _ = s.read(&mut buf).await;
                            }
                            let _ = s.write_all(&too_many_clients()).await;
                        });
                    }
                }
            }
        });
        FakeServer {
            port,
            accepted,
            mode,
            task,
        }
    }

    pub(super) fn set(&self, how: Behaviour) {
        self.mode.store(how as u8, Ordering::SeqCst);
    }

    pub(super) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Log in as `user` to `db` with the raw client: "ok", or the first error's SQLSTATE and text.
async fn raw_login(port: u16, user: &str, db: &str, wait: Duration) -> (String, Option<RawConn>) {
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", user),
        ("database", db),
    ]))
    .await;
    loop {
        match c.read_message(wait).await {
            Some((b'Z', _)) => return ("ok".into(), Some(c)),
            Some((b'E', body)) => {
                let f = error_fields(&body);
                return (format!("{} {}", f[&b'C'], f[&b'M']), None);
            }
            Some(_) => continue,
            None => return (format!("no answer within {wait:?}"), None),
        }
    }
}

/// What a client does to meet a timeout.
#[derive(Clone, Copy)]
enum Act {
    /// BEGIN, then idle in the transaction (idle_transaction_timeout).
    IdleInTransaction,
    /// Idle between transactions (client_idle_timeout).
    Idle,
    /// A query longer than query_timeout.
    SlowQuery,
}

/// Do `act` for about `idle`: the error that came meanwhile (if any) and whether the connection
/// still runs a query.
async fn meet_timeout(port: u16, user: &str, act: Act, idle: Duration) -> String {
    let (r, c) = raw_login(port, user, "app", Duration::from_secs(5)).await;
    let Some(mut c) = c else {
        return format!("login: {r}");
    };
    match act {
        Act::IdleInTransaction => {
            c.send(&RawConn::message(b'Q', b"BEGIN\0")).await;
            bad_input_common::read_until_ready(&mut c).await;
        }
        Act::Idle => {}
        Act::SlowQuery => {
            let q = format!("SELECT pg_sleep({})\0", idle.as_secs_f32() - 0.5);
            c.send(&RawConn::message(b'Q', q.as_bytes())).await;
        }
    }
    let mut told = "nothing".to_string();
    while let Some((t, body)) = c.read_message(idle).await {
        if t == b'E' {
            let f = error_fields(&body);
            told = format!("{} {} {}", f[&b'S'], f[&b'C'], f[&b'M']);
            break;
        }
        if t == b'Z' {
            break;
        }
    }
    c.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let alive = match c.read_message(Duration::from_secs(3)).await {
        Some((b'T', _)) => "the query runs",
        Some((b'E', _)) => "the query fails",
        _ => "connection closed",
    };
    format!("{told}; then {alive}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_timeouts_per_user_match_pgbouncer() {
    let mut results = Vec::new();
    let idle = Duration::from_millis(2500);
    let tx = Act::IdleInTransaction;
    for (label, extra, act) in [
        (
            "idle_transaction_timeout global 0, trust_user 1",
            "idle_transaction_timeout = 0\n\n[users]\ntrust_user = idle_transaction_timeout=1",
            tx,
        ),
        (
            "idle_transaction_timeout global 1, md5_user 30",
            "idle_transaction_timeout = 1\n\n[users]\nmd5_user = idle_transaction_timeout=30",
            tx,
        ),
        (
            "idle_transaction_timeout global 1, md5_user 0",
            "idle_transaction_timeout = 1\n\n[users]\nmd5_user = idle_transaction_timeout=0",
            tx,
        ),
        (
            "client_idle_timeout global 1, md5_user 0",
            "client_idle_timeout = 1\n\n[users]\nmd5_user = client_idle_timeout=0",
            Act::Idle,
        ),
        (
            "query_timeout global 1, md5_user 0",
            "query_timeout = 1\n\n[users]\nmd5_user = query_timeout=0",
            Act::SlowQuery,
        ),
    ] {
        let Some(p) = pair_with(
            &format!("auth_type = trust\n{extra}"),
            super::DB,
            USERS,
            &[],
        ) else {
            return;
        };
        for user in ["trust_user", "md5_user"] {
            let (a, b) = tokio::join!(
                meet_timeout(p.pgb.port, user, act, idle),
                meet_timeout(p.sl.port, user, act, idle)
            );
            results.push((format!("{label}: {user}"), a, b));
        }
    }
    // Five configurations, two users each.
    report(&results, 5 * 2);
}

/// A client logs in to a database whose server never answers: what it sees, and how many
/// connections the pooler made meanwhile.
async fn login_to_silent_server(port: u16, server: &FakeServer) -> String {
    let (r, _) = raw_login(port, "trust_user", "app", Duration::from_secs(8)).await;
    format!("{r}; tries {}", server.accepted())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_connect_timeout_and_login_retry_match_pgbouncer() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    let mut results = Vec::new();
    // A server that accepts and never answers: server_connect_timeout ends each try,
    // server_login_retry spaces them, query_wait_timeout ends the client's wait.
    let (fa, fb) = (
        FakeServer::start(Behaviour::Silent).await,
        FakeServer::start(Behaviour::Silent).await,
    );
    let extra = "auth_type = trust\nserver_connect_timeout = 1\nserver_login_retry = 2\n\
                 query_wait_timeout = 4";
    let a = pair_with(
        extra,
        &format!("app = host=127.0.0.1 port={} dbname=app", fa.port),
        USERS,
        &[],
    )
    .unwrap();
    let b = pair_with(
        extra,
        &format!("app = host=127.0.0.1 port={} dbname=app", fb.port),
        USERS,
        &[],
    )
    .unwrap();
    let (ra, rb) = tokio::join!(
        login_to_silent_server(a.pgb.port, &fa),
        login_to_silent_server(b.sl.port, &fb)
    );
    results.push(("server never answers".into(), ra, rb));
    drop((a, b));

    // The same with query_timeout below query_wait_timeout: a client waiting for a server is held
    // to query_timeout too.
    let (fa, fb) = (
        FakeServer::start(Behaviour::Silent).await,
        FakeServer::start(Behaviour::Silent).await,
    );
    let extra = "auth_type = trust\nserver_connect_timeout = 1\nserver_login_retry = 5\n\
                 query_timeout = 2\nquery_wait_timeout = 4";
    let a = pair_with(
        extra,
        &format!("app = host=127.0.0.1 port={} dbname=app", fa.port),
        USERS,
        &[],
    )
    .unwrap();
    let b = pair_with(
        extra,
        &format!("app = host=127.0.0.1 port={} dbname=app", fb.port),
        USERS,
        &[],
    )
    .unwrap();
    let (ra, rb) = tokio::join!(
        login_to_silent_server(a.pgb.port, &fa),
        login_to_silent_server(b.sl.port, &fb)
    );
    results.push(("server never answers, query_timeout 2".into(), ra, rb));
    drop((a, b));

    // A server that refuses every login: the first client gets the server's error, the next ones
    // (within server_login_retry) the cached one; after it, a new try.
    let (fa, fb) = (
        FakeServer::start(Behaviour::Refuse).await,
        FakeServer::start(Behaviour::Refuse).await,
    );
    let extra = "auth_type = trust\nserver_login_retry = 2\nquery_wait_timeout = 4";
    let a = pair_with(
        extra,
        &format!("app = host=127.0.0.1 port={} dbname=app", fa.port),
        USERS,
        &[],
    )
    .unwrap();
    let b = pair_with(
        extra,
        &format!("app = host=127.0.0.1 port={} dbname=app", fb.port),
        USERS,
        &[],
    )
    .unwrap();
    let wait = Duration::from_secs(6);
    for (step, pause) in [
        ("first client", Duration::ZERO),
        ("at once after", Duration::ZERO),
        ("1 s later", Duration::from_secs(1)),
        ("after server_login_retry", Duration::from_millis(1500)),
    ] {
        tokio::time::sleep(pause).await;
        let timed = |port| async move {
            let t = std::time::Instant::now();
            let r = raw_login(port, "trust_user", "app", wait).await;
            (r, t.elapsed())
        };
        let ((ra, ta), (rb, tb)) = tokio::join!(timed(a.pgb.port), timed(b.sl.port));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The client right after a refusal waits for the next try, server_login_retry after the
        // first (not one try per client).
        let waited = |t: Duration| match step {
            "at once after" if t >= Duration::from_millis(1500) => "; waited for the next try",
            "at once after" => "; answered at once",
            _ => "",
        };
        results.push((
            format!("server refuses logins: {step}"),
            format!("{}; tries {}{}", ra.0, fa.accepted(), waited(ta)),
            format!("{}; tries {}{}", rb.0, fb.accepted(), waited(tb)),
        ));
    }
    // Nobody asks: no more tries.
    tokio::time::sleep(Duration::from_secs(3)).await;
    results.push((
        "server refuses logins: no client, no tries".into(),
        format!("tries {}", fa.accepted()),
        format!("tries {}", fb.accepted()),
    ));
    // The silent server (query_wait_timeout, then query_timeout), four steps of the refusing
    // one, then no client.
    report(&results, 2 + 4 + 1);
}

/// A query on a logged-in raw client: "ok", or the error's SQLSTATE and text.
async fn query(c: &mut RawConn, sql: &str) -> String {
    c.send(&RawConn::message(b'Q', format!("{sql}\0").as_bytes()))
        .await;
    let mut out = "ok".to_string();
    loop {
        match c.read_message(Duration::from_secs(8)).await {
            Some((b'Z', _)) => return out,
            Some((b'E', body)) => {
                let f = error_fields(&body);
                out = format!("{} {}", f[&b'C'], f[&b'M']);
            }
            Some(_) => continue,
            None if out == "ok" => return "connection closed".into(),
            None => return out,
        }
    }
}

/// Log in and run one query: what each of the two saw, and the tries the server counted.
async fn login_and_query(port: u16, server: &FakeServer) -> String {
    let (r, c) = raw_login(port, "trust_user", "app", Duration::from_secs(8)).await;
    let q = match c {
        Some(mut c) => query(&mut c, "SELECT 1").await,
        None => "-".into(),
    };
    // Tries the pooler starts after answering are counted too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    format!("login {r}; query {q}; tries {}", server.accepted())
}

/// The server worked, then fails (`bad`), then works again: what clients see at each step. Its
/// idle server closes after server_idle_timeout (1 s), so that the next client needs a new one.
async fn failing_after_working(
    port: u16,
    server: &FakeServer,
    bad: Behaviour,
) -> Vec<(&'static str, String)> {
    let mut seen = Vec::new();
    seen.push(("works", login_and_query(port, server).await));
    server.set(bad);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    seen.push(("failing: first client", login_and_query(port, server).await));
    seen.push((
        "failing: at once after",
        login_and_query(port, server).await,
    ));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    seen.push((
        "failing: after server_login_retry",
        login_and_query(port, server).await,
    ));
    server.set(Behaviour::Pass);
    seen.push(("works again: at once", login_and_query(port, server).await));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    seen.push((
        "works again: after server_login_retry",
        login_and_query(port, server).await,
    ));
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_starts_refusing_is_met_as_pgbouncer_meets_it() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    let mut results = Vec::new();
    for (label, bad) in [
        ("refuses logins", Behaviour::Refuse),
        ("closes at once", Behaviour::Close),
        ("never answers", Behaviour::Silent),
    ] {
        let (fa, fb) = (
            FakeServer::start(Behaviour::Pass).await,
            FakeServer::start(Behaviour::Pass).await,
        );
        let extra = "auth_type = trust\nserver_login_retry = 2\nquery_wait_timeout = 4\n\
                     server_idle_timeout = 1\nserver_connect_timeout = 1";
        let entry = |f: &FakeServer| format!("app = host=127.0.0.1 port={} dbname=app", f.port);
        let a = pair_with(extra, &entry(&fa), USERS, &[]).unwrap();
        let b = pair_with(extra, &entry(&fb), USERS, &[]).unwrap();
        let (sa, sb) = tokio::join!(
            failing_after_working(a.pgb.port, &fa, bad),
            failing_after_working(b.sl.port, &fb, bad)
        );
        results.extend(
            sa.into_iter()
                .zip(sb)
                .map(|((step, x), (_, y))| (format!("server {label} after working: {step}"), x, y)),
        );
    }
    // Three ways of failing, six steps each.
    report(&results, 3 * 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_config_rows_of_the_timeout_keys_match_pgbouncer() {
    let Some(p) = pair_with(
        "auth_type = trust\nadmin_users = admin",
        super::DB,
        USERS,
        &[],
    ) else {
        return;
    };
    let (mut ca, mut cb) = (console(p.pgb.port).await, console(p.sl.port).await);
    let (ra, rb) = (
        ca.query("SHOW CONFIG").await.unwrap(),
        cb.query("SHOW CONFIG").await.unwrap(),
    );
    let row = |r: &sluice_e2e::ConsoleResult, key: &str| {
        r.rows
            .iter()
            .find(|row| row[0].as_deref() == Some(key))
            .map(|row| format!("{row:?}"))
            .unwrap_or_else(|| "absent".into())
    };
    let mut results = Vec::new();
    for key in [
        "idle_transaction_timeout",
        "server_connect_timeout",
        "server_login_retry",
        "pool_idle_timeout",
        "query_wait_notify",
        "server_fast_close",
        "dns_max_ttl",
        "dns_nxdomain_ttl",
        "login_notify_message",
    ] {
        results.push((format!("SHOW CONFIG {key}"), row(&ra, key), row(&rb, key)));
    }
    report(&results, 9);
}
