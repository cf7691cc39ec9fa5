//! `route_reads` applied to a classification: may this transaction run on a standby at all?
//! (Which standby, if any is fresh enough, is `freshness.rs`'s question.)

use std::fmt;

use sluice_config::RouteReads;

use super::classify::{Classification, Declared, PrimaryWhy, ReadKind, Verdict};

/// Why a transaction may run on a standby.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadOnlyBecause {
    /// It said so (`BEGIN READ ONLY`, `BEGIN; SET TRANSACTION READ ONLY`).
    Declared(Declared),
    /// The session's `default_transaction_read_only` is on.
    SessionReadOnly,
    /// `route_reads = auto` and the statement is a proven read.
    ProvenRead(ReadKind),
}

/// Why a transaction runs on the primary before freshness is even asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrimaryBecause {
    /// `route_reads = off`.
    Off,
    /// The classifier says so.
    Statement(PrimaryWhy),
    /// `route_reads = explicit` and the transaction does not declare itself read only.
    NotDeclared,
}

/// Whether a transaction opened by the text classified as `class` may run on a standby, for a
/// client whose session default access mode is read only when `session_read_only` (the tracked
/// `default_transaction_read_only`).
///
/// In a read-only session, a statement that would write fails on the standby with the same
/// SQLSTATE 25006 it gets on the primary, so texts that follow the session need no replay.
pub fn wants_standby(
    mode: RouteReads,
    class: &Classification,
    session_read_only: bool,
) -> Result<ReadOnlyBecause, PrimaryBecause> {
    if mode == RouteReads::Off {
        return Err(PrimaryBecause::Off);
    }
    match class.verdict {
        Verdict::Primary(why) => Err(PrimaryBecause::Statement(why)),
        Verdict::DeclaredReadOnly(how) => Ok(ReadOnlyBecause::Declared(how)),
        Verdict::ProvenRead { .. } | Verdict::FollowsSession if session_read_only => {
            Ok(ReadOnlyBecause::SessionReadOnly)
        }
        Verdict::ProvenRead { kind, .. } if mode == RouteReads::Auto => {
            Ok(ReadOnlyBecause::ProvenRead(kind))
        }
        Verdict::ProvenRead { .. } | Verdict::FollowsSession => Err(PrimaryBecause::NotDeclared),
    }
}

impl fmt::Display for ReadOnlyBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadOnlyBecause::Declared(Declared::Begin) => f.write_str("BEGIN READ ONLY"),
            ReadOnlyBecause::Declared(Declared::SetTransaction) => {
                f.write_str("SET TRANSACTION READ ONLY")
            }
            ReadOnlyBecause::SessionReadOnly => f.write_str("default_transaction_read_only is on"),
            ReadOnlyBecause::ProvenRead(kind) => write!(f, "read-only {kind:?}"),
        }
    }
}

impl fmt::Display for PrimaryBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrimaryBecause::Off => f.write_str("route_reads is off"),
            PrimaryBecause::NotDeclared => f.write_str("not declared read only"),
            PrimaryBecause::Statement(why) => match why {
                PrimaryWhy::Empty => f.write_str("empty query"),
                PrimaryWhy::DeclaredReadWrite => f.write_str("declared read write"),
                PrimaryWhy::ModeNotFixed => f.write_str("BEGIN whose access mode may still change"),
                PrimaryWhy::SeveralTransactions => f.write_str("several transactions in one query"),
                PrimaryWhy::NotARead(kw) => write!(f, "not a read ({kw})"),
                PrimaryWhy::LockingClause => f.write_str("locking clause"),
                PrimaryWhy::SelectInto => f.write_str("SELECT INTO"),
                PrimaryWhy::DataModifying => f.write_str("data-modifying statement inside a read"),
                PrimaryWhy::Name(name, _) => write!(f, "uses {name}"),
                PrimaryWhy::UnknownFunction => {
                    f.write_str("calls a function not known to be a read")
                }
            },
        }
    }
}
