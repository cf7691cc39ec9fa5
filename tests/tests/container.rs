//! deploy/container/Containerfile: the image the recipe makes, built with Debian's buildah (vfs
//! storage in a temp dir; nothing is pulled: the `build` stage, which needs a Rust image from a
//! registry, is replaced by a root filesystem that deploy/container/rootfs.sh lays out around the
//! static binary scripts/test.sh builds). The image runs `sluice --version`, then its own
//! ENTRYPOINT and CMD as user 65532 with the config mounted read-only, serves a query from the
//! test cluster, and exits 0 on its STOPSIGNAL. Containers run with `--isolation chroot`: the OCI
//! runtime (crun) cannot create cgroups on this machine. Needs root, buildah and the static
//! binary (scripts/test.sh installs and builds them): without one the test fails
//! (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line, nothing asserted).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_e2e::{free_port, PgCluster};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const IMAGE: &str = "localhost/sluice-e2e:test";

/// The static binary scripts/test.sh builds (`--target <arch>-unknown-linux-gnu`, crt-static).
fn static_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_STATIC_BIN") {
        return PathBuf::from(p);
    }
    Path::new(ROOT).join(format!(
        "target/{}-unknown-linux-gnu/debug/sluice",
        std::env::consts::ARCH
    ))
}

/// buildah with its storage (vfs) and run state inside `dir`, so the test leaves nothing behind.
struct Buildah {
    dir: tempfile::TempDir,
}

impl Buildah {
    fn cmd(&self) -> Command {
        let mut c = Command::new("buildah");
        c.arg("--root")
            .arg(self.dir.path().join("storage"))
            .arg("--runroot")
            .arg(self.dir.path().join("runroot"))
            .args(["--storage-driver", "vfs"]);
        c
    }

    /// Run buildah to completion; panics with its output on failure. Returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "buildah {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Buildah {
    fn drop(&mut self) {
        let _ = self.cmd().args(["rm", "--all"]).output();
    }
}

/// `buildah run` of the image's command; on drop (a failed assertion) the process in the
/// container is killed as well as buildah, which does not pass signals on.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            if let Some(pid) = descendant(self.0.id(), "sluice") {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// What the test needs and does not have, if anything.
fn missing(bin: &Path) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "not root (buildah with vfs storage and chroot isolation runs as root here)".into(),
        );
    }
    if Command::new("buildah").arg("--version").output().is_err() {
        return Some("buildah not installed (Debian package buildah)".into());
    }
    if !bin.exists() {
        return Some(format!(
            "no static binary at {} (scripts/test.sh builds it: RUSTFLAGS='-C target-feature=+crt-static' \
             cargo build -p sluice --target {}-unknown-linux-gnu)",
            bin.display(),
            std::env::consts::ARCH
        ));
    }
    None
}

/// The pid of the process named `name` among the descendants of `ancestor`.
fn descendant(ancestor: u32, name: &str) -> Option<u32> {
    let mut parent = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.insert(pid, (ppid, comm));
        }
    }
    parent.iter().find_map(|(&pid, (_, comm))| {
        let mut p = pid;
        while let Some((pp, _)) = parent.get(&p) {
            if *pp == ancestor {
                return (comm == name).then_some(pid);
            }
            p = *pp;
        }
        None
    })
}

#[tokio::test]
async fn the_image_runs_as_its_user_serves_a_query_and_drains_on_its_stop_signal() {
    let bin = static_binary();
    if let Some(why) = missing(&bin) {
        return sluice_e2e::missing_tool(&why);
    }
    let t0 = Instant::now();
    // The recipe's premise: a binary that needs no shared library.
    let ldd = Command::new("ldd").arg(&bin).output().unwrap();
    let said =
        String::from_utf8_lossy(&ldd.stdout).to_string() + &String::from_utf8_lossy(&ldd.stderr);
    assert!(
        said.contains("not a dynamic executable") || said.contains("statically linked"),
        "{} is dynamically linked:\n{said}",
        bin.display()
    );

    let b = Buildah {
        dir: tempfile::Builder::new()
            .prefix("sluice-e2e-image-")
            .tempdir()
            .unwrap(),
    };
    let work = b.dir.path();
    let rootfs = work.join("build/rootfs");
    let st = Command::new(Path::new(ROOT).join("deploy/container/rootfs.sh"))
        .arg(&bin)
        .arg(&rootfs)
        .status()
        .unwrap();
    assert!(st.success(), "rootfs.sh: {st}");
    std::fs::create_dir(work.join("context")).unwrap();
    let containerfile = Path::new(ROOT).join("deploy/container/Containerfile");
    b.ok(&[
        "build",
        "--quiet",
        "--build-context",
        &format!("build={}", work.join("build").display()),
        "-f",
        &containerfile.display().to_string(),
        "-t",
        IMAGE,
        &work.join("context").display().to_string(),
    ]);
    let config = b.ok(&[
        "inspect",
        "--type",
        "image",
        "--format",
        "{{.OCIv1.Config.User}}|{{.OCIv1.Config.StopSignal}}|\
         {{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}{{range .OCIv1.Config.Cmd}}{{.}} {{end}}",
        IMAGE,
    ]);
    let parts: Vec<&str> = config.split('|').collect();
    assert_eq!(
        parts[..2],
        ["65532:65532", "SIGINT"],
        "image config: {config}"
    );
    let argv: Vec<&str> = parts[2].split_whitespace().collect();
    assert_eq!(
        argv,
        ["/usr/local/bin/sluice", "/etc/pgbouncer/pgbouncer.ini"],
        "ENTRYPOINT + CMD"
    );
    let size = b.ok(&["images", "--format", "{{.Size}}", IMAGE]);
    let ctr = b.ok(&["from", "--name", "sluice-e2e", IMAGE]);

    let version = b.ok(&[
        "run",
        "--isolation",
        "chroot",
        &ctr,
        "--",
        "/usr/local/bin/sluice",
        "--version",
    ]);
    assert!(
        version.contains("Sluice"),
        "sluice --version in the image: {version}"
    );

    // The image's own command line, with a config mounted read-only as the Deployment does.
    let pg = PgCluster::get();
    let (port, metrics_port) = (free_port(), free_port());
    let cfg = work.join("cfg");
    std::fs::create_dir(&cfg).unwrap();
    std::fs::write(
        cfg.join("pgbouncer.ini"),
        format!(
            "[databases]\napp = host=localhost port={} dbname=app\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = /run/sluice\n\
             auth_type = md5\nauth_file = /etc/pgbouncer/userlist.txt\npool_mode = transaction\n\n\
             [sluice]\nworkers = 1\nmetrics_listen_addr = 127.0.0.1:{metrics_port}\n",
            pg.port
        ),
    )
    .unwrap();
    std::fs::write(cfg.join("userlist.txt"), "\"md5_user\" \"md5_pass\"\n").unwrap();
    for f in ["pgbouncer.ini", "userlist.txt"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(cfg.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let log_path = work.join("sluice.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut run = Running(
        b.cmd()
            .args(["run", "--isolation", "chroot", "-v"])
            .arg(format!("{}:/etc/pgbouncer:ro", cfg.display()))
            .arg(&ctr)
            .arg("--")
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    let conn_str = format!("host=127.0.0.1 port={port} user=md5_user password=md5_pass dbname=app");
    let client = loop {
        if let Ok(Some(st)) = run.0.try_wait() {
            panic!("the container exited ({st}); log:\n{}", read_log());
        }
        if let Ok((c, conn)) = tokio_postgres::connect(&conn_str, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no answer on port {port}; log:\n{}",
            read_log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let row = client
        .query_one("SELECT 'from the image'::text", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "from the image");
    let (code, _) = sluice_e2e::http_get(metrics_port, "/health/live").await;
    assert_eq!(code, 200);

    let pid = descendant(run.0.id(), "sluice").expect("the sluice process under buildah run");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(
        uid, ["65532"; 4],
        "the process's real, effective, saved, fs uid"
    );

    // What the runtime sends at the end of the preStop sleep: the idle client is let go, exit 0.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        if let Some(st) = run.0.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            panic!("still running 10 s after SIGINT; log:\n{}", read_log());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(st.success(), "exit {st}; log:\n{}", read_log());
    drop(client);
    eprintln!(
        "image {IMAGE} ({size}) built, served a query and drained in {:?}",
        t0.elapsed()
    );
}
