//! Limits on single bad messages against the real sluice binary: impossible and truncated lengths
//! before and after login, max_packet_size on the server side, bounded password messages, wrong
//! protocol versions, SSLRequest followed by plaintext, and a Query arriving in pieces. Each ends
//! with the right error or a close (never a hang or an allocation of the announced size), and
//! normal clients keep working.

mod bad_input_common;

use std::time::Duration;

use sluice_e2e::{error_fields, RawConn, Sluice};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use bad_input_common::{
    assert_works, bad_startup, closed_promptly, expect_fatal, packet_with_len, raw_login,
    raw_scalar, read_until_ready, rss_kib, split_messages, start, PROMPT,
};

#[tokio::test]
async fn impossible_and_truncated_lengths_before_and_after_login() {
    let s = start("");
    // Startup: lengths 0, 3 and 2^31-1 are refused at the length word.
    for len in [0u32, 3, 0x7fff_ffff] {
        let f = bad_startup(
            &s,
            &packet_with_len(len, &196_608u32.to_be_bytes()),
            "08P01",
        )
        .await;
        assert!(f[&b'M'].contains("startup"), "len {len}: {f:?}");
    }
    // Startup: a truncated packet followed by a half-close.
    let full = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    for cut in [1usize, 4, 9, full.len() - 1] {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
        c.write_all(&full[..cut]).await.unwrap();
        let msgs = closed_promptly(c, &format!("startup cut at {cut}")).await;
        assert_eq!(msgs.len(), 1, "cut {cut}: {msgs:?}");
        assert_eq!(error_fields(&msgs[0].1)[&b'C'], "08P01");
    }

    // After login: 0 and 3 are below the length word itself.
    for len in [0u32, 3] {
        let mut c = raw_login(&s, &[]).await;
        let mut m = vec![b'Q'];
        m.extend_from_slice(&len.to_be_bytes());
        c.send(&m).await;
        let f = expect_fatal(&mut c, "08P01").await;
        assert!(f[&b'M'].contains("packet"), "len {len}: {f:?}");
    }
    // After login, 2^31-1 with the default max_packet_size (2^31-1, like PgBouncer): legal for the
    // pooler's setting, but longer than PostgreSQL accepts for a Query, so refused at the header
    // (isolation.rs checks the text). The client gets an error or a close, and nothing is
    // allocated for it.
    let rss_before = rss_kib(s.pid());
    let mut c = raw_login(&s, &[]).await;
    let mut m = vec![b'Q'];
    m.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
    m.extend_from_slice(&vec![b'x'; 256 * 1024]);
    c.send(&m).await;
    let (got, closed) = c.read_until_close(PROMPT + PROMPT).await;
    assert!(closed, "2^31-1 Query: not closed; got {got:?}");
    if !got.is_empty() {
        let msgs = split_messages(&got);
        assert!(msgs.iter().all(|(t, _)| *t == b'E'), "{msgs:?}");
    }
    assert!(rss_kib(s.pid()) < rss_before + 32 * 1024);
    assert_works(&s).await;

    // After login: a message cut short, then a half-close. The server that saw half a message
    // must not be handed to anyone else.
    let mut c = raw_login(&s, &[]).await;
    let mut m = vec![b'Q'];
    m.extend_from_slice(&100u32.to_be_bytes());
    m.extend_from_slice(b"SELECT 1");
    c.send(&m).await;
    c.shutdown_write().await;
    let (_, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "truncated Query + half-close: not closed");
    for _ in 0..3 {
        assert_works(&s).await;
    }
}

/// max_packet_size on the server side: a 2 MB DataRow with max_packet_size = 1 MB ends that
/// client's session with an error or a close, without buffering the row; others carry on.
#[tokio::test]
async fn oversized_server_message_is_refused_at_the_header() {
    let s = start("max_packet_size = 1048576");
    assert_works(&s).await;
    let before = rss_kib(s.pid());
    let mut c = raw_login(&s, &[]).await;
    c.send(&RawConn::message(b'Q', b"SELECT repeat('x', 2000000)\0"))
        .await;
    let (got, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "not closed after an oversized server message");
    // Whatever came before the DataRow (RowDescription) may be there; the row itself may not.
    let rows = got.windows(4).filter(|w| *w == b"xxxx").count();
    assert_eq!(rows, 0, "the oversized row was forwarded");
    assert!(
        got.contains(&b'E'),
        "no ErrorResponse for the dropped server message"
    );
    assert!(rss_kib(s.pid()) < before + 16 * 1024);
    for _ in 0..3 {
        assert_works(&s).await;
    }
}

#[tokio::test]
async fn wrong_protocol_versions_and_ssl_request_then_plaintext() {
    let s = start("");
    // 4.0: not a protocol we speak.
    let mut body = (4u32 << 16).to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0trust_user\0database\0app\0\0");
    let f = bad_startup(&s, &packet_with_len(body.len() as u32 + 4, &body), "08P01").await;
    assert!(
        f[&b'M'].contains("protocol") || f[&b'M'].contains("version"),
        "{f:?}"
    );
    // 3.99: PostgreSQL and PgBouncer answer NegotiateProtocolVersion(3.0) and carry on.
    let mut p = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    p[6..8].copy_from_slice(&99u16.to_be_bytes());
    let mut c = RawConn::connect(s.port).await;
    c.send(&p).await;
    let msgs = read_until_ready(&mut c).await;
    assert_eq!(msgs[0].0, b'v', "{msgs:?}");
    assert_eq!(&msgs[0].1[..4], &0x0003_0000u32.to_be_bytes());
    assert_eq!(raw_scalar(&mut c, "SELECT 399").await, "399");

    // SSLRequest, then plaintext: whether the answer is 'N' (no TLS) or 'S' (TLS configured),
    // plaintext where a startup packet or a TLS ClientHello belongs ends in an error or a close.
    let startup = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    let mut pipelined = RawConn::ssl_request();
    pipelined.extend_from_slice(&startup);
    let mut garbage_after = RawConn::ssl_request();
    garbage_after.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    for (name, bytes, wait_answer) in [
        ("pipelined startup", pipelined, false),
        ("plaintext garbage", garbage_after, true),
    ] {
        let mut c = RawConn::connect(s.port).await;
        if wait_answer {
            c.send(&bytes[..8]).await;
            let a = c.read_bytes(1, PROMPT).await;
            assert!(
                matches!(a.as_deref(), Some(b"N") | Some(b"S")),
                "{name}: {a:?}"
            );
            c.send(&bytes[8..]).await;
        } else {
            c.send(&bytes).await;
        }
        let (got, closed) = c.read_until_close(PROMPT).await;
        assert!(closed, "{name}: no close within {PROMPT:?}; got {got:?}");
        // A login must not have happened: no AuthenticationOk.
        let rest = got.strip_prefix(b"N").unwrap_or(&got);
        assert!(!rest.starts_with(b"R\0\0\0\x08\0\0\0\0"), "{name}: {got:?}");
    }
    assert_works(&s).await;
}

/// Password messages are bounded (64 KiB plus framing) before anything is allocated, for
/// cleartext and for SCRAM: a 16 MiB announcement is a protocol violation, while a long but
/// in-bounds wrong password is just a failed login.
#[tokio::test]
async fn oversized_password_messages_are_refused() {
    for auth in ["plain", "scram-sha-256"] {
        let s = Sluice::builder(&Sluice::basic_ini(
            &format!("auth_type = {auth}\nclient_login_timeout = 5"),
            bad_input_common::DB_LINE,
        ))
        .userlist("\"pw_user\" \"secret\"\n")
        .start();
        let before = rss_kib(s.pid());
        let startup = RawConn::startup_packet(&[("user", "pw_user"), ("database", "app")]);
        // 16 MiB announced, 64 KiB actually sent.
        let mut c = RawConn::connect(s.port).await;
        c.send(&startup).await;
        let (tag, _) = c.read_message(PROMPT).await.expect("auth request");
        assert_eq!(tag, b'R', "{auth}");
        let mut m = vec![b'p'];
        m.extend_from_slice(&(16u32 << 20).to_be_bytes());
        m.extend_from_slice(&vec![b'a'; 64 * 1024]);
        c.send(&m).await;
        let f = expect_fatal(&mut c, "08P01").await;
        assert!(f[&b'M'].contains("auth packet"), "{auth}: {f:?}");
        // In bounds but wrong: an ordinary authentication failure.
        let mut c = RawConn::connect(s.port).await;
        c.send(&startup).await;
        c.read_message(PROMPT).await.expect("auth request");
        let mut body = vec![b'b'; 60 * 1024];
        body.push(0);
        if auth != "plain" {
            // SASLInitialResponse: mechanism, then the (oversized, bogus) client-first data.
            let mut sasl = b"SCRAM-SHA-256\0".to_vec();
            sasl.extend_from_slice(&(body.len() as u32).to_be_bytes());
            sasl.extend_from_slice(&body);
            body = sasl;
        }
        c.send(&RawConn::message(b'p', &body)).await;
        // PgBouncer's SQLSTATE for a failed authentication.
        expect_fatal(&mut c, "08P01").await;
        assert!(rss_kib(s.pid()) < before + 16 * 1024, "{auth}");
    }
}

/// CPU time (user + system, in clock ticks) a process has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the parenthesized command: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A Query that arrives in pieces, in transaction mode (where session-state tracking inspects
/// whole Query messages): Sluice waits for the rest without spinning, then answers it. A client
/// trickling a big statement must cost neither a busy core nor a hang.
#[tokio::test]
async fn query_arriving_in_pieces_in_transaction_mode() {
    let s = start("pool_mode = transaction\ndefault_pool_size = 2");
    assert_works(&s).await;
    let mut c = raw_login(&s, &[]).await;
    let sql = format!("SELECT length('{}')", "y".repeat(200_000));
    let mut body = sql.into_bytes();
    body.push(0);
    let msg = RawConn::message(b'Q', &body);
    let (head, tail) = msg.split_at(70_000);
    c.send(head).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_ticks(s.pid());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let used = cpu_ticks(s.pid()) - before;
    // 100 ticks per second: a spinning worker would show ~100 here.
    assert!(
        used < 30,
        "sluice used {used} ticks of CPU in 1 s waiting for the rest of a Query"
    );
    c.send(tail).await;
    let (r, status) = bad_input_common::raw_query_reply(&mut c).await;
    assert_eq!(r.expect("query failed")[0][0].as_deref(), Some("200000"));
    assert_eq!(status, b'I');
    assert_works(&s).await;
}
