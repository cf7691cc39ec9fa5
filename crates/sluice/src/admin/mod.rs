//! The admin console: the virtual database `pgbouncer`. Login and access rules live in `session`,
//! the grammar in `parse`, result sets in `result`, and one file per command group.

pub mod control;
pub mod parse;
pub mod result;
pub mod session;
pub mod show_advice;
pub mod show_config;
pub mod show_conns;
pub mod show_dns;
pub mod show_hosts;
pub mod show_mem;
pub mod show_pools;
pub mod show_stats;
pub mod show_workers;

use std::sync::Arc;

use bytes::BytesMut;
use sluice_protocol::{
    encode_command_complete, encode_notice, encode_notice_with_detail, Severity,
};

use crate::app::App;
use crate::error::sqlstate;
use parse::Command;
use result::ResultSet;

/// The name clients connect to.
pub const ADMIN_DB: &str = "pgbouncer";
/// The user the admin pool is shown under.
pub const ADMIN_USER: &str = "pgbouncer";
/// The PgBouncer release whose console Sluice reproduces column for column.
pub const PGBOUNCER_COMPAT: &str = "1.25.2";

/// What a console user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// admin_users, or `pgbouncer` from the same OS user over the Unix socket.
    Admin,
    /// stats_users: SHOW only (not SHOW FDS).
    Stats,
}

/// A command refused or failed: an ERROR (not FATAL) and the session goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AdminError {
    pub sqlstate: &'static str,
    pub message: String,
    /// A command the console does not have: the session answers PgBouncer's `invalid command
    /// '<the query as typed>', use SHOW HELP;` (`message` is only for tests and logs).
    pub unknown_command: bool,
}

impl AdminError {
    pub fn new(message: impl Into<String>) -> Self {
        AdminError {
            sqlstate: sqlstate::PROTOCOL_VIOLATION,
            message: message.into(),
            unknown_command: false,
        }
    }

    /// A command (or SHOW subject) the console does not have; `what` names it for logs.
    pub fn unknown_command(what: &str) -> Self {
        AdminError {
            unknown_command: true,
            ..AdminError::new(format!("invalid command '{what}', use SHOW HELP;"))
        }
    }
}

/// Per-connection state commands may change.
#[derive(Debug, Default)]
pub struct ConsoleState {
    /// This console issued SUSPEND: leaving resumes the pooler.
    pub suspended_here: bool,
}

/// PgBouncer's fixed answers for the session parameters drivers ask about.
fn faked_parameter(name: &str) -> Option<&'static str> {
    Some(match name {
        "client_encoding" => "UTF-8",
        "default_transaction_isolation" => "read committed",
        "standard_conforming_strings" => "on",
        "datestyle" => "ISO",
        "timezone" => "GMT",
        _ => return None,
    })
}

/// Run one command, writing its result (not ReadyForQuery) into `out`.
pub async fn execute(
    app: &Arc<App>,
    access: Access,
    cmd: Command,
    state: &mut ConsoleState,
    out: &mut BytesMut,
) -> Result<(), AdminError> {
    match cmd {
        Command::Empty => {
            sluice_protocol::encode_empty_query_response(out);
            Ok(())
        }
        Command::Show(what) => {
            if what == "fds" && access != Access::Admin {
                return Err(AdminError::new("admin access needed"));
            }
            if let Some(v) = faked_parameter(&what) {
                let cols: &'static [(&'static str, result::Col)] = match what.as_str() {
                    "client_encoding" => &[("client_encoding", result::Col::Text)],
                    "default_transaction_isolation" => {
                        &[("default_transaction_isolation", result::Col::Text)]
                    }
                    "standard_conforming_strings" => {
                        &[("standard_conforming_strings", result::Col::Text)]
                    }
                    "datestyle" => &[("datestyle", result::Col::Text)],
                    _ => &[("timezone", result::Col::Text)],
                };
                let mut rs = ResultSet::new(cols);
                rs.push(vec![result::text(v)]);
                rs.encode(out);
                return Ok(());
            }
            if what == "help" {
                encode_notice_with_detail(
                    Severity::Notice,
                    "00000",
                    "Console usage",
                    show_config::HELP,
                    out,
                );
                encode_command_complete("SHOW", out);
                return Ok(());
            }
            show(app, &what)?.encode(out);
            Ok(())
        }
        Command::Set { key, value } => {
            if faked_parameter(&key).is_some() {
                encode_notice(Severity::Notice, "00000", "SET ignored", out);
                encode_command_complete("SET", out);
                return Ok(());
            }
            require_admin(access)?;
            if let Some(reason) = control::set(app, &key, &value)? {
                // PgBouncer's notice; the detail says why.
                encode_notice_with_detail(
                    Severity::Notice,
                    "00000",
                    "TLS settings could not be applied, still using old configuration",
                    &reason,
                    out,
                );
            }
            encode_command_complete(&format!("SET {key}={value}"), out);
            Ok(())
        }
        Command::Word { cmd, arg } => {
            // A command the console does not have is that, whoever asks (PgBouncer's order).
            if !control::COMMANDS.contains(&cmd.as_str()) {
                return Err(AdminError::unknown_command(&cmd));
            }
            require_admin(access)?;
            let tag = control::run(app, &cmd, arg.as_deref(), state).await?;
            encode_command_complete(tag, out);
            Ok(())
        }
    }
}

fn require_admin(access: Access) -> Result<(), AdminError> {
    match access {
        Access::Admin => Ok(()),
        Access::Stats => Err(AdminError::new("admin access needed")),
    }
}

/// The result set of `SHOW <what>`.
pub fn show(app: &Arc<App>, what: &str) -> Result<ResultSet, AdminError> {
    Ok(match what {
        "stats" => show_stats::stats(app),
        "stats_totals" => show_stats::stats_totals(app),
        "stats_averages" => show_stats::stats_averages(app),
        "totals" => show_stats::totals(app),
        "pools" => show_pools::pools(app),
        "databases" => show_pools::databases(app),
        "users" => show_pools::users(app),
        "peers" => show_pools::peers(app),
        "peer_pools" => show_pools::peer_pools(app),
        "lists" => show_pools::lists(app),
        "state" => show_pools::state(app),
        "clients" => show_conns::clients(app),
        "servers" => show_conns::servers(app),
        "sockets" => show_conns::sockets(app, false),
        "active_sockets" => show_conns::sockets(app, true),
        "fds" => show_conns::fds(app),
        "mem" => show_mem::mem(app),
        "config" => show_config::config(app),
        "dns_hosts" => show_dns::dns_hosts(app),
        "hosts" => show_hosts::hosts(app),
        "dns_zones" => show_dns::dns_zones(),
        "version" => show_config::version(),
        "workers" => show_workers::workers(app),
        "cross_worker" => show_workers::cross_worker(app),
        "advice" => show_advice::advice(app),
        other => return Err(AdminError::unknown_command(&format!("SHOW {other}"))),
    })
}
