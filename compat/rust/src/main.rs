//! tokio-postgres through Sluice: every `prepare` (and every parameterized `query`) is a named
//! server-side statement (s0, s1, ...) and concurrent queries on one client are pipelined. Runs every
//! compat scenario and prints one `PASS|FAIL|SKIP <scenario> <detail>` line each.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{future::join_all, pin_mut, SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Notification};

type Res = Result<String, String>;
type BoxFut = Pin<Box<dyn Future<Output = Res>>>;
type Scenario = (&'static str, fn() -> BoxFut);

fn env(k: &str, def: &str) -> String {
    std::env::var(k)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| def.to_string())
}

fn tag() -> String {
    env("COMPAT_TAG", &format!("rs{}", std::process::id()))
}

fn table() -> String {
    format!("compat_{}", tag())
}

fn lock_key() -> i64 {
    // FNV-1a of the tag: stable across runs.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in tag().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    (h % 1_000_000_000) as i64
}

fn config() -> Config {
    let mut c = Config::new();
    c.host(env("PGHOST", "127.0.0.1"))
        .port(env("PGPORT", "6432").parse().expect("PGPORT"))
        .user(env("PGUSER", "postgres"))
        .password(env("PGPASSWORD", ""))
        .dbname(env("PGDATABASE", "postgres"))
        .connect_timeout(Duration::from_secs(10));
    c
}

/// A client plus the notifications its connection task receives.
struct Conn {
    client: Client,
    notes: mpsc::UnboundedReceiver<Notification>,
}

async fn connect() -> Result<Conn, String> {
    let (client, mut conn) = config().connect(NoTls).await.map_err(e)?;
    let (tx, notes) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        pin_mut!(stream);
        while let Some(m) = stream.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    Ok(Conn { client, notes })
}

async fn conns(n: usize) -> Result<Vec<Conn>, String> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(connect().await?);
    }
    Ok(v)
}

/// Error text: SQLSTATE and message for server errors.
fn e(err: tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => err.to_string(),
    }
}

fn code(r: Result<impl Sized, tokio_postgres::Error>) -> String {
    match r {
        Ok(_) => "no error".into(),
        Err(err) => err
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| err.to_string()),
    }
}

fn expect(cond: bool, msg: impl Into<String>) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg.into())
    }
}

async fn s_connect() -> Res {
    let c = connect().await?;
    let u: String = c
        .client
        .query_one("SELECT current_user::text", &[])
        .await
        .map_err(e)?
        .get(0);
    expect(u == env("PGUSER", ""), format!("current_user={u}"))?;
    Ok(String::new())
}

async fn s_simple_query() -> Res {
    let c = connect().await?;
    let msgs = c
        .client
        .simple_query("SELECT 1; SELECT 1 + 1, 'text'")
        .await
        .map_err(e)?;
    let rows: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect();
    expect(rows.len() == 2, "two result rows")?;
    expect(
        rows[1].get(0) == Some("2") && rows[1].get(1) == Some("text"),
        "unexpected row",
    )?;
    Ok(String::new())
}

async fn s_prepared() -> Res {
    // Two connections alternate; every third round a third one holds a server in a transaction, so
    // in transaction mode they also move between servers.
    let mut cs = conns(3).await?;
    let blocker = cs.pop().unwrap();
    let mut stmts = Vec::new();
    for c in &cs {
        stmts.push(
            c.client
                .prepare("SELECT $1::int * 2 + $2::int")
                .await
                .map_err(e)?,
        );
    }
    for i in 0..12i32 {
        let hold = i % 3 == 1;
        if hold {
            blocker
                .client
                .batch_execute("BEGIN; SELECT 1")
                .await
                .map_err(e)?;
        }
        for (j, c) in cs.iter().enumerate() {
            let k: i32 = if j == 0 { 1 } else { 1000 };
            let got: i32 = c
                .client
                .query_one(&stmts[j], &[&i, &k])
                .await
                .map_err(|x| format!("iteration {i}: {}", e(x)))?
                .get(0);
            expect(got == i * 2 + k, format!("iteration {i}: got {got}"))?;
        }
        if hold {
            blocker.client.batch_execute("COMMIT").await.map_err(e)?;
        }
    }
    // A parameterized query by text: prepared, executed and closed every time.
    for i in 0..6i32 {
        let got: i32 = cs[0]
            .client
            .query_one("SELECT $1::int + 1", &[&i])
            .await
            .map_err(e)?
            .get(0);
        expect(got == i + 1, "query by text")?;
    }
    Ok("12 executions x 2 connections of a prepared statement".into())
}

async fn s_transaction() -> Res {
    let mut cs = conns(2).await?;
    let t = table();
    let other = cs.pop().unwrap();
    let c = &mut cs[0];
    c.client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS \"{t}\"; CREATE TABLE \"{t}\" (id int primary key, v text)"
        ))
        .await
        .map_err(e)?;
    let ins = format!("INSERT INTO \"{t}\" VALUES ($1, $2)");
    let tx = c.client.transaction().await.map_err(e)?;
    tx.execute(&ins, &[&1i32, &"committed"]).await.map_err(e)?;
    tx.commit().await.map_err(e)?;
    let tx = c.client.transaction().await.map_err(e)?;
    tx.execute(&ins, &[&2i32, &"rolled back"])
        .await
        .map_err(e)?;
    tx.rollback().await.map_err(e)?;
    let ids: Vec<i32> = other
        .client
        .query(&format!("SELECT id FROM \"{t}\" ORDER BY id"), &[])
        .await
        .map_err(e)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    expect(
        ids == [1],
        format!("rows seen by another connection: {ids:?}"),
    )?;
    c.client
        .batch_execute(&format!("DROP TABLE \"{t}\""))
        .await
        .map_err(e)?;
    Ok(String::new())
}

async fn s_error_in_tx() -> Res {
    let c = connect().await?;
    let cl = &c.client;
    cl.batch_execute("BEGIN").await.map_err(e)?;
    let got = code(cl.query_one("SELECT 1/$1::int", &[&0i32]).await);
    expect(got == "22012", format!("1/0: {got}"))?;
    let got = code(cl.query_one("SELECT 1", &[]).await);
    expect(got == "25P02", format!("after error: {got}"))?;
    cl.batch_execute("ROLLBACK").await.map_err(e)?;
    let v: i32 = cl
        .query_one("SELECT $1::int", &[&7i32])
        .await
        .map_err(e)?
        .get(0);
    expect(v == 7, "work after rollback")?;
    let got = code(cl.query("SELECT * FROM compat_no_such_table", &[]).await);
    expect(got == "42P01", format!("missing table: {got}"))?;
    cl.simple_query("SELECT 'ok'").await.map_err(e)?;
    Ok(String::new())
}

async fn s_copy() -> Res {
    let c = connect().await?;
    let t = format!("{}_copy", table());
    c.client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS \"{t}\"; CREATE TABLE \"{t}\" (id int, v text)"
        ))
        .await
        .map_err(|x| format!("create table: {}", e(x)))?;
    let sink = c
        .client
        .copy_in::<_, Bytes>(&format!("COPY \"{t}\" (id, v) FROM STDIN"))
        .await
        .map_err(|x| format!("COPY FROM start: {}", e(x)))?;
    pin_mut!(sink);
    for chunk in 0..5 {
        let mut s = String::new();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            s.push_str(&format!("{i}\trow {i}\n"));
        }
        sink.send(Bytes::from(s))
            .await
            .map_err(|x| format!("COPY FROM data: {}", e(x)))?;
    }
    let n = sink
        .finish()
        .await
        .map_err(|x| format!("COPY FROM finish: {}", e(x)))?;
    expect(n == 5000, format!("COPY FROM copied {n}"))?;
    let stream = c
        .client
        .copy_out(&format!(
            "COPY (SELECT id, v FROM \"{t}\" ORDER BY id) TO STDOUT"
        ))
        .await
        .map_err(|x| format!("COPY TO start: {}", e(x)))?;
    pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(b) = stream.next().await {
        out.extend_from_slice(&b.map_err(|x| format!("COPY TO data: {}", e(x)))?);
    }
    let text = String::from_utf8_lossy(&out);
    let lines: Vec<&str> = text.lines().collect();
    expect(
        lines.len() == 5000 && lines[1] == "1\trow 1",
        format!("COPY TO got {} lines", lines.len()),
    )?;
    c.client
        .batch_execute(&format!("DROP TABLE \"{t}\""))
        .await
        .map_err(|x| format!("drop table: {}", e(x)))?;
    Ok("5000 rows in, 5000 out".into())
}

async fn s_large_result() -> Res {
    let c = connect().await?;
    let rows = c
        .client
        .query(
            "SELECT g, 'row ' || g FROM generate_series(1, 100000) g",
            &[],
        )
        .await
        .map_err(e)?;
    let sum: i64 = rows.iter().map(|r| i64::from(r.get::<_, i32>(0))).sum();
    expect(
        rows.len() == 100_000 && sum == 100_000 * 100_001 / 2,
        format!("got {} rows", rows.len()),
    )?;
    c.client.simple_query("SELECT 1").await.map_err(e)?;
    Ok("100000 rows".into())
}

async fn s_cancel() -> Res {
    let c = connect().await?;
    let token = c.client.cancel_token();
    let t0 = Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await
    });
    let got = code(c.client.simple_query("SELECT pg_sleep(20)").await);
    let took = t0.elapsed();
    canceller
        .await
        .map_err(|x| x.to_string())?
        .map_err(|x| format!("cancel request: {}", e(x)))?;
    expect(got == "57014", format!("expected 57014, got {got}"))?;
    expect(
        took < Duration::from_secs(10),
        format!("cancel took {took:?}"),
    )?;
    c.client.simple_query("SELECT 1").await.map_err(e)?;
    Ok(format!("cancelled after {:.2}s", took.as_secs_f64()))
}

async fn s_set_isolation() -> Res {
    let cs = conns(3).await?;
    cs[0]
        .client
        .batch_execute("SET work_mem = '7777kB'")
        .await
        .map_err(e)?;
    // A bound set_config (the value a driver parameter): tracked from the Bind's values.
    cs[0]
        .client
        .query_one("SELECT set_config('app.tenant', $1, false)", &[&TENANT])
        .await
        .map_err(e)?;
    for (i, name) in [(1, "B"), (2, "C")] {
        let seen = settings(&cs[i]).await?;
        expect(
            !seen.contains("7777kB") && !seen.contains(TENANT),
            format!("connection {name} sees A's settings ({seen})"),
        )?;
    }
    let seen = settings(&cs[0]).await?;
    expect(
        seen == format!("7777kB/{TENANT}"),
        format!("connection A lost its settings ({seen})"),
    )?;
    Ok(String::new())
}

/// What set_isolation's connection A set: work_mem and app.tenant.
const TENANT: &str = "it's A";

async fn settings(c: &Conn) -> Result<String, String> {
    Ok(c.client
        .query_one(
            "SELECT current_setting('work_mem') || '/' || coalesce(current_setting('app.tenant', true), '')",
            &[],
        )
        .await
        .map_err(e)?
        .get(0))
}

async fn lock_call(c: &Conn, f: &str) -> Result<bool, String> {
    Ok(c.client
        .query_one(&format!("SELECT {f}($1)"), &[&lock_key()])
        .await
        .map_err(e)?
        .get(0))
}

async fn s_advisory_lock() -> Res {
    let cs = conns(2).await?;
    let (a, b) = (&cs[0], &cs[1]);
    a.client
        .execute("SELECT pg_advisory_lock($1)", &[&lock_key()])
        .await
        .map_err(e)?;
    expect(
        !lock_call(b, "pg_try_advisory_lock").await?,
        "B got the lock A holds",
    )?;
    expect(
        lock_call(a, "pg_advisory_unlock").await?,
        "A does not hold its lock any more",
    )?;
    expect(
        lock_call(b, "pg_try_advisory_lock").await?,
        "B cannot take the lock after A released it",
    )?;
    expect(lock_call(b, "pg_advisory_unlock").await?, "B unlock")?;
    Ok(String::new())
}

async fn s_listen_notify() -> Res {
    let mut cs = conns(2).await?;
    let chan = format!("compat_{}", tag());
    cs[0]
        .client
        .batch_execute(&format!("LISTEN \"{chan}\""))
        .await
        .map_err(e)?;
    cs[1]
        .client
        .execute("SELECT pg_notify($1, $2)", &[&chan, &"hello from B"])
        .await
        .map_err(e)?;
    let n = tokio::time::timeout(Duration::from_secs(3), cs[0].notes.recv())
        .await
        .ok()
        .flatten()
        .ok_or("A received no notification within 3s")?;
    expect(
        n.channel() == chan && n.payload() == "hello from B",
        "wrong notification",
    )?;
    Ok(String::new())
}

async fn s_pipeline() -> Res {
    // Concurrent queries on one client are pipelined: Parse/Bind/Execute/Sync for each, back to back.
    let cs = conns(2).await?;
    for round in 0..3 {
        for (j, c) in cs.iter().enumerate() {
            let st = c
                .client
                .prepare("SELECT $1::int + $2::int")
                .await
                .map_err(e)?;
            let futs = (0..20i32).map(|i| {
                let st = st.clone();
                let cl = &c.client;
                let jj = j as i32;
                async move { cl.query_one(&st, &[&i, &jj]).await }
            });
            for (i, r) in join_all(futs).await.into_iter().enumerate() {
                let v: i32 = r
                    .map_err(|x| format!("round {round} item {i}: {}", e(x)))?
                    .get(0);
                expect(
                    v == i as i32 + j as i32,
                    format!("round {round} item {i}: got {v}"),
                )?;
            }
        }
    }
    // An error in the middle of a pipeline only fails its own query.
    let cl = &cs[0].client;
    let (a, b, c) = tokio::join!(
        cl.query_one("SELECT 1", &[]),
        cl.query_one("SELECT 1/0", &[]),
        cl.query_one("SELECT 2", &[])
    );
    expect(a.is_ok() && c.is_ok(), "neighbours of the failing query")?;
    expect(code(b) == "22012", "failing query in a pipeline")?;
    Ok("3 rounds x 2 connections x 20 pipelined queries + error".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let only: Vec<String> = env("COMPAT_ONLY", "")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let scenarios: Vec<Scenario> = vec![
        ("connect", || Box::pin(s_connect())),
        ("simple_query", || Box::pin(s_simple_query())),
        ("prepared", || Box::pin(s_prepared())),
        ("transaction", || Box::pin(s_transaction())),
        ("error_in_tx", || Box::pin(s_error_in_tx())),
        ("copy", || Box::pin(s_copy())),
        ("large_result", || Box::pin(s_large_result())),
        ("cancel", || Box::pin(s_cancel())),
        ("set_isolation", || Box::pin(s_set_isolation())),
        ("advisory_lock", || Box::pin(s_advisory_lock())),
        ("listen_notify", || Box::pin(s_listen_notify())),
        ("pipeline", || Box::pin(s_pipeline())),
    ];
    let mut failed = 0;
    for (name, f) in scenarios {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let t0 = Instant::now();
        let r = match tokio::time::timeout(Duration::from_secs(30), f()).await {
            Ok(r) => r,
            Err(_) => Err("timed out after 30s".into()),
        };
        let (status, detail) = match r {
            Ok(d) => ("PASS", format!("{d} ({:.2}s)", t0.elapsed().as_secs_f64())),
            Err(d) => {
                failed += 1;
                ("FAIL", d)
            }
        };
        let detail: String = detail.split_whitespace().collect::<Vec<_>>().join(" ");
        println!(
            "{status} {name} {}",
            detail.chars().take(400).collect::<String>()
        );
    }
    std::process::exit(if failed > 0 { 1 } else { 0 });
}
