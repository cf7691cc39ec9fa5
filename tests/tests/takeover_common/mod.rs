//! Helpers of tests/tests/takeover.rs: two processes on one port sharing a Unix socket directory
//! (where the takeover socket is), log waits, pgbench figures, and a successor played by the test
//! over the takeover socket with Sluice's own codec.
#![allow(dead_code)]

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use sluice::takeover::codec::{ClientState, Msg, VERSION};
use sluice::takeover::link::{self, LinkReader, LinkWriter};
use sluice_e2e::Sluice;
use tokio_postgres::error::SqlState;

pub const USERLIST: &str = "\"trust_user\" \"\"\n";

/// The Unix socket directory both processes use (the takeover socket lives there).
pub struct SharedDir(tempfile::TempDir);

impl SharedDir {
    pub fn new() -> Self {
        let d = tempfile::Builder::new()
            .prefix("sluice-e2e-takeover-")
            .tempdir()
            .unwrap();
        SharedDir(d)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// Transaction mode, 20 servers, trust auth, the shared socket directory, plus `extra` lines.
pub fn ini(shared: &SharedDir, extra: &str) -> String {
    format!(
        "[databases]\napp = host={{pg_host}} port={{pg_port}} dbname=app\n\n[pgbouncer]\n\
         listen_addr = 127.0.0.1\nlisten_port = {{port}}\nunix_socket_dir = {}\n\
         auth_file = {{userlist}}\nauth_type = trust\npool_mode = transaction\n\
         default_pool_size = 20\n{extra}\n",
        shared.path().display()
    )
}

pub fn start_old(shared: &SharedDir, extra: &str) -> Sluice {
    Sluice::builder(&ini(shared, extra))
        .userlist(USERLIST)
        .start()
}

/// `sluice --takeover` on `port` (returns at once: the port already accepts).
pub fn start_new(shared: &SharedDir, port: u16, extra: &str) -> Sluice {
    Sluice::builder(&ini(shared, extra))
        .userlist(USERLIST)
        .port(port)
        .arg("--takeover")
        .start()
}

/// Wait until `s`'s log contains `needle`; panics with the log otherwise.
pub fn wait_for_log(s: &Sluice, needle: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !s.log().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log within {limit:?}:\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// pgbench's "number of failed transactions".
pub fn failed_transactions(out: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix("number of failed transactions: "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Mean tps of pgbench's progress lines (`-P 1`, on stderr) before `at` seconds and from a second
/// after it.
pub fn tps_around(err: &str, at: f64) -> (f64, f64) {
    let points: Vec<(f64, f64)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("progress: ")?;
            let (t, rest) = rest.split_once(" s, ")?;
            let (tps, _) = rest.split_once(" tps")?;
            Some((t.parse().ok()?, tps.parse().ok()?))
        })
        .collect();
    let mean = |v: Vec<f64>| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let before = points.iter().filter(|p| p.0 <= at).map(|p| p.1).collect();
    let after = points
        .iter()
        .filter(|p| p.0 > at + 1.0)
        .map(|p| p.1)
        .collect();
    (mean(before), mean(after))
}

/// `SELECT pg_sleep(30)` on `c`, cancelled through its cancel key (sent every 300 ms until the
/// query ends, so one that lands before the query runs does not matter): the error's SQLSTATE.
pub async fn cancelled_sleep(c: &tokio_postgres::Client) -> Option<SqlState> {
    let token = c.cancel_token();
    let sleep = c.simple_query("SELECT pg_sleep(30)");
    tokio::pin!(sleep);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        tokio::select! {
            r = &mut sleep => return r.err().and_then(|e| e.code().cloned()),
            _ = tokio::time::sleep(Duration::from_millis(300)) => {
                assert!(tokio::time::Instant::now() < deadline, "the query was never cancelled");
                token.cancel_query(tokio_postgres::NoTls).await.unwrap();
            }
        }
    }
}

/// `SHOW name` as text.
pub async fn show(c: &tokio_postgres::Client, name: &str) -> String {
    let rows = c.simple_query(&format!("SHOW {name}")).await.unwrap();
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap()
}

/// A successor played by the test: it takes the offer (and, on `take`, the listeners) and the
/// clients sent to it, acknowledges none, accepts nothing; dropping it is its death.
pub struct FakeSuccessor {
    reader: LinkReader,
    writer: LinkWriter,
    kept: Vec<OwnedFd>,
}

impl FakeSuccessor {
    pub async fn connect(shared: &SharedDir, port: u16) -> Self {
        let path = shared.path().join(format!(".s.PGSQL.{port}.takeover"));
        let sock = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (mut reader, writer) = link::split(sock);
        let hello = Msg::Hello {
            version: VERSION,
            pid: std::process::id(),
        };
        writer.send(&hello, &[]).await.unwrap();
        let (m, kept) = reader.recv_within(Duration::from_secs(5)).await.unwrap();
        assert!(matches!(m, Msg::Offer { .. }), "{m:?}");
        assert!(!kept.is_empty());
        FakeSuccessor {
            reader,
            writer,
            kept,
        }
    }

    pub async fn take(&mut self) {
        self.writer.send(&Msg::Take, &[]).await.unwrap();
        let (m, _) = self
            .reader
            .recv_within(Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(m, Msg::Taken);
    }

    pub async fn next_client(&mut self) -> ClientState {
        let (m, fds) = self
            .reader
            .recv_within(Duration::from_secs(10))
            .await
            .unwrap();
        let Msg::Client(state) = m else {
            panic!("expected a client, got {m:?}")
        };
        assert_eq!(fds.len(), 1);
        self.kept.extend(fds);
        *state
    }
}
