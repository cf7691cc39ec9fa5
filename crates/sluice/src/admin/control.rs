//! Control commands: SET, RELOAD, PAUSE, RESUME, SUSPEND, DISABLE, ENABLE, RECONNECT, KILL,
//! KILL_CLIENT, SHUTDOWN [WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS], WAIT_CLOSE. Signals reuse
//! `pause_all` / `resume_all` (SIGUSR1 / SIGUSR2).

use std::sync::Arc;
use std::time::Duration;

use sluice_config::SetError;

use super::{AdminError, ConsoleState, ADMIN_DB};
use crate::app::{App, SetOutcome};
use crate::client::kill::KillReason;
use crate::client::registry::ClientEntry;
use crate::error::sqlstate;
use crate::lifecycle::Phase;
use crate::pool::Pool;
use crate::server::log::reason;
use crate::targets;

/// How often PAUSE / SUSPEND / WAIT_CLOSE re-check their condition.
const POLL: Duration = Duration::from_millis(20);

/// The pools a command applies to: one database, or every pool.
fn scope(app: &App, db: Option<&str>) -> Vec<Arc<Pool>> {
    app.pools
        .all()
        .into_iter()
        .filter(|p| db.is_none_or(|d| p.key.database == d))
        .collect()
}

fn known_db(app: &App, db: &str) -> Result<(), AdminError> {
    let cfg = app.config();
    if targets::find_database(&cfg, db).is_some() || !scope(app, Some(db)).is_empty() {
        Ok(())
    } else {
        Err(AdminError::new(format!("no such database: {db}")))
    }
}

/// ENABLE / DISABLE without a database: PgBouncer's words.
fn need_db(arg: Option<&str>) -> Result<String, AdminError> {
    arg.map(str::to_string)
        .ok_or_else(|| AdminError::new("a database is required"))
}

/// An argument to a command that takes none is, for PgBouncer, a command it does not have.
fn no_arg(arg: Option<&str>, cmd: &str) -> Result<(), AdminError> {
    match arg {
        None => Ok(()),
        Some(a) => Err(AdminError::unknown_command(&format!("{cmd} {a}"))),
    }
}

/// SET key = value: reloadable `[pgbouncer]`/`[sluice]` keys apply at once; others are ignored.
/// Some(reason): stored, but TLS could not be rebuilt with it and stays as it was.
pub fn set(app: &App, key: &str, value: &str) -> Result<Option<String>, AdminError> {
    match app.set_setting(key, value) {
        Ok(SetOutcome::Applied) => Ok(None),
        Ok(SetOutcome::Ignored) => {
            tracing::info!("SET {key}: not changeable at runtime, ignored");
            Ok(None)
        }
        Ok(SetOutcome::TlsKept(reason)) => Ok(Some(reason)),
        Err(SetError::UnknownKey) => {
            Err(AdminError::new(format!("unknown config parameter: {key}")))
        }
        Err(SetError::BadValue(e)) => Err(AdminError::new(format!("invalid value for {key}: {e}"))),
    }
}

/// PAUSE without waiting: freeze the pools and close their idle servers (also SIGUSR1).
pub fn pause_all(app: &App) -> Result<(), AdminError> {
    app.control
        .pause_all()
        .map_err(|e| AdminError::new(e.to_string()))?;
    for p in scope(app, None) {
        p.set_paused(true);
        p.close_idle(reason::PAUSE_MODE);
    }
    tracing::info!("PAUSE: pooler paused");
    Ok(())
}

/// RESUME (all) (also SIGUSR2).
pub fn resume_all(app: &App) -> Result<(), AdminError> {
    if !app.lifecycle.is_running() {
        return Err(AdminError::new("pooler is shutting down"));
    }
    app.control
        .resume_all()
        .map_err(|e| AdminError::new(e.to_string()))?;
    for p in scope(app, None) {
        if !app.control.db_paused(&p.key.database) {
            p.set_paused(false);
        }
    }
    tracing::info!("RESUME: pooler resumed");
    Ok(())
}

/// Wait until no server of `pools` is in use (PAUSE returns then).
async fn wait_released(pools: &[Arc<Pool>]) {
    loop {
        if pools.iter().all(|p| {
            let c = p.counts();
            c.active == 0 && c.connecting == 0
        }) {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn pause(app: &App, db: Option<&str>) -> Result<(), AdminError> {
    match db {
        None => {
            pause_all(app)?;
            wait_released(&scope(app, None)).await;
        }
        Some(d) => {
            if d == ADMIN_DB {
                return Err(AdminError::new("cannot pause admin db"));
            }
            known_db(app, d)?;
            app.control
                .pause_db(d)
                .map_err(|e| AdminError::new(e.to_string()))?;
            let pools = scope(app, Some(d));
            for p in &pools {
                p.set_paused(true);
                p.close_idle(reason::PAUSE_MODE);
            }
            wait_released(&pools).await;
        }
    }
    Ok(())
}

/// Clients SUSPEND still waits for: all but the admin consoles, that have not parked (stopped
/// reading with nothing buffered). Clients still logging in count: they park once logged in.
fn unparked(app: &App) -> Vec<Arc<ClientEntry>> {
    let clients = app
        .registry
        .all()
        .into_iter()
        .filter(|c| c.identity.get().is_none_or(|(db, _)| db != ADMIN_DB))
        .collect();
    app.control.gate().unparked(clients, |c| c.id)
}

/// SUSPEND: close the gate, then return once every client has parked; after suspend_timeout the
/// laggards are disconnected ("suspend_timeout"). The pools keep serving meanwhile, so a client
/// that already sent a request gets it through and parks afterwards.
async fn suspend(app: &App, state: &mut ConsoleState) -> Result<(), AdminError> {
    app.control
        .suspend()
        .map_err(|e| AdminError::new(e.to_string()))?;
    state.suspended_here = true;
    // Clients blocked reading would not look at the gate before their peer sends something.
    for c in app.registry.all() {
        c.kill.nudge();
    }
    let limit = app.config().settings.suspend_timeout.as_duration();
    let started = tokio::time::Instant::now();
    let mut forced = false;
    loop {
        if !app.control.is_suspended() {
            return Err(AdminError::new(
                "pooler was resumed before SUSPEND completed",
            ));
        }
        let laggards = unparked(app);
        if laggards.is_empty() {
            break;
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            if !forced {
                tracing::info!(
                    "SUSPEND: suspend_timeout reached, closing {} client(s) that did not stop",
                    laggards.len()
                );
                forced = true;
            }
            for c in &laggards {
                c.kill.cancel_because(KillReason::SuspendTimeout);
            }
        }
        tokio::time::sleep(POLL).await;
    }
    tracing::info!("SUSPEND: all clients stopped");
    Ok(())
}

fn resume(app: &App, db: Option<&str>) -> Result<(), AdminError> {
    let Some(d) = db else {
        return resume_all(app);
    };
    if !app.lifecycle.is_running() {
        return Err(AdminError::new("pooler is shutting down"));
    }
    known_db(app, d)?;
    app.control
        .resume_db(d)
        .map_err(|e| AdminError::new(e.to_string()))?;
    if !app.control.db_paused(d) {
        for p in scope(app, Some(d)) {
            p.set_paused(false);
        }
    }
    Ok(())
}

/// KILL: drop every client and server of the scope (never the console) and leave its databases
/// paused until their own RESUME. A bare `KILL` pauses each database that has a pool, as
/// PgBouncer 1.25.2 does (one without a pool has nothing to kill), and a bare RESUME does not
/// undo it; both forms are refused while the pooler is paused or suspended.
fn kill(app: &App, db: Option<&str>) -> Result<(), AdminError> {
    if let Some(d) = db {
        if d == ADMIN_DB {
            return Err(AdminError::new("cannot kill admin db"));
        }
        known_db(app, d)?;
    }
    let pools = scope(app, db);
    let mut dbs: Vec<&str> = pools
        .iter()
        .map(|p| p.key.database.as_str())
        .filter(|d| *d != ADMIN_DB)
        .collect();
    dbs.extend(db);
    app.control
        .kill_pause(dbs)
        .map_err(|e| AdminError::new(e.to_string()))?;
    for p in &pools {
        p.set_paused(true);
        // Idle servers now, the others as their killed clients let go of them.
        p.reconnect(reason::DB_REMOVED);
    }
    for c in app.registry.all() {
        let Some((cdb, _)) = c.identity.get() else {
            continue;
        };
        if cdb != ADMIN_DB && db.is_none_or(|d| d == cdb) {
            c.kill.cancel_because(KillReason::Kill);
        }
    }
    Ok(())
}

fn kill_client(app: &App, arg: Option<&str>) -> Result<(), AdminError> {
    let id = arg
        .and_then(|a| a.parse().ok())
        .map(crate::ids::ClientId)
        .ok_or_else(|| AdminError::new("invalid client pointer supplied"))?;
    let entry = app
        .registry
        .get(id)
        .ok_or_else(|| AdminError::new("client not found"))?;
    tracing::info!("KILL_CLIENT: disconnecting client C-{id}");
    entry.kill.cancel();
    Ok(())
}

async fn wait_close(app: &App, db: Option<&str>) -> Result<(), AdminError> {
    if let Some(d) = db {
        known_db(app, d)?;
    }
    loop {
        if scope(app, db).iter().all(|p| p.close_needed_count() == 0) {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The console's commands other than SHOW and SET (lower-case), the ones `run` knows.
pub const COMMANDS: &[&str] = &[
    "reload",
    "pause",
    "resume",
    "suspend",
    "disable",
    "enable",
    "reconnect",
    "kill",
    "kill_client",
    "shutdown",
    "wait_close",
];

/// PgBouncer's `<COMMAND> ['<database>'] command issued` line, logged before the command is
/// checked (a refused one is logged too, its error after it), as operators' audit greps expect.
/// KILL_CLIENT logs its own line once the client is found; a DISABLE or ENABLE without a database
/// is refused first.
fn log_issued(cmd: &str, arg: Option<&str>) {
    let upper = cmd.to_ascii_uppercase();
    match (cmd, arg) {
        ("kill_client", _) | ("disable" | "enable", None) => {}
        ("shutdown", Some(mode)) => {
            tracing::info!("SHUTDOWN {} command issued", mode.to_ascii_uppercase())
        }
        ("reload" | "suspend", _) | (_, None) => tracing::info!("{upper} command issued"),
        (_, Some(db)) => tracing::info!("{upper} '{db}' command issued"),
    }
}

/// Run a non-SHOW command; returns its CommandComplete tag.
pub async fn run(
    app: &Arc<App>,
    cmd: &str,
    arg: Option<&str>,
    state: &mut ConsoleState,
) -> Result<&'static str, AdminError> {
    if COMMANDS.contains(&cmd) {
        log_issued(cmd, arg);
    }
    Ok(match cmd {
        "reload" => {
            no_arg(arg, cmd)?;
            // PgBouncer's answer (F0000, the details only in the log: a config error may quote
            // the file's contents).
            app.reload().map_err(|e| {
                tracing::error!("RELOAD failed, keeping the old configuration: {e}");
                AdminError {
                    sqlstate: sqlstate::CONFIG_ERROR,
                    ..AdminError::new("RELOAD failed, see logs for additional details")
                }
            })?;
            "RELOAD"
        }
        "pause" => {
            pause(app, arg).await?;
            "PAUSE"
        }
        "resume" => {
            resume(app, arg)?;
            state.suspended_here = false;
            "RESUME"
        }
        "suspend" => {
            no_arg(arg, cmd)?;
            suspend(app, state).await?;
            "SUSPEND"
        }
        "disable" | "enable" => {
            let db = need_db(arg)?;
            if db == ADMIN_DB {
                return Err(AdminError::new("cannot disable admin db"));
            }
            known_db(app, &db)?;
            app.control.set_disabled(&db, cmd == "disable");
            if cmd == "disable" {
                "DISABLE"
            } else {
                "ENABLE"
            }
        }
        "reconnect" => {
            if let Some(d) = arg {
                known_db(app, d)?;
            }
            for p in scope(app, arg) {
                p.reconnect(reason::CONFIG_CHANGED);
            }
            "RECONNECT"
        }
        "kill" => {
            kill(app, arg)?;
            "KILL"
        }
        "kill_client" => {
            kill_client(app, arg)?;
            "KILL_CLIENT"
        }
        "shutdown" => {
            let phase = match arg.map(str::to_ascii_lowercase).as_deref() {
                None => Phase::Exit,
                Some("wait_for_servers") => Phase::WaitForServers,
                Some("wait_for_clients") => Phase::WaitForClients,
                Some(other) => {
                    return Err(AdminError::unknown_command(&format!("shutdown {other}")))
                }
            };
            app.lifecycle.request(phase);
            "SHUTDOWN"
        }
        "wait_close" => {
            wait_close(app, arg).await?;
            "WAIT_CLOSE"
        }
        other => return Err(AdminError::unknown_command(other)),
    })
}
