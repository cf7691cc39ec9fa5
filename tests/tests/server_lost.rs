//! A server lost under a running request (pg_terminate_backend from a direct connection) in
//! transaction mode, through the real sluice binary against a real PostgreSQL: the client keeps
//! its connection and gets one ERROR for the request (08006, or 08007 when it could have
//! committed); inside a transaction block it gets 25P02 until ROLLBACK, which Sluice answers; its
//! next transaction runs on a fresh server. Session mode keeps closing the client.

mod bad_input_common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, Anchor, RawConn, Sluice};

use bad_input_common::{assert_works, raw_login, raw_query, raw_scalar, start, su, PROMPT};

/// Kill every backend running a query that contains `marker` (waiting until one shows up).
async fn kill_running(marker: &str) {
    let deadline = Instant::now() + PROMPT;
    loop {
        let n = su(
            "postgres",
            format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE query LIKE '%{marker}%' AND pid <> pg_backend_pid() AND state = 'active'"
            ),
        )
        .await;
        if n.trim() != "0" {
            return;
        }
        assert!(Instant::now() < deadline, "no backend ran {marker}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Messages up to and including the next ReadyForQuery.
async fn until_ready(c: &mut RawConn) -> Vec<(u8, Vec<u8>)> {
    let mut msgs = Vec::new();
    loop {
        let (tag, body) = c
            .read_message(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("no ReadyForQuery; so far {msgs:?}"));
        msgs.push((tag, body));
        if tag == b'Z' {
            return msgs;
        }
    }
}

/// The ErrorResponses among `msgs`, as fields.
fn errors(msgs: &[(u8, Vec<u8>)]) -> Vec<HashMap<u8, String>> {
    msgs.iter()
        .filter(|(t, _)| *t == b'E')
        .map(|(_, b)| error_fields(b))
        .collect()
}

/// The one error of a reply, which must be an ERROR (not FATAL) with `sqlstate`; and the
/// ReadyForQuery status that ends the reply.
fn one_error(msgs: &[(u8, Vec<u8>)], sqlstate: &str, status: u8) -> HashMap<u8, String> {
    let errs = errors(msgs);
    assert_eq!(errs.len(), 1, "exactly one error: {msgs:?}");
    let f = errs.into_iter().next().unwrap();
    assert_eq!(f[&b'C'], sqlstate, "{f:?}");
    assert_eq!(f[&b'S'], "ERROR", "{f:?}");
    assert_eq!(msgs.last().unwrap(), &(b'Z', vec![status]), "{msgs:?}");
    f
}

fn query_msg(sql: &str) -> Vec<u8> {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    RawConn::message(b'Q', &body)
}

fn tx_pool() -> Sluice {
    start("pool_mode = transaction\ndefault_pool_size = 1")
}

#[tokio::test]
async fn a_killed_autocommit_query_fails_once_and_the_connection_goes_on() {
    let s = tx_pool();
    let mut c = raw_login(&s, &[]).await;
    let before = raw_scalar(&mut c, "SELECT pg_backend_pid()").await;
    raw_query(&mut c, "SET statement_timeout = '123s'")
        .await
        .0
        .unwrap();
    c.send(&query_msg("SELECT pg_sleep(5) -- lost_autocommit"))
        .await;
    kill_running("lost_autocommit").await;
    let msgs = until_ready(&mut c).await;
    // Outside a transaction block the statement may have committed before the server went.
    let f = one_error(&msgs, "08007", b'I');
    assert!(f[&b'M'].contains("127.0.0.1:"), "names the server: {f:?}");
    assert!(
        f[&b'M'].contains("administrator command"),
        "says why: {f:?}"
    );
    // Same connection, a fresh server (pool size 1: the dead one was not returned).
    let after = raw_scalar(&mut c, "SELECT pg_backend_pid()").await;
    assert_ne!(before, after);
    // The client's SET followed it to the new server.
    assert_eq!(raw_scalar(&mut c, "SHOW statement_timeout").await, "123s");
    assert!(
        s.log().contains("was lost"),
        "the loss is logged:\n{}",
        s.log()
    );
    assert_works(&s).await;
}

#[tokio::test]
async fn a_killed_query_inside_begin_leaves_an_aborted_transaction_until_rollback() {
    let s = tx_pool();
    let mut c = raw_login(&s, &[]).await;
    let (r, status) = raw_query(&mut c, "BEGIN").await;
    r.unwrap();
    assert_eq!(status, b'T');
    c.send(&query_msg("SELECT pg_sleep(5) -- lost_in_tx")).await;
    kill_running("lost_in_tx").await;
    let msgs = until_ready(&mut c).await;
    let f = one_error(&msgs, "08006", b'E');
    assert!(f[&b'M'].contains("127.0.0.1:"), "{f:?}");
    // Nothing runs outside the transaction: every statement gets 25P02, no server reached.
    for sql in [
        "SELECT 1",
        "INSERT INTO nowhere VALUES (1)",
        "SAVEPOINT a",
        "",
    ] {
        let (r, status) = raw_query(&mut c, sql).await;
        assert_eq!(status, b'E', "{sql}");
        if sql.is_empty() {
            r.unwrap();
            continue;
        }
        let e = r.unwrap_err();
        assert_eq!(e[&b'C'], "25P02", "{sql}: {e:?}");
        assert_eq!(
            e[&b'M'],
            "current transaction is aborted, commands ignored until end of transaction block"
        );
    }
    // The savepoint lived on the lost server.
    let (r, status) = raw_query(&mut c, "ROLLBACK TO SAVEPOINT a").await;
    assert_eq!(r.unwrap_err()[&b'C'], "3B001");
    assert_eq!(status, b'E');
    c.send(&query_msg("ROLLBACK")).await;
    let msgs = until_ready(&mut c).await;
    let tags: Vec<(u8, Vec<u8>)> = msgs;
    assert_eq!(
        tags,
        vec![(b'C', b"ROLLBACK\0".to_vec()), (b'Z', vec![b'I'])],
        "answered by Sluice as PostgreSQL would"
    );
    // A new transaction works, on a fresh server.
    let (r, status) = raw_query(&mut c, "BEGIN").await;
    r.unwrap();
    assert_eq!(status, b'T');
    assert_eq!(raw_scalar(&mut c, "SELECT 7").await, "7");
    let (r, status) = raw_query(&mut c, "COMMIT").await;
    r.unwrap();
    assert_eq!(status, b'I');
    assert_works(&s).await;
}

#[tokio::test]
async fn commit_of_an_aborted_transaction_answers_rollback() {
    let s = tx_pool();
    let mut c = raw_login(&s, &[]).await;
    raw_query(&mut c, "BEGIN").await.0.unwrap();
    c.send(&query_msg("SELECT pg_sleep(5) -- lost_then_commit"))
        .await;
    kill_running("lost_then_commit").await;
    one_error(&until_ready(&mut c).await, "08006", b'E');
    c.send(&query_msg("COMMIT")).await;
    assert_eq!(
        until_ready(&mut c).await,
        vec![(b'C', b"ROLLBACK\0".to_vec()), (b'Z', vec![b'I'])]
    );
    assert_eq!(raw_scalar(&mut c, "SELECT 8").await, "8");
}

/// A COMMIT held up by a deferred trigger is killed: 08007 (whether it committed cannot be
/// known to the pooler), the block is over ('I'), and nothing is run again: the row is absent.
#[tokio::test]
async fn a_lost_commit_is_transaction_resolution_unknown() {
    let s = tx_pool();
    su(
        "app",
        "DROP TABLE IF EXISTS lost_commit; CREATE TABLE lost_commit (id int); \
         GRANT ALL ON lost_commit TO PUBLIC; \
         CREATE OR REPLACE FUNCTION lost_commit_slow() RETURNS trigger LANGUAGE plpgsql AS \
         $$BEGIN PERFORM pg_sleep(5); RETURN NULL; END$$; \
         CREATE CONSTRAINT TRIGGER lost_commit_slow AFTER INSERT ON lost_commit \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lost_commit_slow();"
            .into(),
    )
    .await;
    let mut c = raw_login(&s, &[]).await;
    raw_query(&mut c, "BEGIN").await.0.unwrap();
    raw_query(&mut c, "INSERT INTO lost_commit VALUES (1)")
        .await
        .0
        .unwrap();
    c.send(&query_msg("COMMIT /* lost_commit_marker */")).await;
    kill_running("lost_commit_marker").await;
    let f = one_error(&until_ready(&mut c).await, "08007", b'I');
    assert!(f[&b'M'].contains("committing"), "{f:?}");
    assert_eq!(
        raw_scalar(&mut c, "SELECT count(*) FROM lost_commit").await,
        "0",
        "the commit was not run again"
    );
}

/// The same through tokio-postgres (extended protocol, prepared statements).
#[tokio::test]
async fn extended_protocol_loss_inside_and_outside_a_transaction() {
    let s = tx_pool();
    let mut c = s.connect("trust_user", "", "app").await.unwrap();
    let add = c.prepare("SELECT $1::int + 1").await.unwrap();
    let (r, ()) = tokio::join!(
        c.query("SELECT pg_sleep(5) -- lost_ext_auto", &[]),
        kill_running("lost_ext_auto")
    );
    let e = r.map(|_| ()).expect_err("killed");
    assert_eq!(
        e.code().map(|c| c.code()),
        Some("08007"),
        "{e:?}\n{}",
        s.log()
    );
    // The prepared statement is re-prepared on the fresh server.
    let row = c.query_one(&add, &[&41i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);

    let tx = c.transaction().await.unwrap();
    let (r, ()) = tokio::join!(
        tx.query("SELECT pg_sleep(5) -- lost_ext_tx", &[]),
        kill_running("lost_ext_tx")
    );
    let e = r.map(|_| ()).expect_err("killed");
    assert_eq!(e.code().map(|c| c.code()), Some("08006"), "{e:?}");
    let e = tx.query_one(&add, &[&1i32]).await.expect_err("aborted");
    assert_eq!(e.code().map(|c| c.code()), Some("25P02"), "{e:?}");
    tx.rollback().await.unwrap();
    let row = c.query_one(&add, &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
}

/// A COPY FROM STDIN whose server is lost midway: the error at once, the client's remaining
/// CopyData and its CopyDone dropped, and the connection goes on.
#[tokio::test]
async fn a_copy_from_stdin_lost_midway() {
    let s = tx_pool();
    su(
        "app",
        "DROP TABLE IF EXISTS lost_copy; CREATE TABLE lost_copy (id int); \
         GRANT ALL ON lost_copy TO PUBLIC;"
            .into(),
    )
    .await;
    let mut c = raw_login(&s, &[]).await;
    c.send(&query_msg("COPY lost_copy FROM STDIN -- lost_copy_marker"))
        .await;
    let (tag, _) = c.read_message(PROMPT).await.expect("CopyInResponse");
    assert_eq!(tag, b'G');
    for i in 0..100 {
        c.send(&RawConn::message(b'd', format!("{i}\n").as_bytes()))
            .await;
    }
    su(
        "postgres",
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE query LIKE '%lost_copy_marker%' AND pid <> pg_backend_pid()"
            .into(),
    )
    .await;
    let msgs = until_ready(&mut c).await;
    one_error(&msgs, "08007", b'I');
    for i in 100..200 {
        c.send(&RawConn::message(b'd', format!("{i}\n").as_bytes()))
            .await;
    }
    c.send(&RawConn::message(b'c', b"")).await;
    assert_eq!(
        raw_scalar(&mut c, "SELECT count(*) FROM lost_copy").await,
        "0"
    );
    assert_works(&s).await;
}

/// Session mode: the server is the session; losing it ends the client, as before.
#[tokio::test]
async fn session_mode_still_closes_the_client() {
    let s = start("pool_mode = session\ndefault_pool_size = 1");
    let mut c = raw_login(&s, &[]).await;
    c.send(&query_msg("SELECT pg_sleep(5) -- lost_session_mode"))
        .await;
    kill_running("lost_session_mode").await;
    let (bytes, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "session client not closed: {bytes:?}");
    let msgs = bad_input_common::split_messages(&bytes);
    assert!(
        errors(&msgs).iter().any(|f| f[&b'S'] == "FATAL"),
        "{msgs:?}"
    );
    assert_works(&s).await;
}

/// A pinned client (a session advisory lock) cannot go on without its server: FATAL naming
/// the state, after the error for its request.
#[tokio::test]
async fn a_pinned_client_is_closed_naming_its_state() {
    let s = start("pool_mode = transaction\ndefault_pool_size = 2");
    let mut c = raw_login(&s, &[]).await;
    raw_scalar(&mut c, "SELECT pg_advisory_lock(4242)::text").await;
    c.send(&query_msg("SELECT pg_sleep(5) -- lost_pinned"))
        .await;
    kill_running("lost_pinned").await;
    let (bytes, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "{bytes:?}");
    let msgs = bad_input_common::split_messages(&bytes);
    let errs = errors(&msgs);
    let fatal = errs.last().expect("an error");
    assert_eq!(fatal[&b'S'], "FATAL", "{errs:?}");
    assert!(fatal[&b'M'].contains("advisory locks"), "{fatal:?}");
    assert_works(&s).await;
}

/// Requests pipelined behind the lost one inside a block: the running one gets the loss, the
/// next one 25P02, as PostgreSQL answers after an error; ROLLBACK then works.
#[tokio::test]
async fn a_pipeline_inside_a_block_fails_request_by_request() {
    let s = tx_pool();
    let mut c = raw_login(&s, &[]).await;
    raw_query(&mut c, "BEGIN").await.0.unwrap();
    let pipeline = [
        query_msg("SELECT pg_sleep(5) -- lost_pipeline"),
        query_msg("SELECT 1"),
    ]
    .concat();
    c.send(&pipeline).await;
    kill_running("lost_pipeline").await;
    one_error(&until_ready(&mut c).await, "08006", b'E');
    one_error(&until_ready(&mut c).await, "25P02", b'E');
    let (r, status) = raw_query(&mut c, "ROLLBACK").await;
    r.unwrap();
    assert_eq!(status, b'I');
    assert_eq!(raw_scalar(&mut c, "SELECT 5").await, "5");
    assert_works(&s).await;
}

/// The messages of `bytes`, and how many bytes at the end are not a whole message.
fn framed(bytes: &[u8]) -> (Vec<(u8, &[u8])>, usize) {
    let mut msgs = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= 5 {
        let len = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        if len < 4 || bytes.len() - at < 1 + len {
            break;
        }
        msgs.push((bytes[at], &bytes[at + 5..at + 1 + len]));
        at += 1 + len;
    }
    (msgs, bytes.len() - at)
}

/// A server lost while its reply streams to a slow client, cut in the middle of a row (PostgreSQL
/// dies mid-send when its client, the pooler, does not read): the client's stream is mid-message,
/// so nothing may follow the cut. A FATAL written there would be read as the rest of the row (a
/// row with wrong contents that a streaming driver hands to the application) and then as garbage.
/// Every whole message the client gets must be a right row (or an error at a message boundary),
/// and the connection closes. (When PostgreSQL dies between two rows, the client is told as after
/// any lost server, ERROR and ReadyForQuery, and goes on.)
#[tokio::test]
async fn a_server_lost_mid_row_sends_nothing_after_the_cut() {
    let s = tx_pool();
    for round in 0..3 {
        if let Err(e) = cut_mid_row(s.port, &format!("cut_mid_row_{round}")).await {
            panic!("round {round}: {e}");
        }
    }
    assert_works(&s).await;
    // The same cut through PgBouncer 1.25.2, for comparison only (printed).
    let pgb = Anchor::start(
        "auth_type = trust\npool_mode = transaction\ndefault_pool_size = 1",
        "app = host={pg_host} port={pg_port} dbname=app",
        "\"trust_user\" \"\"\n",
    );
    if let Some(pgb) = pgb {
        for round in 0..3 {
            let theirs = cut_mid_row(pgb.port, &format!("cut_mid_row_pgb_{round}")).await;
            eprintln!("side by side | a server lost mid-row | PgBouncer 1.25.2, round {round}: {theirs:?}");
        }
    }
}

/// One query of 200,000 rows through the pooler on `port` by a client that stops reading, its
/// backend terminated while the reply is backed up: Ok(rows) when every whole message was right
/// and nothing followed a cut, else what went wrong.
async fn cut_mid_row(port: u16, marker: &str) -> Result<u64, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A small receive buffer: the reply backs up into the pooler and PostgreSQL.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut c = socket
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    c.write_all(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await
    .unwrap();
    let sql = format!("SELECT g, repeat('x', 500) AS {marker} FROM generate_series(1, 200000) g");
    c.write_all(&query_msg(&sql)).await.unwrap();
    // Read a little, then stop: the pooler's writes to us wait, PostgreSQL's to it too.
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while got.len() < 100_000 {
        let n = c.read(&mut chunk).await.unwrap();
        if n == 0 {
            return Err("closed early".into());
        }
        got.extend_from_slice(&chunk[..n]);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill_running(marker).await;
    // Everything until the pooler closes the connection, or answers the query's end.
    loop {
        match tokio::time::timeout(Duration::from_secs(20), c.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Err(_) => return Err("neither closed nor answered".into()),
        }
        let (msgs, _) = framed(&got);
        if msgs.iter().filter(|(t, _)| *t == b'Z').count() >= 2 {
            break;
        }
    }
    let (msgs, cut) = framed(&got);
    // Row `g` as PostgreSQL sends it.
    let row = |g: u64| {
        let g = g.to_string();
        let mut m = vec![b'D'];
        m.extend_from_slice(&(4 + 2 + 4 + g.len() as u32 + 4 + 500).to_be_bytes());
        m.extend_from_slice(&[0, 2]);
        m.extend_from_slice(&(g.len() as u32).to_be_bytes());
        m.extend_from_slice(g.as_bytes());
        m.extend_from_slice(&500u32.to_be_bytes());
        m.extend_from_slice(&[b'x'; 500]);
        m
    };
    let shown = |b: &[u8]| String::from_utf8_lossy(&b[b.len().saturating_sub(120)..]).into_owned();
    let mut rows = 0u64;
    for (tag, body) in &msgs {
        match tag {
            b'R' | b'S' | b'K' | b'Z' | b'T' => {}
            b'D' => {
                rows += 1;
                if *body != &row(rows)[5..] {
                    return Err(format!(
                        "row {rows} is not what PostgreSQL sent: {:?}",
                        shown(body)
                    ));
                }
            }
            b'E' => {
                let f = error_fields(body);
                if !(f[&b'C'].starts_with("08") || f[&b'C'] == "57P01") {
                    return Err(format!("error {f:?}"));
                }
            }
            other => {
                return Err(format!(
                    "after {rows} rows a message '{}': the stream lost its framing",
                    *other as char
                ))
            }
        }
    }
    if rows <= 100 {
        return Err(format!("only {rows} rows"));
    }
    // A stream cut mid-row ends with that row's first bytes, and nothing after them.
    let tail = &got[got.len() - cut..];
    if !row(rows + 1).starts_with(tail) {
        return Err(format!(
            "after row {rows}, {cut} bytes that are not the start of the next: {:?}",
            shown(tail)
        ));
    }
    Ok(rows)
}
