//! Running one driver program against its own Sluice and collecting its scenario lines.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sluice_e2e::Sluice;
use std::io::Read;

use super::{Cell, Paths, Status, PASSWORD, RUN_TIMEOUT, USER};

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

pub fn start_sluice(mode: &str) -> Sluice {
    let pool = if mode == "session" {
        // Session mode: one server per client; the scenarios open at most 3 clients at a time.
        "default_pool_size = 20"
    } else {
        // Few servers, so clients of one scenario really share them (state leaks show up).
        "default_pool_size = 2"
    };
    // pgjdbc sends extra_float_digits at startup; like PgBouncer, Sluice rejects unknown startup
    // parameters unless they are ignored: this is the setting every PgBouncer + JDBC operator has.
    let extra = format!(
        "auth_type = scram-sha-256\npool_mode = {mode}\n{pool}\nmax_client_conn = 100\n\
         query_wait_timeout = 15\nignore_startup_parameters = extra_float_digits"
    );
    Sluice::builder(&Sluice::basic_ini(
        &extra,
        "app = host={pg_host} port={pg_port} dbname=app",
    ))
    .userlist(&format!("\"{USER}\" \"{PASSWORD}\"\n"))
    .start()
}

/// Run one driver program against `sluice`; returns its scenario lines and a note on how it ended.
pub fn run_program(
    cmd: &[String],
    sluice: &Sluice,
    tag: &str,
    mode: &str,
    p: &Paths,
) -> (BTreeMap<String, Cell>, String) {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .current_dir(&p.root)
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", sluice.port.to_string())
        .env("PGUSER", USER)
        .env("PGPASSWORD", PASSWORD)
        .env("PGDATABASE", "app")
        .env("PGSSLMODE", "disable")
        .env("COMPAT_TAG", tag)
        .env("COMPAT_MODE", mode)
        .env("NODE_PATH", p.cache.join("node/node_modules"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => return (BTreeMap::new(), format!("cannot start {}: {e}", cmd[0])),
    };
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let out_t = thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let err_t = thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait driver program") {
            break Some(s);
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let mut cells = BTreeMap::new();
    for line in stdout.lines() {
        let mut parts = line.splitn(3, ' ');
        let status = match parts.next() {
            Some("PASS") => Status::Pass,
            Some("FAIL") => Status::Fail,
            Some("SKIP") => Status::Skip,
            _ => continue,
        };
        let Some(name) = parts.next() else { continue };
        let detail = parts.next().unwrap_or("").trim().to_string();
        cells.insert(name.to_string(), Cell { status, detail });
    }
    let note = match status {
        None => format!("killed after {RUN_TIMEOUT:?}"),
        Some(s) => format!("{s} in {:.1}s", t0.elapsed().as_secs_f64()),
    };
    if status.is_none_or(|s| !s.success()) {
        let tail = |text: &str, n: usize| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        eprintln!(
            "compat: {tag}: {note}\n--- program stderr (tail) ---\n{}\n--- sluice log (tail) ---\n{}",
            tail(&stderr, 15),
            tail(&sluice.log(), 15)
        );
    }
    (cells, note)
}
