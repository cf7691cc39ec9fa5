//! Bad input after login, clients vanishing mid-transaction and killed backends, against the real
//! sluice binary: every case ends with the exact error and/or a close within a couple of seconds,
//! never a hang, and a normal client keeps working afterwards.

mod bad_input_common;

use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, RawConn};

use bad_input_common::{
    assert_works, bad_startup, expect_fatal, packet_with_len, raw_login, raw_query, raw_scalar,
    rss_kib, split_messages, start, su, PROMPT,
};

// ---------------------------------------------------------------------------------------------
// After login
// ---------------------------------------------------------------------------------------------

/// `Q` with length 2 from an idle client (not linked) and from a client inside a transaction
/// (linked), in transaction mode with one server: 08P01 + close, and the other client carries on.
#[tokio::test]
async fn bad_message_length_after_login() {
    let s = start("pool_mode = transaction\ndefault_pool_size = 1");
    let other = s.connect("trust_user", "", "app").await.unwrap();
    other.simple_query("SELECT 1").await.unwrap();

    // Unlinked: right after login.
    let mut c = raw_login(&s, &[]).await;
    c.send(&[b'Q', 0, 0, 0, 2]).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(f[&b'M'].contains("packet"), "{f:?}");
    let row = tokio::time::timeout(PROMPT, other.query_one("SELECT 2", &[]))
        .await
        .expect("other client hung")
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);

    // Linked: in the middle of a transaction, holding the only server.
    let mut c = raw_login(&s, &[]).await;
    let (r, status) = raw_query(&mut c, MARK).await;
    r.unwrap();
    assert_eq!(status, b'T');
    c.send(&[b'Q', 0, 0, 0, 2, b'x']).await;
    expect_fatal(&mut c, "08P01").await;
    let row = tokio::time::timeout(PROMPT, other.query_one("SELECT 3", &[]))
        .await
        .expect("other client hung: the dirty server was not freed")
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 3);
    // The other client must not have inherited the open transaction.
    let row = other
        .query_one(
            "SELECT coalesce(current_setting('bad_input.marker', true), '')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, String>(0),
        "",
        "other client runs inside the leftover transaction"
    );
    assert_works(&s).await;
}

#[tokio::test]
async fn oversized_message_length_after_login_is_refused() {
    let s = start("max_packet_size = 1048576");
    assert_works(&s).await;
    let before = rss_kib(s.pid());
    let mut c = raw_login(&s, &[]).await;
    c.send(&[b'Q', 0x40, 0, 0, 0, b'S', b'E', b'L']).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(f[&b'M'].contains("packet"), "{f:?}");
    let after = rss_kib(s.pid());
    assert!(after < before + 16 * 1024, "RSS {before} -> {after} KiB");
    assert_works(&s).await;
}

#[tokio::test]
async fn cancel_request_with_random_key_is_ignored() {
    let s = start("");
    let busy = s.connect("trust_user", "", "app").await.unwrap();
    let sleeper =
        tokio::spawn(async move { busy.simple_query("SELECT pg_sleep(0.6)").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(150)).await;
    for key in [[0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0], [0; 8]] {
        let mut c = RawConn::connect(s.port).await;
        let mut body = 80_877_102u32.to_be_bytes().to_vec();
        body.extend_from_slice(&key);
        c.send(&packet_with_len(16, &body)).await;
        let t0 = Instant::now();
        let (bytes, closed) = c.read_until_close(PROMPT).await;
        assert!(closed, "cancel connection not closed");
        assert!(
            bytes.is_empty(),
            "cancel connection got an answer: {bytes:?}"
        );
        assert!(t0.elapsed() < PROMPT);
    }
    // Nothing else happened: the running query was not cancelled.
    tokio::time::timeout(PROMPT, sleeper)
        .await
        .expect("sleeper hung")
        .unwrap()
        .expect("a random cancel key cancelled someone's query");
    // A CancelRequest with the wrong length is a malformed packet.
    let mut body = 80_877_102u32.to_be_bytes().to_vec();
    body.extend_from_slice(&[1, 2, 3, 4]);
    bad_startup(&s, &packet_with_len(12, &body), "08P01").await;
    assert_works(&s).await;
}

// ---------------------------------------------------------------------------------------------
// Clients vanishing mid-transaction, servers dying
// ---------------------------------------------------------------------------------------------

/// How the client disappears.
#[derive(Clone, Copy, Debug)]
enum Vanish {
    /// Drop the TCP connection without Terminate.
    Abrupt,
    /// tokio-postgres drop: Terminate, then close.
    Terminate,
}

async fn vanish_mid_transaction(mode: &str, how: Vanish) {
    let table = format!("bad_input_vanish_{mode}_{how:?}").to_lowercase();
    su(
        "app",
        format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table}(x int); \
             GRANT ALL ON {table} TO PUBLIC"
        ),
    )
    .await;
    let s = start(&format!(
        "pool_mode = {mode}\ndefault_pool_size = 1\nserver_reset_query = DISCARD ALL"
    ));
    let insert = format!("INSERT INTO {table} VALUES (1)");
    let probe = "SELECT txid_current()::text || '|' || now()::text || '|' || pg_backend_pid()";

    let (a_txid, a_now, a_pid) = match how {
        Vanish::Abrupt => {
            let mut a = raw_login(&s, &[]).await;
            raw_query(&mut a, MARK).await.0.unwrap();
            let (r, status) = raw_query(&mut a, &insert).await;
            r.unwrap();
            assert_eq!(status, b'T');
            let v = raw_scalar(&mut a, probe).await;
            drop(a); // close without Terminate or COMMIT
            split3(&v)
        }
        Vanish::Terminate => {
            let a = s.connect("trust_user", "", "app").await.unwrap();
            a.batch_execute(MARK).await.unwrap();
            a.batch_execute(&insert).await.unwrap();
            let v: String = a.query_one(probe, &[]).await.unwrap().get(0);
            drop(a);
            split3(&v)
        }
    };

    // The next client (pool size 1: it can only get A's server or a fresh one).
    let b = tokio::time::timeout(Duration::from_secs(8), s.connect("trust_user", "", "app"))
        .await
        .expect("next client hung")
        .unwrap();
    let row = tokio::time::timeout(
        Duration::from_secs(8),
        b.query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {table}), txid_current()::text, now()::text, \
                 coalesce(current_setting('bad_input.marker', true), '')"
            ),
            &[],
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("next client's query hung\nlog:\n{}", s.log()))
    .unwrap();
    let (count, txid, now, marker): (i64, String, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        count, 0,
        "uncommitted row of the vanished client is visible"
    );
    assert_ne!(
        txid, a_txid,
        "next client runs in the vanished client's transaction"
    );
    assert_ne!(
        now, a_now,
        "next client runs in the vanished client's transaction"
    );
    assert_eq!(
        marker, "",
        "next client sees the vanished client's SET LOCAL"
    );

    // No session is left idle in transaction from A (closing a backend is asynchronous: poll).
    let deadline = Instant::now() + PROMPT;
    loop {
        let left = su(
            "app",
            format!(
                "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' \
                 AND (pid = {a_pid} OR query LIKE '%{table}%')"
            ),
        )
        .await;
        if left == "0" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} session(s) left idle in transaction by the vanished client (pid {a_pid})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        su("app", format!("SELECT count(*) FROM {table}")).await,
        "0"
    );
    drop(b);
    assert_works(&s).await;
    su("app", format!("DROP TABLE {table}")).await;
}

/// Opens a transaction with a transaction-local marker setting.
const MARK: &str = "BEGIN; SELECT set_config('bad_input.marker', 'dirty', true)";

fn split3(v: &str) -> (String, String, i32) {
    let mut it = v.split('|');
    let txid = it.next().unwrap().to_string();
    let now = it.next().unwrap().to_string();
    let pid = it.next().unwrap().parse().unwrap();
    (txid, now, pid)
}

#[tokio::test]
async fn vanished_client_mid_transaction_transaction_mode_abrupt() {
    vanish_mid_transaction("transaction", Vanish::Abrupt).await;
}

#[tokio::test]
async fn vanished_client_mid_transaction_transaction_mode_terminate() {
    vanish_mid_transaction("transaction", Vanish::Terminate).await;
}

#[tokio::test]
async fn vanished_client_mid_transaction_session_mode_abrupt() {
    vanish_mid_transaction("session", Vanish::Abrupt).await;
}

#[tokio::test]
async fn vanished_client_mid_transaction_session_mode_terminate() {
    vanish_mid_transaction("session", Vanish::Terminate).await;
}

#[tokio::test]
async fn killed_backend_of_idle_session_client() {
    let s = start("pool_mode = session\ndefault_pool_size = 2");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        su("postgres", format!("SELECT pg_terminate_backend({pid})")).await,
        "t"
    );
    // The client's next query fails promptly, it does not hang.
    let t0 = Instant::now();
    let r = tokio::time::timeout(PROMPT, a.simple_query("SELECT 1"))
        .await
        .unwrap_or_else(|_| panic!("query after backend kill hung\nlog:\n{}", s.log()));
    assert!(r.is_err(), "query on a killed backend succeeded: {r:?}");
    assert!(t0.elapsed() < PROMPT);
    drop(a);
    // A new client gets a working server (not the dead one).
    let b = s.connect("trust_user", "", "app").await.unwrap();
    let new_pid: i32 = b
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(new_pid, pid);
    assert_works(&s).await;
}

#[tokio::test]
async fn killed_backend_of_linked_raw_client_gets_error_message() {
    // Same as above on the raw protocol: the error sluice relays or reports carries a SQLSTATE and
    // the connection is closed.
    let s = start("pool_mode = session\ndefault_pool_size = 1");
    let mut a = raw_login(&s, &[]).await;
    let pid = raw_scalar(&mut a, "SELECT pg_backend_pid()").await;
    su("postgres", format!("SELECT pg_terminate_backend({pid})")).await;
    a.send(&RawConn::message(b'Q', b"SELECT 1\0")).await;
    let (bytes, closed) = a.read_until_close(PROMPT).await;
    assert!(closed, "client not closed after its server died: {bytes:?}");
    let msgs = split_messages(&bytes);
    let errors: Vec<_> = msgs
        .iter()
        .filter(|(t, _)| *t == b'E')
        .map(|(_, b)| error_fields(b))
        .collect();
    assert!(!errors.is_empty(), "no ErrorResponse: {msgs:?}");
    for f in &errors {
        let code = &f[&b'C'];
        assert!(
            code == "57P01" || code.starts_with("08"),
            "unexpected SQLSTATE: {f:?}"
        );
    }
    assert!(
        !msgs.iter().any(|(t, _)| *t == b'D'),
        "the query ran somewhere: {msgs:?}"
    );
    // Pool size 1: the dead server must have been dropped for this to work.
    assert_works(&s).await;
}

#[tokio::test]
async fn killed_idle_backend_in_transaction_mode_is_replaced() {
    // In transaction mode an idle client holds no server. Once the killed backend is gone, the
    // pool's dead idle server (it sent FATAL + EOF while idle) must not be handed out: the client's
    // next query runs on a fresh backend, with no error.
    let s = start("pool_mode = transaction\ndefault_pool_size = 1");
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let pid: i32 = a
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    su("postgres", format!("SELECT pg_terminate_backend({pid})")).await;
    wait_backend_gone(pid).await;
    let row = tokio::time::timeout(PROMPT, a.query_one("SELECT pg_backend_pid()", &[]))
        .await
        .unwrap_or_else(|_| panic!("query after idle backend kill hung\nlog:\n{}", s.log()))
        .unwrap_or_else(|e| panic!("dead idle server was handed out: {e:?}\nlog:\n{}", s.log()));
    assert_ne!(row.get::<_, i32>(0), pid);
    assert_works(&s).await;
}

/// Poll pg_stat_activity until backend `pid` has exited (it sent its FATAL message before).
async fn wait_backend_gone(pid: i32) {
    let deadline = Instant::now() + PROMPT;
    while su(
        "postgres",
        format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
    )
    .await
        != "0"
    {
        assert!(Instant::now() < deadline, "backend {pid} did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
