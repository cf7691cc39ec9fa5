//! Read routing (`route_reads`): which transactions may run on a standby, and which standby is
//! fresh enough for a client to read its own writes and never go back in time. Pure and IO-free:
//! the pool calls [`route`] when a routing client's transaction starts and
//! [`Freshness::finished`] when it ends; the health checker fills the [`HostView`]s.
//! See docs/architecture.md, "Read routing".

pub mod classify;
pub mod freshness;
pub mod lsn;
mod names;
pub mod policy;

pub use classify::{
    classify, classify_with, Classification, ClassifyOptions, Declared, PrimaryWhy, ReadKind,
    SessionMode, UnknownFunctions, Verdict,
};
pub use freshness::{Fresh, Freshness, HostKey, HostView, PollClock, Role, Target};
pub use lsn::{Lsn, LsnError};
pub use names::NeedsPrimary;
pub use policy::{wants_standby, PrimaryBecause, ReadOnlyBecause};

use std::fmt;

use sluice_config::RouteReads;

/// Where a transaction goes and why (for the log and SHOW).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    pub target: Target,
    pub why: Why,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Why {
    /// Not a read-only transaction (or routing off).
    NotReadOnly(PrimaryBecause),
    /// Read only; `Fresh` says which standby, or why the primary after all.
    ReadOnly(ReadOnlyBecause, Fresh),
}

/// Decide where the transaction opened by the text classified as `class` runs, for a client in a
/// database with `mode`, whose session default is read only when `session_read_only`, and
/// whose freshness state is `state`, over the database's `hosts` (`spread`: see
/// [`Freshness::choose`]). The caller records the outcome with [`Freshness::finished`] once the
/// transaction ends, wherever it ran.
pub fn route(
    mode: RouteReads,
    class: &Classification,
    session_read_only: bool,
    state: &mut Freshness,
    hosts: &[HostView],
    spread: usize,
) -> Route {
    match wants_standby(mode, class, session_read_only) {
        Err(why) => Route {
            target: Target::Primary,
            why: Why::NotReadOnly(why),
        },
        Ok(because) => {
            let (target, fresh) = state.choose(hosts, spread);
            Route {
                target,
                why: Why::ReadOnly(because, fresh),
            }
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.target {
            Target::Primary => f.write_str("primary")?,
            Target::Standby(h) => write!(f, "standby (host {})", h.index)?,
        }
        match self.why {
            Why::NotReadOnly(why) => write!(f, ": {why}"),
            Why::ReadOnly(because, fresh) => {
                let fresh = match fresh {
                    Fresh::SameStandby => "same standby as the last read",
                    Fresh::CaughtUp => "standby caught up with the client",
                    Fresh::FirstRead => "first transaction of the client",
                    Fresh::WatermarkPending => "waiting for a poll after the last transaction",
                    Fresh::NoStandbyCaughtUp => "no standby caught up with the client",
                    Fresh::NoHealthyStandby => "no healthy standby",
                };
                write!(f, ": {because}, {fresh}")
            }
        }
    }
}

#[cfg(test)]
mod tests;
