//! bench/pgo_train.py, the training run of scripts/build-pgo.sh, kept working: it starts its own
//! PostgreSQL, runs each load of its mix (pgbench -S at 10 and 100 clients, TPC-B, the extended and
//! prepared protocols, a session-pooled database, large results, md5, SCRAM and TLS + SCRAM logins,
//! SHOW on the console) through the binary
//! it is given, and stops it with SIGINT. A load that fails or a pooler that does not exit 0 fails
//! the script, and so this test. Here it drives the test build (not instrumented) for 1 s a load:
//! what the profile-guided build would be trained on must work through Sluice.

use std::process::Command;

#[test]
fn the_profile_training_mix_runs_through_sluice() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/pgo_train.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(sluice_e2e::sluice_bin())
        .arg("1")
        .env("PYTHONUNBUFFERED", "1")
        .output()
        .expect("python3 runs bench/pgo_train.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench/pgo_train.py failed: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let log = format!("{stdout}{stderr}");
    for load in [
        "-S, 10 clients",
        "-S, 100 clients",
        "TPC-B, 10 clients",
        "-S extended",
        "-S prepared",
        "-S session pooling",
        "large results",
        "md5 logins",
        "SCRAM logins",
        "TLS + SCRAM logins",
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("{load}: ")))
            .unwrap_or_else(|| panic!("no line for {load:?} in:\n{log}"));
        let n: u64 = line
            .rsplit(": ")
            .next()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no transaction count in {line:?}"));
        assert!(n > 0, "{load}: no transaction went through: {line}");
    }
    assert!(log.contains("training done"), "{log}");
}
