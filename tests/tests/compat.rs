//! Real-driver conformance matrix: builds each driver program under compat/ once (cached in
//! target/compat-cache), runs it through Sluice in session and transaction mode, prints the matrix,
//! writes compat/RESULTS.md and fails on any red cell not listed in compat/expected-failures.txt.
//!
//! Env: COMPAT_DRIVERS=psycopg,pgx (subset of drivers), COMPAT_MODES=transaction (subset of modes),
//! COMPAT_ONLY=cancel,copy (subset of scenarios), COMPAT_SKIP=1 (skip the whole matrix).
//! RESULTS.md is only rewritten for a full run.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sluice_e2e::{PgCluster, Sluice};

const USER: &str = "compat_user";
const PASSWORD: &str = "compat_pass";
const MODES: [&str; 2] = ["session", "transaction"];
/// One driver program run may not take longer than this (scenarios have their own short timeouts).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
/// Building one toolchain's programs (first run downloads packages).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
/// Driver programs run at the same time (each against its own Sluice).
const PARALLEL_RUNS: usize = 3;

const COMMON: &[&str] = &[
    "connect",
    "simple_query",
    "prepared",
    "transaction",
    "error_in_tx",
    "copy",
    "large_result",
    "cancel",
    "set_isolation",
    "advisory_lock",
    "listen_notify",
];

/// The toolchain a driver program is built with; one build per toolchain.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
enum Toolchain {
    Python,
    Java,
    Go,
    Node,
    Rust,
}

struct Driver {
    name: &'static str,
    toolchain: Toolchain,
    /// Scenarios beyond COMMON that this driver reports.
    extra: &'static [&'static str],
}

const DRIVERS: &[Driver] = &[
    Driver {
        name: "psycopg",
        toolchain: Toolchain::Python,
        extra: &["pipeline"],
    },
    Driver {
        name: "asyncpg",
        toolchain: Toolchain::Python,
        extra: &[],
    },
    Driver {
        name: "pgjdbc",
        toolchain: Toolchain::Java,
        extra: &["batch"],
    },
    Driver {
        name: "pgx",
        toolchain: Toolchain::Go,
        extra: &["batch"],
    },
    Driver {
        name: "node-postgres",
        toolchain: Toolchain::Node,
        extra: &[],
    },
    Driver {
        name: "tokio-postgres",
        toolchain: Toolchain::Rust,
        extra: &["pipeline"],
    },
];

impl Driver {
    /// Every scenario of this driver (or those named in COMPAT_ONLY, which the programs honour too).
    fn scenarios(&self) -> Vec<&'static str> {
        let only = std::env::var("COMPAT_ONLY").unwrap_or_default();
        let only: Vec<&str> = only.split(',').filter(|s| !s.is_empty()).collect();
        COMMON
            .iter()
            .chain(self.extra.iter())
            .copied()
            .filter(|s| only.is_empty() || only.contains(s))
            .collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    Pass,
    Fail,
    Skip,
}

#[derive(Clone, Debug)]
struct Cell {
    status: Status,
    detail: String,
}

struct Paths {
    root: PathBuf,
    cache: PathBuf,
}

impl Paths {
    fn new() -> Paths {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .to_path_buf();
        let cache = root.join("target/compat-cache");
        fs::create_dir_all(&cache).expect("create target/compat-cache");
        Paths { root, cache }
    }
    fn compat(&self, sub: &str) -> PathBuf {
        self.root.join("compat").join(sub)
    }
}

// ---------------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------------

/// Why a toolchain's programs are not runnable.
#[derive(Clone, Debug)]
enum BuildError {
    /// Toolchain missing or registry unreachable: the driver's cells are SKIP.
    Unavailable(String),
    /// Anything else (our code does not compile, ...): the driver's cells are FAIL.
    Broken(String),
}

/// FNV-1a over the files (path + content) under `dir` whose names pass `keep`, sorted.
fn tree_hash(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> String {
    fn walk(d: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
        let Ok(rd) = fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, keep, out);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, keep, &mut files);
    files.sort();
    let mut h: u64 = 0xcbf29ce484222325;
    for f in files {
        let data = fs::read(&f).unwrap_or_default();
        for b in f.to_string_lossy().bytes().chain(data) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

fn has_tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Output of a failed install step that means "the network/registry is not there".
fn looks_offline(out: &str) -> bool {
    const SIGNS: &[&str] = &[
        "Temporary failure in name resolution",
        "Could not resolve host",
        "Name or service not known",
        "ENOTFOUND",
        "EAI_AGAIN",
        "ECONNREFUSED",
        "Network is unreachable",
        "No matching distribution found",
        "Could not transfer artifact",
        "dial tcp",
        "i/o timeout",
        "failed to download",
        "Unknown host",
    ];
    SIGNS.iter().any(|s| out.contains(s))
}

/// Run a build step with a timeout; Err carries the combined output.
fn step(mut cmd: Command, what: &str) -> Result<(), BuildError> {
    let t0 = Instant::now();
    let out_path = std::env::temp_dir().join(format!(
        "sluice-compat-build-{}-{}.log",
        std::process::id(),
        what.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    let out_file = fs::File::create(&out_path).expect("build log");
    cmd.stdin(Stdio::null())
        .stdout(out_file.try_clone().expect("dup"))
        .stderr(out_file);
    let mut child = cmd
        .spawn()
        .map_err(|e| BuildError::Unavailable(format!("{what}: cannot start: {e}")))?;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait build step") {
            break Some(s);
        }
        if t0.elapsed() > BUILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let out = fs::read_to_string(&out_path).unwrap_or_default();
    let _ = fs::remove_file(&out_path);
    eprintln!(
        "compat: {what}: {:?} in {:.1}s",
        status,
        t0.elapsed().as_secs_f64()
    );
    match status {
        Some(s) if s.success() => Ok(()),
        _ => {
            let tail: String = out
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            let msg = format!("{what} failed ({status:?}):\n{tail}");
            if looks_offline(&out) {
                Err(BuildError::Unavailable(msg))
            } else {
                Err(BuildError::Broken(msg))
            }
        }
    }
}

fn cmd_in(program: &str, dir: &Path) -> Command {
    let mut c = Command::new(program);
    c.current_dir(dir);
    c
}

/// Build (or reuse from the cache) the programs of one toolchain. Returns, per driver of that
/// toolchain, the command line that runs it.
fn build(tc: Toolchain, p: &Paths) -> Result<HashMap<&'static str, Vec<String>>, BuildError> {
    let cache = p.cache.join(format!("{tc:?}").to_lowercase());
    fs::create_dir_all(&cache).expect("create cache dir");
    let stamp_path = cache.join("stamp");
    let s = |x: &Path| x.display().to_string();
    let require = |tool: &str| {
        if has_tool(tool) {
            Ok(())
        } else {
            Err(BuildError::Unavailable(format!(
                "`{tool}` is not installed"
            )))
        }
    };
    let (hash, run): (String, Box<dyn Fn() -> Result<(), BuildError>>) = match tc {
        Toolchain::Python => {
            require("python3")?;
            let src = p.compat("python");
            let venv = cache.join("venv");
            let hash = tree_hash(&src, &|f| f.ends_with("requirements.txt"));
            let venv2 = venv.clone();
            (
                hash,
                Box::new(move || {
                    let _ = fs::remove_dir_all(&venv2);
                    let mut c = cmd_in("python3", &src);
                    c.args(["-m", "venv"]).arg(&venv2);
                    step(c, "python3 -m venv")?;
                    let mut c = cmd_in(&s(&venv2.join("bin/pip")), &src);
                    c.args([
                        "install",
                        "-q",
                        "--disable-pip-version-check",
                        "-r",
                        "requirements.txt",
                    ]);
                    step(c, "pip install")
                }),
            )
        }
        Toolchain::Java => {
            require("mvn")?;
            require("java")?;
            require("javac")?;
            let src = p.compat("java");
            let out = cache.join("build");
            let hash = tree_hash(&src, &|f| {
                f.extension().is_some_and(|e| e == "java") || f.ends_with("pom.xml")
            });
            (
                hash,
                Box::new(move || {
                    let mut c = cmd_in("mvn", &src);
                    c.args(["-q", "-B", "package", "dependency:copy-dependencies"])
                        .arg(format!("-Dcompat.out={}", s(&out)));
                    step(c, "mvn package")
                }),
            )
        }
        Toolchain::Go => {
            require("go")?;
            let src = p.compat("go");
            let bin = cache.join("compat-pgx");
            let hash = tree_hash(&src, &|f| {
                f.extension().is_some_and(|e| e == "go")
                    || f.ends_with("go.mod")
                    || f.ends_with("go.sum")
            });
            (
                hash,
                Box::new(move || {
                    let mut c = cmd_in("go", &src);
                    c.args(["build", "-o"]).arg(&bin).arg(".");
                    step(c, "go build")
                }),
            )
        }
        Toolchain::Node => {
            require("node")?;
            require("npm")?;
            let src = p.compat("node");
            let hash = tree_hash(&src, &|f| {
                f.ends_with("package.json") || f.ends_with("package-lock.json")
            });
            let cache2 = cache.clone();
            (
                hash,
                Box::new(move || {
                    for f in ["package.json", "package-lock.json"] {
                        fs::copy(src.join(f), cache2.join(f)).expect("copy npm manifest");
                    }
                    let mut c = cmd_in("npm", &cache2);
                    c.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]);
                    step(c, "npm ci")
                }),
            )
        }
        Toolchain::Rust => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let src = p.compat("rust");
            let target = cache.join("target");
            // Cargo knows when to rebuild: always ask it (a no-op build takes well under a second).
            let hash = format!("always-{}", Instant::now().elapsed().as_nanos());
            (
                hash,
                Box::new(move || {
                    let mut c = cmd_in(&cargo, &src);
                    c.args(["build", "-q", "--manifest-path"])
                        .arg(src.join("Cargo.toml"))
                        .arg("--target-dir")
                        .arg(&target)
                        .env_remove("CARGO_TARGET_DIR")
                        .env_remove("RUSTC_WRAPPER");
                    step(c, "cargo build compat/rust")
                }),
            )
        }
    };
    if fs::read_to_string(&stamp_path).ok().as_deref() != Some(hash.as_str()) {
        let _ = fs::remove_file(&stamp_path);
        run()?;
        fs::write(&stamp_path, &hash).expect("write stamp");
    }
    let mut cmds = HashMap::new();
    match tc {
        Toolchain::Python => {
            let py = s(&cache.join("venv/bin/python"));
            for (d, f) in [
                ("psycopg", "psycopg_compat.py"),
                ("asyncpg", "asyncpg_compat.py"),
            ] {
                cmds.insert(d, vec![py.clone(), s(&p.compat("python").join(f))]);
            }
        }
        Toolchain::Java => {
            let out = cache.join("build");
            let cp = format!(
                "{}:{}/*",
                s(&out.join("classes")),
                s(&out.join("dependency"))
            );
            cmds.insert(
                "pgjdbc",
                vec![
                    "java".into(),
                    "-XX:TieredStopAtLevel=1".into(),
                    "-Xshare:auto".into(),
                    "-cp".into(),
                    cp,
                    "compat.PgjdbcCompat".into(),
                ],
            );
        }
        Toolchain::Go => {
            cmds.insert("pgx", vec![s(&cache.join("compat-pgx"))]);
        }
        Toolchain::Node => {
            cmds.insert(
                "node-postgres",
                vec!["node".into(), s(&p.compat("node").join("compat.js"))],
            );
        }
        Toolchain::Rust => {
            cmds.insert(
                "tokio-postgres",
                vec![s(&cache.join("target/debug/compat-tokio-postgres"))],
            );
        }
    }
    Ok(cmds)
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

fn start_sluice(mode: &str) -> Sluice {
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
fn run_program(
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

// ---------------------------------------------------------------------------------------------
// Expected failures and the report
// ---------------------------------------------------------------------------------------------

/// `driver mode scenario reason` lines of compat/expected-failures.txt (mode may be `*`).
fn expected_failures(p: &Paths) -> HashMap<(String, String, String), String> {
    let text = fs::read_to_string(p.compat("expected-failures.txt")).unwrap_or_default();
    let mut m = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut rest = line;
        let mut f: Vec<&str> = Vec::new();
        for _ in 0..3 {
            let t = rest.trim_start();
            let end = t.find(char::is_whitespace).unwrap_or(t.len());
            f.push(&t[..end]);
            rest = &t[end..];
        }
        f.push(rest.trim());
        assert!(
            f.len() == 4 && !f[3].trim().is_empty(),
            "compat/expected-failures.txt:{}: want `driver mode scenario reason`: {line}",
            i + 1
        );
        assert!(
            DRIVERS.iter().any(|d| d.name == f[0]),
            "compat/expected-failures.txt:{}: unknown driver {}",
            i + 1,
            f[0]
        );
        let modes: Vec<&str> = if f[1] == "*" {
            MODES.to_vec()
        } else {
            assert!(
                MODES.contains(&f[1]),
                "compat/expected-failures.txt:{}: unknown mode {}",
                i + 1,
                f[1]
            );
            vec![f[1]]
        };
        for mode in modes {
            m.insert(
                (f[0].to_string(), mode.to_string(), f[2].to_string()),
                f[3].trim().to_string(),
            );
        }
    }
    m
}

type Key = (String, String, String);

fn symbol(cell: &Cell, expected: bool) -> &'static str {
    match (cell.status, expected) {
        (Status::Pass, false) => "✅ pass",
        (Status::Pass, true) => "✅ pass (listed as expected failure)",
        (Status::Fail, true) => "❌ expected failure",
        (Status::Fail, false) => "❌ **FAIL**",
        (Status::Skip, _) => "⏭️ skip",
    }
}

/// Which pooler source the matrix was taken with: `git describe`-ish, `+dirty` when crates/ has
/// uncommitted changes (the binary is built from the working tree).
fn pooler_version(p: &Paths) -> String {
    if let Some(bin) = std::env::var_os("SLUICE_BIN") {
        return format!("SLUICE_BIN={}", Path::new(&bin).display());
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&p.root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(head) => {
            let dirty =
                git(&["status", "--porcelain", "--", "crates"]).is_some_and(|s| !s.is_empty());
            format!("{head}{}", if dirty { "+dirty" } else { "" })
        }
        None => "unknown".into(),
    }
}

fn render(
    results: &BTreeMap<Key, Cell>,
    expected: &HashMap<Key, String>,
    modes: &[&str],
    elapsed: Duration,
    version: &str,
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Driver compatibility matrix\n\nGenerated by `cargo test -p sluice-e2e --test compat` \
         (tests/tests/compat.rs); do not edit by hand. Pooler source: {version}. Run took {:.0}s.\n\n\
         ✅ pass · ❌ expected failure = listed in `compat/expected-failures.txt` with its reason · \
         ❌ **FAIL** = unexpected · ⏭️ skip = toolchain or registry unavailable\n",
        elapsed.as_secs_f64()
    );
    for d in DRIVERS {
        if !results.keys().any(|k| k.0 == d.name) {
            continue;
        }
        let _ = writeln!(md, "## {}\n", d.name);
        let _ = writeln!(md, "| scenario | {} |", modes.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(modes.len()));
        for sc in d.scenarios() {
            let mut row = format!("| {sc} |");
            for m in modes {
                let k = (d.name.to_string(), m.to_string(), sc.to_string());
                match results.get(&k) {
                    Some(c) => {
                        let _ = write!(row, " {} |", symbol(c, expected.contains_key(&k)));
                    }
                    None => row.push_str(" |"),
                }
            }
            let _ = writeln!(md, "{row}");
        }
        md.push('\n');
    }
    let mut notes: Vec<String> = Vec::new();
    for (k, c) in results {
        if c.status != Status::Pass {
            let why = expected
                .get(k)
                .map(|r| format!(" — expected: {r}"))
                .unwrap_or_default();
            notes.push(format!(
                "- `{} {} {}`: {}{}",
                k.0,
                k.1,
                k.2,
                c.detail.replace('|', "/"),
                why
            ));
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(
            md,
            "## Details of non-passing cells\n\n{}",
            notes.join("\n")
        );
    }
    md
}

#[test]
fn driver_matrix() {
    if std::env::var_os("COMPAT_SKIP").is_some() {
        eprintln!("compat: COMPAT_SKIP set, skipping the driver matrix");
        return;
    }
    let t0 = Instant::now();
    let p = Paths::new();
    let only_drivers: Option<Vec<String>> = std::env::var("COMPAT_DRIVERS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let only_modes: Option<Vec<String>> = std::env::var("COMPAT_MODES")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let drivers: Vec<&Driver> = DRIVERS
        .iter()
        .filter(|d| {
            only_drivers
                .as_ref()
                .is_none_or(|o| o.iter().any(|x| x == d.name))
        })
        .collect();
    let modes: Vec<&str> = MODES
        .iter()
        .copied()
        .filter(|m| only_modes.as_ref().is_none_or(|o| o.iter().any(|x| x == m)))
        .collect();
    let full_run = drivers.len() == DRIVERS.len()
        && modes.len() == MODES.len()
        && std::env::var_os("COMPAT_ONLY").is_none();

    // Cluster + role first (initdb runs while the builds start).
    let cluster = thread::spawn(|| {
        PgCluster::get().psql(
            "postgres",
            &format!("CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'"),
        );
    });

    // Build every needed toolchain in parallel.
    let mut toolchains: Vec<Toolchain> = drivers.iter().map(|d| d.toolchain).collect();
    toolchains.sort();
    toolchains.dedup();
    let builds: Vec<_> = toolchains
        .into_iter()
        .map(|tc| {
            let p = Paths::new();
            (tc, thread::spawn(move || build(tc, &p)))
        })
        .collect();
    let mut commands: HashMap<&str, Result<Vec<String>, BuildError>> = HashMap::new();
    for (tc, h) in builds {
        let r = h.join().expect("build thread");
        for d in DRIVERS.iter().filter(|d| d.toolchain == tc) {
            let c = match &r {
                Ok(m) => Ok(m[d.name].clone()),
                Err(e) => Err(e.clone()),
            };
            commands.insert(d.name, c);
        }
    }
    let build_time = t0.elapsed();
    cluster.join().expect("cluster setup");

    // Run every (driver, mode) against its own Sluice, a few at a time.
    let results: Arc<Mutex<BTreeMap<Key, Cell>>> = Arc::default();
    let mut jobs: Vec<(&Driver, &str)> = Vec::new();
    for d in &drivers {
        for m in &modes {
            jobs.push((d, m));
        }
    }
    let queue = Arc::new(Mutex::new(jobs));
    thread::scope(|scope| {
        for _ in 0..PARALLEL_RUNS {
            let queue = Arc::clone(&queue);
            let results = Arc::clone(&results);
            let commands = &commands;
            let p = &p;
            scope.spawn(move || loop {
                let Some((d, mode)) = queue.lock().unwrap().pop() else {
                    return;
                };
                let mut cells: BTreeMap<String, Cell> = BTreeMap::new();
                let note = match &commands[d.name] {
                    Err(BuildError::Unavailable(why)) => {
                        for sc in d.scenarios() {
                            cells.insert(
                                sc.into(),
                                Cell {
                                    status: Status::Skip,
                                    detail: why.lines().next().unwrap_or("").into(),
                                },
                            );
                        }
                        format!("skipped: {why}")
                    }
                    Err(BuildError::Broken(why)) => {
                        for sc in d.scenarios() {
                            cells.insert(
                                sc.into(),
                                Cell {
                                    status: Status::Fail,
                                    detail: format!(
                                        "build failed: {}",
                                        why.lines().next().unwrap_or("")
                                    ),
                                },
                            );
                        }
                        format!("build failed: {why}")
                    }
                    Ok(cmd) => {
                        let sluice = start_sluice(mode);
                        let tag = format!("{}_{mode}", d.name.replace('-', "_"));
                        let (got, note) = run_program(cmd, &sluice, &tag, mode, p);
                        for sc in d.scenarios() {
                            let c = got.get(sc).cloned().unwrap_or(Cell {
                                status: Status::Fail,
                                detail: format!("no result line (program {note})"),
                            });
                            cells.insert(sc.into(), c);
                        }
                        for (name, c) in got {
                            cells.entry(name).or_insert(c);
                        }
                        note
                    }
                };
                eprintln!("compat: {} {mode}: {note}", d.name);
                let mut r = results.lock().unwrap();
                for (sc, c) in cells {
                    r.insert((d.name.to_string(), mode.to_string(), sc), c);
                }
            });
        }
    });
    let results = Arc::try_unwrap(results).unwrap().into_inner().unwrap();
    let expected = expected_failures(&p);
    let elapsed = t0.elapsed();

    let md = render(&results, &expected, &modes, elapsed, &pooler_version(&p));
    println!("{md}");
    if full_run {
        fs::write(p.compat("RESULTS.md"), &md).expect("write compat/RESULTS.md");
    }

    let mut unexpected_fail = Vec::new();
    let mut unexpected_pass = Vec::new();
    for (k, c) in &results {
        let listed = expected.contains_key(k);
        match c.status {
            Status::Fail if !listed => {
                unexpected_fail.push(format!("{} {} {}: {}", k.0, k.1, k.2, c.detail))
            }
            Status::Pass if listed => unexpected_pass.push(format!("{} {} {}", k.0, k.1, k.2)),
            _ => {}
        }
    }
    for k in expected.keys() {
        if drivers.iter().any(|d| d.name == k.0)
            && modes.contains(&k.1.as_str())
            && !results.contains_key(k)
        {
            eprintln!(
                "compat: expected-failures.txt lists {} {} {}, which is not a scenario",
                k.0, k.1, k.2
            );
        }
    }
    eprintln!(
        "compat: builds {:.1}s, total {:.1}s",
        build_time.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    if !unexpected_pass.is_empty() {
        eprintln!(
            "compat: UNEXPECTED PASS (trim compat/expected-failures.txt):\n  {}",
            unexpected_pass.join("\n  ")
        );
    }
    assert!(
        unexpected_fail.is_empty(),
        "driver cells failed that are not in compat/expected-failures.txt:\n  {}",
        unexpected_fail.join("\n  ")
    );
}
