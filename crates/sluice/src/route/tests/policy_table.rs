//! `route_reads` × classification × session default: standby or primary, and why.

use sluice_config::RouteReads::{self, Auto, Explicit};

use crate::route::*;

fn want(mode: RouteReads, sql: &str, session_ro: bool) -> Result<ReadOnlyBecause, PrimaryBecause> {
    wants_standby(mode, &classify(sql.as_bytes()), session_ro)
}

#[test]
fn modes_and_sessions() {
    use PrimaryBecause::{NotDeclared, Statement};
    use ReadOnlyBecause::*;
    const OFF: RouteReads = RouteReads::Off;
    let table: &[(
        RouteReads,
        &str,
        bool,
        Result<ReadOnlyBecause, PrimaryBecause>,
    )] = &[
        (OFF, "BEGIN READ ONLY", false, Err(PrimaryBecause::Off)),
        (OFF, "SELECT 1", true, Err(PrimaryBecause::Off)),
        (
            Explicit,
            "BEGIN READ ONLY",
            false,
            Ok(Declared(crate::route::Declared::Begin)),
        ),
        (
            Auto,
            "BEGIN READ ONLY",
            false,
            Ok(Declared(crate::route::Declared::Begin)),
        ),
        (Explicit, "SELECT 1", false, Err(NotDeclared)),
        (Explicit, "SELECT 1", true, Ok(SessionReadOnly)),
        (Auto, "SELECT 1", false, Ok(ProvenRead(ReadKind::Select))),
        (Auto, "SELECT 1", true, Ok(SessionReadOnly)),
        (Auto, "SELECT 1; SELECT 2", false, Err(NotDeclared)),
        (Auto, "SELECT 1; SELECT 2", true, Ok(SessionReadOnly)),
        (Explicit, "BEGIN; SELECT 1", true, Ok(SessionReadOnly)),
        (Explicit, "BEGIN; SELECT 1", false, Err(NotDeclared)),
        (
            Auto,
            "BEGIN",
            true,
            Err(Statement(PrimaryWhy::ModeNotFixed)),
        ),
        (
            Auto,
            "INSERT INTO t VALUES (1)",
            true,
            Err(Statement(PrimaryWhy::NotARead("INSERT"))),
        ),
        (
            Explicit,
            "BEGIN READ WRITE",
            true,
            Err(Statement(PrimaryWhy::DeclaredReadWrite)),
        ),
        (
            Auto,
            "SELECT nextval('s')",
            true,
            Err(Statement(PrimaryWhy::Name("nextval", NeedsPrimary::Writes))),
        ),
        (
            Auto,
            "SELECT * FROM t FOR UPDATE",
            false,
            Err(Statement(PrimaryWhy::LockingClause)),
        ),
    ];
    for (mode, sql, ro, expected) in table {
        assert_eq!(
            want(*mode, sql, *ro),
            *expected,
            "{mode:?} {sql:?} session_ro={ro}"
        );
    }
}

#[test]
fn route_says_why() {
    let hosts = [
        HostView {
            role: Role::Primary,
            healthy: true,
            lsn: Lsn(100),
            polled_at: 1,
            incarnation: 1,
        },
        HostView {
            role: Role::Standby,
            healthy: true,
            lsn: Lsn(100),
            polled_at: 2,
            incarnation: 1,
        },
    ];
    let mut state = Freshness::default();
    let r = route(Auto, &classify(b"SELECT 1"), false, &mut state, &hosts, 0);
    assert_eq!(
        r.target,
        Target::Standby(HostKey {
            index: 1,
            incarnation: 1
        })
    );
    assert_eq!(
        r.to_string(),
        "standby (host 1): read-only Select, first transaction of the client"
    );
    let r = route(
        Auto,
        &classify(b"UPDATE t SET a = 1"),
        false,
        &mut state,
        &hosts,
        0,
    );
    assert_eq!(r.target, Target::Primary);
    assert_eq!(r.to_string(), "primary: not a read (UPDATE)");
    state.finished(
        HostKey {
            index: 0,
            incarnation: 1,
        },
        2,
    );
    let r = route(
        Explicit,
        &classify(b"BEGIN READ ONLY"),
        false,
        &mut state,
        &hosts,
        0,
    );
    assert_eq!(
        r.to_string(),
        "primary: BEGIN READ ONLY, waiting for a poll after the last transaction"
    );
}
