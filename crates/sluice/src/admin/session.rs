//! An admin console connection: who may log in (admin_users, stats_users, or `pgbouncer` from our
//! own OS user over the Unix socket), the welcome, and the simple-query loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use sluice_protocol::{
    encode_backend_key_data, encode_error, encode_parameter_status, encode_ready_for_query,
    frontend_tag, Severity, TransactionStatus,
};
use tokio::io::AsyncReadExt;

use super::{execute, parse, Access, ConsoleState, ADMIN_DB, ADMIN_USER, PGBOUNCER_COMPAT};
use crate::app::App;
use crate::auth::exchange::{authenticate, AuthRequest};
use crate::client::limits::Admitted;
use crate::client::registry::{ClientEntry, ClientState};
use crate::client::startup::StartupInfo;
use crate::conn::{ClientConn, EndReason};
use crate::error::{sqlstate, ClientNotice};
use crate::net::framed::{read_message, ReadError};
use crate::net::Stream;
use crate::stats::PoolStats;
use crate::targets;

/// Largest console query accepted.
const MAX_QUERY: usize = 64 * 1024;

fn refuse(message: &str) -> EndReason {
    EndReason::Error(ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, message))
}

/// The peer of a Unix socket runs as the same OS user as this process.
fn same_os_user(stream: &Stream) -> bool {
    match stream {
        Stream::Unix(s) => s
            .peer_cred()
            .is_ok_and(|c| c.uid() == nix::unistd::getuid().as_raw()),
        _ => false,
    }
}

/// A console client that logged in: its access, and its place in the client counts.
pub struct ConsoleLogin {
    pub access: Access,
    _admitted: Admitted,
}

/// Authenticate a console user, count it under max_db_client_connections and
/// max_user_client_connections, and decide its access, in PgBouncer's order (its limits come
/// before admin_users/stats_users are looked at; Sluice authenticates first, as for pool logins).
/// AuthenticationOk is queued on success.
pub async fn login(
    app: &Arc<App>,
    client: &mut ClientConn,
    info: &StartupInfo,
) -> Result<ConsoleLogin, EndReason> {
    let own_user = info.user == ADMIN_USER && same_os_user(&client.stream);
    let role = if own_user {
        sluice_protocol::encode_auth_ok(&mut client.wbuf);
        Some(Access::Admin)
    } else {
        // Authenticated as any client (the global auth_user's auth_query where the auth file
        // does not list the user); with auth_type=any the lists alone decide.
        let req = AuthRequest {
            user: &info.user,
            database: &info.database,
            db: None,
            physical_replication: false,
        };
        authenticate(app, client, &req).await?;
        let cfg = app.config();
        let listed = |l: &[String]| l.iter().any(|u| u == &info.user);
        if listed(&cfg.settings.admin_users) {
            Some(Access::Admin)
        } else if listed(&cfg.settings.stats_users) {
            Some(Access::Stats)
        } else {
            None
        }
    };
    let admitted = admit(app, &info.user, own_user)?;
    let Some(access) = role else {
        tracing::warn!(
            "C-{}: {} admin console login refused for user {}",
            client.id,
            client.label(),
            info.user
        );
        return Err(refuse("not allowed"));
    };
    Ok(ConsoleLogin {
        access,
        _admitted: admitted,
    })
}

/// The console's clients count as the `pgbouncer` database's (the global max_db_client_connections,
/// the console having no [databases] entry) and their user's, as PgBouncer counts them. Users in
/// admin_users pass either limit; `pgbouncer` from our own OS user is held to the database's only
/// (PgBouncer checks no user limit on that path).
fn admit(app: &Arc<App>, user: &str, own_user: bool) -> Result<Admitted, EndReason> {
    let cfg = app.config();
    let exempt = cfg.settings.admin_users.iter().any(|u| u == user);
    let (db_limit, user_limit) = match (exempt, own_user) {
        (true, _) => (0, 0),
        (false, true) => (cfg.settings.max_db_client_connections, 0),
        (false, false) => (
            cfg.settings.max_db_client_connections,
            targets::user_client_limit(&cfg, user),
        ),
    };
    app.client_counts
        .admit(ADMIN_DB, user, db_limit as usize, user_limit as usize)
        .map_err(|r| refuse(r.message()))
}

/// Counts a logged-in console client while it lives.
struct ConsoleMember(Arc<App>);

impl Drop for ConsoleMember {
    fn drop(&mut self) {
        self.0.admin_clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Welcome the console client and serve its queries until it leaves.
pub async fn run(
    app: &Arc<App>,
    client: &mut ClientConn,
    info: &StartupInfo,
    access: Access,
    entry: &Arc<ClientEntry>,
) -> EndReason {
    let version = format!("{PGBOUNCER_COMPAT}/bouncer");
    for (k, v) in [
        ("server_version", version.as_str()),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("TimeZone", "GMT"),
        ("standard_conforming_strings", "on"),
        ("is_superuser", "on"),
    ] {
        encode_parameter_status(k, v, &mut client.wbuf);
    }
    let cancel = app.cancels.register(app.config().settings.peer_id);
    encode_backend_key_data(cancel.key, &mut client.wbuf);
    encode_ready_for_query(TransactionStatus::Idle, &mut client.wbuf);
    if client.flush().await.is_err() {
        return EndReason::ClientEof;
    }
    app.admin_clients.fetch_add(1, Ordering::AcqRel);
    let _member = ConsoleMember(app.clone());
    // PgBouncer 1.25's console row in SHOW STATS: one query and one transaction per console login
    // (whatever it then runs), no bytes, no times.
    for c in [
        &app.admin_stats.client_logins,
        &app.admin_stats.query_count,
        &app.admin_stats.xact_count,
    ] {
        PoolStats::add(c, 1);
    }
    let _ = entry
        .identity
        .set((ADMIN_DB.to_string(), info.user.clone()));
    if app.config().settings.application_name_add_host {
        let named =
            crate::client::login::name_with_host(info.params.get("application_name"), &client.peer);
        entry.application_name.publish_str(&named);
    } else if let Some(a) = info.params.get("application_name") {
        entry.application_name.publish_str(a);
    }
    // Linked to no server: `idle` in SHOW CLIENTS, as PgBouncer's console clients are.
    entry.set_state(ClientState::Idle);
    let mut state = ConsoleState::default();
    let end = serve(app, client, access, entry, &mut state).await;
    // The console that issued SUSPEND is the only way back in (the listeners are suspended).
    if state.suspended_here && app.control.is_suspended() && super::control::resume_all(app).is_ok()
    {
        tracing::info!("admin disappeared when suspended, doing RESUME");
    }
    end
}

/// Completes when the console's peer closes or its socket fails. What it sends meanwhile (a
/// pipelined query) stays in `rbuf` for the query loop; past MAX_QUERY it is no longer read.
async fn peer_gone(stream: &mut Stream, rbuf: &mut BytesMut) {
    while rbuf.len() <= MAX_QUERY {
        if rbuf.capacity() - rbuf.len() < 512 {
            rbuf.reserve(4096);
        }
        match stream.read_buf(rbuf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
    std::future::pending().await
}

async fn serve(
    app: &Arc<App>,
    client: &mut ClientConn,
    access: Access,
    entry: &Arc<ClientEntry>,
    state: &mut ConsoleState,
) -> EndReason {
    loop {
        let msg = tokio::select! {
            r = read_message(&mut client.stream, &mut client.rbuf, MAX_QUERY) => r,
            _ = entry.kill.cancelled() => return refuse("admin forced disconnect"),
        };
        let body = match msg {
            Ok((frontend_tag::QUERY, body)) => body,
            Ok((frontend_tag::TERMINATE, _)) => return EndReason::ClientClosed,
            Err(ReadError::Closed) => return EndReason::ClientEof,
            Ok((b'P' | b'B' | b'E' | b'D' | b'S' | b'C' | b'H' | b'F', _)) => {
                return refuse("extended query protocol not supported by admin console")
            }
            Ok((tag, _)) => {
                return refuse(&format!(
                    "unexpected message '{}' on the admin console",
                    tag as char
                ))
            }
            Err(e) => return refuse(&format!("bad packet: {e}")),
        };
        let text = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into_owned();
        let mut out = std::mem::take(&mut client.wbuf);
        let result = match parse::parse(&text) {
            // PAUSE, SUSPEND and WAIT_CLOSE wait: notice meanwhile if the console leaves. The
            // command stops waiting; a PAUSE stays in place (as in PgBouncer), a SUSPEND is undone.
            Ok(cmd) => tokio::select! {
                r = execute(app, access, cmd, state, &mut out) => r,
                _ = peer_gone(&mut client.stream, &mut client.rbuf) => {
                    tracing::info!("C-{}: {} admin console closed while its command ran", client.id, client.label());
                    return EndReason::ClientEof;
                }
                _ = entry.kill.cancelled() => return refuse("admin forced disconnect"),
            },
            Err(e) => Err(super::AdminError::new(e.to_string())),
        };
        if let Err(mut e) = result {
            if e.unknown_command {
                // PgBouncer's words quote the query as it was typed.
                e.message = parse::ParseError(text).to_string();
            }
            // PgBouncer logs a console error twice: the error, then the client's `pooler error`.
            tracing::error!("{}", e.message);
            if app.config().settings.log_pooler_errors {
                tracing::warn!(
                    "C-{}: {} pooler error: {}",
                    client.id,
                    client.label(),
                    e.message
                );
            }
            encode_error(
                Severity::Error,
                e.sqlstate,
                &e.message,
                None,
                None,
                &mut out,
            );
        }
        encode_ready_for_query(TransactionStatus::Idle, &mut out);
        client.wbuf = out;
        if client.flush().await.is_err() {
            return EndReason::ClientEof;
        }
    }
}
