//! Tests of the hba and ident parsers and of rule evaluation.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::hba::*;
use crate::hba_match::{ClientAddr, HbaRequest, HbaVerdict};
use crate::ident::{parse_ident, IdentMaps};

const HBA_PATH: &str = "/etc/sluice/hba.conf";

fn parse_with(text: &str, files: &[(&str, &str)]) -> Result<HbaRules, crate::ConfigError> {
    let files: HashMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    parse_hba(text, Path::new(HBA_PATH), &mut |p: &Path| {
        files
            .get(p)
            .cloned()
            .ok_or_else(|| "No such file or directory".to_string())
    })
}

fn parse(text: &str) -> HbaRules {
    parse_with(text, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> String {
    parse_with(text, &[]).unwrap_err().to_string()
}

fn ip(s: &str) -> ClientAddr {
    ClientAddr::Ip(s.parse::<IpAddr>().unwrap())
}

fn req<'a>(addr: ClientAddr, db: &'a str, user: &'a str) -> HbaRequest<'a> {
    HbaRequest {
        addr,
        is_tls: false,
        cert_cn: None,
        peer_user: None,
        database: db,
        user,
        physical_replication: false,
    }
}

/// The line number of the matching rule, or 0 for none.
fn line_of(rules: &HbaRules, r: &HbaRequest<'_>) -> usize {
    rules.find(r).map_or(0, |rule| rule.line)
}

#[test]
fn every_line_kind_and_method() {
    let rules = parse(
        "# comment\n\
         local all all trust\n\
         host all all 127.0.0.1/32 reject\n\
         hostssl all all 10.0.0.0/8 cert\n\
         hostnossl all all 10.0.0.0/8 md5\n\
         host all all ::1/128 password\n\
         \n\
         host all all all scram-sha-256   # trailing comment\n\
         local db1 u1 peer\n",
    );
    let r = &rules.rules;
    assert_eq!(r.len(), 7);
    assert_eq!(
        r.iter().map(|r| r.conn).collect::<Vec<_>>(),
        vec![
            HbaConnType::Local,
            HbaConnType::Host,
            HbaConnType::HostSsl,
            HbaConnType::HostNoSsl,
            HbaConnType::Host,
            HbaConnType::Host,
            HbaConnType::Local
        ]
    );
    assert_eq!(
        r.iter().map(|r| r.method.as_str()).collect::<Vec<_>>(),
        vec![
            "trust",
            "reject",
            "cert",
            "md5",
            "password",
            "scram-sha-256",
            "peer"
        ]
    );
    assert_eq!(r[0].line, 2);
    assert_eq!(r[5].line, 8);
    assert_eq!(r[5].address, Some(HbaAddress::Any));
    assert_eq!(r[0].address, None);
    assert_eq!(r[1].location(), "/etc/sluice/hba.conf:3");
}

#[test]
fn local_vs_host_and_tls_kinds() {
    let rules = parse(
        "local all all trust\n\
         hostssl all all 0.0.0.0/0 cert\n\
         hostnossl all all 0.0.0.0/0 md5\n",
    );
    assert_eq!(line_of(&rules, &req(ClientAddr::Unix, "d", "u")), 1);
    assert_eq!(line_of(&rules, &req(ip("1.2.3.4"), "d", "u")), 3);
    let tls = HbaRequest {
        is_tls: true,
        ..req(ip("1.2.3.4"), "d", "u")
    };
    assert_eq!(line_of(&rules, &tls), 2);
    let only_host = parse("host all all 0.0.0.0/0 md5\n");
    assert_eq!(line_of(&only_host, &req(ClientAddr::Unix, "d", "u")), 0);
    assert_eq!(line_of(&only_host, &tls), 1);
}

#[test]
fn database_and_user_lists() {
    let rules = parse(
        "host db1,db2 alice,bob 0.0.0.0/0 md5\n\
         host db3 , db4 carol 0.0.0.0/0 md5\n\
         host sameuser all 0.0.0.0/0 trust\n\
         host \"all\" \"Mixed Case\",\"we\"\"ird\" 0.0.0.0/0 password\n",
    );
    let a = ip("10.1.1.1");
    assert_eq!(line_of(&rules, &req(a, "db2", "bob")), 1);
    assert_eq!(line_of(&rules, &req(a, "db4", "carol")), 2);
    assert_eq!(line_of(&rules, &req(a, "dave", "dave")), 3);
    assert_eq!(line_of(&rules, &req(a, "db1", "dave")), 0);
    // A quoted "all" is a database named all, not the keyword.
    assert_eq!(line_of(&rules, &req(a, "all", "Mixed Case")), 4);
    assert_eq!(line_of(&rules, &req(a, "all", "we\"ird")), 4);
    assert_eq!(line_of(&rules, &req(a, "other", "Mixed Case")), 0);
    assert_eq!(rules.rules[3].users.names, vec!["Mixed Case", "we\"ird"]);
    assert!(!rules.rules[3].databases.all);
}

#[test]
fn at_file_includes_relative_to_the_hba_file() {
    let rules = parse_with(
        "host @dbs @sub/users 0.0.0.0/0 md5\n",
        &[
            ("/etc/sluice/dbs", "app, other\n# comment\nthird\n"),
            ("/etc/sluice/sub/users", "alice bob\n@more\n"),
            ("/etc/sluice/sub/more", "\"carol c\"\n"),
        ],
    )
    .unwrap();
    let r = &rules.rules[0];
    assert_eq!(r.databases.names, vec!["app", "other", "third"]);
    assert_eq!(r.users.names, vec!["alice", "bob", "carol c"]);
    let missing = parse_with("host @nope all 0.0.0.0/0 md5\n", &[]).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "/etc/sluice/hba.conf:1: @nope: /etc/sluice/nope: No such file or directory"
    );
    let bad = parse_with(
        "host @dbs all 0.0.0.0/0 md5\n",
        &[("/etc/sluice/dbs", "ok\n+group\n")],
    )
    .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "/etc/sluice/dbs:2: group membership (\"+group\") is not supported"
    );
    let looped =
        parse_with("host @a all 0.0.0.0/0 md5\n", &[("/etc/sluice/a", "@a\n")]).unwrap_err();
    assert!(looped.to_string().contains("nested too deeply"), "{looped}");
}

#[test]
fn cidr_and_address_mask() {
    let rules = parse(
        "host all all 192.168.0.0/16 md5\n\
         host all all 10.0.0.0 255.0.0.0 password\n\
         host all all 172.16.5.9/12 trust\n\
         host all all 0.0.0.0/0 reject\n",
    );
    assert_eq!(line_of(&rules, &req(ip("192.168.200.1"), "d", "u")), 1);
    assert_eq!(line_of(&rules, &req(ip("10.255.0.1"), "d", "u")), 2);
    // Host bits in the network are masked off, like PostgreSQL.
    assert_eq!(line_of(&rules, &req(ip("172.31.0.1"), "d", "u")), 3);
    assert_eq!(line_of(&rules, &req(ip("11.0.0.1"), "d", "u")), 4);
    // IPv4-mapped IPv6 clients match IPv4 lines.
    assert_eq!(line_of(&rules, &req(ip("::ffff:10.0.0.1"), "d", "u")), 2);
    // IPv6 clients do not match 0.0.0.0/0.
    assert_eq!(line_of(&rules, &req(ip("::1"), "d", "u")), 0);
    assert_eq!(
        rules.rules[2].address,
        Some(HbaAddress::Net {
            addr: "172.16.0.0".parse().unwrap(),
            prefix: 12
        })
    );
}

#[test]
fn ipv6() {
    let rules = parse(
        "host all all ::1/128 trust\n\
         host all all fe80::/10 md5\n\
         host all all 2001:db8:: ffff:ffff:: password\n\
         host all all ::/0 reject\n",
    );
    assert_eq!(line_of(&rules, &req(ip("::1"), "d", "u")), 1);
    assert_eq!(line_of(&rules, &req(ip("fe80::1234"), "d", "u")), 2);
    assert_eq!(line_of(&rules, &req(ip("2001:db8:1::5"), "d", "u")), 3);
    assert_eq!(line_of(&rules, &req(ip("2002::1"), "d", "u")), 4);
    assert_eq!(line_of(&rules, &req(ip("127.0.0.1"), "d", "u")), 0);
}

#[test]
fn first_match_wins_and_no_match_rejects() {
    let rules = parse(
        "host app alice 127.0.0.1/32 reject\n\
         host app all 127.0.0.1/32 trust\n",
    );
    let lo = ip("127.0.0.1");
    let (rule, v) = rules.evaluate(None, &req(lo, "app", "alice"));
    assert_eq!(rule.map(|r| r.line), Some(1));
    assert_eq!(
        v,
        HbaVerdict::Refuse("rejected by hba line /etc/sluice/hba.conf:1".into())
    );
    assert_eq!(
        rules.evaluate(None, &req(lo, "app", "bob")).1,
        HbaVerdict::Trust
    );
    let (none, v) = rules.evaluate(None, &req(lo, "other", "bob"));
    assert!(none.is_none());
    assert!(matches!(v, HbaVerdict::Refuse(_)));
    assert!(matches!(
        HbaRules::default().evaluate(None, &req(lo, "a", "b")).1,
        HbaVerdict::Refuse(_)
    ));
}

#[test]
fn password_methods() {
    let rules =
        parse("host a all all md5\nhost b all all password\nhost c all all scram-sha-256\n");
    let lo = ip("127.0.0.1");
    for (db, m) in [
        ("a", HbaMethod::Md5),
        ("b", HbaMethod::Password),
        ("c", HbaMethod::ScramSha256),
    ] {
        assert_eq!(
            rules.evaluate(None, &req(lo, db, "u")).1,
            HbaVerdict::Password(m)
        );
    }
}

#[test]
fn peer_with_and_without_map() {
    let rules = parse("local app all peer\nlocal all all peer map=m\n");
    let idents = parse_ident("m root app_user\nm /^(.*)_os$ \\1\n", Path::new("ident")).unwrap();
    let peer = |db: &'static str, os: Option<&'static str>, user: &'static str| HbaRequest {
        peer_user: os,
        ..req(ClientAddr::Unix, db, user)
    };
    assert_eq!(
        rules.evaluate(None, &peer("app", Some("bob"), "bob")).1,
        HbaVerdict::Identified
    );
    assert!(matches!(
        rules.evaluate(None, &peer("app", Some("root"), "bob")).1,
        HbaVerdict::Refuse(_)
    ));
    assert!(matches!(
        rules.evaluate(None, &peer("app", None, "bob")).1,
        HbaVerdict::Refuse(_)
    ));
    let i = Some(&idents);
    assert_eq!(
        rules.evaluate(i, &peer("x", Some("root"), "app_user")).1,
        HbaVerdict::Identified
    );
    assert_eq!(
        rules.evaluate(i, &peer("x", Some("carol_os"), "carol")).1,
        HbaVerdict::Identified
    );
    assert!(matches!(
        rules.evaluate(i, &peer("x", Some("root"), "postgres")).1,
        HbaVerdict::Refuse(_)
    ));
    // A map that the ident file does not define refuses.
    match rules.evaluate(None, &peer("x", Some("root"), "app_user")).1 {
        HbaVerdict::Refuse(why) => assert!(why.contains("ident map \"m\""), "{why}"),
        v => panic!("{v:?}"),
    }
}

#[test]
fn cert_needs_tls_and_matching_cn() {
    let rules = parse("host all all all cert\nhostssl all all all cert map=c\n");
    let lo = ip("127.0.0.1");
    assert!(matches!(
        rules.evaluate(None, &req(lo, "d", "u")).1,
        HbaVerdict::Refuse(why) if why.contains("TLS")
    ));
    let tls = |cn: Option<&'static str>, user: &'static str| HbaRequest {
        is_tls: true,
        cert_cn: cn,
        ..req(lo, "d", user)
    };
    assert_eq!(
        rules.evaluate(None, &tls(Some("u"), "u")).1,
        HbaVerdict::Identified
    );
    assert!(matches!(
        rules.evaluate(None, &tls(Some("v"), "u")).1,
        HbaVerdict::Refuse(_)
    ));
    assert!(matches!(
        rules.evaluate(None, &tls(None, "u")).1,
        HbaVerdict::Refuse(_)
    ));
}

/// PostgreSQL's rule, which PgBouncer 1.25.2 follows (compared side by side in
/// tests/tests/parity/replication.rs): a physical replication connection matches only lines whose
/// database column says `replication`; every other connection, a logical one included, matches
/// by name, `all` and `sameuser`, never `replication`; a quoted "replication" is a database name.
#[test]
fn replication_keyword_matches_physical_replication_only() {
    let rules = parse(
        "host all all 10.0.0.0/8 reject\n\
         host replication,app repl 10.0.0.0/8 md5\n\
         host \"replication\" all all trust\n\
         host all all all scram-sha-256\n",
    );
    assert!(rules.rules[1].databases.replication);
    assert!(!rules.rules[2].databases.replication);
    let physical = |addr: &'static str, db: &'static str, user: &'static str| HbaRequest {
        physical_replication: true,
        ..req(ip(addr), db, user)
    };
    // `all` (line 1) does not match a physical connection; `replication` (line 2) does.
    assert_eq!(line_of(&rules, &physical("10.1.1.1", "app", "repl")), 2);
    assert_eq!(line_of(&rules, &physical("10.1.1.1", "x", "repl")), 2);
    // Not the user of line 2, and line 4's `all` is not `replication`: no line.
    assert_eq!(line_of(&rules, &physical("10.1.1.1", "app", "other")), 0);
    // Nor does a quoted "replication" (a database of that name).
    assert_eq!(line_of(&rules, &physical("192.0.2.1", "x", "repl")), 0);
    // Ordinary and logical connections: by name; `replication` never matches them.
    assert_eq!(line_of(&rules, &req(ip("10.1.1.1"), "app", "repl")), 1);
    assert_eq!(line_of(&rules, &req(ip("192.0.2.1"), "app", "repl")), 4);
    assert_eq!(
        line_of(&rules, &req(ip("192.0.2.1"), "replication", "u")),
        3
    );
    // A database named like the keyword, unquoted in the file, is the keyword.
    let kw = parse("host replication all all trust\n");
    assert_eq!(line_of(&kw, &req(ip("192.0.2.1"), "replication", "u")), 0);
    // `sameuser` is a name rule: physical connections skip it.
    let same = parse("host sameuser all all trust\n");
    assert_eq!(line_of(&same, &physical("192.0.2.1", "u", "u")), 0);
}

/// `clientcert=` (PostgreSQL 14+) on hostssl lines: verify-ca wants a verified certificate,
/// verify-full also its CN to be the user; the method runs only after that. A line loaded with
/// its condition dropped would let in what the file refuses, so nothing here is ignored.
#[test]
fn clientcert_is_enforced_before_the_method() {
    let rules = parse(
        "hostssl ca_db all all trust clientcert=verify-ca\n\
         hostssl full_db all all scram-sha-256 clientcert=verify-full\n\
         hostssl cert_db all all cert clientcert=verify-full clientname=CN\n",
    );
    let lo = ip("127.0.0.1");
    let conn = |db: &'static str, cn: Option<&'static str>, user: &'static str| HbaRequest {
        is_tls: true,
        cert_cn: cn,
        ..req(lo, db, user)
    };
    let refused = |v: HbaVerdict, want: &str| match v {
        HbaVerdict::CertificateRequired(why) => assert!(why.contains(want), "{why}"),
        v => panic!("want a certificate refusal ({want}), got {v:?}"),
    };
    refused(
        rules.evaluate(None, &conn("ca_db", None, "u")).1,
        "no valid client certificate (clientcert=verify-ca), hba line",
    );
    assert_eq!(
        rules.evaluate(None, &conn("ca_db", Some("anyone"), "u")).1,
        HbaVerdict::Trust
    );
    refused(
        rules.evaluate(None, &conn("full_db", None, "u")).1,
        "clientcert=verify-full",
    );
    refused(
        rules.evaluate(None, &conn("full_db", Some("v"), "u")).1,
        "clientcert=verify-full: certificate authentication failed: \"v\" may not log in as \"u\"",
    );
    assert_eq!(
        rules.evaluate(None, &conn("full_db", Some("u"), "u")).1,
        HbaVerdict::Password(HbaMethod::ScramSha256)
    );
    assert_eq!(
        rules.evaluate(None, &conn("cert_db", Some("u"), "u")).1,
        HbaVerdict::Identified
    );
    // A certificate name without TLS is never taken.
    let plain = HbaRequest {
        cert_cn: Some("u"),
        ..req(lo, "ca_db", "u")
    };
    assert_eq!(line_of(&rules, &plain), 0);
}

#[test]
fn options_and_continuation() {
    let rules = parse(
        "hostssl all all all \\\n  cert map=certmap clientcert=verify-full\nlocal all all trust\n",
    );
    assert_eq!(rules.rules[0].map.as_deref(), Some("certmap"));
    assert_eq!(rules.rules[0].client_cert, Some(ClientCert::VerifyFull));
    assert_eq!(rules.rules[1].line, 3);
}

#[test]
fn errors_name_file_and_line() {
    let cases = [
        (
            "bogus all all trust\n",
            "1: invalid connection type \"bogus\"",
        ),
        ("\nlocal all all\n", "2: expected an authentication method"),
        (
            "local all all ident\n",
            "1: unsupported authentication method \"ident\"",
        ),
        ("host all all trust\n", "1: invalid IP address \"trust\""),
        (
            "host all all db.example.com md5\n",
            "1: invalid IP address \"db.example.com\"",
        ),
        (
            "host all all 10.0.0.0/33 md5\n",
            "1: invalid CIDR mask \"33\"",
        ),
        ("host all all 10.0.0.1 md5\n", "1: invalid IP mask \"md5\""),
        (
            "host all all 10.0.0.1 255.0.255.0 md5\n",
            "1: invalid IP mask \"255.0.255.0\"",
        ),
        ("host all all 10.0.0.1 ffff:: md5\n", "differ in family"),
        (
            "host all all samenet md5\n",
            "1: address \"samenet\" is not supported",
        ),
        (
            "host all +admins all md5\n",
            "1: group membership (\"+admins\") is not supported",
        ),
        (
            "host samerole all all md5\n",
            "database keyword \"samerole\" is not supported",
        ),
        (
            "host all all all md5 clientcert=verify-ca\n",
            "1: clientcert can only be configured for hostssl lines",
        ),
        (
            "hostssl all all all cert clientcert=verify-ca\n",
            "1: clientcert only accepts verify-full with cert authentication",
        ),
        (
            "hostssl all all all md5 clientcert=1\n",
            "1: invalid value for clientcert: \"1\"",
        ),
        (
            "hostssl all all all cert clientname=DN\n",
            "1: clientname=DN is not supported",
        ),
        (
            "host all all all md5 pamservice=x\n",
            "1: unsupported authentication option \"pamservice\"",
        ),
        (
            "host all all all peer\n",
            "peer authentication is only supported on local lines",
        ),
        (
            "local all all cert\n",
            "cert authentication is only supported on host lines",
        ),
        (
            "local all all md5 map=x\n",
            "map= is only valid with peer or cert",
        ),
        ("local all all peer junk\n", "invalid option \"junk\""),
        (
            "local \"unterminated all trust\n",
            "1: unterminated quoted string",
        ),
        ("local all\n", "1: expected a user list"),
        ("hostgssenc all all all md5\n", "not supported"),
        (
            "include other.conf\n",
            "\"include\" directives are not supported",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.starts_with("/etc/sluice/hba.conf:"), "{text:?}: {e}");
        assert!(e.contains(want), "{text:?}: got {e}, want {want}");
    }
}

#[test]
fn parser_never_panics_on_junk() {
    let junk = [
        "",
        "\\",
        "\"",
        ",,,",
        "local ,",
        "host a b",
        "host a b 1.2.3.4/",
        "host a b /8 md5",
        "local @",
        "local @ all trust",
        "host all all ::/999 md5",
        "local a b trust ,",
        "\u{0}\u{1}",
        "local all all trust\\",
        "host all all 1.2.3.4 1.2.3.4.5 md5",
    ];
    for j in junk {
        let _ = parse_with(j, &[]);
    }
}

#[test]
fn ident_parser() {
    let maps = parse_ident(
        "# MAP SYSTEM PG\n\
         m1 alice alice_db\n\
         m1 \"bob smith\" \"Bob\"\n\
         m2 /^(.*)@example\\.com$ \\1\n\
         m3 root all\n\
         m4 svc /^app_\n",
        Path::new("/etc/ident.conf"),
    )
    .unwrap();
    assert_eq!(maps.len(), 5);
    assert!(maps.permits("m1", "alice", "alice_db"));
    assert!(!maps.permits("m1", "alice", "bob"));
    assert!(maps.permits("m1", "bob smith", "Bob"));
    assert!(maps.permits("m2", "carol@example.com", "carol"));
    assert!(!maps.permits("m2", "carol@example.org", "carol"));
    assert!(!maps.permits("m2", "carol@example.com", "dave"));
    assert!(maps.permits("m3", "root", "anyone"));
    assert!(maps.permits("m4", "svc", "app_reader"));
    assert!(!maps.permits("m4", "svc", "reader"));
    assert!(!maps.permits("nomap", "alice", "alice_db"));
    assert!(maps.has_map("m3") && !maps.has_map("m5"));
    assert!(IdentMaps::default().is_empty());
}

#[test]
fn ident_errors_name_file_and_line() {
    let path = Path::new("/etc/ident.conf");
    for (text, want) in [
        (
            "m1 alice\n",
            "/etc/ident.conf:1: expected MAPNAME SYSTEM-USERNAME PG-USERNAME",
        ),
        ("\nm1 a b c\n", "/etc/ident.conf:2: extra fields"),
        (
            "m1 /([ x\n",
            "/etc/ident.conf:1: invalid regular expression",
        ),
        ("m1 a +grp\n", "/etc/ident.conf:1: group membership"),
        (
            "m1 \"a b\n",
            "/etc/ident.conf:1: unterminated quoted string",
        ),
    ] {
        let e = parse_ident(text, path).unwrap_err().to_string();
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
}

#[test]
fn load_from_disk_resolves_includes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users.txt"), "alice\n").unwrap();
    let hba = dir.path().join("hba.conf");
    std::fs::write(&hba, "local all @users.txt trust\n").unwrap();
    let rules = load_hba(&hba).unwrap();
    assert_eq!(rules.rules[0].users.names, vec!["alice"]);
    let missing = load_hba(&dir.path().join("none.conf")).unwrap_err();
    assert!(matches!(missing, crate::ConfigError::Io { .. }));
    let ident = dir.path().join("ident.conf");
    std::fs::write(&ident, "m root alice\n").unwrap();
    assert!(crate::ident::load_ident(&ident)
        .unwrap()
        .permits("m", "root", "alice"));
}
