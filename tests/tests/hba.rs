//! auth_type = hba end to end: every method that works without TLS (trust, reject, md5, password,
//! scram-sha-256, peer with an ident map over the Unix socket), local vs host lines, database and
//! user lists, `@file`, CIDR and address/mask, first match wins, no match refuses; RELOAD picks up a
//! changed file and keeps the old rules when the new file is broken; a broken file at startup is a
//! config error. Tests run as root, so the Unix socket peer is `root`.

mod auth_common;

use std::time::Duration;

use auth_common::*;
use sluice_e2e::{free_port, Sluice};

const PASSWORDS: [(&str, &str); 4] = [
    ("md5_user", "md5_pass"),
    ("scram_user", "scram_pass"),
    ("plain_user", "plain_pass"),
    ("trust_user", "trust_pass"),
];

fn db(name: &str, dbname: &str) -> String {
    format!("{name} = host={{pg_host}} port={{pg_port}} dbname={dbname}\n")
}

/// Sluice with auth_type = hba, `hba` as {dir}/hba.conf, every role in the userlist (plaintext).
fn start(databases: &str, hba: &str, extra: &str, files: &[(&str, &str)]) -> Sluice {
    let ini = Sluice::basic_ini(
        &format!(
            "auth_type = hba\nauth_hba_file = {{hba}}\nquery_wait_timeout = 5\n\
             server_connect_timeout = 5\n{extra}"
        ),
        databases,
    );
    let mut b = Sluice::builder(&ini)
        .userlist(&userlist(&PASSWORDS))
        .file("hba.conf", hba);
    for (name, text) in files {
        b = b.file(name, text);
    }
    b.start()
}

#[tokio::test]
async fn each_method_by_database() {
    let dbs = [
        "trust_db",
        "reject_db",
        "md5_db",
        "pw_db",
        "scram_db",
        "nohba_db",
    ]
    .iter()
    .map(|n| db(n, "app"))
    .collect::<String>();
    let hba = "\
# TYPE DATABASE  USER ADDRESS       METHOD
host   trust_db  all  127.0.0.1/32  trust
host   reject_db all  127.0.0.1/32  reject
host   md5_db    all  127.0.0.1/32  md5
host   pw_db     all  127.0.0.1/32  password
host   scram_db  all  127.0.0.1/32  scram-sha-256
";
    let mport = free_port();
    let s = start(
        &dbs,
        hba,
        &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n"),
        &[],
    );
    for (database, code) in [
        ("trust_db", AUTH_OK),
        ("md5_db", AUTH_MD5),
        ("pw_db", AUTH_CLEARTEXT),
        ("scram_db", AUTH_SASL),
    ] {
        assert_eq!(
            first_auth_request(s.port, "scram_user", database).await,
            Ok(code),
            "{database}"
        );
        for (user, password) in PASSWORDS {
            assert_eq!(
                login_ok(&s, Via::Tcp, user, password, database).await,
                user,
                "{database}"
            );
        }
    }
    for database in ["md5_db", "pw_db", "scram_db"] {
        let failed = if database == "scram_db" {
            sasl_failed()
        } else {
            pw_failed("md5_user")
        };
        assert_eq!(
            login_err(&s, Via::Tcp, "md5_user", "wrong", database).await,
            failed,
            "{database}"
        );
        // An unknown user fails exactly like a wrong password.
        assert_eq!(
            login_err(&s, Via::Tcp, "hba_nobody", "wrong", database).await,
            failed,
            "{database}"
        );
    }
    // trust still needs a known user (PgBouncer's answer).
    let (code, msg) = login_err(&s, Via::Tcp, "hba_nobody", "", "trust_db").await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("08P01", "\"trust\" authentication failed")
    );
    let (code, msg) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "reject_db").await;
    assert_eq!(code, "28000");
    assert_eq!(
        msg,
        "hba rejects connection for host \"127.0.0.1\", user \"md5_user\", database \"reject_db\""
    );
    let (code, msg) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "nohba_db").await;
    assert_eq!(code, "28000");
    assert!(
        msg.starts_with("no hba entry for host \"127.0.0.1\""),
        "{msg}"
    );
    // Failures are logged with the client address, the rule, and no password; and counted.
    let log = s.log();
    assert!(
        log.lines().any(|l| l.contains("login failed")
            && l.contains("127.0.0.1:")
            && l.contains("hba.conf:3")),
        "{log}"
    );
    assert!(!log.contains("md5_pass"), "{log}");
    let failures = sample(&metrics(mport).await, "sluice_client_login_failures_total");
    assert!(failures >= 9.0, "{failures}");
}

#[tokio::test]
async fn lists_include_files_addresses_and_first_match() {
    let dbs = db("app", "app") + &db("other", "other");
    let hba = "\
host app @users.txt 127.0.0.1/32 reject
host app,other \"scram_user\", plain_user 127.0.0.1/32 trust
host all all 10.0.0.0/8 trust
host all all 127.0.0.1 255.255.255.255 md5
";
    let s = start(
        &dbs,
        hba,
        "",
        &[("users.txt", "# users refused on app\nmd5_user\n")],
    );
    // Line 1 matches first (user from @users.txt) even though line 4 would let md5_user in.
    let (code, _) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "app").await;
    assert_eq!(code, "28000");
    // On `other` line 1 does not apply: line 4 (address + mask) asks for md5.
    assert_eq!(
        first_auth_request(s.port, "md5_user", "other").await,
        Ok(AUTH_MD5)
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "md5_user", "md5_pass", "other").await,
        "md5_user"
    );
    // Line 2: database and user lists, quoted name.
    for (user, database) in [("scram_user", "app"), ("plain_user", "other")] {
        assert_eq!(
            first_auth_request(s.port, user, database).await,
            Ok(AUTH_OK),
            "{user}@{database}"
        );
        assert_eq!(
            login_ok(&s, Via::Tcp, user, "ignored", database).await,
            user
        );
    }
    // trust_user: line 3's network does not contain 127.0.0.1, so line 4 applies.
    assert_eq!(
        first_auth_request(s.port, "trust_user", "app").await,
        Ok(AUTH_MD5)
    );
    // A file whose only network does not match refuses everything from 127.0.0.1.
    let s2 = start(
        &db("app", "app"),
        "host all all 10.0.0.0/8 trust\n",
        "",
        &[],
    );
    let (code, msg) = login_err(&s2, Via::Tcp, "trust_user", "trust_pass", "app").await;
    assert_eq!(code, "28000", "{msg}");
    assert!(msg.starts_with("no hba entry"), "{msg}");
}

#[tokio::test]
async fn local_lines_and_peer_with_an_ident_map() {
    let dbs = db("app", "app") + &db("other", "other");
    let hba = "\
local app   trust_user peer map=rootmap
local other all        peer
local all   all        md5
host  all   all        127.0.0.1/32 reject
";
    let s = start(
        &dbs,
        hba,
        "auth_ident_file = {dir}/ident.conf\n",
        &[("ident.conf", "# MAP SYSTEM PG\nrootmap root trust_user\n")],
    );
    // root (this test process) may be trust_user through the map; no password is asked.
    assert_eq!(
        login_ok(&s, Via::Unix, "trust_user", "not-checked", "app").await,
        "trust_user"
    );
    // Same socket, another user: line 3 (local md5).
    assert_eq!(
        login_ok(&s, Via::Unix, "md5_user", "md5_pass", "app").await,
        "md5_user"
    );
    assert_eq!(
        login_err(&s, Via::Unix, "md5_user", "wrong", "app").await,
        pw_failed("md5_user")
    );
    // Peer without a map: OS user root is not trust_user.
    let (code, msg) = login_err(&s, Via::Unix, "trust_user", "trust_pass", "other").await;
    assert_eq!(
        (code.as_str(), msg.as_str()),
        (
            "28000",
            "peer authentication failed for user \"trust_user\""
        )
    );
    // The same user over TCP hits the host line.
    let (code, msg) = login_err(&s, Via::Tcp, "trust_user", "trust_pass", "app").await;
    assert_eq!(code, "28000", "{msg}");
    assert!(msg.starts_with("hba rejects connection"), "{msg}");
}

#[tokio::test]
async fn reload_reads_the_changed_file_and_keeps_the_old_rules_when_broken() {
    let s = start(
        &db("app", "app"),
        "host all all 127.0.0.1/32 trust\n",
        "",
        &[],
    );
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await,
        Ok(AUTH_OK)
    );
    s.write_file("hba.conf", "host all all 127.0.0.1/32 reject\n");
    sighup(&s).await;
    let (code, _) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "app").await;
    assert_eq!(code, "28000");
    // A broken file: logged with file:line, the reject rule stays.
    s.write_file(
        "hba.conf",
        "host all all 127.0.0.1/32 md5\nhost all all not-an-ip md5\n",
    );
    sighup(&s).await;
    let log = s.log();
    assert!(
        log.lines()
            .any(|l| l.contains("hba not reloaded") && l.contains("hba.conf:2")),
        "{log}"
    );
    let (code, _) = login_err(&s, Via::Tcp, "md5_user", "md5_pass", "app").await;
    assert_eq!(code, "28000");
    s.write_file("hba.conf", "host all all 127.0.0.1/32 md5\n");
    sighup(&s).await;
    assert_eq!(
        first_auth_request(s.port, "md5_user", "app").await,
        Ok(AUTH_MD5)
    );
    assert_eq!(
        login_ok(&s, Via::Tcp, "md5_user", "md5_pass", "app").await,
        "md5_user"
    );
}

#[tokio::test]
async fn broken_hba_file_at_startup_is_a_config_error() {
    let ini = Sluice::basic_ini(
        "auth_type = hba\nauth_hba_file = {hba}\n",
        &db("app", "app"),
    );
    let (status, out) = Sluice::builder(&ini)
        .userlist(&userlist(&PASSWORDS))
        .file(
            "hba.conf",
            "local all all trust\nhost all +admins all md5\n",
        )
        .run_expect_exit(Duration::from_secs(10));
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("hba.conf:2: group membership (\"+admins\") is not supported"),
        "{out}"
    );
}
