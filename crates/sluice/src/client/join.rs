//! Joining a pool: the one way a client becomes a member of its pool and gets its `Session`,
//! whether it logged in here (`login.rs`) or was handed over by another process
//! (`takeover::state`).

use std::sync::Arc;

use sluice_config::{Config, DatabaseEntry};
use sluice_protocol::StoredSecret;

use super::limits::Admitted;
use super::registry::ClientEntry;
use super::session::{PoolMember, Session};
use crate::app::App;
use crate::cancel::CancelHandle;
use crate::forward::RelayScratch;
use crate::pool::Pool;
use crate::prepared::ClientStatements;
use crate::server::params::ParamMap;
use crate::session_state::tracker::SessionTracker;
use crate::targets;

/// The pool of `database` for `login_user`, made with `secret` if new, with the client counted
/// in it; `admitted` is its place in the database's and user's client counts. A pool freed by
/// autodb_idle_timeout between the lookup and the count (`Pool::retire_if_unused`) is made again.
pub(crate) fn join_pool(
    app: &App,
    cfg: &Config,
    db: &DatabaseEntry,
    database: &str,
    login_user: &str,
    secret: Option<&StoredSecret>,
    admitted: Admitted,
) -> PoolMember {
    let pool = loop {
        let pool = app.pools.get_or_create(database, login_user, || {
            targets::pool_settings(
                cfg,
                db,
                login_user,
                secret.cloned(),
                app.tls.load().server.clone(),
                |_| app.pools.current_generation(),
            )
        });
        pool.client_joined();
        if !pool.is_removed() {
            break pool;
        }
        pool.client_left();
    };
    PoolMember {
        pool,
        _admitted: admitted,
    }
}

/// What a session starts from besides its pool membership.
pub struct SessionStart {
    pub entry: Arc<ClientEntry>,
    pub params: ParamMap,
    pub statements: ClientStatements,
    pub tracker: SessionTracker,
    pub cancel: CancelHandle,
    /// (database, user) as the client named them (SHOW CLIENTS).
    pub identity: (String, String),
}

impl Session {
    /// A member's session between transactions, linked to no server; its SHOW CLIENTS entry
    /// learns its application_name and identity.
    pub(crate) fn joined(member: PoolMember, start: SessionStart) -> Box<Session> {
        let SessionStart {
            entry,
            params,
            statements,
            tracker,
            cancel,
            identity,
        } = start;
        entry.application_name.publish(params.application_name());
        let _ = entry.identity.set(identity);
        let pool: Arc<Pool> = member.pool.clone();
        let route = super::route::ClientRoute::for_pool(&pool, entry.id.0);
        Box::new(Session {
            pool,
            entry,
            params,
            statements,
            tracker,
            counted_pinned: false,
            params_confirmed: false,
            last_server: 0,
            cancel,
            relay_scratch: RelayScratch::default(),
            idle_sleep: None,
            after_loss: None,
            route,
            stays_here: false,
            _member: member,
        })
    }
}
