//! The admin console through the real `sluice` binary and a real PostgreSQL: every SHOW's columns and
//! wire types (reference §4.3), figures against a known workload (seed 000's cl_waiting/maxwait)
//! and access rules (§3). Control commands under load: `admin_control.rs`; signals, SHUTDOWN and
//! the login timeout: `admin_lifecycle.rs`.

mod admin_common;

use std::time::Duration;

use admin_common::{admin, num, show, start};
use sluice_e2e::{psql_cmd, Console, PgCluster, Sluice};

const TEXT: u32 = 25;
const INT4: u32 = 23;
const INT8: u32 = 20;
const NUMERIC: u32 = 1700;
const BYTEA: u32 = 17;

/// Reference §4.3 (types: i=int4, q=int8, N=numeric, T=timestamp sent as text, else text). Where the
/// reference leaves a column un-annotated (POOLS, MEM, PEER_POOLS counters, STATS_TOTALS/AVERAGES,
/// TOTALS values) the type is PgBouncer's own (int4 / numeric).
fn expected_columns(what: &str) -> Vec<(&'static str, u32)> {
    let t = |n: &'static str| (n, TEXT);
    let i = |n: &'static str| (n, INT4);
    let n = |n: &'static str| (n, NUMERIC);
    let conn = || {
        vec![
            t("type"),
            t("user"),
            t("database"),
            t("replication"),
            t("state"),
            t("addr"),
            i("port"),
            t("local_addr"),
            i("local_port"),
            t("connect_time"),
            t("request_time"),
            i("wait"),
            i("wait_us"),
            i("close_needed"),
            t("ptr"),
            t("link"),
            i("remote_pid"),
            t("tls"),
            t("application_name"),
            i("prepared_statements"),
            i("id"),
        ]
    };
    let stat_names = [
        "server_assignment_count",
        "xact_count",
        "query_count",
        "bytes_received",
        "bytes_sent",
        "xact_time",
        "query_time",
        "wait_time",
    ];
    match what {
        "stats" => {
            let mut v = vec![t("database")];
            v.extend(
                [
                    "total_server_assignment_count",
                    "total_xact_count",
                    "total_query_count",
                    "total_received",
                    "total_sent",
                    "total_xact_time",
                    "total_query_time",
                    "total_wait_time",
                    "total_client_parse_count",
                    "total_server_parse_count",
                    "total_bind_count",
                    "total_client_login_count",
                    "avg_server_assignment_count",
                    "avg_xact_count",
                    "avg_query_count",
                    "avg_recv",
                    "avg_sent",
                    "avg_xact_time",
                    "avg_query_time",
                    "avg_wait_time",
                    "avg_client_parse_count",
                    "avg_server_parse_count",
                    "avg_bind_count",
                    "avg_client_login_count",
                ]
                .map(n),
            );
            v
        }
        "stats_totals" => {
            let mut v = vec![t("database")];
            v.extend(stat_names.map(n));
            v.extend(
                [
                    "client_parse_count",
                    "server_parse_count",
                    "bind_count",
                    "client_login_count",
                ]
                .map(n),
            );
            v
        }
        "stats_averages" => {
            let mut v = vec![t("database")];
            v.extend(stat_names.map(n));
            v.extend(
                [
                    "avg_client_parse_count",
                    "avg_server_parse_count",
                    "avg_bind_count",
                    "avg_client_login_count",
                ]
                .map(n),
            );
            v
        }
        "totals" => vec![t("name"), n("value")],
        "pools" => vec![
            t("database"),
            t("user"),
            i("cl_active"),
            i("cl_waiting"),
            i("cl_active_cancel_req"),
            i("cl_waiting_cancel_req"),
            i("sv_active"),
            i("sv_active_cancel"),
            i("sv_being_canceled"),
            i("sv_idle"),
            i("sv_used"),
            i("sv_tested"),
            i("sv_login"),
            i("maxwait"),
            i("maxwait_us"),
            t("pool_mode"),
            t("load_balance_hosts"),
        ],
        "clients" | "servers" => conn(),
        "sockets" | "active_sockets" => {
            let mut v = conn();
            v.extend(
                [
                    "recv_pos",
                    "pkt_pos",
                    "pkt_remain",
                    "send_pos",
                    "send_remain",
                    "pkt_avail",
                    "send_avail",
                ]
                .map(i),
            );
            v
        }
        "databases" => vec![
            t("name"),
            t("host"),
            i("port"),
            t("database"),
            t("force_user"),
            i("pool_size"),
            i("min_pool_size"),
            i("reserve_pool_size"),
            i("server_lifetime"),
            t("pool_mode"),
            t("load_balance_hosts"),
            i("max_connections"),
            i("current_connections"),
            i("max_client_connections"),
            i("current_client_connections"),
            i("paused"),
            i("disabled"),
        ],
        "users" => vec![
            t("name"),
            t("pool_size"),
            t("reserve_pool_size"),
            t("pool_mode"),
            i("max_user_connections"),
            i("current_connections"),
            i("max_user_client_connections"),
            i("current_client_connections"),
        ],
        "peers" => vec![i("peer_id"), t("host"), i("port"), i("pool_size")],
        "peer_pools" => vec![
            i("peer_id"),
            i("cl_active_cancel_req"),
            i("cl_waiting_cancel_req"),
            i("sv_active_cancel"),
            i("sv_login"),
        ],
        "lists" => vec![t("list"), i("items")],
        "mem" => vec![t("name"), i("size"), i("used"), i("free"), i("memtotal")],
        "config" => vec![t("key"), t("value"), t("default"), t("changeable")],
        "fds" => vec![
            i("fd"),
            t("task"),
            t("user"),
            t("database"),
            t("addr"),
            i("port"),
            ("cancel", INT8),
            i("link"),
            t("client_encoding"),
            t("std_strings"),
            t("datestyle"),
            t("timezone"),
            t("password"),
            ("scram_client_key", BYTEA),
            ("scram_server_key", BYTEA),
        ],
        "dns_hosts" => vec![t("hostname"), ("ttl", INT8), t("addrs")],
        "dns_zones" => vec![t("zonename"), ("serial", INT8), i("count")],
        "state" => vec![t("key"), t("value")],
        "version" => vec![t("version")],
        other => panic!("no expectation for {other}"),
    }
}

const ALL_SHOWS: &[&str] = &[
    "stats",
    "stats_totals",
    "stats_averages",
    "totals",
    "pools",
    "clients",
    "servers",
    "sockets",
    "active_sockets",
    "databases",
    "users",
    "peers",
    "peer_pools",
    "lists",
    "mem",
    "config",
    "fds",
    "dns_hosts",
    "dns_zones",
    "state",
    "version",
];

#[tokio::test]
async fn every_show_has_the_reference_columns_and_types() {
    let s = start("", 2);
    let app = s.connect("app", "apppw", "app").await.unwrap();
    app.simple_query("SELECT 1").await.unwrap();
    let mut c = admin(&s).await;
    for what in ALL_SHOWS {
        let r = show(&mut c, what).await;
        let got: Vec<(&str, u32)> = r.columns.iter().map(|(n, o)| (n.as_str(), *o)).collect();
        assert_eq!(got, expected_columns(what), "SHOW {what}");
        assert_eq!(r.tag, "SHOW", "SHOW {what}");
        for row in &r.rows {
            assert_eq!(row.len(), r.columns.len(), "SHOW {what} row width");
        }
    }
    // SHOW USERS lists auth_file users too ("app" logs in but pools as the forced trust_user).
    let users = show(&mut c, "users").await;
    for name in ["app", "watcher", "admin", "trust_user", "pgbouncer"] {
        assert!(users.get(name, "name").is_some(), "SHOW USERS lists {name}");
    }
    // SELECT x is SHOW x; figures are sane for the live pool and this console.
    let pools = c.query("select pools;").await.unwrap();
    let (db, user) = (pools.col("database"), pools.col("user"));
    let row = |d: &str, u: &str| {
        pools
            .rows
            .iter()
            .find(|r| r[db].as_deref() == Some(d) && r[user].as_deref() == Some(u))
            .cloned()
    };
    let app_row = row("app", "trust_user").expect("pool app/trust_user");
    assert_eq!(app_row[pools.col("cl_active")].as_deref(), Some("1"));
    assert_eq!(app_row[pools.col("sv_idle")].as_deref(), Some("1"));
    assert_eq!(
        app_row[pools.col("pool_mode")].as_deref(),
        Some("transaction")
    );
    let admin_row = row("pgbouncer", "pgbouncer").expect("admin pool row");
    assert_eq!(admin_row[pools.col("cl_active")].as_deref(), Some("1"));
    let v = show(&mut c, "version").await;
    assert!(
        v.rows[0][0]
            .as_deref()
            .unwrap()
            .starts_with("PgBouncer 1.25.2"),
        "{v:?}"
    );
    let state = show(&mut c, "state").await;
    assert_eq!(state.get("active", "value").as_deref(), Some("yes"));
    let cfg = show(&mut c, "config").await;
    assert_eq!(cfg.get("default_pool_size", "value").as_deref(), Some("2"));
    assert_eq!(cfg.get("listen_port", "changeable").as_deref(), Some("no"));
    let lists = show(&mut c, "lists").await;
    assert_eq!(num(&lists, "pools", "items"), 2, "app pool + console");
    assert_eq!(num(&lists, "used_servers", "items"), 1);
    let servers = show(&mut c, "servers").await;
    assert_eq!(servers.rows.len(), 1);
    assert_eq!(servers.find("state", |_| true).as_deref(), Some("idle"));
    let pid: i64 = servers
        .find("remote_pid", |_| true)
        .unwrap()
        .parse()
        .unwrap();
    assert!(pid > 0, "remote_pid is the backend pid");
    let clients = show(&mut c, "clients").await;
    assert_eq!(clients.rows.len(), 2, "app client + this console");
    // Listening on one IP, the client's local address is the listener's (no getsockname).
    let user = clients.col("user");
    let is_app = |r: &[Option<String>]| r[user].as_deref() == Some("app");
    assert_eq!(
        clients.find("local_addr", is_app).as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(clients.find("local_port", is_app), Some(s.port.to_string()));
    let help = c.query("SHOW HELP").await.unwrap();
    // PgBouncer's NOTICE: "Console usage", the commands in its DETAIL after a line break.
    assert_eq!(help.notices, vec!["Console usage".to_string()]);
    assert!(
        help.notice_details[0].starts_with("\n\tSHOW HELP|CONFIG|")
            && help.notice_details[0].contains("\tKILL_CLIENT <client_id>\n"),
        "{help:?}"
    );
    let enc = c.query("SHOW client_encoding").await.unwrap();
    assert_eq!(enc.rows[0][0].as_deref(), Some("UTF-8"));
    let set = c.query("SET client_encoding = 'UTF8'").await.unwrap();
    assert_eq!(set.notices, vec!["SET ignored".to_string()]);
    let err = c.query("SHOW nonsense").await.unwrap_err();
    assert_eq!(err[&b'C'], "08P01");
    let err = c.query("bogus command here").await.unwrap_err();
    assert!(err[&b'M'].contains("SHOW HELP"), "{err:?}");
}

#[tokio::test]
async fn stats_count_a_known_workload() {
    let s = start("", 2);
    let mut c = admin(&s).await;
    let before = show(&mut c, "stats_totals").await;
    assert!(before.get("app", "xact_count").is_none(), "no pool yet");
    let app = s.connect("app", "apppw", "app").await.unwrap();
    const N: i64 = 25;
    for _ in 0..N {
        app.batch_execute("BEGIN; SELECT 1; SELECT 2; COMMIT")
            .await
            .unwrap();
    }
    let t = show(&mut c, "stats_totals").await;
    assert_eq!(num(&t, "app", "xact_count"), N);
    assert_eq!(
        num(&t, "app", "query_count"),
        N,
        "one simple Query per transaction"
    );
    assert_eq!(num(&t, "app", "client_login_count"), 1);
    assert!(num(&t, "app", "server_assignment_count") >= N);
    // Each request is a 39-byte Query message, read while the client is unlinked.
    assert!(num(&t, "app", "bytes_received") >= N * 39);
    assert!(num(&t, "app", "bytes_sent") > 0);
    assert!(num(&t, "app", "xact_time") > 0);
    let st = show(&mut c, "stats").await;
    assert_eq!(num(&st, "app", "total_xact_count"), N);
    // stats_period = 1: after a period the averages show the workload per second.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    for _ in 0..N {
        app.simple_query("SELECT 1").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let avg = show(&mut c, "stats_averages").await;
    let xps = num(&avg, "app", "xact_count");
    assert!(xps > 0 && xps <= N, "xact/s over the last period: {xps}");
    assert!(num(&avg, "app", "xact_time") > 0, "µs per transaction");
    let totals = show(&mut c, "totals").await;
    assert!(num(&totals, "total_xact_count", "value") >= 2 * N);
}

#[tokio::test]
async fn waiting_clients_and_maxwait_as_in_seed_000() {
    let s = start("", 1);
    let holder = s.connect("app", "apppw", "app").await.unwrap();
    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let cl = s.connect("app", "apppw", "app").await.unwrap();
        waiters.push(tokio::spawn(async move {
            cl.simple_query("SELECT 1").await.map(|_| ())
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut c = admin(&s).await;
    let p = show(&mut c, "pools").await;
    assert_eq!(num(&p, "app", "cl_waiting"), 2);
    assert_eq!(num(&p, "app", "cl_active"), 1);
    assert_eq!(num(&p, "app", "sv_active"), 1);
    let wait_us = num(&p, "app", "maxwait") * 1_000_000 + num(&p, "app", "maxwait_us");
    assert!(wait_us >= 300_000, "oldest waiter's age: {wait_us} µs");
    let cl = show(&mut c, "clients").await;
    let waiting = cl
        .rows
        .iter()
        .filter(|r| r[cl.col("state")].as_deref() == Some("waiting"))
        .count();
    assert_eq!(waiting, 2);
    let linked = cl.find("link", |r| {
        r[cl.col("state")].as_deref() == Some("active")
            && r[cl.col("database")].as_deref() == Some("app")
    });
    assert!(linked.unwrap().starts_with("S-"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p2 = show(&mut c, "pools").await;
    let wait2 = num(&p2, "app", "maxwait") * 1_000_000 + num(&p2, "app", "maxwait_us");
    assert!(wait2 > wait_us, "maxwait rises while they wait");
    holder.batch_execute("COMMIT").await.unwrap();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    let p = show(&mut c, "pools").await;
    assert_eq!(
        (num(&p, "app", "cl_waiting"), num(&p, "app", "maxwait_us")),
        (0, 0)
    );
    // The two waiters queued ~0.7 s each: that is wait time; query time counts from when a
    // server was linked (as PgBouncer's), so four fast queries add up to next to nothing.
    let t = show(&mut c, "stats_totals").await;
    let (wait, query) = (num(&t, "app", "wait_time"), num(&t, "app", "query_time"));
    assert!(wait >= 1_000_000, "wait_time {wait} µs");
    assert!(query < 300_000, "query_time {query} µs includes the wait");
}

#[tokio::test]
async fn access_rules() {
    let s = start("", 2);
    let mut w = Console::connect(s.port, "watcher", "watchpw")
        .await
        .unwrap();
    show(&mut w, "pools").await;
    show(&mut w, "stats").await;
    for cmd in [
        "PAUSE",
        "RESUME",
        "RELOAD",
        "SET default_pool_size = 3",
        "KILL app",
        "KILL_CLIENT 1",
        "SHUTDOWN",
        "SHOW FDS",
        "DISABLE app",
        "RECONNECT",
    ] {
        let e = w.query(cmd).await.unwrap_err();
        assert_eq!(e[&b'M'], "admin access needed", "{cmd}");
    }
    let e = Console::connect(s.port, "app", "apppw")
        .await
        .err()
        .expect("app user refused");
    assert_eq!(e[&b'M'], "not allowed");
    let e = Console::connect(s.port, "admin", "wrong")
        .await
        .err()
        .expect("bad password");
    assert_eq!(e[&b'C'], "08P01");
    // Extended protocol: PgBouncer's error and a disconnect.
    let mut a = admin(&s).await;
    a.send_raw(b"P\x00\x00\x00\x08\x00\x00\x00\x00").await;
    let (tag, body) = a.read_raw().await.unwrap();
    assert_eq!(tag, b'E');
    assert!(String::from_utf8_lossy(&body)
        .contains("extended query protocol not supported by admin console"));
    // user pgbouncer from the same OS user over the Unix socket: admin without a password.
    let conn = format!(
        "host={} port={} user=pgbouncer dbname=pgbouncer",
        s.socket_dir.display(),
        s.port
    );
    let (st, out, err) = tokio::task::spawn_blocking(move || psql_cmd(&conn, "SHOW STATE"))
        .await
        .unwrap();
    assert!(st.success(), "{err}");
    assert!(out.contains("active|yes"), "{out}");
    // ... but not over TCP.
    let e = Console::connect(s.port, "pgbouncer", "")
        .await
        .err()
        .expect("tcp pgbouncer refused");
    assert!(e.contains_key(&b'M'));
}

/// The console's own row in SHOW STATS is PgBouncer 1.25's: one query and one transaction per
/// console login, whatever it runs, and no bytes or times (tests/tests/parity.rs compares it).
#[tokio::test]
async fn the_console_row_of_show_stats_counts_logins_only() {
    let s = start("", 2);
    let mut c = admin(&s).await;
    let first = show(&mut c, "STATS").await;
    let n1 = num(&first, "pgbouncer", "total_query_count");
    assert_eq!(n1, num(&first, "pgbouncer", "total_client_login_count"));
    let second = show(&mut c, "STATS").await;
    assert_eq!(num(&second, "pgbouncer", "total_query_count"), n1);
    let mut c2 = admin(&s).await;
    let third = show(&mut c2, "STATS").await;
    assert_eq!(num(&third, "pgbouncer", "total_query_count"), n1 + 1);
    assert_eq!(num(&third, "pgbouncer", "total_xact_count"), n1 + 1);
    for col in [
        "total_received",
        "total_sent",
        "total_xact_time",
        "total_query_time",
    ] {
        assert_eq!(num(&third, "pgbouncer", col), 0, "{col}");
    }
}

/// SHOW DNS_HOSTS and SHOW LISTS report the DNS cache: a database named by host name is looked up
/// once at its first server connect and kept for dns_max_ttl (PgBouncer's columns: hostname, the
/// seconds until the next lookup, the addresses as `ip:0`); an IP address is not a DNS name.
#[tokio::test]
async fn show_dns_hosts_and_lists_report_the_dns_cache() {
    let pg = PgCluster::get();
    let ini = Sluice::basic_ini(
        "auth_type = plain\nadmin_users = admin\npool_mode = transaction\ndns_max_ttl = 30\n",
        &format!(
            "app = host=127.0.0.1 port={p} dbname=app user=trust_user\n\
             byname = host=localhost port={p} dbname=app user=trust_user",
            p = pg.port
        ),
    );
    let s = Sluice::builder(&ini)
        .userlist(admin_common::USERLIST)
        .start();
    let mut c = admin(&s).await;
    assert_eq!(show(&mut c, "DNS_HOSTS").await.rows.len(), 0);
    assert_eq!(num(&show(&mut c, "LISTS").await, "dns_names", "items"), 0);
    let by_ip = s.connect("app", "apppw", "app").await.unwrap();
    by_ip.simple_query("SELECT 1").await.unwrap();
    assert_eq!(
        show(&mut c, "DNS_HOSTS").await.rows.len(),
        0,
        "an IP is not looked up"
    );
    // Whether or not the server login over localhost succeeds (PostgreSQL listens on 127.0.0.1
    // only), the name was looked up.
    if let Ok(by_name) = s.connect("app", "apppw", "byname").await {
        let _ = by_name.simple_query("SELECT 1").await;
    }
    let hosts = show(&mut c, "DNS_HOSTS").await;
    assert_eq!(hosts.rows.len(), 1, "{:?}", hosts.rows);
    let ttl = num(&hosts, "localhost", "ttl");
    assert!((1..=30).contains(&ttl), "ttl {ttl}");
    let addrs = hosts.get("localhost", "addrs").unwrap();
    assert!(
        addrs
            .split(',')
            .any(|a| a == "127.0.0.1:0" || a == "[::1]:0"),
        "{addrs}"
    );
    let lists = show(&mut c, "LISTS").await;
    assert_eq!(num(&lists, "dns_names", "items"), 1);
    assert_eq!(num(&lists, "dns_queries", "items"), 0);
    assert_eq!(num(&lists, "dns_zones", "items"), 0);
}
