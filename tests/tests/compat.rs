//! Real-driver conformance matrix: builds each driver program under compat/ once (cached in
//! target/compat-cache), runs it through Sluice in session and transaction mode, prints the matrix,
//! writes compat/RESULTS.md and fails on any red cell not listed in compat/expected-failures.txt.
//!
//! Env: COMPAT_DRIVERS=psycopg,pgx (subset of drivers), COMPAT_MODES=transaction (subset of modes),
//! COMPAT_ONLY=cancel,copy (subset of scenarios), COMPAT_SKIP=1 (skip the whole matrix).
//! RESULTS.md is only rewritten for a full run.

mod compat_support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use std::{fs, thread};

use sluice_e2e::PgCluster;

use compat_support::build::{build, BuildError};
use compat_support::report::{expected_failures, pooler_version, render, Key};
use compat_support::run::{run_program, start_sluice};
use compat_support::{
    Cell, Driver, Paths, Status, Toolchain, DRIVERS, MODES, PARALLEL_RUNS, PASSWORD, USER,
};

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
    // scripts/test.sh installs every toolchain: one that is unavailable fails the matrix (its
    // cells are shown as skipped only under the local opt-out).
    for d in &drivers {
        if let Err(BuildError::Unavailable(why)) = &commands[d.name] {
            sluice_e2e::missing_tool(&format!(
                "compat: the {} driver cannot be built here: {}",
                d.name,
                why.lines().next().unwrap_or("")
            ));
        }
    }
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
        // Rewrite only when a cell changed: the header's commit and duration alone would leave
        // every test run with a dirty work tree.
        let path = p.compat("RESULTS.md");
        let cells = |s: &str| {
            s.lines()
                .filter(|l| !l.starts_with("Generated by"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let old = fs::read_to_string(&path).unwrap_or_default();
        if cells(&old) != cells(&md) {
            fs::write(&path, &md).expect("write compat/RESULTS.md");
        }
    }

    let mut unexpected_fail = Vec::new();
    let mut unexpected_pass = Vec::new();
    // A skipped cell checked nothing: it fails like a red one, except under the local opt-out
    // (a driver whose toolchain is missing reaches here only under it: `missing_tool` above).
    let skips_allowed = std::env::var(sluice_e2e::ALLOW_MISSING_TOOLS).as_deref() == Ok("1");
    for (k, c) in &results {
        let listed = expected.contains_key(k);
        match c.status {
            Status::Fail if !listed => {
                unexpected_fail.push(format!("{} {} {}: {}", k.0, k.1, k.2, c.detail))
            }
            Status::Skip if !listed && !skips_allowed => unexpected_fail.push(format!(
                "{} {} {}: skipped ({}); {}=1 allows that locally",
                k.0,
                k.1,
                k.2,
                c.detail,
                sluice_e2e::ALLOW_MISSING_TOOLS
            )),
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
