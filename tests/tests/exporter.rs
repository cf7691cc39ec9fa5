//! pgbouncer_exporter against Sluice: the families its v0.12.1 `collector.go` declares (source
//! fetched through the Go module proxy, `exporter_support`), and the real exporter, built from that
//! source, scraping Sluice's console unmodified and compared family by family with `/metrics`; the
//! v0.10 names behind `[sluice] metrics_exporter_names`; tests/go/exportercheck (the exporter's
//! queries and conversions over lib/pq, v0.12.1's and the older ones). `go` (Debian package
//! golang-go, installed by scripts/test.sh) and the proxy are required: without them the checks
//! fail saying why (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line, the Go checks not run).

mod exporter_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use exporter_support::{go_available, run_go, start, start_with, target_dir, Reaper, USERLIST};

use sluice_e2e::{free_port, http_get as get, require, sample, Console, PgCluster, Sluice};
use tokio::net::TcpStream;

/// Family name -> (TYPE, the label-name sets of its samples), for the families with samples.
fn families_of(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut kinds: HashMap<String, String> = HashMap::new();
    for l in text.lines() {
        if let Some(t) = l.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').unwrap();
            kinds.insert(name.to_string(), kind.to_string());
        }
    }
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for (name, labels, _) in parse_samples(text) {
        let kind = kinds.get(&name).cloned().unwrap_or_default();
        let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
        out.entry(name)
            .or_insert_with(|| (kind, BTreeSet::new()))
            .1
            .insert(keys.join(","));
    }
    out
}

/// The real pgbouncer_exporter (v0.12.1, built from its source fetched through the Go module
/// proxy) scrapes Sluice's console unmodified; the pgbouncer_* families it serves and those Sluice
/// serves itself on /metrics are the same, with the same types and label names.
#[tokio::test]
async fn pgbouncer_exporter_scrapes_sluice() {
    let built = tokio::task::spawn_blocking(exporter_support::binary)
        .await
        .unwrap();
    let Some(exporter) = require(built) else {
        return;
    };
    let (s, mport) = start();
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
    let eport = free_port();
    let _child = Reaper(
        Command::new(&exporter)
            .arg(format!(
                "--pgBouncer.connectionString=postgres://admin:adminpw@127.0.0.1:{}/pgbouncer?sslmode=disable",
                s.port
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{eport}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer_exporter"),
    );
    let t0 = Instant::now();
    let text = loop {
        if TcpStream::connect(("127.0.0.1", eport)).await.is_ok() {
            break get(eport, "/metrics").await.1;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "exporter did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(sample(&text, "pgbouncer_up"), 1.0, "{text}");
    let active = text
        .lines()
        .find(|l| {
            l.starts_with("pgbouncer_pools_client_active_connections{")
                && l.contains("database=\"app\"")
                && l.contains("user=\"trust_user\"")
        })
        .unwrap_or_else(|| panic!("no pool metric for app/trust_user:\n{text}"));
    assert!(active.ends_with(" 1"), "{active}");
    let pooled = text
        .lines()
        .find(|l| {
            l.starts_with("pgbouncer_stats_totals_queries_pooled_total{")
                && l.contains("database=\"app\"")
        })
        .unwrap_or_else(|| panic!("no stats_totals for app:\n{text}"));
    assert!(pooled.ends_with(" 1"), "{pooled}");

    let theirs = families_of(&text);
    let ours = families_of(&get(mport, "/metrics").await.1);
    let pick = |f: &BTreeMap<String, (String, BTreeSet<String>)>| -> BTreeMap<String, (String, BTreeSet<String>)> {
        f.iter()
            // The exporter's own build info is not a figure of the pooler.
            .filter(|(n, _)| n.starts_with("pgbouncer_") && !n.starts_with("pgbouncer_exporter_"))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    };
    let (theirs, ours) = (pick(&theirs), pick(&ours));
    assert!(
        theirs.len() >= 40,
        "the exporter served only {} families:\n{text}",
        theirs.len()
    );
    for (name, t) in &theirs {
        assert_eq!(
            ours.get(name),
            Some(t),
            "{name}: the exporter's vs /metrics"
        );
    }
    let extra: Vec<&String> = ours.keys().filter(|n| !theirs.contains_key(*n)).collect();
    assert!(
        extra.is_empty(),
        "/metrics serves families the exporter does not: {extra:?}"
    );
}

/// Build tests/go/exportercheck. Err says what is missing (`go`, or a Go module proxy that cannot
/// serve its modules), for the test to `require`; a compile error fails the test here.
fn exportercheck() -> Result<PathBuf, String> {
    if !go_available() {
        return Err(
            "pgbouncer_exporter query check: `go` is not installed (Debian package golang-go)"
                .into(),
        );
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("go/exportercheck");
    if let Err(e) = run_go(&["mod", "download"], &dir, None, Duration::from_secs(300)) {
        return Err(format!(
            "pgbouncer_exporter query check: cannot fetch github.com/lib/pq from the Go module proxy: {}",
            e.trim()
        ));
    }
    let out = target_dir().join("go-bin/exportercheck");
    if let Err(e) = run_go(
        &[
            "build",
            "-o",
            out.to_str().expect("a UTF-8 target dir"),
            ".",
        ],
        &dir,
        None,
        Duration::from_secs(300),
    ) {
        panic!("tests/go/exportercheck does not build: {e}");
    }
    Ok(out)
}

/// The `row <show> k=v ...` line of exportercheck's output whose fields include all of `keys`.
fn exporter_row(
    out: &str,
    show: &str,
    keys: &[(&str, &str)],
) -> std::collections::HashMap<String, String> {
    out.lines()
        .filter_map(|l| l.strip_prefix(&format!("row {show} ")))
        .map(|l| {
            l.split(' ')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::HashMap<_, _>>()
        })
        .find(|r| {
            keys.iter()
                .all(|(k, v)| r.get(*k).map(String::as_str) == Some(*v))
        })
        .unwrap_or_else(|| panic!("no `row {show}` with {keys:?} in:\n{out}"))
}

fn num(row: &std::collections::HashMap<String, String>, col: &str) -> f64 {
    row.get(col)
        .unwrap_or_else(|| panic!("no {col} in {row:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{col} in {row:?}: {e}"))
}

/// Beside the real exporter (`pgbouncer_exporter_scrapes_sluice`, which checks family names), the
/// figures row by row: tests/go/exportercheck runs the exporter's queries with lib/pq over the simple query protocol and converts the values
/// exactly as the exporter does; then the figures for the live pool are checked against the workload.
#[tokio::test]
async fn pgbouncer_exporter_queries_against_console() {
    let Some(bin) = require(tokio::task::spawn_blocking(exportercheck).await.unwrap()) else {
        return;
    };
    let pg = PgCluster::get();
    let ini = Sluice::basic_ini(
        "auth_type = plain\nadmin_users = admin\npool_mode = transaction\ndefault_pool_size = 2\n\
         max_client_conn = 77\nmax_user_connections = 9\n\
         ignore_startup_parameters = extra_float_digits\n",
        &format!(
            "app = host=127.0.0.1 port={} dbname=app user=trust_user",
            pg.port
        ),
    );
    let s = Sluice::builder(&ini).userlist(USERLIST).start();
    let a = s.connect("app", "apppw", "app").await.unwrap();
    let b = s.connect("app", "apppw", "app").await.unwrap();
    const N: usize = 15;
    for _ in 0..N {
        a.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
        b.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
    }
    let conn = format!(
        "host=127.0.0.1 port={} user=admin password=adminpw dbname=pgbouncer sslmode=disable",
        s.port
    );
    let out = tokio::task::spawn_blocking(move || Command::new(bin).arg(conn).output())
        .await
        .unwrap()
        .expect("run exportercheck");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}");
    assert!(
        out.status.success() && text.lines().last() == Some("PASS"),
        "exportercheck failed ({}):\n{text}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("\nFAIL "), "{text}");

    // SHOW STATS for the workload's database.
    let st = exporter_row(&text, "stats", &[("database", "app")]);
    assert_eq!(num(&st, "total_xact_count"), (2 * N) as f64, "{st:?}");
    assert_eq!(num(&st, "total_query_count"), (2 * N) as f64, "{st:?}");
    for c in [
        "total_received",
        "total_sent",
        "total_xact_time",
        "total_query_time",
        "total_server_assignment_count",
    ] {
        assert!(num(&st, c) > 0.0, "{c} in {st:?}");
    }
    assert!(num(&st, "total_wait_time") >= 0.0, "{st:?}");
    assert!(
        num(&st, "total_xact_time") >= num(&st, "total_query_time") * 0.5,
        "{st:?}"
    );

    // SHOW STATS_TOTALS (v0.11.0 and later): the same workload under the current names.
    let tt = exporter_row(&text, "stats_totals", &[("database", "app")]);
    assert_eq!(num(&tt, "xact_count"), (2 * N) as f64, "{tt:?}");
    assert_eq!(num(&tt, "query_count"), (2 * N) as f64, "{tt:?}");
    for c in [
        "bytes_received",
        "bytes_sent",
        "xact_time",
        "query_time",
        "server_assignment_count",
    ] {
        assert!(num(&tt, c) > 0.0, "{c} in {tt:?}");
    }
    for c in ["client_parse_count", "server_parse_count", "bind_count"] {
        assert_eq!(num(&tt, c), 0.0, "{c}: the workload sent no Parse: {tt:?}");
    }
    assert_eq!(
        num(&tt, "xact_count"),
        num(&st, "total_xact_count"),
        "{tt:?} {st:?}"
    );

    // SHOW CLIENTS (v0.12.0 and later): pgbouncer_client_connections counts the two app clients,
    // `idle` as PgBouncer 1.25 says of a client in the active list that holds no server.
    let cl = exporter_row(&text, "clients", &[("database", "app"), ("user", "app")]);
    assert_eq!(num(&cl, "count"), 2.0, "{cl:?}");
    assert_eq!(cl.get("state").map(String::as_str), Some("idle"), "{cl:?}");

    // SHOW POOLS: two connected clients, idle in transaction mode, at most pool_size servers.
    let p = exporter_row(
        &text,
        "pools",
        &[("database", "app"), ("user", "trust_user")],
    );
    assert_eq!(num(&p, "cl_active"), 2.0, "{p:?}");
    assert_eq!(num(&p, "cl_waiting"), 0.0, "{p:?}");
    assert_eq!(num(&p, "sv_active"), 0.0, "{p:?}");
    let servers = ["sv_idle", "sv_used", "sv_tested", "sv_login"]
        .iter()
        .map(|c| num(&p, c))
        .sum::<f64>();
    assert!(num(&p, "sv_idle") >= 1.0, "{p:?}");
    assert!(servers <= 2.0, "more servers than pool_size: {p:?}");
    assert_eq!(num(&p, "maxwait"), 0.0, "{p:?}");
    assert_eq!(num(&p, "maxwait_us"), 0.0, "{p:?}");
    assert_eq!(p.get("pool_mode"), None, "pool_mode is not a pools label");

    // SHOW DATABASES for `app`.
    let port = pg.port.to_string();
    let d = exporter_row(&text, "databases", &[("name", "app")]);
    assert_eq!(
        d.get("host").map(String::as_str),
        Some("127.0.0.1"),
        "{d:?}"
    );
    assert_eq!(d.get("port"), Some(&port), "{d:?}");
    assert_eq!(d.get("database").map(String::as_str), Some("app"), "{d:?}");
    // NULL (no per-database pool_mode), which the exporter turns into an empty label, as with PgBouncer.
    assert_eq!(d.get("pool_mode").map(String::as_str), Some(""), "{d:?}");
    assert_eq!(num(&d, "pool_size"), 2.0, "{d:?}");
    assert_eq!(num(&d, "current_connections"), servers, "{d:?} vs {p:?}");
    assert_eq!(num(&d, "paused"), 0.0, "{d:?}");
    assert_eq!(num(&d, "disabled"), 0.0, "{d:?}");

    // SHOW LISTS, SHOW CONFIG, SHOW VERSION.
    let l = exporter_row(&text, "lists", &[]);
    assert!(num(&l, "databases") >= 1.0, "{l:?}");
    assert!(num(&l, "pools") >= 1.0, "{l:?}");
    assert!(
        num(&l, "used_clients") >= 3.0,
        "two app clients and the console: {l:?}"
    );
    let c = exporter_row(&text, "config", &[]);
    assert_eq!(num(&c, "max_client_conn"), 77.0, "{c:?}");
    assert_eq!(num(&c, "max_user_connections"), 9.0, "{c:?}");
    let v = exporter_row(&text, "version", &[]);
    assert!(!v["version"].is_empty(), "{v:?}");
    drop((a, b));
}

/// One parsed sample: family name, labels, value.
fn parse_samples(text: &str) -> Vec<(String, std::collections::BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut map = std::collections::BTreeMap::new();
        // Label values here hold no commas or quotes (names of databases, users, addresses).
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap();
            map.insert(k.to_string(), v.trim_matches('"').to_string());
        }
        out.push((name.to_string(), map, value.parse().unwrap()));
    }
    out
}

/// The column names of a console SHOW.
async fn show_columns(con: &mut Console, what: &str) -> BTreeSet<String> {
    let rs = con.query(&format!("SHOW {what}")).await.unwrap();
    rs.columns.iter().map(|(n, _)| n.clone()).collect()
}

/// Every family the prometheus-community pgbouncer_exporter v0.12.1 declares in its collector.go
/// (read from the source fetched through the Go module proxy, not from a copy of ours) is on
/// /metrics with its type and label names, unless the SHOW it reads has none of its columns (as
/// against PgBouncer 1.25); with the figures the console shows for the same pool, and the series
/// of a database removed by RELOAD gone with its pool.
#[tokio::test]
async fn every_pgbouncer_exporter_family_is_served() {
    let dir = tokio::task::spawn_blocking(exporter_support::module_dir)
        .await
        .unwrap();
    let Some(dir) = require(dir) else {
        return;
    };
    let declared = exporter_support::families(&dir);
    let (s, mport) = start();
    // A second database, removed below.
    let ini = std::fs::read_to_string(s.dir.path().join("pgbouncer.ini")).unwrap();
    let pg = PgCluster::get();
    let with_gone = ini.replace(
        "[databases]\n",
        &format!(
            "[databases]\ngone = host=127.0.0.1 port={} dbname=app user=trust_user\n",
            pg.port
        ),
    );
    s.rewrite_config(&with_gone);
    let mut con = Console::connect(s.port, "admin", "adminpw").await.unwrap();
    con.query("RELOAD").await.unwrap();
    let gone = s.connect("app", "apppw", "gone").await.unwrap();
    gone.simple_query("SELECT 1").await.unwrap();
    drop(gone);
    // One client inside a transaction: cl_active and sv_active are 1 for `app`.
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.batch_execute("BEGIN; SELECT 1").await.unwrap();

    let text = get(mport, "/metrics").await.1;
    let served = families_of(&text);
    let mut checked = Vec::new();
    let mut not_in_console = Vec::new();
    for f in &declared {
        if let Some((show, columns)) = &f.show {
            let have = show_columns(&mut con, show).await;
            if !columns.iter().any(|c| have.contains(c)) {
                not_in_console.push(f.name.clone());
                continue;
            }
        }
        let (kind, label_sets) = served.get(&f.name).unwrap_or_else(|| {
            panic!(
                "{}: declared by the exporter, no sample on /metrics",
                f.name
            )
        });
        if let Some(want) = f.kind {
            assert_eq!(kind, want, "{}: type", f.name);
        }
        let want: Vec<&str> = f.labels.iter().map(String::as_str).collect();
        assert_eq!(
            label_sets,
            &BTreeSet::from([want.join(",")]),
            "{}: label names",
            f.name
        );
        checked.push(f.name.clone());
    }
    // The exporter's v0.12.1 families, those PgBouncer 1.25's console cannot feed aside.
    assert_eq!(not_in_console, ["pgbouncer_stats_totals_queries_total"]);
    for name in [
        "pgbouncer_stats_totals_client_parses_total",
        "pgbouncer_stats_totals_server_parses_total",
        "pgbouncer_stats_totals_binds_total",
        "pgbouncer_stats_totals_server_assignments_total",
        "pgbouncer_client_connections",
        "pgbouncer_databases_reserve_pool",
    ] {
        assert!(
            checked.iter().any(|c| c == name),
            "{name} not declared: {checked:?}"
        );
    }
    assert!(
        checked.len() >= 40,
        "only {} families declared",
        checked.len()
    );
    // The standard families every Prometheus client library serves of its own process.
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(served.contains_key(name), "{name}");
    }
    let samples = parse_samples(&text);

    // The figures are the console's.
    let value = |name: &str, pairs: &[(&str, &str)]| -> f64 {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && pairs
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no {name} {pairs:?}"))
            .2
    };
    let pools = con.query("SHOW POOLS").await.unwrap();
    let row = |col: &str| -> f64 {
        pools
            .find(col, |r| r[0].as_deref() == Some("app"))
            .unwrap()
            .parse()
            .unwrap()
    };
    let app_pool = [("database", "app"), ("user", "trust_user")];
    assert_eq!(
        value("pgbouncer_pools_client_active_connections", &app_pool),
        1.0
    );
    assert_eq!(
        value("pgbouncer_pools_server_active_connections", &app_pool),
        1.0
    );
    assert_eq!(
        value("pgbouncer_pools_client_active_connections", &app_pool),
        row("cl_active")
    );
    assert_eq!(
        value("pgbouncer_pools_server_idle_connections", &app_pool),
        row("sv_idle")
    );
    let config = con.query("SHOW CONFIG").await.unwrap();
    let max_client_conn: f64 = config
        .get("max_client_conn", "value")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        value("pgbouncer_config_max_client_connections", &[]),
        max_client_conn
    );
    let dbs = con.query("SHOW DATABASES").await.unwrap();
    let pool_size: f64 = dbs.get("app", "pool_size").unwrap().parse().unwrap();
    assert_eq!(
        value("pgbouncer_databases_pool_size", &[("name", "app")]),
        pool_size
    );
    assert_eq!(pool_size, 2.0);
    let stats = con.query("SHOW STATS_TOTALS").await.unwrap();
    let xacts: f64 = stats.get("gone", "xact_count").unwrap().parse().unwrap();
    assert_eq!(
        value(
            "pgbouncer_stats_totals_sql_transactions_pooled_total",
            &[("database", "gone")]
        ),
        xacts
    );
    let reserve: f64 = dbs
        .get("app", "reserve_pool_size")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        value("pgbouncer_databases_reserve_pool", &[("name", "app")]),
        reserve
    );
    // Clients by database, user, application_name and state: `app`'s one, and this console.
    assert_eq!(
        value(
            "pgbouncer_client_connections",
            &[("database", "app"), ("user", "app"), ("state", "active")]
        ),
        1.0
    );

    // `gone` removed: its pool, and with it its series, go away.
    s.rewrite_config(&ini);
    con.query("RELOAD").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = get(mport, "/metrics").await.1;
        let left = text
            .lines()
            .filter(|l| l.starts_with("pgbouncer_pools_") && l.contains("database=\"gone\""))
            .count();
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "series of the removed pool remain:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.batch_execute("COMMIT").await.unwrap();
}

/// `[sluice] metrics_exporter_names = v0.10` serves the names of pgbouncer_exporter v0.10.x and
/// earlier (tests/data's list: name, type, labels) and none of the v0.11+ ones; RELOAD with the
/// key gone brings the current names back.
#[tokio::test]
async fn v0_10_names_behind_the_setting() {
    let (s, mport) = start_with("metrics_exporter_names = v0.10\n");
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let served = families_of(&get(mport, "/metrics").await.1);
    let listed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/pgbouncer_exporter_v0.10_families.txt"
    ))
    .unwrap();
    let mut checked = 0;
    for line in listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, kind, labels) = (f[0], f[1], f[2].replace('-', ""));
        let (k, l) = served
            .get(name)
            .unwrap_or_else(|| panic!("{name}: no sample"));
        assert_eq!(k, kind, "{name}");
        assert_eq!(l, &BTreeSet::from([labels]), "{name}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} families listed");
    let current_only = |served: &BTreeMap<String, (String, BTreeSet<String>)>| -> Vec<String> {
        served
            .keys()
            .filter(|n| {
                n.starts_with("pgbouncer_stats_totals_")
                    || *n == "pgbouncer_client_connections"
                    || *n == "pgbouncer_databases_reserve_pool"
            })
            .cloned()
            .collect()
    };
    assert_eq!(current_only(&served), Vec::<String>::new());

    let ini = std::fs::read_to_string(s.dir.path().join("pgbouncer.ini")).unwrap();
    s.rewrite_config(&ini.replace("metrics_exporter_names = v0.10\n", ""));
    let mut con = Console::connect(s.port, "admin", "adminpw").await.unwrap();
    con.query("RELOAD").await.unwrap();
    let served = families_of(&get(mport, "/metrics").await.1);
    assert!(
        current_only(&served).len() >= 10,
        "{:?}",
        served.keys().collect::<Vec<_>>()
    );
    assert!(!served.contains_key("pgbouncer_stats_queries_pooled_total"));
    assert!(!served.contains_key("pgbouncer_server_connections"));
    app.batch_execute("COMMIT").await.unwrap();
}
