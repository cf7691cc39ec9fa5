//! A session between transactions as the takeover carries it: `capture` in the old process,
//! `adopt` in the new one (a login without authentication: the old process authenticated the
//! client, and only a process of the same user can reach the takeover socket).

use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::BytesMut;
use sluice_protocol::CancelKey;

use super::codec::{ClientState, StatementState};
use crate::app::App;
use crate::client::guard::ClientGuard;
use crate::client::join::{join_pool, SessionStart};
use crate::client::registry::Registration;
use crate::client::session::Session;
use crate::conn::ClientConn;
use crate::net::{PeerAddr, Stream};
use crate::prepared::ClientStatements;
use crate::server::params::ParamMap;
use crate::session_state::tracker::SessionTracker;
use crate::targets;

/// What the old process sends of a client linked to no server (`give::hand_over`).
pub fn capture(client: &ClientConn, s: &Session) -> ClientState {
    let (database, user) = s.entry.identity.get().cloned().unwrap_or_default();
    ClientState {
        id: client.id.0,
        peer: client.peer.clone(),
        local_addr: s.entry.local_addr.get().copied(),
        database,
        user,
        params: s
            .params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        tracked_sets: s.tracker.tracked_sets().to_vec(),
        statements: s
            .statements
            .iter()
            .map(|(name, st)| StatementState {
                name: name.to_string(),
                query: st.query().to_string(),
                param_types: st.param_types().to_vec(),
            })
            .collect(),
        cancel_key: s.cancel.key.to_bytes(),
        pending: client.rbuf.to_vec(),
        server_secret: s.pool.settings().target.secret.clone(),
        scram_keys: s.pool.scram_keys(),
    }
}

/// A client adopted by the new process, ready to run once its Ack is written.
pub struct Adopted {
    pub guard: ClientGuard,
    pub registration: Registration,
    pub session: Box<Session>,
    socket: OwnedFd,
    peer: PeerAddr,
    names: (String, String),
    pending: Vec<u8>,
}

impl Adopted {
    /// The client's connection, registered with the calling worker's IO driver.
    pub fn connect(
        self,
        app: &App,
    ) -> std::io::Result<(ClientGuard, Registration, ClientConn, Box<Session>)> {
        let stream = match &self.peer {
            PeerAddr::Tcp(_) => {
                let s = std::net::TcpStream::from(self.socket);
                s.set_nonblocking(true)?;
                Stream::Tcp(tokio::net::TcpStream::from_std(s)?)
            }
            PeerAddr::Unix { .. } => {
                let s = std::os::unix::net::UnixStream::from(self.socket);
                s.set_nonblocking(true)?;
                Stream::Unix(tokio::net::UnixStream::from_std(s)?)
            }
        };
        let mut client = ClientConn::new(
            self.registration.entry.id,
            stream,
            self.peer,
            app.control.gate().clone(),
        );
        client.names = Some(crate::conn::ClientNames::new(&self.names.0, &self.names.1));
        if !self.pending.is_empty() {
            client.rbuf = BytesMut::from(&self.pending[..]);
        }
        Ok((self.guard, self.registration, client, self.session))
    }
}

/// Take a client over: its pool (made from this process's config), its cancel key, parameters,
/// tracked SETs and prepared statements. An error says why it cannot be (it then stays with the
/// old process).
pub fn adopt(app: &Arc<App>, st: ClientState, socket: OwnedFd) -> Result<Adopted, String> {
    let cfg = app.config();
    let Some(db) = targets::find_database(&cfg, &st.database) else {
        return Err(format!(
            "no database {:?} in this process's config",
            st.database
        ));
    };
    if app.control.db_disabled(&st.database) {
        return Err(format!("database {:?} is disabled here", st.database));
    }
    let login_user = db.user.as_deref().unwrap_or(&st.user).to_string();
    let secret = match db.user {
        Some(_) => app.credentials.lookup(&login_user),
        None => st
            .server_secret
            .clone()
            .or_else(|| app.credentials.lookup(&login_user)),
    };
    // Admitted by the old process already: no limit is checked again.
    let admitted = app
        .client_counts
        .admit(&db.name, &st.user, 0, 0)
        .map_err(|r| r.message().to_string())?;
    let cancel = app
        .cancels
        .adopt(CancelKey::from_bytes(st.cancel_key))
        .ok_or("its cancel key is taken here")?;
    let member = join_pool(
        app,
        &cfg,
        &db,
        &st.database,
        &login_user,
        secret.as_ref(),
        admitted,
    );
    let pool = member.pool.clone();
    if let Some(keys) = st.scram_keys.clone().filter(|_| db.user.is_none()) {
        pool.set_scram_keys(keys);
    }
    let mut params = ParamMap::new();
    for (k, v) in &st.params {
        params.set(k, v);
    }
    if let Some(welcome) = pool.welcome() {
        params.fill_tracked_from(&app.tracked, &welcome.params);
        welcome.share(&mut params);
        welcome.mark_and_greet(&app.tracked, &mut params, &mut BytesMut::new());
    }
    let mut statements = ClientStatements::default();
    for s in &st.statements {
        statements.insert(&s.name, app.statements.intern(&s.query, &s.param_types));
    }
    let (guard, _) = ClientGuard::new(app);
    let registration = app.registry.register(app.next_client_id(), st.peer.clone());
    let entry = registration.entry.clone();
    if let Some(a) = st.local_addr {
        let _ = entry.local_addr.set(a);
    }
    let session = Session::joined(
        member,
        SessionStart {
            entry,
            params,
            statements,
            tracker: SessionTracker::restored(st.tracked_sets),
            cancel,
            identity: (st.database.clone(), st.user.clone()),
        },
    );
    Ok(Adopted {
        guard,
        registration,
        session,
        socket,
        peer: st.peer,
        names: (st.database, st.user),
        pending: st.pending,
    })
}
