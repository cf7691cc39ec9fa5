//! PgBouncer 1.26.0 and 1.26.1's six security advisories, each written from its description as a
//! test of Sluice: a SCRAM client-first-message without a nonce before authentication; message
//! lengths that overflow a packet buffer; a server's unbounded SCRAM iteration count (a scripted
//! fake server); a second StartupMessage in the middle of a SCRAM exchange naming another user (the
//! admin included) or a database that does not exist; `-c=` and other malformed forms in the
//! `options` startup parameter; `max_packet_size` at or above 2^31.
//!
//! Each shows that Sluice answers with an error or a close, stays up, keeps serving a healthy
//! client (a SCRAM login and a query) and does not keep burning CPU afterwards (its CPU time over a
//! quiet second, from /proc: a behaviour check with a generous bound, not a timing target).

use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, PgCluster, RawConn, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every hostile input must be answered (error or close) well within this.
const PROMPT: Duration = Duration::from_secs(5);
/// At most this much CPU (clock ticks, 1/100 s on Linux) over a quiet second: an idle pooler
/// uses well under one; a core kept busy by abandoned work uses about a hundred.
const QUIET_TICKS: u64 = 30;

const USERLIST: &str = "\"scram_user\" \"scram_pass\"\n\"admin\" \"admin_pass\"\n";

fn ini(extra: &str, databases: &str) -> String {
    Sluice::basic_ini(
        &format!(
            "auth_type = scram-sha-256\nadmin_users = admin\nquery_wait_timeout = 10\n\
             client_login_timeout = 5\nserver_login_retry = 1\nserver_connect_timeout = 5\n{extra}"
        ),
        &format!("app = host={{pg_host}} port={{pg_port}} dbname=app\n{databases}"),
    )
}

fn start(extra: &str, databases: &str) -> Sluice {
    PgCluster::get();
    Sluice::builder(&ini(extra, databases))
        .userlist(USERLIST)
        .start()
}

/// utime + stime of the process, in clock ticks (/proc/<pid>/stat fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("sluice (pid {pid}) is gone: {e}"));
    let after_name = &stat[stat.rfind(')').expect("stat has (comm)") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // after_name starts at field 3 (state): utime is field 14, stime 15.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Sluice is up, serves a SCRAM login and a query, and idles quietly.
async fn assert_healthy_and_quiet(s: &Sluice) {
    let fut = async {
        let c = s
            .connect("scram_user", "scram_pass", "app")
            .await
            .unwrap_or_else(|e| panic!("healthy client cannot log in: {e:?}\nlog:\n{}", s.log()));
        let row = c.query_one("SELECT 40 + 2", &[]).await.expect("query");
        assert_eq!(row.get::<_, i32>(0), 42);
    };
    tokio::time::timeout(Duration::from_secs(15), fut)
        .await
        .unwrap_or_else(|_| panic!("healthy client hung\nlog:\n{}", s.log()));
    let before = cpu_ticks(s.pid());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = cpu_ticks(s.pid()) - before;
    assert!(
        used <= QUIET_TICKS,
        "sluice used {used} ticks of CPU over a quiet second\nlog:\n{}",
        s.log()
    );
}

/// What a raw client got: the messages before the close (or the timeout), and whether it closed.
struct Answer {
    messages: Vec<(u8, Vec<u8>)>,
    closed: bool,
}

impl Answer {
    fn error(&self) -> Option<std::collections::HashMap<u8, String>> {
        self.messages
            .iter()
            .find(|(t, _)| *t == b'E')
            .map(|(_, b)| error_fields(b))
    }

    /// An ErrorResponse or a close: never silence, never a login.
    fn assert_refused(&self, what: &str) {
        assert!(
            self.error().is_some() || self.closed,
            "{what}: neither an error nor a close: {:?}",
            self.tags()
        );
        let logged_in = self
            .messages
            .iter()
            .any(|(t, b)| (*t == b'R' && b.starts_with(&[0, 0, 0, 0])) || *t == b'Z');
        assert!(
            !logged_in,
            "{what}: the login went through: {:?}",
            self.tags()
        );
    }

    fn tags(&self) -> String {
        self.messages.iter().map(|(t, _)| *t as char).collect()
    }
}

async fn answer(c: &mut RawConn) -> Answer {
    let deadline = Instant::now() + PROMPT;
    let mut messages = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match c.read_message(left).await {
            Some(m) => {
                let last = m.0 == b'E';
                messages.push(m);
                if last {
                    // A FATAL error is followed by the close.
                    let (_, closed) = c.read_until_close(PROMPT).await;
                    return Answer { messages, closed };
                }
            }
            None => {
                let (_, closed) = c.read_until_close(Duration::from_millis(100)).await;
                return Answer {
                    messages,
                    closed: closed || Instant::now() < deadline,
                };
            }
        }
    }
}

/// Start a SCRAM login as `user` on `db` and wait for the AuthenticationSASL request.
async fn sasl_started(s: &Sluice, user: &str, db: &str) -> RawConn {
    let mut c = RawConn::connect(s.port).await;
    c.send(&RawConn::startup_packet(&[
        ("user", user),
        ("database", db),
    ]))
    .await;
    let (tag, body) = c.read_message(PROMPT).await.expect("an auth request");
    assert_eq!((tag, &body[..4]), (b'R', &[0, 0, 0, 10][..]), "SASL");
    c
}

fn sasl_initial(mechanism: &str, data: &[u8]) -> Vec<u8> {
    let mut body = mechanism.as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&(data.len() as i32).to_be_bytes());
    body.extend_from_slice(data);
    RawConn::message(b'p', &body)
}

// ---------------------------------------------------------------------------------------------
// 1. SCRAM client-first-message without a nonce, before authentication
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn scram_client_first_without_a_nonce_is_refused() {
    let s = start("", "");
    for first in [
        &b"n,,n=,"[..],
        b"n,,n=scram_user",
        b"n,,n=,r=",
        b"n,,n=,r",
        b"n,,r=abc",
        b"n,,",
        b"",
        b"y,,n=,s=abc",
    ] {
        let mut c = sasl_started(&s, "scram_user", "app").await;
        c.send(&sasl_initial("SCRAM-SHA-256", first)).await;
        let a = answer(&mut c).await;
        a.assert_refused(&format!(
            "client-first {:?}",
            String::from_utf8_lossy(first)
        ));
        if let Some(f) = a.error() {
            assert!(
                ["08P01", "28P01", "28000"].contains(&f[&b'C'].as_str()),
                "{f:?}"
            );
        }
    }
    assert_healthy_and_quiet(&s).await;
}

// ---------------------------------------------------------------------------------------------
// 2. Message lengths that overflow a packet buffer
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn lengths_that_would_overflow_a_packet_buffer_are_refused() {
    let s = start("", "");
    // Startup packets announcing 2^32-1, 2^31 and 2^31-1 bytes.
    for len in [u32::MAX, 1 << 31, i32::MAX as u32] {
        let mut c = RawConn::connect(s.port).await;
        let mut p = len.to_be_bytes().to_vec();
        p.extend_from_slice(&196_608u32.to_be_bytes());
        c.send(&p).await;
        answer(&mut c)
            .await
            .assert_refused(&format!("startup length {len}"));
    }
    // A SASLInitialResponse whose own length word, or whose inner data length, is huge or
    // negative: the arithmetic on it must not wrap around a bounds check.
    for (outer, inner) in [
        (Some(u32::MAX), None),
        (Some(1 << 31), None),
        (None, Some(i32::MAX)),
        (None, Some(-2)),
        (None, Some(i32::MIN)),
    ] {
        let mut c = sasl_started(&s, "scram_user", "app").await;
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        body.extend_from_slice(&inner.unwrap_or(6).to_be_bytes());
        body.extend_from_slice(b"n,,n=,");
        let mut m = vec![b'p'];
        let len = outer.unwrap_or(body.len() as u32 + 4);
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(&body);
        c.send(&m).await;
        answer(&mut c)
            .await
            .assert_refused(&format!("SASL lengths {outer:?}/{inner:?}"));
    }
    assert_healthy_and_quiet(&s).await;
}

// ---------------------------------------------------------------------------------------------
// 3. A server's unbounded SCRAM iteration count
// ---------------------------------------------------------------------------------------------

/// A fake PostgreSQL that answers every login with a SCRAM challenge of 2^31-1 iterations, then
/// waits. Returns its port.
async fn hostile_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = hostile_login(sock).await;
            });
        }
    });
    port
}

async fn read_packet(s: &mut TcpStream, tagged: bool) -> std::io::Result<Vec<u8>> {
    let mut head = vec![0u8; if tagged { 5 } else { 4 }];
    s.read_exact(&mut head).await?;
    let len = u32::from_be_bytes(head[head.len() - 4..].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len.saturating_sub(4).min(1 << 16)];
    s.read_exact(&mut body).await?;
    Ok(body)
}

fn auth(code: u32, data: &[u8]) -> Vec<u8> {
    let mut body = code.to_be_bytes().to_vec();
    body.extend_from_slice(data);
    RawConn::message(b'R', &body)
}

async fn hostile_login(mut sock: TcpStream) -> std::io::Result<()> {
    let mut startup = read_packet(&mut sock, false).await?;
    if startup == 80_877_103u32.to_be_bytes() {
        sock.write_all(b"N").await?; // no TLS here
        startup = read_packet(&mut sock, false).await?;
    }
    assert!(startup.starts_with(&196_608u32.to_be_bytes()));
    sock.write_all(&auth(10, b"SCRAM-SHA-256\0\0")).await?;
    let initial = read_packet(&mut sock, true).await?;
    let text = String::from_utf8_lossy(&initial).to_string();
    let nonce = text.split("r=").nth(1).unwrap_or_default().to_string();
    let first = format!("r={nonce}hostile,s=c2FsdHNhbHQ=,i=2147483647");
    sock.write_all(&auth(11, first.as_bytes())).await?;
    // Wait for whatever comes (nothing should: the pooler refuses) until it hangs up.
    let mut sink = [0u8; 1024];
    while sock.read(&mut sink).await? > 0 {}
    Ok(())
}

#[tokio::test]
async fn a_servers_unbounded_scram_iteration_count_is_refused() {
    let fake = hostile_server().await;
    let s = start(
        "",
        &format!("evil = host=127.0.0.1 port={fake} dbname=evil\n"),
    );
    let started = Instant::now();
    for _ in 0..3 {
        let err = tokio::time::timeout(
            Duration::from_secs(10),
            s.connect("scram_user", "scram_pass", "evil"),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the client waiting for the hostile server hung\n{}",
                s.log()
            )
        })
        .expect_err("the login must fail");
        let db = err.as_db_error().unwrap_or_else(|| panic!("{err:?}"));
        assert_eq!(db.code().code(), "08P01", "{db:?}");
        assert!(
            db.message().contains("SCRAM iterations"),
            "{}",
            db.message()
        );
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    let log = s.log();
    assert!(
        log.contains(&format!(
            "127.0.0.1:{fake}: server login refused: the server asked for 2147483647 SCRAM iterations, more than server_scram_max_iterations (100000)"
        )),
        "{log}"
    );
    assert_healthy_and_quiet(&s).await;
}

// ---------------------------------------------------------------------------------------------
// 4. A second StartupMessage in the middle of a SCRAM exchange
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_second_startup_message_mid_scram_is_refused() {
    let s = start("", "");
    let others: [&[(&str, &str)]; 4] = [
        &[("user", "admin"), ("database", "pgbouncer")],
        &[("user", "scram_user"), ("database", "no_such_db")],
        &[("user", "no_such_user"), ("database", "app")],
        &[("user", "admin"), ("database", "app")],
    ];
    for second in others {
        // Before the client-first-message, and after it (waiting for the client-final).
        for after_first in [false, true] {
            let mut c = sasl_started(&s, "scram_user", "app").await;
            if after_first {
                c.send(&sasl_initial("SCRAM-SHA-256", b"n,,n=,r=abcdefghijklmnop"))
                    .await;
                let (tag, _) = c.read_message(PROMPT).await.expect("SASLContinue");
                assert_eq!(tag, b'R');
            }
            c.send(&RawConn::startup_packet(second)).await;
            answer(&mut c).await.assert_refused(&format!(
                "second startup {second:?} (after first: {after_first})"
            ));
        }
    }
    assert!(!s.log().contains("login: db=pgbouncer"), "{}", s.log());
    assert_healthy_and_quiet(&s).await;
}

// ---------------------------------------------------------------------------------------------
// 5. `-c=` and other malformed forms in the `options` startup parameter
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn malformed_options_are_answered() {
    // Both the default (options refused) and options accepted for known -c settings.
    for extra in ["", "ignore_startup_parameters = options"] {
        let s = start(extra, "");
        for options in [
            "-c=",
            "-c",
            "-c ",
            "-c =",
            "-c=x",
            "-c =x",
            "--=",
            "--",
            "-",
            "-c\\",
            "-c a\\",
            "--x",
            "-c a",
            "-c a=",
            "-ca=b -c",
            "\\",
            "-c \\ ",
            "-c=a=b",
            "-c\u{1}=x",
        ] {
            let mut c = RawConn::connect(s.port).await;
            c.send(&RawConn::startup_packet(&[
                ("user", "scram_user"),
                ("database", "app"),
                ("options", options),
            ]))
            .await;
            let (tag, body) = c
                .read_message(PROMPT)
                .await
                .unwrap_or_else(|| panic!("options {options:?}: no answer\n{}", s.log()));
            match tag {
                b'E' => {
                    let f = error_fields(&body);
                    assert!(
                        ["08P01", "22023", "42704", "0A000"].contains(&f[&b'C'].as_str()),
                        "options {options:?}: {f:?}"
                    );
                }
                // Accepted as harmless: the login goes on to authentication.
                b'R' => {}
                other => panic!("options {options:?}: unexpected '{}'", other as char),
            }
        }
        assert_healthy_and_quiet(&s).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 6. max_packet_size at or above 2^31
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn max_packet_size_at_or_above_2_pow_31_is_refused() {
    PgCluster::get();
    for value in ["2147483648", "4294967295", "4294967296", "99999999999"] {
        let (status, log) = Sluice::builder(&ini(&format!("max_packet_size = {value}"), ""))
            .userlist(USERLIST)
            .run_expect_exit(Duration::from_secs(10));
        assert!(!status.success(), "{value}: {log}");
        assert!(
            log.contains(".ini:") && log.contains(&format!("max_packet_size: value {value}"))
                || log.contains(&format!("max_packet_size: invalid integer '{value}'")),
            "{value}: {log}"
        );
    }
    // The largest allowed value starts; a reload to 2^31 is refused and the pooler stays up.
    let s = start("max_packet_size = 2147483647", "");
    s.rewrite_config(&ini("max_packet_size = 2147483648", ""));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + PROMPT;
    while !s.log().contains("max_packet_size: value 2147483648") {
        assert!(
            Instant::now() < deadline,
            "reload error not logged\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_healthy_and_quiet(&s).await;
}

// ---------------------------------------------------------------------------------------------
// The server leg beyond the advisories: server_require_auth and oversized login messages
// ---------------------------------------------------------------------------------------------

/// A fake PostgreSQL that answers every startup packet with `reply`, then waits. Returns its port.
async fn scripted_server(reply: Vec<u8>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut startup = read_packet(&mut sock, false).await?;
                if startup == 80_877_103u32.to_be_bytes() {
                    sock.write_all(b"N").await?;
                    startup = read_packet(&mut sock, false).await?;
                }
                assert!(startup.starts_with(&196_608u32.to_be_bytes()));
                sock.write_all(&reply).await?;
                let mut sink = [0u8; 1024];
                while sock.read(&mut sink).await? > 0 {}
                std::io::Result::Ok(())
            });
        }
    });
    port
}

async fn refused_login(s: &Sluice, db: &str) -> tokio_postgres::error::DbError {
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        s.connect("scram_user", "scram_pass", db),
    )
    .await
    .unwrap_or_else(|_| panic!("the client waiting for {db} hung\n{}", s.log()))
    .expect_err("the login must fail");
    err.as_db_error()
        .unwrap_or_else(|| panic!("{err:?}"))
        .clone()
}

#[tokio::test]
async fn server_require_auth_refuses_a_cleartext_request() {
    let cleartext = scripted_server(auth(3, b"")).await;
    let databases = format!("plain = host=127.0.0.1 port={cleartext} dbname=plain\n");
    let s = start("[sluice]\nserver_require_auth = scram-sha-256", &databases);
    let db = refused_login(&s, "plain").await;
    assert_eq!(db.code().code(), "28000", "{db:?}");
    assert!(
        db.message().contains(
            "server_require_auth does not allow the server's authentication method \"password\""
        ),
        "{}",
        db.message()
    );
    // The real server asks for SCRAM, which the setting allows.
    assert_healthy_and_quiet(&s).await;
    // Without the setting the request is answered, as PgBouncer answers it (the fake then
    // never lets the login finish: server_connect_timeout ends it).
    let s = start("server_connect_timeout = 1", &databases);
    let db = refused_login(&s, "plain").await;
    assert_ne!(db.code().code(), "28000", "{db:?}");
    assert_healthy_and_quiet(&s).await;
}

#[tokio::test]
async fn an_oversized_server_login_message_ends_that_login_only() {
    // An AuthenticationSASL announcing 16 MiB: refused at the header, nothing allocated.
    let mut huge = vec![b'R'];
    huge.extend_from_slice(&(16u32 << 20).to_be_bytes());
    huge.extend_from_slice(&10u32.to_be_bytes());
    let port = scripted_server(huge).await;
    let s = start(
        "",
        &format!("big = host=127.0.0.1 port={port} dbname=big\n"),
    );
    let db = refused_login(&s, "big").await;
    assert_eq!(db.code().code(), "08P01", "{db:?}");
    assert!(
        db.message().contains("message too large"),
        "{}",
        db.message()
    );
    assert!(
        s.log()
            .contains(&format!("127.0.0.1:{port}: server login refused")),
        "{}",
        s.log()
    );
    assert_healthy_and_quiet(&s).await;
}

/// Something that is not PostgreSQL at a server's address (an HTTP server answering the
/// SSLRequest with `HTTP/1.1 400`): that login ends with a clear error, which the log names once
/// as a pooler error (it used to say `pooler error: pooler error: ...`).
#[tokio::test]
async fn a_server_answering_the_ssl_request_with_garbage_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = read_packet(&mut sock, false).await;
                let _ = sock.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            });
        }
    });
    let s = start(
        "server_tls_sslmode = prefer",
        &format!("web = host=127.0.0.1 port={port} dbname=web\n"),
    );
    let db = refused_login(&s, "web").await;
    assert!(
        db.message().contains("server sent 'H' to SSLRequest"),
        "{}",
        db.message()
    );
    let log = s.log();
    assert!(
        log.contains("pooler error: server sent 'H' to SSLRequest"),
        "{log}"
    );
    assert!(!log.contains("pooler error: pooler error"), "{log}");
    assert_healthy_and_quiet(&s).await;
}
