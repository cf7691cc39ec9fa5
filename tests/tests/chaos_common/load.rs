//! The soak's operations: what each does and checks.

use super::connect::{cancel, open_with, USERS};
use super::*;

/// How long after its cancel operation a client's queries may still meet that cancel: PostgreSQL
/// signals the backend twice, and under load the second signal can come late.
/// Both tracked parameters set from one bind parameter.
const BOUND_SET: &str =
    "SELECT set_config('application_name', $1, false), set_config('app.chaos', $1, false)";

const OWN_CANCEL_WINDOW: Duration = Duration::from_secs(2);

/// One operation on `client`; false = the connection is gone (the caller makes a new one).
/// `memo`: what this connection's earlier operations left (see `Memo`).
pub(super) async fn operate(
    ctx: &Ctx,
    client: &mut tokio_postgres::Client,
    pooling: Pooling,
    rng: &mut Rng,
    memo: &mut Memo,
) -> bool {
    ctx.ops.fetch_add(1, Ordering::Relaxed);
    let own = memo.own_cancel;
    let error = |kind: &'static str, e: &tokio_postgres::Error| {
        ctx.tally.error_exposed(kind, pooling, &own, e)
    };
    let mut cancel_sent: Option<(Instant, &'static str)> = None;
    let mut cancel_pending = false;
    // 0 - 9, 11 - 16, 18 and 19 in transaction and session pooling (17 now and then, below);
    // statement pooling: what runs outside a transaction block (prepared statements, large
    // results, cancels, pipelines, autocommit writes, SET of a tracked parameter, a large Bind,
    // an insert's id read back).
    const TRANSACTION: &[u64] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 18, 19];
    const SESSION: &[u64] = TRANSACTION;
    const STATEMENT: &[u64] = &[2, 3, 4, 5, 7, 9, 10, 10, 11, 12, 18, 19];
    let ops = match pooling {
        Pooling::Transaction => TRANSACTION,
        Pooling::Session => SESSION,
        Pooling::Statement => STATEMENT,
    };
    let mut pick = ops[rng.below(ops.len() as u64) as usize];
    // Now and then, in the chaos modes, a transaction left idle (17).
    if pooling != Pooling::Statement && !ctx.mode.takeover() && rng.below(80) == 0 {
        pick = 17;
    }
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
                        error("commit", &e);
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
                    Err(e) => error("prepared", &e),
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
                    Err(e) => error("rows", &e),
                }
            }
            5 => {
                let token = client.cancel_token();
                let started = Instant::now();
                let tls = ctx.tls.clone();
                let canceller = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let sent = Instant::now();
                    cancel(tls, token).await;
                    sent
                });
                let slept = client.simple_query("SELECT pg_sleep(5)").await;
                let outcome = match &slept {
                    Err(e) if e.code().map(|c| c.code()) == Some("57014") => "was cancelled",
                    Ok(_) => "ended normally",
                    Err(_) => "ended with another error",
                };
                match slept {
                    Err(e) if e.code().map(|c| c.code()) == Some("57014") => {
                        if started.elapsed() >= Duration::from_secs(5) {
                            ctx.tally
                                .finding("cancel: answered only after the sleep".into());
                        } else {
                            ctx.tally.ok("cancel");
                        }
                        // In session pooling the server is the client's own: PostgreSQL's second
                        // signal for the cancel may land on the client's next query, as on a
                        // direct connection (tokio-postgres does not wait for the cancel to
                        // land). In the other modes the pooler holds the server until it has.
                        cancel_pending = pooling == Pooling::Session;
                    }
                    // The cancel may lose the race with a chaos event or arrive before the query
                    // reached a server (PgBouncer drops those too): the sleep then ends normally.
                    Ok(_) => ctx.tally.cancel_missed(),
                    // Ended by a chaos event: the cancel may land on what runs next.
                    Err(e) => {
                        error("cancel", &e);
                        cancel_pending = true;
                    }
                }
                if let Ok(sent) = canceller.await {
                    cancel_sent = Some((sent, outcome));
                }
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
                        error("failed transaction", &e);
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
                    (Err(e), None) | (_, Some(e)) => error("pipeline", &e),
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
                        error("copy", &e);
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                }
            }
            19 => {
                // An insert's id read back in a request of its own (PDO's lastInsertId()): the
                // client's own id, or (transaction and statement pooling) PostgreSQL's 55000
                // when the pooler discarded the values another client left on the server:
                // never another id.
                let read = if rng.below(2) == 0 {
                    "SELECT lastval()"
                } else {
                    "SELECT currval('chaos_ids_id_seq')"
                };
                let answer = async {
                    let id: i64 = client
                        .query_one("INSERT INTO chaos_ids DEFAULT VALUES RETURNING id", &[])
                        .await?
                        .get(0);
                    Ok::<_, tokio_postgres::Error>((id, client.simple_query(read).await))
                };
                match answer.await {
                    Ok((id, Ok(rows))) => {
                        let got = rows.iter().find_map(|m| match m {
                            tokio_postgres::SimpleQueryMessage::Row(r) => {
                                r.get(0).map(str::to_string)
                            }
                            _ => None,
                        });
                        if got.as_deref() == Some(id.to_string().as_str()) {
                            ctx.tally.ok("sequence read");
                        } else {
                            ctx.tally.finding(format!(
                                "{read} after inserting id {id} answered {got:?}"
                            ));
                        }
                    }
                    Ok((_, Err(e)))
                        if pooling != Pooling::Session
                            && e.code().map(|c| c.code()) == Some("55000") =>
                    {
                        ctx.tally.ok("sequence read discarded");
                    }
                    Ok((_, Err(e))) | Err(e) => error("sequence read", &e),
                }
            }
            10 => {
                // One statement, its own transaction: acknowledged once CommandComplete and
                // ReadyForQuery arrived.
                let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                match client
                    .execute("INSERT INTO chaos_commits VALUES ($1)", &[&id])
                    .await
                {
                    Ok(1) => {
                        ctx.tally.acked.lock().unwrap().push(id);
                        ctx.tally.ok("autocommit");
                    }
                    Ok(n) => ctx
                        .tally
                        .finding(format!("autocommit insert {id}: {n} rows")),
                    Err(e) => error("autocommit", &e),
                }
            }
            11 => {
                // More named statements than max_prepared_statements (20): the pooler evicts
                // them from its servers and prepares them again unseen, each meant for its own
                // text. Some texts are shared by other clients (the same statement, other names).
                let base = rng.below(1_000) as i64;
                let offsets: Vec<i64> = (0..25).map(|_| rng.below(40) as i64).collect();
                let answer = async {
                    let mut statements = Vec::new();
                    for k in &offsets {
                        let sql = format!("SELECT $1::int8 + {k}");
                        statements.push(client.prepare(&sql).await?);
                    }
                    let mut got = Vec::new();
                    for (st, _) in statements.iter().zip(&offsets).rev() {
                        got.push(client.query_one(st, &[&base]).await?.get::<_, i64>(0));
                    }
                    got.reverse();
                    Ok::<_, tokio_postgres::Error>(got)
                };
                match answer.await {
                    Ok(got) => {
                        let want: Vec<i64> = offsets.iter().map(|k| base + k).collect();
                        if got == want {
                            ctx.tally.ok("many prepared");
                        } else {
                            ctx.tally.finding(format!(
                                "many prepared: {base} + {offsets:?} answered {got:?}"
                            ));
                        }
                    }
                    Err(e) => error("many prepared", &e),
                }
            }
            12 => {
                // Simple queries pipelined: each its own Query, sent before the first answer.
                let base = rng.below(1 << 30) as i64;
                let q: Vec<String> = (0..4).map(|i| format!("SELECT {}", base + i)).collect();
                let (a, b, c, d) = tokio::join!(
                    client.simple_query(&q[0]),
                    client.simple_query(&q[1]),
                    client.simple_query(&q[2]),
                    client.simple_query(&q[3]),
                );
                let value = |r: Result<Vec<tokio_postgres::SimpleQueryMessage>, _>| {
                    r.map(|msgs| {
                        msgs.iter().find_map(|m| match m {
                            tokio_postgres::SimpleQueryMessage::Row(row) => {
                                row.get(0).map(str::to_string)
                            }
                            _ => None,
                        })
                    })
                };
                let got = [value(a), value(b), value(c), value(d)];
                let mut wrong = Vec::new();
                let mut failed = None;
                for (i, r) in got.into_iter().enumerate() {
                    match r {
                        Ok(Some(v)) if v == (base + i as i64).to_string() => {}
                        Ok(v) => wrong.push((i, v)),
                        Err(e) => failed = Some(e),
                    }
                }
                match failed {
                    _ if !wrong.is_empty() => ctx.tally.finding(format!(
                        "simple pipeline from {base}: wrong answers {wrong:?}"
                    )),
                    None => ctx.tally.ok("simple pipeline"),
                    Some(e) => error("simple pipeline", &e),
                }
            }
            13 => {
                // Session state that pins (an advisory lock, a temporary table): the client keeps
                // its server until it lets go, or, if that server is lost, it is told. Never
                // silently another server: the lock would be gone, the table missing.
                let key = rng.below(1 << 62) as i64;
                let table = format!("chaos_tmp_{}", rng.below(1 << 40));
                let pid = "SELECT pg_backend_pid()";
                // Half the time the lock and the table are made inside a DO block, whose body
                // the classifier reads (`session_state/do_block.rs`).
                let in_block = rng.below(2) == 0;
                let answer = async {
                    if in_block {
                        client
                            .batch_execute(&format!(
                                "DO $$ BEGIN PERFORM pg_advisory_lock({key}); \
                                 IF true THEN CREATE TEMP TABLE {table} (n int); END IF; END $$"
                            ))
                            .await?;
                        client
                            .batch_execute(&format!("INSERT INTO {table} VALUES (1), (2), (3)"))
                            .await?;
                    } else {
                        client
                            .query_one("SELECT pg_advisory_lock($1)", &[&key])
                            .await?;
                        client
                            .batch_execute(&format!(
                                "CREATE TEMP TABLE {table} (n int); \
                                 INSERT INTO {table} VALUES (1), (2), (3)"
                            ))
                            .await?;
                    }
                    let first: i32 = client.query_one(pid, &[]).await?.get(0);
                    let count: i64 = client
                        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                        .await?
                        .get(0);
                    let then: i32 = client.query_one(pid, &[]).await?.get(0);
                    let unlocked: bool = client
                        .query_one("SELECT pg_advisory_unlock($1)", &[&key])
                        .await?
                        .get(0);
                    client.batch_execute(&format!("DROP TABLE {table}")).await?;
                    Ok::<_, tokio_postgres::Error>((first, count, then, unlocked))
                };
                match answer.await {
                    Ok((first, 3, then, true)) if first == then => ctx.tally.ok("pinned"),
                    Ok(got) => ctx.tally.finding(format!(
                        "pinned: (backend, rows, backend, unlocked) = {got:?}, not (p, 3, p, true)"
                    )),
                    Err(e) => {
                        error("pinned", &e);
                        // Whatever is left (the server may still be this client's).
                        let _ = client
                            .batch_execute("SELECT pg_advisory_unlock_all(); DISCARD TEMP")
                            .await;
                    }
                }
            }
            14 => {
                // More state that pins: a cursor WITH HOLD and an SQL-level prepared statement,
                // used over several transactions, then closed and deallocated.
                let n = 3 + rng.below(5) as i64;
                let stmt = format!("chaos_q{}", rng.below(1 << 40));
                let answer = async {
                    let values = |msgs: Vec<tokio_postgres::SimpleQueryMessage>| -> Vec<i64> {
                        msgs.into_iter()
                            .filter_map(|m| match m {
                                tokio_postgres::SimpleQueryMessage::Row(r) => {
                                    r.get(0).and_then(|v| v.parse().ok())
                                }
                                _ => None,
                            })
                            .collect()
                    };
                    client
                        .batch_execute(&format!(
                            "BEGIN; DECLARE chaos_c CURSOR WITH HOLD FOR \
                             SELECT g FROM generate_series(1, {n}) g; COMMIT; \
                             PREPARE {stmt} (int8) AS SELECT $1 * 3"
                        ))
                        .await?;
                    let head = values(client.simple_query("FETCH 2 FROM chaos_c").await?);
                    let tripled =
                        values(client.simple_query(&format!("EXECUTE {stmt}({n})")).await?);
                    let rest = values(client.simple_query("FETCH ALL FROM chaos_c").await?);
                    client
                        .batch_execute(&format!("CLOSE chaos_c; DEALLOCATE {stmt}"))
                        .await?;
                    Ok::<_, tokio_postgres::Error>((head, tripled, rest))
                };
                match answer.await {
                    Ok((head, tripled, rest))
                        if head == [1, 2]
                            && tripled == [n * 3]
                            && rest == (3..=n).collect::<Vec<_>>() =>
                    {
                        ctx.tally.ok("held cursor")
                    }
                    Ok(got) => ctx.tally.finding(format!(
                        "held cursor: fetched and executed {got:?} (cursor over 1..={n})"
                    )),
                    Err(e) => {
                        error("held cursor", &e);
                        // (A batch that stopped in its transaction block left it open.)
                        let _ = client.batch_execute("ROLLBACK").await;
                        let _ = client
                            .batch_execute(&format!("CLOSE ALL; DEALLOCATE {stmt}"))
                            .await;
                    }
                }
            }
            17 => {
                // A transaction left idle past idle_transaction_timeout (2 s, chaos modes): the
                // pooler closes its server and the client, and its insert never commits (the
                // server must not go back to the pool with it, where another client's COMMIT
                // would commit it).
                let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
                let answer = async {
                    client
                        .batch_execute(&format!("BEGIN; INSERT INTO chaos_commits VALUES ({id})"))
                        .await?;
                    tokio::time::sleep(Duration::from_secs(4)).await;
                    let closed = client.is_closed();
                    if !closed {
                        client.batch_execute("COMMIT").await?;
                    }
                    Ok::<_, tokio_postgres::Error>(closed)
                };
                match answer.await {
                    Ok(true) => {
                        ctx.tally.aborted.lock().unwrap().push(id);
                        ctx.tally.ok("idle in transaction, closed");
                    }
                    Ok(false) => {
                        ctx.tally.acked.lock().unwrap().push(id);
                        ctx.tally.finding(format!(
                            "a transaction idle for 4 s was not closed (idle_transaction_timeout \
                             = 2): its COMMIT ran (row {id})"
                        ));
                    }
                    // Ended otherwise (the COMMIT failed): its outcome is not known here.
                    Err(e) => {
                        error("idle in transaction", &e);
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                }
            }
            18 => {
                // A large message from the client: a Bind of 128 KiB - 1.1 MiB, hashed by the
                // server.
                let len = 128 * 1024 + rng.below(1024 * 1024) as usize;
                let seed = rng.next();
                let data: Vec<u8> = (0..len)
                    .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
                    .collect();
                let expected: String = {
                    use sha2::Digest;
                    sha2::Sha256::digest(&data)
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect()
                };
                let sql = "SELECT encode(sha256($1), 'hex'), length($1)";
                match client.query_one(sql, &[&data]).await {
                    Ok(row)
                        if row.get::<_, String>(0) == expected
                            && row.get::<_, i32>(1) as usize == len =>
                    {
                        ctx.tally.ok("large bind")
                    }
                    Ok(row) => ctx.tally.finding(format!(
                        "large bind: {len} bytes hashed to {} over {} bytes, not {expected}",
                        row.get::<_, String>(0),
                        row.get::<_, i32>(1)
                    )),
                    Err(e) => error("large bind", &e),
                }
            }
            16 => {
                // A portal read in chunks (Execute with a row limit, PortalSuspended between:
                // JDBC's fetch size) inside a transaction.
                let n = 200 + rng.below(800) as i64;
                let chunk = 1 + rng.below(150) as i32;
                let answer = async {
                    let tx = client.transaction().await?;
                    let st = tx
                        .prepare("SELECT g FROM generate_series(1, $1::int8) g")
                        .await?;
                    let portal = tx.bind(&st, &[&n]).await?;
                    let mut got: Vec<i64> = Vec::new();
                    loop {
                        let rows = tx.query_portal(&portal, chunk).await?;
                        if rows.is_empty() {
                            break;
                        }
                        got.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
                    }
                    tx.commit().await?;
                    Ok::<_, tokio_postgres::Error>(got)
                };
                match answer.await {
                    Ok(got) if got.iter().copied().eq(1..=n) => ctx.tally.ok("portal"),
                    Ok(got) => ctx.tally.finding(format!(
                        "portal: 1..={n} in chunks of {chunk}, got {} rows, first {:?}, last {:?}",
                        got.len(),
                        got.first(),
                        got.last()
                    )),
                    Err(e) => error("portal", &e),
                }
            }
            15 => {
                // LISTEN pins a listener of its own (same user and database) to its server, and
                // a NOTIFY from this client reaches it between its transactions; UNLISTEN lets
                // it go.
                let channel = format!("chaos_ch{}", rng.below(1 << 40));
                let payload = format!("p{}", rng.below(1 << 40));
                let user = USERS[rng.below(2) as usize];
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let heard = async {
                    let (listener, task) =
                        open_with(ctx, user, pooling.db(), Via::Tcp, Some(tx)).await?;
                    let outcome = async {
                        listener.batch_execute(&format!("LISTEN {channel}")).await?;
                        // The listener runs a transaction of its own in between: still pinned.
                        listener.batch_execute("SELECT 1").await?;
                        // A PAUSE of the database waits for the listener's server, and holds
                        // the NOTIFY until the RESUME that follows it: then the listener lets go
                        // without it (within the console's patience for the PAUSE).
                        let notify = format!("NOTIFY {channel}, '{payload}'");
                        let sent = Duration::from_millis(1500);
                        let got =
                            match tokio::time::timeout(sent, client.batch_execute(&notify)).await {
                                Ok(done) => {
                                    done?;
                                    let wait = Duration::from_secs(2);
                                    Some(tokio::time::timeout(wait, rx.recv()).await.ok().flatten())
                                }
                                Err(_) => None,
                            };
                        // Answered only while its connection lives: a listener ended by the
                        // chaos is an error, not a lost notification.
                        listener.batch_execute("UNLISTEN *").await?;
                        Ok::<_, tokio_postgres::Error>(got)
                    }
                    .await;
                    drop(listener);
                    task.abort();
                    outcome
                };
                match heard.await {
                    Ok(Some(Some((c, p)))) if c == channel && p == payload => {
                        ctx.tally.ok("notified")
                    }
                    Ok(None) => ctx.tally.ok("notify held (paused)"),
                    Ok(Some(got)) => ctx.tally.finding(format!(
                        "notify: {channel} '{payload}' sent, the listener heard {got:?}"
                    )),
                    Err(e) => error("notified", &e),
                }
            }
            _ => {
                // Tracked parameters (application_name, which PgBouncer tracks too, and a custom
                // one, which Sluice tracks): what this connection set last time is still their
                // value, whatever servers its transactions met since (restarted, recycled, in
                // any pool mode), and a change holds at once: a SET, a RESET ALL (back to
                // unset), a SET whose later change a savepoint rolled back, a SET committed by a
                // COMMIT AND CHAIN or a COMMIT before a second transaction that rolls back, a
                // set_config whose value is a bind parameter, a SET pipelined behind a failing
                // request, or none for a SET LOCAL or a SET rolled
                // back.
                let name = format!("chaos_{}", rng.below(1_000_000));
                let change = match rng.below(9) {
                    0 => "RESET ALL".to_string(),
                    1 => format!(
                        "BEGIN; SET LOCAL application_name = '{name}'; \
                         SET LOCAL app.chaos = '{name}'; COMMIT"
                    ),
                    2 => format!(
                        "BEGIN; SET application_name = '{name}'; SET app.chaos = '{name}'; \
                         ROLLBACK"
                    ),
                    // Set, then a savepoint's rollback undoes a second SET only.
                    3 => format!(
                        "BEGIN; SET application_name = '{name}'; SET app.chaos = '{name}'; \
                         SAVEPOINT s; SET app.chaos = 'undone'; ROLLBACK TO s; COMMIT"
                    ),
                    // Committed, then a second transaction in the same string rolls back.
                    4 => format!(
                        "BEGIN; SET application_name = '{name}'; SET app.chaos = '{name}'; \
                         COMMIT AND CHAIN; SET app.chaos = 'undone'; ROLLBACK"
                    ),
                    5 => format!(
                        "SET application_name = '{name}'; SET app.chaos = '{name}'; COMMIT; \
                         BEGIN; SET app.chaos = 'undone'; ROLLBACK"
                    ),
                    // set_config with the value a bind parameter (tracked from the Bind).
                    6 => BOUND_SET.to_string(),
                    _ => format!("SET application_name = '{name}'; SET app.chaos = '{name}'"),
                };
                let rng_pipelined = change.starts_with("SET") && rng.below(3) == 0;
                let before = memo.app_name.take();
                let answer = async {
                    let show = "SELECT current_setting('application_name'), \
                                coalesce(current_setting('app.chaos', true), '')";
                    let row = client.query_one(show, &[]).await?;
                    let was: (String, String) = (row.get(0), row.get(1));
                    if rng_pipelined {
                        // Pipelined behind a request that fails: the SET is its own transaction.
                        let (failed, set) = tokio::join!(
                            client.batch_execute("SELECT 1/0"),
                            client.batch_execute(&change)
                        );
                        if failed.is_ok() {
                            ctx.tally
                                .finding("session state: SELECT 1/0 succeeded".into());
                        }
                        set?;
                    } else if change == BOUND_SET {
                        client.query_one(BOUND_SET, &[&name]).await?;
                    } else {
                        client.batch_execute(&change).await?;
                    }
                    let row = client.query_one(show, &[]).await?;
                    let now: (String, String) = (row.get(0), row.get(1));
                    Ok::<_, tokio_postgres::Error>((was, now))
                };
                // Both parameters hold `value` ("" = unset).
                let holds =
                    |(app, custom): &(String, String), value: &str| app == value && custom == value;
                match answer.await {
                    Ok((was, _)) if before.as_ref().is_some_and(|b| !holds(&was, b)) => {
                        ctx.tally.finding(format!(
                            "session state: {:?} set earlier, now {was:?}",
                            before.unwrap()
                        ))
                    }
                    Ok((was, now)) => {
                        let committed = change.starts_with("SET")
                            || change.contains("SAVEPOINT")
                            || change.contains("COMMIT AND CHAIN")
                            || change == BOUND_SET;
                        let expected = if committed {
                            Some(name.as_str())
                        } else if change == "RESET ALL" {
                            Some("")
                        } else {
                            // SET LOCAL, or rolled back: unchanged.
                            (was.0 == was.1).then_some(was.0.as_str())
                        };
                        match expected {
                            Some(value) if holds(&now, value) => {
                                ctx.tally.ok("session state");
                                memo.app_name = Some(value.to_string());
                            }
                            None if now == was => ctx.tally.ok("session state"),
                            _ => ctx.tally.finding(format!(
                                "session state: {change}, then {now:?} (before it {was:?})"
                            )),
                        }
                    }
                    // Its value is not known now (the SET may or may not have run).
                    Err(e) => {
                        error("session state", &e);
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                }
            }
        }
    };
    let outcome = tokio::time::timeout(HANG, fut).await;
    if cancel_pending {
        memo.own_cancel.until = Some(Instant::now() + OWN_CANCEL_WINDOW);
    }
    if cancel_sent.is_some() {
        memo.own_cancel.last = cancel_sent;
    }
    if outcome.is_err() {
        ctx.tally
            .finding(format!("operation {pick} hung for {HANG:?}"));
        return false;
    }
    !client.is_closed()
}
