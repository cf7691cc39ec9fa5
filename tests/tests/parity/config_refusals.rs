//! Configurations refused side by side: `auth_type = pam` and `ldap` (PgBouncer 1.25.2 built
//! without PAM and LDAP, as the reference binary and Sluice are, refuses them at startup naming the
//! file and line, and a RELOAD to them fails and keeps the running configuration), a `pam` line in
//! the HBA file, and the seed-style `prepared_statement_cache_size` (Sluice reads it as
//! max_prepared_statements; PgBouncer does not know the key).

use std::time::Duration;

use sluice_e2e::{Anchor, Console, Sluice};

use super::{login, pair_with, report, DB};

const USERS: &str = "\"md5_user\" \"md5_pass\"\n\"admin\" \"admin_pass\"\n";

/// How a refusal reads: whether the log names `file:line` and `word`.
fn refused(log: &str, file: &str, line: usize, word: &str) -> String {
    let named = log.contains(&format!("{file}:{line}")) && log.contains(word);
    format!("refused; the log names the file, line and {word}: {named}")
}

/// The 1-based line of `ini` that starts with `key`.
fn line_of(ini: &str, key: &str) -> usize {
    ini.lines()
        .position(|l| l.trim_start().starts_with(key))
        .map_or(0, |i| i + 1)
}

/// Start both on `extra` (and `files`), and say how each took it: "started" or how it refused.
/// `at`: where the refusal must point (file name, line in it; None = the line of `word` in
/// pgbouncer.ini).
fn startup(
    extra: &str,
    files: &[(&str, &str)],
    word: &str,
    at: Option<(&str, usize)>,
) -> [String; 2] {
    let pgb = match Anchor::try_start_with(extra, DB, USERS, files).expect("checked by the caller")
    {
        Ok(_) => "started".to_string(),
        Err(r) => {
            let (file, line) = at.unwrap_or(("pgbouncer.ini", line_of(&r.ini, word)));
            refused(&r.log, file, line, word)
        }
    };
    let ini = Sluice::basic_ini(extra, &DB.replace("{pg_host}", "127.0.0.1"));
    let mut b = Sluice::builder(&ini).userlist(USERS);
    for (name, text) in files {
        b = b.file(name, text);
    }
    let (status, log) = b.run_expect_exit(Duration::from_secs(5));
    assert!(!status.success(), "{log}");
    let (file, line) = at.unwrap_or(("pgbouncer.ini", line_of(&ini, word)));
    [pgb, refused(&log, file, line, word)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_configurations_match_pgbouncer() {
    if !Anchor::available() {
        return;
    }
    let mut r = Vec::new();
    for method in ["pam", "ldap"] {
        let [a, b] = startup(&format!("auth_type = {method}"), &[], "auth_type", None);
        r.push((format!("auth_type = {method} at startup"), a, b));
    }
    // An HBA line with pam: PgBouncer warns and skips the line; Sluice refuses the file.
    let hba = "host all md5_user 127.0.0.1/32 pam\nhost all all 127.0.0.1/32 md5\n";
    let [a, b] = startup(
        "auth_type = hba\nauth_hba_file = {hba}",
        &[("hba.conf", hba)],
        "pam",
        Some(("hba.conf", 1)),
    );
    r.push(("a pam line in the HBA file at startup".to_string(), a, b));
    // What PgBouncer does with it: the line is gone, and md5_user meets the next line (md5).
    let a = Anchor::start_with(
        "auth_type = hba\nauth_hba_file = {hba}",
        DB,
        USERS,
        &[("hba.conf", hba)],
    )
    .unwrap();
    r.push((
        "a pam line in the HBA file: PgBouncer's login under it".to_string(),
        login(a.port, "md5_user", "md5_pass", "app").await,
        "refused at startup".to_string(),
    ));
    drop(a);

    // RELOAD to auth_type = pam: refused, the running configuration (plain) kept.
    let p = pair_with("auth_type = plain\nadmin_users = admin", DB, USERS, &[]).unwrap();
    let to_pam = |cfg: String| cfg.replace("auth_type = plain", "auth_type = pam");
    p.pgb.write_file("pgbouncer.ini", &to_pam(p.pgb.config()));
    let sl_ini = p.sl.dir.path().join("pgbouncer.ini");
    std::fs::write(&sl_ini, to_pam(std::fs::read_to_string(&sl_ini).unwrap())).unwrap();
    let mut answers = Vec::new();
    for port in [p.pgb.port, p.sl.port] {
        let mut c = Console::connect(port, "admin", "admin_pass").await.unwrap();
        answers.push(match c.query("RELOAD").await {
            Ok(_) => "ok".to_string(),
            Err(f) => format!("{} {}", f[&b'C'], f[&b'M']),
        });
    }
    r.push((
        "RELOAD to auth_type = pam".to_string(),
        answers[0].clone(),
        answers[1].clone(),
    ));
    r.push((
        "a login after RELOAD to auth_type = pam".to_string(),
        login(p.pgb.port, "md5_user", "md5_pass", "app").await,
        login(p.sl.port, "md5_user", "md5_pass", "app").await,
    ));
    r.push((
        "the log after RELOAD to auth_type = pam".to_string(),
        format!("names auth_type: {}", p.pgb.log().contains("auth_type")),
        format!("names auth_type: {}", p.sl.log().contains("auth_type")),
    ));
    drop(p);

    // prepared_statement_cache_size: PgBouncer refuses the unknown key; Sluice reads it as
    // max_prepared_statements and says so in the log.
    let extra = "auth_type = plain\nadmin_users = admin\nprepared_statement_cache_size = 50";
    let pgb = match Anchor::try_start_with(extra, DB, USERS, &[]).unwrap() {
        Ok(_) => "started".to_string(),
        Err(e) => refused(
            &e.log,
            "pgbouncer.ini",
            line_of(&e.ini, "prepared_statement_cache_size"),
            "prepared_statement_cache_size",
        ),
    };
    let ini = Sluice::basic_ini(extra, &DB.replace("{pg_host}", "127.0.0.1"));
    let s = Sluice::builder(&ini).userlist(USERS).start();
    let line = line_of(&ini, "prepared_statement_cache_size");
    let said = format!(
        "pgbouncer.ini:{line}: prepared_statement_cache_size is read as max_prepared_statements"
    );
    // The port may answer before the line reaches the log file (seen under load).
    for _ in 0..50 {
        if s.log().contains(&said) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.log().contains(&said), "{}", s.log());
    let mut c = Console::connect(s.port, "admin", "admin_pass")
        .await
        .unwrap();
    let cfg = c.query("SHOW CONFIG").await.unwrap();
    assert_eq!(
        cfg.get("max_prepared_statements", "value").as_deref(),
        Some("50")
    );
    r.push((
        "prepared_statement_cache_size at startup".to_string(),
        pgb,
        "started".to_string(),
    ));
    report(&r, 8);
}
