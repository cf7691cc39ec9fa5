//! Chaos soak: many kinds of client work at once (transactions, prepared statements, large
//! results, cancels, abandoned queries, failed transactions, login churn over md5 and SCRAM, both
//! pool modes) while an operator and the network do their worst at random (RELOAD with a changed
//! pool size, PAUSE/RESUME, KILL/RESUME, DISABLE/ENABLE, RECONNECT, backends terminated,
//! PostgreSQL restarted, garbage and wrong-password connections). What each test of one fault shows alone, this shows together.
//!
//! Invariants: every answer that arrives is the right one; no acknowledged commit is lost; no
//! error comes from a confused protocol (an unexpected message, a prepared statement that vanished
//! or doubled); nothing hangs; and afterwards the pooler is clean (no client or server left
//! active, fresh logins work, no panic in its log, no descriptors leaked).
//!
//! The soak of tests/tests/chaos.rs (the chaos) and tests/tests/chaos_takeover.rs (the same load
//! across an online restart, `--takeover`, with no other event: nobody may see an error). Each is
//! its own test process: the chaos restarts its process's cluster. `SLUICE_CHAOS_SECS` sets the
//! length (default 15 s in the test command); `SLUICE_CHAOS_SEED` replays a run's choices (the
//! seed is printed).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_e2e::{Console, PgCluster, RawConn, Sluice};
use tokio_postgres::NoTls;

/// Longer than any wait the configuration allows (query_wait_timeout, a PostgreSQL restart): an
/// operation still pending after this is a hang.
const HANG: Duration = Duration::from_secs(30);

const DATABASES: &str = "app_tx = host={pg_host} port={pg_port} dbname=app pool_mode=transaction\n\
                         app_sess = host={pg_host} port={pg_port} dbname=app pool_mode=session";

const HBA: &str = "host pgbouncer trust_user 127.0.0.1/32 trust\n\
                   host all md5_user 127.0.0.1/32 md5\n\
                   host all scram_user 127.0.0.1/32 scram-sha-256\n";

/// How the soak runs: with random operator and network events, or across one takeover.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Chaos,
    Takeover,
}

fn ini(pool_size: u32, socket_dir: &str) -> String {
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = hba\nauth_hba_file = {{hba}}\nadmin_users = trust_user\n\
             default_pool_size = {pool_size}\nmax_prepared_statements = 20\n\
             query_wait_timeout = 10\nserver_connect_timeout = 5\nserver_login_retry = 1\n\
             client_login_timeout = 10\nlog_connections = 0\nlog_disconnections = 0\n"
        ),
        DATABASES,
    );
    // Both processes of a takeover share the Unix socket directory (the takeover socket is there).
    ini.replace(
        "unix_socket_dir = {dir}",
        &format!("unix_socket_dir = {socket_dir}"),
    )
}

/// xorshift64*: the run's choices, replayable from the printed seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the run saw, shared by every task.
#[derive(Default)]
struct Tally {
    /// Operations that completed with the right answer, by kind.
    ok: Mutex<BTreeMap<&'static str, u64>>,
    /// Errors by kind and SQLSTATE (or the client library's description), with one message each.
    errors: Mutex<BTreeMap<String, (u64, String)>>,
    /// Findings: a wrong answer, a protocol confusion, a hang. Any one fails the test.
    findings: Mutex<Vec<String>>,
    acked: Mutex<Vec<i64>>,
    chaos: Mutex<BTreeMap<&'static str, u64>>,
}

impl Tally {
    fn ok(&self, kind: &'static str) {
        *self.ok.lock().unwrap().entry(kind).or_default() += 1;
    }
    fn finding(&self, what: String) {
        self.findings.lock().unwrap().push(what);
    }
    fn chaos(&self, what: &'static str) {
        *self.chaos.lock().unwrap().entry(what).or_default() += 1;
    }
    /// An error during chaos is expected (a terminated backend, a restart, a pool full); one that
    /// shows the protocol or the statement bookkeeping went wrong is a finding.
    fn error(&self, kind: &'static str, session: bool, e: &tokio_postgres::Error) {
        let text = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => e.to_string(),
        };
        let code = e.code().map(|c| c.code().to_string());
        let mode = if session { "session" } else { "transaction" };
        let key = format!(
            "{kind} ({mode} pooling) {}",
            code.clone().unwrap_or_else(|| short(&text))
        );
        // A cancel that reached a query it was not sent for: in transaction pooling, the pooler
        // let another query onto a server before a cancel aimed at it had landed.
        // In session pooling the server is the client's own, and the next query it gets cancelled
        // is its own, as on a direct connection: tokio-postgres' cancel_query does not wait for
        // the cancel to land (libpq's does), and PostgreSQL signals the backend twice.
        let misdirected = kind != "cancel" && !session && code.as_deref() == Some("57014");
        let confused = misdirected
            || text.contains("unexpected message")
            || text.contains("invalid message")
            || text.contains("protocol")
            || matches!(
                code.as_deref(),
                Some("26000") | Some("42P05") | Some("XX000")
            );
        if confused {
            self.finding(format!("{kind} ({mode} pooling): {code:?} {text}"));
        }
        let mut errors = self.errors.lock().unwrap();
        let entry = errors.entry(key).or_insert((0, text));
        entry.0 += 1;
    }
}

fn short(text: &str) -> String {
    text.split(':').next().unwrap_or(text).to_string()
}

struct Ctx {
    sluice: Sluice,
    socket_dir: String,
    tally: Tally,
    next_id: AtomicI64,
    stop_at: Instant,
    ops: AtomicU64,
}

const USERS: [(&str, &str); 2] = [("md5_user", "md5_pass"), ("scram_user", "scram_pass")];

async fn connect(
    ctx: &Ctx,
    user: (&str, &str),
    db: &str,
) -> Option<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> {
    let conn_str = ctx.sluice.conn_str(user.0, user.1, db);
    match tokio::time::timeout(HANG, tokio_postgres::connect(&conn_str, NoTls)).await {
        Ok(Ok((client, conn))) => {
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            ctx.tally.ok("login");
            Some((client, task))
        }
        Ok(Err(e)) => {
            ctx.tally.error("login", db == "app_sess", &e);
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
        Err(_) => {
            ctx.tally
                .finding(format!("login as {} to {db} hung for {HANG:?}", user.0));
            None
        }
    }
}

/// One operation on `client`; false = the connection is gone (the caller makes a new one).
async fn operate(ctx: &Ctx, client: &tokio_postgres::Client, session: bool, rng: &mut Rng) -> bool {
    ctx.ops.fetch_add(1, Ordering::Relaxed);
    let pick = rng.below(if session { 10 } else { 9 });
    let fut = async {
        match pick {
            0 | 1 => {
                let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                let sql = format!("BEGIN; INSERT INTO chaos_commits VALUES ({id}); COMMIT");
                match client.batch_execute(&sql).await {
                    Ok(()) => {
                        ctx.tally.acked.lock().unwrap().push(id);
                        ctx.tally.ok("commit");
                    }
                    Err(e) => {
                        ctx.tally.error("commit", session, &e);
                        // The batch stopped at the error: its transaction is still open (failed).
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                }
            }
            2 | 3 => {
                let (a, b) = (rng.below(1 << 40) as i64, rng.below(1000) as i64);
                let answer = async {
                    let st = client.prepare("SELECT $1::int8 * 2 + $2::int8").await?;
                    let first: i64 = client.query_one(&st, &[&a, &b]).await?.get(0);
                    // The same statement again: in transaction mode possibly on another server.
                    let again: i64 = client.query_one(&st, &[&b, &a]).await?.get(0);
                    Ok::<_, tokio_postgres::Error>((first, again))
                };
                match answer.await {
                    Ok((first, again)) if first == a * 2 + b && again == b * 2 + a => {
                        ctx.tally.ok("prepared")
                    }
                    Ok(got) => ctx.tally.finding(format!(
                        "prepared: ({a}, {b}) answered {got:?}, not ({}, {})",
                        a * 2 + b,
                        b * 2 + a
                    )),
                    Err(e) => ctx.tally.error("prepared", session, &e),
                }
            }
            4 => {
                let n = 2_000 + rng.below(3_000) as i64;
                let sql = "SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, $1::int8) g";
                match client.query(sql, &[&n]).await {
                    Ok(rows) => {
                        let last: Option<i64> = rows.last().map(|r| r.get(0));
                        let right = rows.len() as i64 == n
                            && last == Some(n)
                            && rows.iter().enumerate().all(|(i, r)| {
                                r.get::<_, i64>(0) == i as i64 + 1
                                    && r.get::<_, &str>(1).len() == 256
                            });
                        if right {
                            ctx.tally.ok("rows");
                        } else {
                            ctx.tally.finding(format!(
                                "rows: asked for {n}, got {} rows ending at {last:?}",
                                rows.len()
                            ));
                        }
                    }
                    Err(e) => ctx.tally.error("rows", session, &e),
                }
            }
            5 => {
                let token = client.cancel_token();
                let started = Instant::now();
                let canceller = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    token.cancel_query(NoTls).await
                });
                match client.simple_query("SELECT pg_sleep(5)").await {
                    Err(e) if e.code().map(|c| c.code()) == Some("57014") => {
                        if started.elapsed() >= Duration::from_secs(5) {
                            ctx.tally
                                .finding("cancel: answered only after the sleep".into());
                        } else {
                            ctx.tally.ok("cancel");
                        }
                    }
                    // The cancel may lose the race with a chaos event or arrive before the query
                    // reached a server (PgBouncer drops those too): the sleep then ends normally.
                    Ok(_) => ctx.tally.ok("cancel missed"),
                    Err(e) => ctx.tally.error("cancel", session, &e),
                }
                let _ = canceller.await;
            }
            6 => {
                let answer = async {
                    let failed = client
                        .batch_execute("BEGIN; SELECT 1 / 0")
                        .await
                        .err()
                        .and_then(|e| e.code().map(|c| c.code().to_string()));
                    client.batch_execute("ROLLBACK").await?;
                    let one: i32 = client.query_one("SELECT 1", &[]).await?.get(0);
                    Ok::<_, tokio_postgres::Error>((failed, one))
                };
                match answer.await {
                    Ok((Some(code), 1)) if code == "22012" => ctx.tally.ok("failed transaction"),
                    // A chaos event ended the transaction before the division.
                    Ok((Some(code), 1)) if code.starts_with("57") || code.starts_with("08") => {
                        ctx.tally.ok("failed transaction (chaos)")
                    }
                    Ok(got) => ctx
                        .tally
                        .finding(format!("failed transaction: got {got:?}")),
                    Err(e) => {
                        ctx.tally.error("failed transaction", session, &e);
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                }
            }
            7 => {
                // Eight statements pipelined (tokio-postgres sends them before reading a reply),
                // the fourth failing: the others still get their own answers.
                let base = rng.below(1 << 30) as i64;
                let q = "SELECT $1::int8 + 1";
                let bad = "SELECT 1 / ($1::int8 - $1::int8)";
                let v: Vec<i64> = (0..8).map(|i| base + i).collect();
                let p: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 1]> =
                    v.iter().map(|x| [x as _]).collect();
                let (r0, r1, r2, r3, r4, r5, r6, r7) = tokio::join!(
                    client.query_one(q, &p[0]),
                    client.query_one(q, &p[1]),
                    client.query_one(q, &p[2]),
                    client.query_one(bad, &p[3]),
                    client.query_one(q, &p[4]),
                    client.query_one(q, &p[5]),
                    client.query_one(q, &p[6]),
                    client.query_one(q, &p[7]),
                );
                let mut wrong = Vec::new();
                let mut failed = None;
                for (i, r) in [r0, r1, r2, r4, r5, r6, r7].into_iter().enumerate() {
                    let i = if i >= 3 { i + 1 } else { i } as i64;
                    match r {
                        Ok(row) if row.get::<_, i64>(0) == base + i + 1 => {}
                        Ok(row) => wrong.push((i, row.get::<_, i64>(0))),
                        Err(e) => failed = Some(e),
                    }
                }
                match (r3, failed) {
                    _ if !wrong.is_empty() => ctx
                        .tally
                        .finding(format!("pipeline from {base}: wrong answers {wrong:?}")),
                    (Err(e), None) if e.code().map(|c| c.code()) == Some("22012") => {
                        ctx.tally.ok("pipeline")
                    }
                    (Ok(row), None) => ctx.tally.finding(format!(
                        "pipeline: the division by zero answered {:?}",
                        row.get::<_, i32>(0)
                    )),
                    (Err(e), None) | (_, Some(e)) => ctx.tally.error("pipeline", session, &e),
                }
            }
            8 => {
                use futures_util::{SinkExt, StreamExt};
                let rows = 500 + rng.below(2_000) as usize;
                let tag = rng.below(1 << 40) as i64;
                let answer = async {
                    client.batch_execute("BEGIN").await?;
                    let sink = client
                        .copy_in("COPY chaos_copy (tag, n) FROM STDIN")
                        .await?;
                    futures_util::pin_mut!(sink);
                    let text: String = (0..rows).map(|n| format!("{tag}\t{n}\n")).collect();
                    sink.send(bytes::Bytes::from(text)).await?;
                    sink.finish().await?;
                    let copied: i64 = client
                        .query_one("SELECT count(*) FROM chaos_copy WHERE tag = $1", &[&tag])
                        .await?
                        .get(0);
                    client.batch_execute("ROLLBACK").await?;
                    let out = client
                        .copy_out(&format!(
                            "COPY (SELECT g FROM generate_series(1, {rows}) g) TO STDOUT"
                        ))
                        .await?;
                    futures_util::pin_mut!(out);
                    let mut text = Vec::new();
                    while let Some(chunk) = out.next().await {
                        text.extend_from_slice(&chunk?);
                    }
                    Ok::<_, tokio_postgres::Error>((copied, text))
                };
                match answer.await {
                    Ok((copied, text)) => {
                        let expected: String = (1..=rows).map(|g| format!("{g}\n")).collect();
                        if copied as usize == rows && text == expected.as_bytes() {
                            ctx.tally.ok("copy");
                        } else {
                            ctx.tally.finding(format!(
                                "copy: {rows} rows in, {copied} counted; {} bytes out, {} expected",
                                text.len(),
                                expected.len()
                            ));
                        }
                    }
                    Err(e) => {
                        ctx.tally.error("copy", session, &e);
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                }
            }
            _ => {
                let name = format!("chaos_{}", rng.below(1_000_000));
                let answer = async {
                    client
                        .batch_execute(&format!("SET application_name = '{name}'"))
                        .await?;
                    let row = client.query_one("SHOW application_name", &[]).await?;
                    Ok::<_, tokio_postgres::Error>(row.get::<_, String>(0))
                };
                match answer.await {
                    Ok(got) if got == name => ctx.tally.ok("session state"),
                    Ok(got) => ctx
                        .tally
                        .finding(format!("session state: SET {name}, SHOW said {got}")),
                    Err(e) => ctx.tally.error("session state", session, &e),
                }
            }
        }
    };
    let outcome = tokio::time::timeout(HANG, fut).await;
    if outcome.is_err() {
        ctx.tally
            .finding(format!("operation {pick} hung for {HANG:?}"));
        return false;
    }
    !client.is_closed()
}

/// A client that keeps its connection (making a new one when chaos closes it).
async fn steady(ctx: Arc<Ctx>, n: u64, mut rng: Rng) {
    let user = USERS[(n % 2) as usize];
    let (db, session) = if n.is_multiple_of(3) {
        ("app_sess", true)
    } else {
        ("app_tx", false)
    };
    let mut conn = None;
    let mut kept = None;
    while Instant::now() < ctx.stop_at {
        if conn.is_none() {
            conn = connect(&ctx, user, db).await;
            kept = None;
            continue;
        }
        let (client, _) = conn.as_ref().unwrap();
        // One statement prepared when the connection is made and used for its whole life: in
        // transaction pooling it meets servers that never saw it (new after a restart, a
        // RECONNECT or a RELOAD), where the pooler prepares it again unseen.
        if kept.is_none() {
            match client
                .prepare("SELECT $1::int8 - 1, current_user::text")
                .await
            {
                Ok(st) => kept = Some(st),
                Err(e) => {
                    ctx.tally.error("prepared once", session, &e);
                    if client.is_closed() {
                        conn = None;
                    }
                    continue;
                }
            }
        }
        if rng.below(3) == 0 {
            let x = rng.below(1 << 40) as i64;
            let st = kept.as_ref().unwrap();
            match tokio::time::timeout(HANG, client.query_one(st, &[&x])).await {
                Ok(Ok(row))
                    if row.get::<_, i64>(0) == x - 1 && row.get::<_, String>(1) == user.0 =>
                {
                    ctx.tally.ok("prepared once")
                }
                Ok(Ok(row)) => ctx.tally.finding(format!(
                    "prepared once: ({x}) answered ({}, {})",
                    row.get::<_, i64>(0),
                    row.get::<_, String>(1)
                )),
                Ok(Err(e)) => ctx.tally.error("prepared once", session, &e),
                Err(_) => ctx.tally.finding("prepared once: hung".into()),
            }
            if client.is_closed() {
                conn = None;
                kept = None;
            }
            continue;
        }
        if !operate(&ctx, client, session, &mut rng).await {
            conn = None;
            kept = None;
        }
    }
}

/// A client per operation; some go away in the middle of a query.
async fn churn(ctx: Arc<Ctx>, n: u64, mut rng: Rng) {
    while Instant::now() < ctx.stop_at {
        let user = USERS[rng.below(2) as usize];
        let db = if rng.below(4) == 0 {
            "app_sess"
        } else {
            "app_tx"
        };
        let Some((client, task)) = connect(&ctx, user, db).await else {
            continue;
        };
        if rng.below(3) == 0 {
            // Abandoned: the client's socket closes while its query runs on a server.
            let query = client.simple_query("SELECT pg_sleep(0.2)");
            let _ = tokio::time::timeout(Duration::from_millis(20 + n), query).await;
            ctx.tally.ok("abandoned");
        } else {
            operate(&ctx, &client, db == "app_sess", &mut rng).await;
        }
        drop(client);
        task.abort();
    }
}

async fn console(ctx: &Ctx) -> Option<Console> {
    match tokio::time::timeout(HANG, Console::connect(ctx.sluice.port, "trust_user", "")).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            ctx.tally.finding(format!("console login refused: {e:?}"));
            None
        }
        Err(_) => {
            ctx.tally.finding("console login hung".into());
            None
        }
    }
}

async fn admin(ctx: &Ctx, console: &mut Console, command: &str) {
    match tokio::time::timeout(HANG, console.query(command)).await {
        Ok(Ok(_)) => {}
        // RESUME of a database no longer paused and the like: answered, not hung.
        Ok(Err(fields)) => {
            let mut errors = ctx.tally.errors.lock().unwrap();
            let entry = errors
                .entry(format!("console {command}"))
                .or_insert((0, format!("{fields:?}")));
            entry.0 += 1;
        }
        Err(_) => ctx.tally.finding(format!("console {command} hung")),
    }
}

/// The operator and the network, one event every 0.3 – 1.5 s.
async fn chaos(ctx: Arc<Ctx>, mut rng: Rng) {
    let Some(mut console) = console(&ctx).await else {
        return;
    };
    let pg = PgCluster::get();
    let mut pool_size = 6;
    let mut last_restart = Instant::now();
    while Instant::now() < ctx.stop_at {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(1200))).await;
        match rng.below(9) {
            0 => {
                pool_size = if pool_size == 6 { 3 } else { 6 };
                ctx.sluice.rewrite_config(&ini(pool_size, &ctx.socket_dir));
                admin(&ctx, &mut console, "RELOAD").await;
                ctx.tally.chaos("reload");
            }
            1 => {
                admin(&ctx, &mut console, "PAUSE app_tx").await;
                tokio::time::sleep(Duration::from_millis(rng.below(500))).await;
                admin(&ctx, &mut console, "RESUME app_tx").await;
                ctx.tally.chaos("pause/resume");
            }
            2 => {
                admin(&ctx, &mut console, "RECONNECT app_tx").await;
                ctx.tally.chaos("reconnect");
            }
            3 => {
                let killed = tokio::task::spawn_blocking(move || {
                    pg.psql(
                        "postgres",
                        "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM \
                         pg_stat_activity WHERE datname = 'app' AND backend_type = 'client backend' \
                         ORDER BY random() LIMIT 3) t",
                    )
                })
                .await
                .unwrap();
                let _ = killed;
                ctx.tally.chaos("backends terminated");
            }
            6 => {
                // Every client of one database told to go (KILL), then let back in.
                admin(&ctx, &mut console, "KILL app_tx").await;
                tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
                admin(&ctx, &mut console, "RESUME app_tx").await;
                ctx.tally.chaos("kill/resume");
            }
            7 => {
                admin(&ctx, &mut console, "DISABLE app_sess").await;
                tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
                admin(&ctx, &mut console, "ENABLE app_sess").await;
                ctx.tally.chaos("disable/enable");
            }
            4 if last_restart.elapsed() > Duration::from_secs(8) => {
                tokio::task::spawn_blocking(move || pg.restart_fast())
                    .await
                    .unwrap();
                last_restart = Instant::now();
                ctx.tally.chaos("postgresql restarted");
            }
            _ => {
                let port = ctx.sluice.port;
                let mut junk = Vec::new();
                for i in 0..10u64 {
                    let bytes: Vec<u8> = (0..(rng.below(200) + 1))
                        .map(|_| rng.below(256) as u8)
                        .collect();
                    junk.push(tokio::spawn(async move {
                        let mut c = RawConn::connect(port).await;
                        let said = if i % 2 == 0 {
                            // Then EOF: a partial packet (a few bytes, or a length that
                            // promises more) waits for the rest until client_login_timeout,
                            // as PgBouncer's does; the end of the stream must close it at once.
                            c.send(&bytes).await;
                            c.shutdown_write().await;
                            format!("garbage {bytes:?} and EOF")
                        } else {
                            c.send(&RawConn::startup_packet(&[
                                ("user", "md5_user"),
                                ("database", "app_tx"),
                            ]))
                            .await;
                            let first = c.read_message(Duration::from_secs(5)).await;
                            let said = format!("wrong password, first answer {first:?}");
                            if let Some((b'R', _)) = first {
                                c.send(&RawConn::message(
                                    b'p',
                                    b"md5ffffffffffffffffffffffffffffffff\0",
                                ))
                                .await;
                            }
                            said
                        };
                        let (rest, closed) = c.read_until_close(Duration::from_secs(5)).await;
                        (!closed).then(|| format!("{said}, then {rest:?}"))
                    }));
                }
                for j in junk {
                    if let Some(what) = j.await.unwrap() {
                        ctx.tally
                            .finding(format!("a bad connection was left open: {what}"));
                    }
                }
                ctx.tally.chaos("garbage and wrong passwords");
            }
        }
    }
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Run the soak; panics with the findings.
pub async fn soak(mode: Mode) {
    let secs: u64 = std::env::var("SLUICE_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed: u64 = std::env::var("SLUICE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("{mode:?}: {secs} s, SLUICE_CHAOS_SEED={seed}");
    let pg = PgCluster::get();
    pg.psql(
        "app",
        "DROP TABLE IF EXISTS chaos_commits; CREATE TABLE chaos_commits(id bigint PRIMARY KEY); \
         GRANT ALL ON chaos_commits TO PUBLIC; DROP TABLE IF EXISTS chaos_copy; \
         CREATE TABLE chaos_copy(tag bigint, n int); GRANT ALL ON chaos_copy TO PUBLIC",
    );
    let users = format!(
        "\"md5_user\" \"md5_pass\"\n\"scram_user\" \"{}\"\n\"trust_user\" \"\"\n",
        pg.stored_secret("scram_user")
    );
    let shared = tempfile::Builder::new()
        .prefix("sluice-e2e-chaos-")
        .tempdir()
        .unwrap();
    let socket_dir = match mode {
        Mode::Chaos => "{dir}".to_string(),
        Mode::Takeover => shared.path().display().to_string(),
    };
    let builder = Sluice::builder(&ini(6, &socket_dir))
        .userlist(&users)
        .file("hba.conf", HBA);
    let sluice = builder.clone().start();
    let port = sluice.port;
    let fds_before = fd_count(sluice.pid());
    let ctx = Arc::new(Ctx {
        sluice,
        socket_dir,
        tally: Tally::default(),
        next_id: AtomicI64::new(1),
        stop_at: Instant::now() + Duration::from_secs(secs),
        ops: AtomicU64::new(0),
    });
    let mut rng = Rng(seed);
    let mut tasks = Vec::new();
    for n in 0..9 {
        tasks.push(tokio::spawn(steady(ctx.clone(), n, Rng(rng.next() | 1))));
    }
    for n in 0..4 {
        tasks.push(tokio::spawn(churn(ctx.clone(), n, Rng(rng.next() | 1))));
    }
    let successor = match mode {
        Mode::Chaos => {
            tasks.push(tokio::spawn(chaos(ctx.clone(), Rng(rng.next() | 1))));
            None
        }
        // Half-way through, a new process takes the port and the clients over.
        Mode::Takeover => Some(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(secs) / 2).await;
            let new = builder.port(port).arg("--takeover");
            tokio::task::spawn_blocking(move || new.start())
                .await
                .unwrap()
        })),
    };
    for t in tasks {
        if tokio::time::timeout(Duration::from_secs(secs) + 2 * HANG, t)
            .await
            .is_err()
        {
            ctx.tally.finding("a client task did not end".into());
        }
    }

    let successor = match successor {
        Some(t) => Some(t.await.expect("the new process started")),
        None => None,
    };
    let mut ctx = Arc::into_inner(ctx).expect("every task has ended");
    if let Some(new) = &successor {
        // The old process goes once its last client has (session clients stay there until they
        // leave, and every client of the run has left by now).
        if ctx.sluice.wait_exit(Duration::from_secs(15)).is_none() {
            ctx.tally
                .finding("the old process did not exit after the takeover".into());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !new.log().contains("the takeover is complete") && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !new.log().contains("the takeover is complete") {
            ctx.tally
                .finding("the new process never said the takeover is complete".into());
        }
        if new.log().contains("panicked") {
            ctx.tally.finding("a panic in the new process's log".into());
        }
    }

    if successor.is_some() {
        // The clients did move: the new process served transactions of both pool modes before
        // anyone logged in again below.
        let mut console = Console::connect(port, "trust_user", "")
            .await
            .expect("console of the new process");
        let stats = console.query("SHOW STATS").await.expect("SHOW STATS");
        for db in ["app_tx", "app_sess"] {
            let served: u64 = stats
                .find("total_xact_count", |row| {
                    row[stats.col("database")].as_deref() == Some(db)
                })
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            println!("the new process served {served} transactions of {db}");
            if served < 20 {
                ctx.tally.finding(format!(
                    "the new process served only {served} transactions of {db}"
                ));
            }
        }
    }

    // Afterwards: the pools settle with nobody active and nobody waiting.
    let settled = {
        let mut console = Console::connect(ctx.sluice.port, "trust_user", "")
            .await
            .expect("console after the run");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let pools = console.query("SHOW POOLS").await.expect("SHOW POOLS");
            let busy: Vec<String> = ["app_tx", "app_sess"]
                .iter()
                .flat_map(|db| {
                    ["cl_active", "cl_waiting", "sv_active"]
                        .into_iter()
                        .filter_map(|col| {
                            pools
                                .find(col, |row| {
                                    row[pools.col("database")].as_deref() == Some(*db)
                                })
                                .filter(|v| v != "0")
                                .map(|v| format!("{db} {col}={v}"))
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            if busy.is_empty() {
                break None;
            }
            if Instant::now() > deadline {
                break Some(busy);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    if let Some(busy) = settled {
        ctx.tally
            .finding(format!("15 s after the run the pools still show {busy:?}"));
    }
    for db in ["app_tx", "app_sess"] {
        for user in USERS {
            let c = ctx
                .sluice
                .connect(user.0, user.1, db)
                .await
                .unwrap_or_else(|e| panic!("fresh login {} to {db}: {e}", user.0));
            let v: i32 = c.query_one("SELECT 41 + 1", &[]).await.unwrap().get(0);
            assert_eq!(v, 42);
        }
    }

    // No acknowledged commit lost.
    let acked = ctx.tally.acked.lock().unwrap().clone();
    let present: std::collections::HashSet<i64> = pg
        .psql("app", "SELECT id FROM chaos_commits")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let lost: Vec<i64> = acked
        .iter()
        .copied()
        .filter(|id| !present.contains(id))
        .collect();
    if !lost.is_empty() {
        ctx.tally.finding(format!(
            "{} acknowledged commits lost: {lost:?}",
            lost.len()
        ));
    }

    // Descriptors: what the process had at the start, plus one per server and client it lists
    // now (idle servers stay open), plus a little slack for sockets still closing.
    let pid = successor.as_ref().unwrap_or(&ctx.sluice).pid();
    let mut console = Console::connect(port, "trust_user", "")
        .await
        .expect("console for the descriptor count");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let servers = console.query("SHOW SERVERS").await.expect("SHOW SERVERS");
        let clients = console.query("SHOW CLIENTS").await.expect("SHOW CLIENTS");
        let listed = servers.rows.len() + clients.rows.len();
        let fds = fd_count(pid);
        if fds <= fds_before + listed + 4 {
            break;
        }
        if Instant::now() > deadline {
            ctx.tally.finding(format!(
                "descriptors: {fds_before} at the start, {fds} after the run for {} servers and \
                 {} clients listed",
                servers.rows.len(),
                clients.rows.len()
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = successor.as_ref().unwrap_or(&ctx.sluice).log();
    if log.contains("panicked") {
        ctx.tally.finding("a panic in the log".into());
    }

    println!("chaos: {} operations", ctx.ops.load(Ordering::Relaxed));
    println!("chaos events: {:?}", ctx.tally.chaos.lock().unwrap());
    println!("answered right: {:?}", ctx.tally.ok.lock().unwrap());
    for (key, (n, example)) in ctx.tally.errors.lock().unwrap().iter() {
        println!("error {key}: {n}x, e.g. {example}");
    }
    if mode == Mode::Takeover {
        // Nothing else happened: an error would be the takeover's.
        for (key, (n, example)) in ctx.tally.errors.lock().unwrap().iter() {
            ctx.tally
                .finding(format!("across the takeover, {key}: {n}x, e.g. {example}"));
        }
    }
    let findings = ctx.tally.findings.lock().unwrap();
    let ok = ctx.tally.ok.lock().unwrap();
    for kind in [
        "commit",
        "prepared",
        "prepared once",
        "rows",
        "login",
        "pipeline",
        "copy",
    ] {
        assert!(
            ok.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} succeeded during the run (seed {seed})"
        );
    }
    assert!(
        findings.is_empty(),
        "seed {seed}: {} findings:\n{}\nsluice log (tail):\n{}",
        findings.len(),
        findings.join("\n"),
        log.lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
