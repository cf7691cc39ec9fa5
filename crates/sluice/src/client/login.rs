//! After the startup packet: find the database, authenticate, join the pool, and send the welcome
//! (ParameterStatus set, BackendKeyData with the client's own cancel key, ReadyForQuery).

use std::sync::Arc;

use sluice_config::{AuthType, Config};
use sluice_protocol::{encode_backend_key_data, encode_ready_for_query, TransactionStatus};

use super::join::{join_pool, SessionStart};
use super::limits::Admitted;
use super::registry::ClientEntry;
use super::replication;
use super::session::Session;
use super::startup::{Replication, StartupInfo};
use crate::app::App;
use crate::auth::exchange::{authenticate, AuthRequest};
use crate::conn::{ClientConn, EndReason};
use crate::error::{sqlstate, ClientNotice};
use crate::pool::Pool;
use crate::prepared::ClientStatements;
use crate::server::welcome::Welcome;
use crate::session_state::tracker::SessionTracker;
use crate::stats::PoolStats;
use crate::targets;

/// Where a pool login leads: the pool's session loop, or a replication client's own server.
/// (The session is boxed here rather than by the caller: it lives as long as the client.)
pub enum Joined {
    Pool(Box<Session>),
    Replication(Box<replication::Start>),
}

/// application_name_add_host: the client's application_name (`app` when it sent none) and its
/// address, as PgBouncer writes them; console clients show it too.
pub fn name_with_host(name: Option<&str>, peer: &crate::net::PeerAddr) -> String {
    let base = name.filter(|a| !a.is_empty()).unwrap_or("app");
    format!("{base} - {peer}")
}

/// The pool login of a client whose startup packet named a pool database: authenticate, join the
/// pool, greet. A plain fn returning an `async move` block rather than an `async fn`: an async fn's state keeps
/// a by-value argument twice (as the argument and as the local), and this state is what a login in
/// flight holds (a connection storm's peak memory).
#[allow(clippy::manual_async_fn)] // deliberate: see above
pub fn login<'a>(
    app: &'a Arc<App>,
    client: &'a mut ClientConn,
    info: StartupInfo,
    entry: Arc<ClientEntry>,
) -> impl std::future::Future<Output = Result<Joined, EndReason>> + Send + 'a {
    async move {
        let cfg = app.config();
        // In a block: what authenticating and joining the pool needed (the secrets, the db
        // entry) is dropped here, not kept in this future's state across the awaits below.
        let (pool, member) = {
            let db = targets::find_database(&cfg, &info.database);
            // Authenticate before revealing whether the database exists.
            let req = AuthRequest {
                user: &info.user,
                database: &info.database,
                db: db.as_deref(),
                physical_replication: info.replication == Replication::Physical,
            };
            let auth = authenticate(app, client, &req).await?;
            let Some(db) = db else {
                tracing::info!(
                    "C-{}: {} login failed: db={} user={}",
                    client.id,
                    client.label(),
                    info.database,
                    info.user
                );
                return Err(EndReason::Error(ClientNotice::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("no such database: {}", info.database),
                )));
            };
            if app.control.db_disabled(&info.database) {
                return Err(EndReason::Error(ClientNotice::new(
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("database \"{}\" is disabled", info.database),
                )));
            }
            if cfg.settings.auth_type == AuthType::Any && db.user.is_none() {
                return Err(EndReason::Error(ClientNotice::new(
                    sqlstate::CONFIG_ERROR,
                    "bouncer config error: auth_type=any needs a forced user in every [databases] entry",
                )));
            }
            let login_user = db.user.as_deref().unwrap_or(&info.user);
            // A forced user logs in with its auth_file secret, any other with the client's (borrowed:
            // copied only into a new pool's settings).
            let forced_secret;
            let server_secret = match db.user {
                Some(_) => {
                    forced_secret = app.credentials.lookup(login_user);
                    forced_secret.as_ref()
                }
                None => auth.secret.as_ref(),
            };
            let admitted = admit(app, &cfg, &db, &info.user)?;
            if matches!(db, targets::FoundDb::Auto(_)) && !app.pools.knows_database(&info.database)
            {
                // PgBouncer's line (it makes the database at lookup, Sluice once the client is in).
                tracing::info!(
                    "C-{}: {} registered new auto-database: {}",
                    client.id,
                    client.label(),
                    info.database
                );
            }
            let member = join_pool(
                app,
                &cfg,
                &db,
                &info.database,
                login_user,
                server_secret,
                admitted,
            );
            let pool = member.pool.clone();
            if auth.from_auth_query && db.user.is_none() {
                follow_auth_query_secret(app, &pool, &db, server_secret);
            }
            if app.control.db_paused(&info.database) && !pool.is_paused() {
                pool.set_paused(true);
            }
            if let Some(keys) = auth.scram_keys.clone().filter(|_| db.user.is_none()) {
                pool.set_scram_keys(keys);
            }
            PoolStats::add(&pool.stats.client_logins, 1);
            (pool, member)
        };
        if info.replication != replication::Replication::None {
            return Ok(Joined::Replication(Box::new(replication::Start::new(
                member, info,
            ))));
        }

        let welcome = match pool.welcome() {
            Some(w) => w,
            None => {
                // A new pool: the first server login provides the parameters every client is greeted with.
                let server = pool
                    .checkout_for_pooler()
                    .await
                    .map_err(|e| EndReason::Error(e.client_notice()))?;
                let welcome = Arc::new(Welcome::new(server.params.clone()));
                pool.give_back_unused(server);
                welcome
            }
        };
        let mut params = info.params;
        if cfg.settings.application_name_add_host {
            let named = name_with_host(params.get("application_name"), &client.peer);
            params.set("application_name", &named);
        }
        // Tracked values the servers do not report are replayed as committed SETs.
        let unreported = params.take_unreported(&app.tracked, &welcome.params);
        params.fill_tracked_from(&app.tracked, &welcome.params);
        welcome.share(&mut params);
        welcome.mark_and_greet(&app.tracked, &mut params, &mut client.wbuf);
        let cancel = app.cancels.register(cfg.settings.peer_id);
        encode_backend_key_data(cancel.key, &mut client.wbuf);
        // login_notify_message: PgBouncer 1.25's NOTICE, before ReadyForQuery.
        if !cfg.settings.login_notify_message.is_empty() {
            sluice_protocol::encode_notice(
                sluice_protocol::Severity::Notice,
                "00000",
                &cfg.settings.login_notify_message,
                &mut client.wbuf,
            );
        }
        encode_ready_for_query(TransactionStatus::Idle, &mut client.wbuf);
        client.flush().await.map_err(|_| EndReason::ClientEof)?;
        // Only errors are composed here from now on: the welcome's buffer is not kept for them.
        client.wbuf = bytes::BytesMut::new();
        Ok(Joined::Pool(Session::joined(
            member,
            SessionStart {
                entry,
                params,
                statements: ClientStatements::default(),
                tracker: SessionTracker::with_startup_values(unreported),
                cancel,
                identity: (info.database, info.user),
            },
        )))
    }
}

/// A pool of an auth_query user logs in with the secret the latest query returned (after RELOAD
/// a changed password replaces the one the pool was created with).
fn follow_auth_query_secret(
    app: &Arc<App>,
    pool: &Arc<Pool>,
    db: &sluice_config::DatabaseEntry,
    secret: Option<&sluice_protocol::StoredSecret>,
) {
    let old = pool.settings();
    if old.target.secret.as_ref() == secret {
        return;
    }
    let cfg = app.config();
    pool.update_settings(targets::pool_settings(
        &cfg,
        db,
        &pool.key.user,
        secret.cloned(),
        app.tls.load().server.clone(),
        |_| app.pools.next_generation(),
    ));
}

/// Count the client in its database's and login user's client counts, or refuse it over
/// max_db_client_connections / max_user_client_connections (a [databases] or [users] value over
/// the global one) with PgBouncer's 08P01 answer. After authentication, where PgBouncer checks
/// before: an unauthenticated client learns nothing of the database's or user's clients (a
/// deliberate difference, docs/compat.md), and one that never finishes its login holds no place.
fn admit(
    app: &Arc<App>,
    cfg: &Config,
    db: &sluice_config::DatabaseEntry,
    user: &str,
) -> Result<Admitted, EndReason> {
    let db_limit = targets::db_client_limit(cfg, db) as usize;
    let user_limit = targets::user_client_limit(cfg, user) as usize;
    app.client_counts
        .admit(&db.name, user, db_limit, user_limit)
        .map_err(|r| EndReason::Error(ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, r.message())))
}
