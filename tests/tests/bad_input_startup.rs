//! Bad input from clients in the startup phase (broken startup packets, wrong protocol versions,
//! SSL/GSS requests, bad startup parameters) against the real sluice binary: every case ends with
//! the exact error and/or a close within a couple of seconds, never a hang, and a normal client
//! keeps working afterwards.

mod bad_input_common;

use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, RawConn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use bad_input_common::{
    assert_works, bad_startup, expect_fatal, packet_with_len, raw_login, raw_scalar,
    read_until_ready, rss_kib, split_messages, start, PROMPT,
};

// ---------------------------------------------------------------------------------------------
// Startup phase
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn garbage_instead_of_startup_packet_is_refused() {
    let s = start("");
    // An HTTP request: the "length" is 0x47455420 (far above the startup limit).
    let f = bad_startup(&s, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "08P01").await;
    assert!(f[&b'M'].contains("startup"), "{f:?}");
    assert_works(&s).await;
    // A plausible length with a nonsense protocol code.
    bad_startup(&s, &b"\0\0\0\x10garbage!garbage!"[..16], "08P01").await;
    assert_works(&s).await;
    // Random-looking binary bytes.
    bad_startup(
        &s,
        &[
            0x00, 0x00, 0x00, 0x0c, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04,
        ],
        "08P01",
    )
    .await;
    assert_works(&s).await;
}

#[tokio::test]
async fn truncated_startup_packet_then_close() {
    let s = start("");
    let full = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    // Half a packet, then the client closes its sending side: sluice reports the truncation and closes.
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    c.write_all(&full[..full.len() / 2]).await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(PROMPT, c.read_to_end(&mut got))
        .await
        .expect("sluice kept a half-closed truncated startup open")
        .ok();
    let msgs = split_messages(&got);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].0, b'E');
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert!(f[&b'M'].contains("truncated"), "{f:?}");
    assert_works(&s).await;

    // Only the first 2 bytes of the length, then a full close (nothing left to read on our side).
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    c.write_all(&full[..2]).await.unwrap();
    drop(c);
    assert_works(&s).await;
    // Sluice is still alive.
    assert!(std::path::Path::new(&format!("/proc/{}", s.pid())).exists());
}

#[tokio::test]
async fn stalled_partial_startup_hits_client_login_timeout() {
    let s = start("client_login_timeout = 1");
    let full = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    let mut c = RawConn::connect(s.port).await;
    c.send(&full[..full.len() - 3]).await;
    let t0 = Instant::now();
    let (bytes, closed) = c.read_until_close(Duration::from_secs(4)).await;
    assert!(closed, "stalled client not closed by client_login_timeout");
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    let msgs = split_messages(&bytes);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert!(f[&b'M'].contains("client_login_timeout"), "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn huge_startup_length_is_refused_without_allocating() {
    let s = start("");
    assert_works(&s).await;
    let before = rss_kib(s.pid());
    // 1 GiB announced, followed by some real bytes: refused at the header.
    let mut c = RawConn::connect(s.port).await;
    let mut bytes = packet_with_len(0x4000_0000, &196_608u32.to_be_bytes());
    bytes.extend_from_slice(&vec![b'x'; 64 * 1024]);
    c.send(&bytes).await;
    let f = expect_fatal(&mut c, "08P01").await;
    assert!(f[&b'M'].contains("startup"), "{f:?}");
    // Several at once must not add up either.
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut c = RawConn::connect(s.port).await;
        c.send(&packet_with_len(0x4000_0000, &196_608u32.to_be_bytes()))
            .await;
        conns.push(c);
    }
    for c in &mut conns {
        expect_fatal(c, "08P01").await;
    }
    let after = rss_kib(s.pid());
    assert!(
        after < before + 16 * 1024 && after < 128 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert_works(&s).await;
}

#[tokio::test]
async fn impossible_startup_lengths_are_refused() {
    let s = start("");
    for len in [0u32, 3, 7, 0x7fff_ffff, 0xffff_ffff] {
        let f = bad_startup(
            &s,
            &packet_with_len(len, &196_608u32.to_be_bytes()),
            "08P01",
        )
        .await;
        assert!(f[&b'M'].contains("startup"), "len {len}: {f:?}");
        assert_works(&s).await;
    }
    assert!(rss_kib(s.pid()) < 128 * 1024);
}

#[tokio::test]
async fn wrong_protocol_versions_are_refused() {
    let s = start("");
    for (major, minor) in [(2u32, 0u32), (4, 0), (1234, 1)] {
        let mut body = ((major << 16) | minor).to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0trust_user\0database\0app\0\0");
        let bytes = packet_with_len(body.len() as u32 + 4, &body);
        let f = bad_startup(&s, &bytes, "08P01").await;
        assert!(
            f[&b'M'].contains("protocol") || f[&b'M'].contains("version"),
            "{major}.{minor}: {f:?}"
        );
        // Only the first 8 bytes of it, and the client waits: refused at once (the version
        // cannot become valid), not at client_login_timeout.
        let t0 = std::time::Instant::now();
        let f = bad_startup(&s, &bytes[..8], "08P01").await;
        assert!(f[&b'M'].contains("version"), "{major}.{minor}: {f:?}");
        assert!(t0.elapsed() < PROMPT, "{:?}", t0.elapsed());
        assert_works(&s).await;
    }
    // A cancel request announcing the wrong length, likewise.
    let mut cancel = 80_877_102u32.to_be_bytes().to_vec();
    cancel.extend_from_slice(&[0; 4]);
    bad_startup(&s, &packet_with_len(40, &cancel), "08P01").await;
}

#[tokio::test]
async fn minor_protocol_version_gets_negotiated_down() {
    let s = start("");
    let mut p = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    p[7] = 2; // 3.2
    let mut c = RawConn::connect(s.port).await;
    c.send(&p).await;
    let msgs = read_until_ready(&mut c).await;
    let (tag, body) = &msgs[0];
    assert_eq!(*tag, b'v', "NegotiateProtocolVersion first: {msgs:?}");
    assert_eq!(&body[..4], &0x0003_0000u32.to_be_bytes(), "{body:?}");
    assert_eq!(raw_scalar(&mut c, "SELECT 7").await, "7");
    assert_works(&s).await;
}

#[tokio::test]
async fn ssl_request_without_tls_gets_n_then_plain_startup_works() {
    let s = start("");
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::ssl_request()).await;
    assert_eq!(
        c.read_bytes(1, PROMPT).await.as_deref(),
        Some(&b"N"[..]),
        "SSLRequest must be answered with a single 'N'"
    );
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    let msgs = read_until_ready(&mut c).await;
    assert_eq!(msgs[0], (b'R', vec![0, 0, 0, 0]));
    assert_eq!(raw_scalar(&mut c, "SELECT 'ok'").await, "ok");
    c.send(&RawConn::message(b'X', &[])).await;
    let (rest, closed) = c.read_until_close(PROMPT).await;
    assert!(closed && rest.is_empty(), "{rest:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn gssenc_request_gets_n_then_plain_startup_works() {
    let s = start("");
    let mut c = RawConn::connect(s.port).await;
    c.send(&packet_with_len(8, &80_877_104u32.to_be_bytes()))
        .await;
    assert_eq!(c.read_bytes(1, PROMPT).await.as_deref(), Some(&b"N"[..]));
    // And an SSLRequest after the refused GSSENCRequest (what libpq does with gssencmode=prefer).
    c.send(&RawConn::ssl_request()).await;
    assert_eq!(c.read_bytes(1, PROMPT).await.as_deref(), Some(&b"N"[..]));
    c.send(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await;
    read_until_ready(&mut c).await;
    assert_eq!(raw_scalar(&mut c, "SELECT 1").await, "1");
    assert_works(&s).await;
}

#[tokio::test]
async fn a_second_ssl_request_is_refused() {
    let s = start("");
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::ssl_request()).await;
    assert_eq!(c.read_bytes(1, PROMPT).await.as_deref(), Some(&b"N"[..]));
    c.send(&RawConn::ssl_request()).await;
    let (got, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "not closed: {got:?}");
    let msgs = split_messages(&got);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert!(f[&b'M'].contains("duplicate SSLRequest"), "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn ssl_request_with_pipelined_plaintext_is_refused() {
    let s = start("");
    let mut bytes = RawConn::ssl_request();
    bytes.extend_from_slice(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]));
    let mut c = RawConn::connect(s.port).await;
    c.send(&bytes).await; // one write: both packets arrive together
    let (got, closed) = c.read_until_close(PROMPT).await;
    assert!(closed, "not closed: {got:?}");
    // An 'N' before the refusal is tolerable; a login (AuthenticationOk) is not.
    let rest = got.strip_prefix(b"N").unwrap_or(&got);
    let msgs = split_messages(rest);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].0, b'E', "{msgs:?}");
    let f = error_fields(&msgs[0].1);
    assert_eq!(f[&b'C'], "08P01", "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn startup_without_user_is_refused() {
    let s = start("");
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[("database", "app")]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("user"), "{f:?}");
    // An empty user is no better.
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[("user", ""), ("database", "app")]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("user"), "{f:?}");
    // Key without value / missing terminator: malformed packet.
    bad_startup(&s, b"\0\0\0\x0e\0\x03\0\0user\0\0", "08P01").await;
    bad_startup(&s, b"\0\0\0\x18\0\x03\0\0user\0trust_user\0\0", "08P01").await;
    assert_works(&s).await;
}

#[tokio::test]
async fn unsupported_startup_parameter_is_named() {
    let s = start("");
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
            ("extra_float_digits", "2"),
        ]),
        "08P01",
    )
    .await;
    assert!(
        f[&b'M'].contains("unsupported startup parameter")
            && f[&b'M'].contains("extra_float_digits"),
        "{f:?}"
    );
    // Unknown parameters inside `options` are refused too.
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
            ("options", "-c work_mem=64kB"),
        ]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("work_mem"), "{f:?}");
    assert_works(&s).await;
}

#[tokio::test]
async fn ignore_startup_parameters_lets_them_pass() {
    let s = start("ignore_startup_parameters = extra_float_digits, options");
    let mut c = raw_login(
        &s,
        &[("extra_float_digits", "2"), ("options", "-c work_mem=64kB")],
    )
    .await;
    assert_eq!(raw_scalar(&mut c, "SELECT 5 * 5").await, "25");
    // Still refused: a parameter not in the list.
    let f = bad_startup(
        &s,
        &RawConn::startup_packet(&[("user", "trust_user"), ("database", "app"), ("geqo", "off")]),
        "08P01",
    )
    .await;
    assert!(f[&b'M'].contains("geqo"), "{f:?}");
    assert_works(&s).await;
}
