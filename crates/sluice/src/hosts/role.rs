//! A server's role at login (libpq's target_session_attrs): from the in_hot_standby and
//! default_transaction_read_only ParameterStatus of PostgreSQL 14+, else asked.

use sluice_config::TargetSessionAttrs;

use crate::error::ServerError;
use crate::server::params::ParamMap;
use crate::server::{query, ServerConn};

/// What target_session_attrs looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleFacts {
    pub in_recovery: bool,
    /// default_transaction_read_only on, or in recovery.
    pub read_only: bool,
}

/// From the login's ParameterStatus (PostgreSQL 14+ reports both); None for older servers.
pub fn from_params(params: &ParamMap) -> Option<RoleFacts> {
    let standby = params.get("in_hot_standby")? == "on";
    let read_only = params.get("default_transaction_read_only") == Some("on");
    Some(RoleFacts {
        in_recovery: standby,
        read_only: standby || read_only,
    })
}

/// libpq's meaning of each value. `prefer-standby` accepts any server (standbys are only tried
/// first).
pub fn accepts(attrs: TargetSessionAttrs, f: RoleFacts) -> bool {
    match attrs {
        TargetSessionAttrs::Any | TargetSessionAttrs::PreferStandby => true,
        TargetSessionAttrs::ReadWrite => !f.read_only,
        TargetSessionAttrs::ReadOnly => f.read_only,
        TargetSessionAttrs::Primary => !f.in_recovery,
        TargetSessionAttrs::Standby => f.in_recovery,
    }
}

/// The role of a server that just logged in: its ParameterStatus, else a query (older servers).
pub async fn learn(conn: &mut ServerConn, max_len: usize) -> Result<RoleFacts, ServerError> {
    if let Some(f) = from_params(&conn.params) {
        return Ok(f);
    }
    let row = query::run_row(
        conn,
        "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_setting('transaction_read_only')",
        max_len,
    )
    .await?;
    let on = |i: usize| {
        matches!(
            row.get(i).and_then(|v| v.as_deref()),
            Some("t" | "on" | "true")
        )
    };
    Ok(RoleFacts {
        in_recovery: on(0),
        read_only: on(0) || on(1),
    })
}

/// How a server of `f` is described in a log line or error.
pub fn describe(f: RoleFacts) -> &'static str {
    match (f.in_recovery, f.read_only) {
        (true, _) => "a standby",
        (false, true) => "a read-only primary",
        (false, false) => "a primary",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TargetSessionAttrs as A;

    const PRIMARY: RoleFacts = RoleFacts {
        in_recovery: false,
        read_only: false,
    };
    const RO_PRIMARY: RoleFacts = RoleFacts {
        in_recovery: false,
        read_only: true,
    };
    const STANDBY: RoleFacts = RoleFacts {
        in_recovery: true,
        read_only: true,
    };

    #[test]
    fn libpq_meanings() {
        let table = [
            (A::Any, [true, true, true]),
            (A::PreferStandby, [true, true, true]),
            (A::ReadWrite, [true, false, false]),
            (A::ReadOnly, [false, true, true]),
            (A::Primary, [true, true, false]),
            (A::Standby, [false, false, true]),
        ];
        for (attrs, want) in table {
            let got = [PRIMARY, RO_PRIMARY, STANDBY].map(|f| accepts(attrs, f));
            assert_eq!(got, want, "{attrs}");
        }
    }

    #[test]
    fn parameter_status() {
        let mut p = ParamMap::new();
        assert_eq!(from_params(&p), None, "before PostgreSQL 14: ask");
        p.set("in_hot_standby", "off");
        p.set("default_transaction_read_only", "on");
        assert_eq!(from_params(&p), Some(RO_PRIMARY));
        p.set("in_hot_standby", "on");
        assert_eq!(from_params(&p), Some(STANDBY));
    }
}
