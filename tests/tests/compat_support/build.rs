//! Building the driver programs of one toolchain under compat/ (or reusing them from the cache in
//! target/compat-cache), telling an unavailable toolchain from a broken build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use std::{fs, thread};

use super::{Paths, Toolchain, BUILD_TIMEOUT};

// ---------------------------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------------------------

/// Why a toolchain's programs are not runnable.
#[derive(Clone, Debug)]
pub enum BuildError {
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
pub fn build(tc: Toolchain, p: &Paths) -> Result<HashMap<&'static str, Vec<String>>, BuildError> {
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
