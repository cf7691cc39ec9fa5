//! deploy/kubernetes/: the manifests pass the Kubernetes schemas (kubernetes-validate's bundled
//! OpenAPI schemas, strict, every version from 1.30 on; PodMonitor against the repo's CRD schema),
//! the validator rejects broken copies of them, and the example config runs with the binary under
//! test: the probe paths answer 200, and the stop signal (SIGINT, the image's STOPSIGNAL) drains and
//! exits 0. The schema tests need kubernetes-validate, which scripts/test.sh installs into
//! target/tools/kubernetes-validate: without it they fail (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud
//! line, nothing asserted).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sluice_e2e::{free_port, http_get, Sluice};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/kubernetes");
const CONTAINERFILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/container/Containerfile"
);
const MANIFESTS: [&str; 5] = [
    "deployment.yaml",
    "service.yaml",
    "poddisruptionbudget.yaml",
    "podmonitor.yaml",
    "example/secret.yaml",
];

/// The virtualenv's python with kubernetes-validate. Not installed: the test fails
/// (`missing_tool`); None only under the opt-out.
fn validator_python() -> Option<PathBuf> {
    let py = std::env::var_os("SLUICE_K8S_VALIDATE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/tools/kubernetes-validate/bin/python3")
        });
    let ok = Command::new(&py)
        .args(["-c", "import kubernetes_validate"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        sluice_e2e::missing_tool(&format!(
            "kubernetes-validate is not installed at {} (scripts/test.sh installs it from PyPI; \
             SLUICE_K8S_VALIDATE_PYTHON names another python)",
            py.display()
        ));
        return None;
    }
    Some(py)
}

fn validate(py: &Path, dir: &Path) -> (Output, String) {
    let out = Command::new(py)
        .arg(Path::new(DIR).join("validate.py"))
        .args(MANIFESTS)
        .current_dir(dir)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, said)
}

fn read(rel: &str) -> String {
    let p = Path::new(DIR).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_manifests_pass_the_kubernetes_schemas() {
    let Some(py) = validator_python() else {
        return;
    };
    let (out, said) = validate(&py, Path::new(DIR));
    assert!(out.status.success(), "validate.py:\n{said}");
    for kind in [
        "Deployment/sluice",
        "Service/sluice",
        "PodDisruptionBudget/sluice",
        "PodMonitor/sluice",
        "Secret/sluice-config",
    ] {
        assert!(
            said.contains(&format!(" {kind}\n")),
            "{kind} not checked:\n{said}"
        );
    }
    assert!(said.contains("0 invalid"), "{said}");
}

#[test]
fn the_validator_rejects_broken_manifests() {
    let Some(py) = validator_python() else {
        return;
    };
    let tmp = tempfile::Builder::new()
        .prefix("sluice-e2e-k8s-")
        .tempdir()
        .unwrap();
    std::fs::create_dir(tmp.path().join("example")).unwrap();
    // One mistake per file, each of a kind kubectl would refuse.
    let breaks: [(&str, &str, &str); 5] = [
        // a misspelt field (strict schemas reject unknown fields)
        ("deployment.yaml", "readinessProbe:", "readinesProbe:"),
        // a required field left out (a Service port's number)
        ("service.yaml", "      port: 6432\n", ""),
        // a wrong type (int-or-string given a boolean)
        (
            "poddisruptionbudget.yaml",
            "maxUnavailable: 1",
            "maxUnavailable: true",
        ),
        // a misspelt field in the CRD, checked against schemas/podmonitor-monitoring-v1.json
        (
            "podmonitor.yaml",
            "podMetricsEndpoints:",
            "podMetricEndpoints:",
        ),
        // a duplicate key
        (
            "example/secret.yaml",
            "type: Opaque",
            "type: Opaque\ntype: Opaque",
        ),
    ];
    for (file, from, to) in breaks {
        let text = read(file);
        assert!(text.contains(from), "{file} has no `{from}` to break");
        std::fs::write(tmp.path().join(file), text.replacen(from, to, 1)).unwrap();
    }
    let (out, said) = validate(&py, tmp.path());
    assert_eq!(out.status.code(), Some(1), "validate.py:\n{said}");
    for (file, _, _) in breaks {
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("ERROR {file}"))),
            "no error for the broken {file}:\n{said}"
        );
    }
    for needle in [
        "'readinesProbe' was unexpected",
        "'port' is a required property",
        "spec.maxUnavailable: True",
        "'podMetricEndpoints' was unexpected",
        "duplicate key 'type'",
    ] {
        assert!(said.contains(needle), "`{needle}` not reported:\n{said}");
    }
}

/// `key: value` of the first line (trimmed) that starts with `key:` in a YAML text of ours.
fn yaml_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no `{key}:` in\n{text}"))
        .trim()
}

/// The block scalar `key: |` of the example Secret, dedented.
fn secret_file(secret: &str, key: &str) -> String {
    let mut lines = secret
        .lines()
        .skip_while(|l| l.trim() != format!("{key}: |"));
    assert!(
        lines.next().is_some(),
        "no `{key}: |` in the example Secret"
    );
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    body.iter()
        .map(|l| l.strip_prefix("    ").unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The example pgbouncer.ini with the cluster's addresses and paths swapped for this machine's
/// (each swap asserts that the line it replaces is there, so the docs and this test move together).
fn local_ini(ini: &str, metrics_port: u16) -> String {
    let swaps = [
        (
            "listen_addr = 0.0.0.0",
            "listen_addr = 127.0.0.1".to_string(),
        ),
        ("listen_port = 6432", "listen_port = {port}".to_string()),
        (
            "unix_socket_dir = /run/sluice",
            "unix_socket_dir = {dir}".to_string(),
        ),
        (
            "auth_file = /etc/pgbouncer/userlist.txt",
            "auth_file = {userlist}".to_string(),
        ),
        (
            "metrics_listen_addr = 0.0.0.0:9127",
            format!("metrics_listen_addr = 127.0.0.1:{metrics_port}"),
        ),
    ];
    let mut lines: Vec<String> = ini.lines().map(str::to_string).collect();
    for (from, to) in swaps {
        let line = lines
            .iter_mut()
            .find(|l| l.trim() == from)
            .unwrap_or_else(|| panic!("example pgbouncer.ini lost `{from}`"));
        *line = to;
    }
    lines.join("\n")
}

#[tokio::test]
async fn the_example_config_serves_the_probes_and_drains_on_the_stop_signal() {
    let deployment = read("deployment.yaml");
    let secret = read("example/secret.yaml");
    // The numbers deployment.yaml's header comment explains, checked against each other.
    assert_eq!(yaml_value(&deployment, "maxSurge"), "1");
    assert_eq!(yaml_value(&deployment, "maxUnavailable"), "0");
    assert_eq!(yaml_value(&deployment, "readOnlyRootFilesystem"), "true");
    assert_eq!(yaml_value(&deployment, "runAsNonRoot"), "true");
    let ini = secret_file(&secret, "pgbouncer.ini");
    let setting = |key: &str| -> u64 {
        ini.lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .trim()
                    .strip_prefix('=')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {key} in the example pgbouncer.ini"))
    };
    let grace: u64 = yaml_value(&deployment, "terminationGracePeriodSeconds")
        .parse()
        .unwrap();
    let pre_stop: u64 = yaml_value(&deployment, "seconds").parse().unwrap();
    assert!(
        grace >= pre_stop + setting("transaction_timeout"),
        "terminationGracePeriodSeconds {grace} < preStop {pre_stop} s + transaction_timeout"
    );
    let containerfile = std::fs::read_to_string(CONTAINERFILE).unwrap();
    assert!(
        containerfile
            .lines()
            .any(|l| l.trim() == "STOPSIGNAL SIGINT"),
        "the image must stop Sluice with SIGINT (safe shutdown)"
    );

    let metrics_port = free_port();
    let mut s = Sluice::builder(&local_ini(&ini, metrics_port))
        .userlist(&secret_file(&secret, "userlist.txt"))
        .start();
    // The probes' paths, as written in the Deployment, on the metrics port.
    let paths: Vec<&str> = deployment
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path: "))
        .collect();
    assert_eq!(paths, ["/health", "/health/live"], "probe paths");
    for path in &paths {
        let (code, body) = http_get(metrics_port, path).await;
        assert_eq!(code, 200, "GET {path}: {body}; log:\n{}", s.log());
    }
    // What the runtime sends after the preStop sleep: no client holds a server, so it exits now.
    let t = Instant::now();
    s.signal(Signal::SIGINT);
    let st = s
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("still running 10 s after SIGINT; log:\n{}", s.log()));
    assert!(st.success(), "exit {st}; log:\n{}", s.log());
    eprintln!("SIGINT with no client: exited in {:?}", t.elapsed());
}
