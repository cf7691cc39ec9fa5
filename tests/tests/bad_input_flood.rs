//! Floods of bad input against the real sluice binary: seeded random bytes before and after login,
//! slowloris startups, thousands of random-key CancelRequests, 5,000 half-open connections (and
//! silent ones held back by tcp_defer_accept) and SQL
//! built to be slow to classify. Every abusive connection ends with the right error or a close,
//! never a hang; Sluice's memory stays bounded; and well-behaved clients (a tokio-postgres loop,
//! pgbench) see no failure. Limits on single messages are in bad_input_limits.rs.

mod bad_input_common;

use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_e2e::{error_fields, pgbench, raise_own_nofile, RawConn, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use bad_input_common::{
    assert_works, closed_promptly, expect_fatal, packet_with_len, raw_login, raw_scalar, rss_kib,
    split_messages, start, PROMPT,
};

/// splitmix64: a tiny deterministic generator, so a failing case can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// (soft, hard) "Max open files" of a process, from /proc/<pid>/limits (u64::MAX = unlimited).
fn nofile_of(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let nums: Vec<u64> = line["Max open files".len()..]
        .split_whitespace()
        .take(2)
        .map(|v| v.parse().unwrap_or(u64::MAX))
        .collect();
    (nums[0], nums[1])
}

/// Open descriptors of a process.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `fd_count` once two readings 100 ms apart agree (at most 2 s): a connection that was just
/// closed is no longer counted.
async fn settled_fd_count(pid: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = fd_count(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = fd_count(pid);
        if now == last || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// pgbench through sluice (trust_user/app) for `secs` seconds with 4 clients running a read-only
/// one-statement script (like -S, without needing pgbench's tables).
fn spawn_pgbench(s: &Sluice, secs: u32) -> tokio::task::JoinHandle<(ExitStatus, String, String)> {
    let script = s.dir.path().join("select.sql");
    std::fs::write(&script, "\\set n random(1, 100000)\nSELECT :n::int + 1;\n").unwrap();
    let port = s.port.to_string();
    let script = script.display().to_string();
    let secs = secs.to_string();
    tokio::task::spawn_blocking(move || {
        pgbench(
            &[
                "-n",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "trust_user",
                "-c",
                "4",
                "-j",
                "2",
                "-T",
                &secs,
                "-f",
                &script,
                "app",
            ],
            "",
        )
    })
}

/// pgbench exited 0, processed transactions and reported zero failed ones.
async fn assert_pgbench_clean(
    bench: tokio::task::JoinHandle<(ExitStatus, String, String)>,
    s: &Sluice,
) {
    let (status, out, err) = bench.await.expect("pgbench task");
    let ctx = || {
        format!(
            "pgbench {status}\nstdout:\n{out}\nstderr:\n{err}\nlog:\n{}",
            s.log()
        )
    };
    assert!(status.success(), "{}", ctx());
    let processed: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split('/').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no transaction count: {}", ctx()));
    assert!(processed > 0, "{}", ctx());
    if let Some(l) = out
        .lines()
        .find(|l| l.starts_with("number of failed transactions:"))
    {
        assert!(l.contains(": 0 ("), "{l}\n{}", ctx());
    }
    assert!(!err.contains("error"), "{}", ctx());
}

/// A tokio-postgres client querying in a loop until `stop`; returns the number of good answers and
/// panics on the first failure or hang. Proof that other clients keep working during the abuse.
fn spawn_bystander(s: &Sluice, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let conn = s.conn_str("trust_user", "", "app");
    tokio::spawn(async move {
        let (c, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .expect("bystander connect");
        tokio::spawn(connection);
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let arg = n as i64;
            let row = tokio::time::timeout(PROMPT, c.query_one("SELECT $1::int8 * 2", &[&arg]))
                .await
                .expect("bystander query hung")
                .expect("bystander query failed");
            assert_eq!(row.get::<_, i64>(0), n as i64 * 2);
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    })
}

fn is_fatal(body: &[u8]) -> bool {
    error_fields(body).get(&b'S').map(String::as_str) == Some("FATAL")
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn random_bytes_before_and_after_login() {
    const SEED: u64 = 0x5eed_0001;
    let s = start("max_packet_size = 65536\nclient_login_timeout = 5");
    assert_works(&s).await;
    let stop = Arc::new(AtomicBool::new(false));
    let bystander = spawn_bystander(&s, stop.clone());
    let rss_before = rss_kib(s.pid());

    // Startup phase: pure noise, and noise behind a plausible length word.
    let mut rng = Rng(SEED);
    let mut set = JoinSet::new();
    for i in 0..150u32 {
        let n = 1 + rng.below(300) as usize;
        let mut bytes = rng.bytes(n);
        if i % 3 == 0 && n >= 8 {
            let len = 8 + rng.below(n as u64 - 7) as u32;
            bytes[..4].copy_from_slice(&len.to_be_bytes());
        }
        let port = s.port;
        set.spawn(async move {
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let _ = c.write_all(&bytes).await;
            let what = format!("startup noise #{i} (seed {SEED:#x}) {bytes:02x?}");
            let msgs = closed_promptly(c, &what).await;
            // Nothing (a CancelRequest-shaped packet) or exactly one FATAL error.
            assert!(msgs.len() <= 1, "{what}: {msgs:?}");
            if let Some((tag, body)) = msgs.first() {
                assert!(*tag == b'E' && is_fatal(body), "{what}: {msgs:?}");
                assert_eq!(error_fields(body)[&b'C'], "08P01", "{what}");
            }
        });
        if set.len() >= 50 {
            set.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_works(&s).await;

    // After login: noise where the next message header should be.
    let mut rng = Rng(SEED ^ 0xaf7e_7000);
    for i in 0..100u32 {
        let n = 1 + rng.below(300) as usize;
        let bytes = rng.bytes(n);
        let mut c = raw_login(&s, &[]).await;
        assert_eq!(raw_scalar(&mut c, "SELECT 1").await, "1");
        let what = format!("post-login noise #{i} (seed {SEED:#x}) {bytes:02x?}");
        set.spawn(async move {
            c.send(&bytes).await;
            // Sluice either refuses the header (08P01 + close), or relays what parses as messages
            // and then sees our half-close. Either way the connection ends promptly.
            let (got, closed) = tokio::time::timeout(PROMPT + PROMPT, async {
                c.shutdown_write().await;
                c.read_until_close(PROMPT).await
            })
            .await
            .unwrap_or_else(|_| panic!("{what}: hang"));
            assert!(closed, "{what}: not closed; got {got:?}");
        });
        if set.len() >= 25 {
            set.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }

    // Header refusals specifically: a length word above max_packet_size or below 4.
    for (tag, len) in [
        (b'Q', 0x00ff_ffffu32),
        (b'P', 3),
        (b'B', 0),
        (0xff, 0x7fff_ffff),
    ] {
        let mut c = raw_login(&s, &[]).await;
        let mut m = vec![tag];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(b"garbage");
        c.send(&m).await;
        let f = expect_fatal(&mut c, "08P01").await;
        assert!(f[&b'M'].contains("packet"), "{f:?}");
    }

    stop.store(true, Ordering::Relaxed);
    let answered = bystander.await.expect("bystander");
    assert!(answered > 10, "bystander answered only {answered} queries");
    assert_works(&s).await;
    let rss_after = rss_kib(s.pid());
    assert!(
        rss_after < rss_before + 64 * 1024 && rss_after < 200 * 1024,
        "RSS {rss_before} -> {rss_after} KiB"
    );
}

/// Slowloris: startup packets trickling in one byte per second are cut off by
/// client_login_timeout (a deadline for the whole login, not per read).
#[tokio::test]
async fn slowloris_startup_is_closed_by_client_login_timeout() {
    let s = start("client_login_timeout = 2");
    let full = RawConn::startup_packet(&[("user", "trust_user"), ("database", "app")]);
    let mut set = JoinSet::new();
    for _ in 0..8 {
        let port = s.port;
        let full = full.clone();
        set.spawn(async move {
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let t0 = Instant::now();
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            for b in &full {
                if c.write_all(&[*b]).await.is_err() {
                    break;
                }
                match tokio::time::timeout(Duration::from_secs(1), c.read(&mut buf)).await {
                    Err(_) => {}
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(6),
                    "slowloris still connected after {:?}",
                    t0.elapsed()
                );
            }
            // Drain whatever is left up to the close.
            let _ = tokio::time::timeout(PROMPT, c.read_to_end(&mut got)).await;
            let el = t0.elapsed();
            assert!(
                el >= Duration::from_millis(1500) && el < Duration::from_secs(6),
                "closed after {el:?}"
            );
            let msgs = split_messages(&got);
            assert_eq!(msgs.len(), 1, "{msgs:?}");
            let f = error_fields(&msgs[0].1);
            assert_eq!(f[&b'C'], "08P01", "{f:?}");
            assert!(f[&b'M'].contains("client_login_timeout"), "{f:?}");
        });
    }
    // Meanwhile normal logins are unaffected.
    assert_works(&s).await;
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_works(&s).await;
}

/// 2,000 CancelRequests with random keys next to a pgbench run: none cancels anything, each
/// connection is closed without an answer, pgbench sees zero failures.
#[tokio::test]
async fn cancel_request_flood_cancels_nothing() {
    const SEED: u64 = 0x00ca_9ce1;
    let s = start("");
    let bench = spawn_pgbench(&s, 6);
    let victim = s.connect("trust_user", "", "app").await.unwrap();
    let sleeper =
        tokio::spawn(async move { victim.simple_query("SELECT pg_sleep(3)").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut rng = Rng(SEED);
    let answered = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..2000 {
        let mut body = 80_877_102u32.to_be_bytes().to_vec();
        body.extend_from_slice(&rng.next().to_be_bytes());
        let packet = packet_with_len(16, &body);
        let port = s.port;
        let answered = answered.clone();
        set.spawn(async move {
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            c.write_all(&packet).await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(PROMPT, c.read_to_end(&mut got))
                .await
                .expect("cancel connection left open")
                .ok();
            if !got.is_empty() {
                answered.fetch_add(1, Ordering::Relaxed);
            }
        });
        if set.len() >= 64 {
            set.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(
        answered.load(Ordering::Relaxed),
        0,
        "a cancel got an answer"
    );
    tokio::time::timeout(Duration::from_secs(10), sleeper)
        .await
        .expect("sleeper hung")
        .unwrap()
        .expect("a random cancel key cancelled someone's query");
    assert_pgbench_clean(bench, &s).await;
    assert_works(&s).await;
}

/// 5,000 connections opened and left silent, next to a pgbench run. Sluice starts with a soft
/// open-files limit of 1024 and must raise it itself; its memory stays bounded; the silent
/// connections are all closed by client_login_timeout; pgbench sees zero failures. With
/// `tcp_defer_accept = 0`: by default the kernel holds silent connections back (next test).
#[tokio::test]
async fn five_thousand_half_open_connections() {
    let own = raise_own_nofile();
    let want = 5000usize;
    let n = want.min(own.saturating_sub(1000) as usize);
    assert!(
        n >= 1000,
        "open-files hard limit {own} too low for this test"
    );
    if n < want {
        eprintln!("NOTE: hard open-files limit {own}: using {n} half-open connections");
    }
    let s = Sluice::builder(&Sluice::basic_ini(
        "auth_type = trust\nmax_client_conn = 10000\nlisten_backlog = 4096\nclient_login_timeout = 8\n\
         tcp_defer_accept = 0",
        bad_input_common::DB_LINE,
    ))
    .userlist(bad_input_common::USERLIST)
    .nofile_soft(1024)
    .start();
    let (soft, hard) = nofile_of(s.pid());
    assert!(
        soft == hard || (hard == u64::MAX && soft >= 65536),
        "sluice did not raise its open-files limit: soft {soft}, hard {hard}\n{}",
        s.log()
    );
    if hard > 1024 {
        assert!(
            s.log().contains("raised open files limit from 1024"),
            "{}",
            s.log()
        );
    }
    assert_works(&s).await;
    let rss_before = rss_kib(s.pid());
    let fds_before = fd_count(s.pid());
    let bench = spawn_pgbench(&s, 8);

    let t0 = Instant::now();
    let mut conns = Vec::with_capacity(n);
    let mut set = JoinSet::new();
    for _ in 0..n {
        let port = s.port;
        set.spawn(async move { TcpStream::connect(("127.0.0.1", port)).await });
        if set.len() >= 200 {
            conns.push(set.join_next().await.unwrap().unwrap().expect("connect"));
        }
    }
    while let Some(r) = set.join_next().await {
        conns.push(r.unwrap().expect("connect"));
    }
    // Sluice has accepted them all (they are not just sitting in the listen backlog).
    let deadline = Instant::now() + Duration::from_secs(5);
    while fd_count(s.pid()) < fds_before + n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fds = fd_count(s.pid());
    assert!(
        fds >= fds_before + n,
        "sluice holds {fds} fds, expected >= {}",
        fds_before + n
    );
    let rss = rss_kib(s.pid());
    eprintln!("sluice RSS: {rss_before} KiB idle, {rss} KiB with {n} half-open connections");
    assert!(
        rss < 200 * 1024,
        "RSS {rss} KiB with {n} half-open connections (before: {rss_before} KiB)"
    );
    // Normal clients log in and work while the half-open ones sit there.
    for _ in 0..3 {
        assert_works(&s).await;
    }
    assert!(
        t0.elapsed() < Duration::from_secs(7),
        "setup too slow to test the timeout"
    );

    // client_login_timeout (8 s from each accept) closes every silent connection.
    let mut set = JoinSet::new();
    for mut c in conns {
        set.spawn(async move {
            let mut got = Vec::new();
            let r = tokio::time::timeout(Duration::from_secs(15), c.read_to_end(&mut got)).await;
            (r.is_ok(), got)
        });
    }
    let mut closed = 0;
    while let Some(r) = set.join_next().await {
        let (ok, got) = r.unwrap();
        assert!(ok, "a half-open connection outlived client_login_timeout");
        let msgs = split_messages(&got);
        assert!(msgs.len() <= 1, "{msgs:?}");
        if let Some((t, body)) = msgs.first() {
            assert_eq!(*t, b'E');
            assert!(error_fields(body)[&b'M'].contains("client_login_timeout"));
        }
        closed += 1;
    }
    assert_eq!(closed, n);
    assert_pgbench_clean(bench, &s).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while fd_count(s.pid()) > fds_before + 50 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fd_count(s.pid()) <= fds_before + 50,
        "descriptors leaked: {} before, {} after",
        fds_before,
        fd_count(s.pid())
    );
    assert_works(&s).await;
}

/// SQL built to be slow for the session-state classifier (nested, unclosed `set_config(` calls,
/// which used to take quadratic time) is answered promptly in transaction mode, and the other
/// clients on the same workers are not held up.
#[tokio::test]
async fn pathological_sql_in_transaction_mode_is_answered_promptly() {
    let s = start("pool_mode = transaction");
    assert_works(&s).await;
    let stop = Arc::new(AtomicBool::new(false));
    let bystander = spawn_bystander(&s, stop.clone());
    let mut c = raw_login(&s, &[]).await;
    let t0 = Instant::now();
    let mut sql = "SELECT set_config(".repeat(20_000).into_bytes();
    sql.push(0);
    c.send(&RawConn::message(b'Q', &sql)).await;
    // Quadratic, this took minutes; linear, well under a second (more on a busy debug build).
    let limit = Duration::from_secs(15);
    let mut error = None;
    loop {
        let (tag, body) = c
            .read_message(limit)
            .await
            .unwrap_or_else(|| panic!("no answer after {:?}", t0.elapsed()));
        match tag {
            b'E' => error = Some(error_fields(&body)),
            b'Z' => break,
            _ => {}
        }
    }
    let f = error.expect("nonsense SQL cannot succeed");
    // A syntax error or stack depth error from PostgreSQL, or Sluice refusing an unknown
    // session-wide setting.
    assert!(
        matches!(f[&b'C'].as_str(), "42601" | "0A000" | "54001"),
        "{f:?}"
    );
    eprintln!("pathological query answered after {:?}", t0.elapsed());
    assert!(t0.elapsed() < limit, "answered after {:?}", t0.elapsed());
    stop.store(true, Ordering::Relaxed);
    assert!(bystander.await.expect("bystander") > 0);
    assert_works(&s).await;
}

/// `tcp_defer_accept` (on by default on Linux, as in PgBouncer): connections that send nothing
/// stay in the kernel and take no descriptor or client slot in Sluice, while one of them that
/// then sends its startup packet logs in. Turned off by RELOAD, it applies from the next accepted
/// connection: silent ones are then accepted (and left to client_login_timeout).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn tcp_defer_accept_keeps_silent_connections_in_the_kernel() {
    let s = Sluice::builder(&Sluice::basic_ini(
        "auth_type = trust",
        bad_input_common::DB_LINE,
    ))
    .userlist(bad_input_common::USERLIST)
    .start();
    assert_works(&s).await;
    let open_silent = |n: usize| async move {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(
                TcpStream::connect(("127.0.0.1", s.port))
                    .await
                    .expect("connect"),
            );
        }
        v
    };
    let before = fd_count(s.pid());
    let mut silent = open_silent(50).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let held = fd_count(s.pid());
    assert!(
        held < before + 5,
        "sluice accepted silent connections: {before} fds before, {held} with 50 silent ones"
    );
    // One of them speaks: it is accepted and logs in.
    let mut one = silent.pop().unwrap();
    one.write_all(&RawConn::startup_packet(&[
        ("user", "trust_user"),
        ("database", "app"),
    ]))
    .await
    .unwrap();
    let mut got = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), one.read_exact(&mut got))
        .await
        .expect("no answer to the startup packet")
        .expect("read");
    assert_eq!(&got[..1], b"R", "expected AuthenticationOk, got {got:?}");
    assert_eq!(
        &got[5..9],
        &[0, 0, 0, 0],
        "expected AuthenticationOk, got {got:?}"
    );

    // Off, by RELOAD: after the next accepted connection, silent ones reach sluice.
    s.rewrite_config(&Sluice::basic_ini(
        "auth_type = trust\ntcp_defer_accept = 0",
        bad_input_common::DB_LINE,
    ));
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.log().contains("configuration reloaded") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_works(&s).await;
    // assert_works' own connection may still be closing: count from a settled fd table.
    let before = settled_fd_count(s.pid()).await;
    let _more = open_silent(20).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while fd_count(s.pid()) < before + 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = fd_count(s.pid());
    assert!(
        now >= before + 20,
        "with tcp_defer_accept = 0 the silent connections were not accepted: {before} -> {now} fds\n{}",
        s.log()
    );
    drop(silent);
}
