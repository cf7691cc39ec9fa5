//! The prometheus-community pgbouncer_exporter itself, for the metrics tests: its source fetched
//! through the Go module proxy (`go mod download`, not copied into this repository), the metric
//! families its `collector.go` declares, and the exporter built from that source.
// Each test file uses part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_e2e::{free_port, PgCluster, Sluice};

/// The release whose names `/metrics` follows by default (`[sluice] metrics_exporter_names = current`).
/// The userlist of the metrics and exporter tests (an admin and the app user).
pub const USERLIST: &str = "\"admin\" \"adminpw\"\n\"app\" \"apppw\"\n";

pub const MODULE: &str = "github.com/prometheus-community/pgbouncer_exporter";
pub const VERSION: &str = "v0.12.1";

/// tests/../target, or CARGO_TARGET_DIR.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

pub fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Run a go command with a deadline: Ok(stdout), or Err with its stderr.
pub fn run_go(
    args: &[&str],
    dir: &Path,
    gobin: Option<&Path>,
    limit: Duration,
) -> Result<String, String> {
    let mut cmd = Command::new("go");
    cmd.args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(b) = gobin {
        cmd.env("GOBIN", b);
    }
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            return if st.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            };
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            return Err(format!("go {args:?} took longer than {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The exporter's source tree in the Go module cache (read-only), fetched through the Go module
/// proxy. Err says what is missing, for `require`.
pub fn module_dir() -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if !go_available() {
            return Err(format!(
                "{MODULE}@{VERSION}: `go` is not installed (Debian package golang-go)"
            ));
        }
        // `go mod download` of an exact version needs no go.mod around it (and `go install
        // ...@version` would ask the proxy for the module's version list, which it refuses).
        let json = run_go(
            &["mod", "download", "-json", &format!("{MODULE}@{VERSION}")],
            &std::env::temp_dir(),
            None,
            Duration::from_secs(300),
        )
        .map_err(|e| format!("{MODULE}@{VERSION}: the Go module proxy did not serve it: {e}"))?;
        let dir = json
            .lines()
            .find_map(|l| l.trim().strip_prefix("\"Dir\": \""))
            .and_then(|l| l.strip_suffix("\","))
            .ok_or_else(|| format!("{MODULE}@{VERSION}: no Dir in `go mod download`: {json}"))?;
        Ok(PathBuf::from(dir))
    })
    .clone()
}

/// The exporter built from that source into target/go-bin (once).
pub fn binary() -> Result<PathBuf, String> {
    let dir = module_dir()?;
    let out = target_dir().join(format!("go-bin/pgbouncer_exporter-{VERSION}"));
    if out.exists() {
        return Ok(out);
    }
    run_go(
        &["build", "-o", out.to_str().expect("a UTF-8 target dir"), "."],
        &dir,
        None,
        Duration::from_secs(400),
    )
    .map_err(|e| format!("{MODULE}@{VERSION}: cannot build it (its dependencies come from the Go module proxy): {e}"))?;
    Ok(out)
}

/// One family the exporter's collector.go declares.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    /// "counter" or "gauge" where the source says so in the declaration (the column tables);
    /// None for `prometheus.NewDesc` ones, whose type is given where they are sent.
    pub kind: Option<&'static str>,
    pub labels: BTreeSet<String>,
    /// For a column-table family: the SHOW it reads (`databases`, `stats_totals`, `pools`) and the
    /// columns that feed it (a family is only there when the SHOW has one of them).
    pub show: Option<(String, Vec<String>)>,
}

fn quoted(s: &str) -> Vec<String> {
    s.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The families declared in the exporter's `collector.go` (namespace from `pgbouncer_exporter.go`):
/// the `metricMaps` column tables (`<namespace>_<show>_<metric>`, labelled by their LABEL columns)
/// and every `prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, name), help, labels, nil)`.
pub fn families(src_dir: &Path) -> Vec<Family> {
    let main = std::fs::read_to_string(src_dir.join("pgbouncer_exporter.go")).unwrap();
    let namespace = main
        .lines()
        .find_map(|l| l.trim().strip_prefix("const namespace = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("const namespace in pgbouncer_exporter.go");
    let src = std::fs::read_to_string(src_dir.join("collector.go")).unwrap();
    let mut out: Vec<Family> = Vec::new();

    // The column tables: from `metricMaps = ` to the first line that closes the var block's entry.
    let tables = src
        .split_once("metricMaps = map[string]map[string]ColumnMapping{")
        .expect("metricMaps in collector.go")
        .1;
    let tables = &tables[..tables.find("\n\t}\n").expect("end of metricMaps")];
    let mut show = String::new();
    let mut labels: BTreeSet<String> = BTreeSet::new();
    let mut metrics: Vec<(String, &'static str, String)> = Vec::new();
    let mut flush = |show: &str, labels: &BTreeSet<String>, metrics: &mut Vec<_>| {
        for (column, kind, metric) in metrics.drain(..) {
            let name = format!("{namespace}_{show}_{metric}");
            if let Some(f) = out.iter_mut().find(|f| f.name == name) {
                f.show.as_mut().unwrap().1.push(column);
            } else {
                out.push(Family {
                    name,
                    kind: Some(kind),
                    labels: labels.clone(),
                    show: Some((show.to_string(), vec![column])),
                });
            }
        }
    };
    for line in tables.lines().map(str::trim) {
        if line.ends_with(": {") && line.starts_with('"') {
            flush(&show, &labels, &mut metrics);
            show = quoted(line)[0].clone();
            labels.clear();
        } else if let Some((key, rest)) = line.split_once(':') {
            let key = quoted(key);
            let rest = rest.trim().trim_start_matches('{');
            let (usage, rest) = rest.split_once(',').unwrap_or((rest, ""));
            match (key.first(), usage.trim()) {
                (Some(column), "LABEL") => {
                    labels.insert(column.clone());
                }
                (Some(column), u @ ("GAUGE" | "COUNTER")) => {
                    let kind = if u == "GAUGE" { "gauge" } else { "counter" };
                    metrics.push((column.clone(), kind, quoted(rest)[0].clone()));
                }
                _ => {}
            }
        }
    }
    flush(&show, &labels, &mut metrics);

    // The descriptors.
    for call in src.split("prometheus.NewDesc(").skip(1) {
        let Some(fq) = call.trim_start().strip_prefix("prometheus.BuildFQName(") else {
            continue;
        };
        let (args, rest) = fq.split_once(')').expect("BuildFQName(...)");
        let parts: Vec<String> = std::iter::once(namespace.clone())
            .chain(quoted(args))
            .filter(|p| !p.is_empty())
            .collect();
        // After the help string: `[]string{"a", "b"}` or nil.
        let after_help = rest.splitn(3, '"').nth(2).expect("a help string");
        let labels = match after_help.trim_start_matches([',', ' ', '\n', '\t']) {
            l if l.starts_with("[]string{") => {
                quoted(&l[..l.find('}').unwrap()]).into_iter().collect()
            }
            _ => BTreeSet::new(),
        };
        out.push(Family {
            name: parts.join("_"),
            kind: None,
            labels,
            show: None,
        });
    }
    out
}

pub fn start() -> (Sluice, u16) {
    start_with("")
}

/// As `start`, with more `[sluice]` lines.
pub fn start_with(sluice_lines: &str) -> (Sluice, u16) {
    let pg = PgCluster::get();
    let mport = free_port();
    let ini = Sluice::basic_ini(
        // lib/pq (hence pgbouncer_exporter) sends extra_float_digits; the exporter's README has
        // PgBouncer users ignore it, as here.
        "auth_type = plain\nadmin_users = admin\npool_mode = transaction\ndefault_pool_size = 2\n\
         ignore_startup_parameters = extra_float_digits\n",
        &format!(
            "app = host=127.0.0.1 port={} dbname=app user=trust_user",
            pg.port
        ),
    ) + &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n{sluice_lines}");
    (Sluice::builder(&ini).userlist(USERLIST).start(), mport)
}

/// Kills the exporter when the test ends.
pub struct Reaper(pub std::process::Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
