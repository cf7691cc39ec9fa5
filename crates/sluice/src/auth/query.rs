//! auth_user / auth_query / auth_dbname (reference §5.3): secrets of users that are not in
//! auth_file, fetched from PostgreSQL.
//!
//! The query runs on a server of the pool (auth_dbname or the client's database, auth_user), with
//! auth_user's password from auth_file, as one extended-protocol round (Parse/Bind with the user
//! name as `$1`/Execute/Sync: no quoting, no tracked-parameter SETs). It must return two columns
//! (name, secret). The secret (plaintext, md5 or SCRAM verifier) verifies the client and logs in
//! to the server as that user (a SCRAM verifier through pass-through keys).
//!
//! A row whose secret is NULL or empty names a user that exists but has no usable password: no
//! password matches it (PgBouncer's "impossible md5"), but auth_type=trust (or an hba trust line)
//! lets the user in, as PgBouncer does. No row at all is `Lookup::NoSuchUser`.
//!
//! The query runs at every login of such a user, as in PgBouncer: a password changed, expired
//! (the default query's `rolvaliduntil`) or a role dropped in PostgreSQL holds from the next login
//! on. Errors fail the login as PgBouncer 1.25 fails it: a server for the
//! query is waited for up to query_wait_timeout, the query itself up to server_connect_timeout; a
//! query error, a missing auth_dbname or the console's name as auth_dbname is `bouncer config
//! error` to the client (the cause in the log), a disabled auth database is named, a refused login
//! of auth_user is the server's own answer (`tests/tests/parity/auth_query.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sluice_config::{Config, DatabaseEntry};
use sluice_protocol::{
    decode_data_row, encode_bind_text, encode_execute, encode_parse, encode_sync, StoredSecret,
};
use tokio::io::AsyncWriteExt;

use crate::admin::ADMIN_DB;
use crate::app::App;
use crate::error::{sqlstate, ClientNotice, ServerError};
use crate::pool::Pool;
use crate::server::{query, ServerConn};
use crate::targets;

/// Why an auth_query lookup failed. The text is for the log; `client_notice` is what the client
/// is told, in PgBouncer 1.25's words (a broken auth_query or auth_dbname is "bouncer config
/// error" to the client, the cause in the log only).
#[derive(Debug, thiserror::Error)]
pub enum AuthQueryError {
    #[error("authentication database \"{0}\" is not configured")]
    NoAuthDatabase(String),
    /// The admin console's name as auth_dbname (or the console itself without one): it has no
    /// PostgreSQL behind it to ask.
    #[error("cannot use the reserved \"{0}\" database as an auth_dbname")]
    ReservedAuthDatabase(String),
    #[error("authentication database \"{0}\" is disabled")]
    AuthDatabaseDisabled(String),
    #[error(
        "could not get a server connection for auth_user \"{user}\" on database \"{db}\": {}",
        .notice.message
    )]
    NoServer {
        user: String,
        db: String,
        /// What the client is told (the server's own answer where it refused auth_user's login).
        notice: Box<ClientNotice>,
    },
    #[error("error in auth_query: {0}")]
    Query(String),
}

impl AuthQueryError {
    pub fn client_notice(&self) -> ClientNotice {
        match self {
            AuthQueryError::NoAuthDatabase(_)
            | AuthQueryError::ReservedAuthDatabase(_)
            | AuthQueryError::Query(_) => {
                ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, "bouncer config error")
            }
            AuthQueryError::AuthDatabaseDisabled(_) => {
                ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, self.to_string())
            }
            AuthQueryError::NoServer { notice, .. } => (**notice).clone(),
        }
    }
}

/// Which auth_user/auth_query/auth database apply to a client's database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthScope {
    pub auth_user: String,
    pub auth_db: String,
    pub query: String,
}

impl AuthScope {
    /// None when no auth_user applies (per-database auth_user, else the global one).
    pub fn of(cfg: &Config, db: &DatabaseEntry, client_db: &str) -> Option<AuthScope> {
        let s = &cfg.settings;
        let auth_user = db
            .auth_user
            .clone()
            .or_else(|| s.auth_user.clone())
            .filter(|u| !u.is_empty())?;
        let auth_db = db
            .auth_dbname
            .clone()
            .or_else(|| s.auth_dbname.0.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| client_db.to_string());
        let query = db
            .auth_query
            .clone()
            .unwrap_or_else(|| s.auth_query.clone());
        Some(AuthScope {
            auth_user,
            auth_db,
            query,
        })
    }

    /// The admin console's scope: the global auth_user, auth_dbname and auth_query (the console
    /// has no [databases] entry). Without a global auth_dbname the auth database is the console
    /// itself, which `lookup` refuses, as PgBouncer does.
    pub fn console(cfg: &Config) -> Option<AuthScope> {
        let s = &cfg.settings;
        let auth_user = s.auth_user.clone().filter(|u| !u.is_empty())?;
        let auth_db = s
            .auth_dbname
            .0
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| ADMIN_DB.to_string());
        Some(AuthScope {
            auth_user,
            auth_db,
            query: s.auth_query.clone(),
        })
    }
}

/// What auth_query said of a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A row: the user exists. None = its secret is NULL or empty (no password can match it).
    Found(Option<StoredSecret>),
    /// No row.
    NoSuchUser,
}

/// What auth_query says of `user`, asked of the server.
pub async fn lookup(
    app: &Arc<App>,
    scope: &AuthScope,
    user: &str,
) -> Result<Lookup, AuthQueryError> {
    if scope.auth_db == ADMIN_DB {
        return Err(AuthQueryError::ReservedAuthDatabase(scope.auth_db.clone()));
    }
    // A disabled auth database serves no lookups.
    if app.control.db_disabled(&scope.auth_db) {
        return Err(AuthQueryError::AuthDatabaseDisabled(scope.auth_db.clone()));
    }
    let pool = auth_pool(app, scope)?;
    let cfg = app.config();
    let limit = cfg
        .settings
        .server_connect_timeout
        .as_duration()
        .unwrap_or(Duration::from_secs(15))
        .max(Duration::from_secs(1));
    let no_server = |notice: ClientNotice| AuthQueryError::NoServer {
        user: scope.auth_user.clone(),
        db: scope.auth_db.clone(),
        notice: Box::new(notice),
    };
    // The lookup waits for a server as a client's query does: up to query_wait_timeout, then
    // PgBouncer's `query_wait_timeout`; a refused login of auth_user reaches the client as the
    // server said it.
    let mut server = pool
        .checkout()
        .await
        .map_err(|e| no_server(e.client_notice()))?;
    let max = pool.settings().connect.max_packet_size;
    let result = tokio::time::timeout(limit, run(&mut server, &scope.query, user, max)).await;
    let found = match result {
        Ok(Ok(found)) => {
            pool.release(server, true);
            found
        }
        Ok(Err(ServerError::Query(f))) => {
            // The server is still in sync after an SQL error.
            pool.release(server, true);
            // "ERROR: column ... does not exist", as PgBouncer logs it.
            return Err(AuthQueryError::Query(if f.severity.is_empty() {
                f.message
            } else {
                format!("{}: {}", f.severity, f.message)
            }));
        }
        Ok(Err(e)) => {
            pool.discard(server);
            return Err(AuthQueryError::Query(e.to_string()));
        }
        Err(_) => {
            pool.discard(server);
            return Err(AuthQueryError::Query("timed out".to_string()));
        }
    };
    let Some(row) = found else {
        return Ok(Lookup::NoSuchUser);
    };
    Ok(Lookup::Found(
        row.filter(|s| !s.is_empty())
            .map(|s| StoredSecret::parse(&s)),
    ))
}

/// The pool auth queries run on: (auth database, auth_user), auth_user's secret from auth_file.
fn auth_pool(app: &Arc<App>, scope: &AuthScope) -> Result<Arc<Pool>, AuthQueryError> {
    let cfg = app.config();
    let mut db = targets::find_database(&cfg, &scope.auth_db)
        .map(targets::FoundDb::into_owned)
        .ok_or_else(|| AuthQueryError::NoAuthDatabase(scope.auth_db.clone()))?;
    // The auth connection logs in as auth_user even where the database forces another user.
    db.user = None;
    db.password = None;
    Ok(app
        .pools
        .get_or_create(&scope.auth_db, &scope.auth_user, || {
            targets::pool_settings(
                &cfg,
                &db,
                &scope.auth_user,
                app.credentials.lookup(&scope.auth_user),
                app.tls.load().server.clone(),
                |_| app.pools.current_generation(),
            )
        }))
}

/// One extended-protocol round of `query` with `$1` = `user`. Ok(None) = no row; Ok(Some(None))
/// = a row whose secret is NULL.
async fn run(
    conn: &mut ServerConn,
    query: &str,
    user: &str,
    max_len: usize,
) -> Result<Option<Option<String>>, ServerError> {
    let mut out = BytesMut::with_capacity(query.len() + user.len() + 64);
    encode_parse("", query, &[], &mut out);
    encode_bind_text("", "", &[Some(user.as_bytes())], &mut out);
    encode_execute("", 0, &mut out);
    encode_sync(&mut out);
    conn.stream.write_all(&out).await?;
    let mut row: Option<Option<String>> = None;
    query::drain_to_ready(conn, max_len, None, |body| {
        if row.is_some() {
            return None;
        }
        let values = match decode_data_row(body) {
            Ok(v) => v,
            Err(e) => {
                row = Some(None);
                return Some(sluice_protocol::ErrorFields {
                    message: format!("malformed auth_query row: {e}"),
                    ..Default::default()
                });
            }
        };
        if values.len() != 2 {
            row = Some(None);
            return Some(sluice_protocol::ErrorFields {
                message: format!(
                    "auth_query must return 2 columns (user, password), got {}",
                    values.len()
                ),
                ..Default::default()
            });
        }
        row = Some(
            values
                .get(1)
                .cloned()
                .flatten()
                .map(|v| String::from_utf8_lossy(v).into_owned()),
        );
        None
    })
    .await?;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        sluice_config::parse_str(text, "test.ini").unwrap()
    }

    #[test]
    fn scope_precedence() {
        let c = cfg("[databases]\n\
             a = host=h auth_user=dbuser auth_dbname=authdb auth_query='SELECT 1'\n\
             b = host=h\n\
             [pgbouncer]\nauth_user = global\n");
        let a = AuthScope::of(&c, c.database("a").unwrap(), "a").unwrap();
        assert_eq!(
            (a.auth_user.as_str(), a.auth_db.as_str(), a.query.as_str()),
            ("dbuser", "authdb", "SELECT 1")
        );
        let b = AuthScope::of(&c, c.database("b").unwrap(), "b").unwrap();
        assert_eq!(
            (b.auth_user.as_str(), b.auth_db.as_str(), b.query.as_str()),
            ("global", "b", sluice_config::AUTH_QUERY_DEFAULT)
        );
        let none = cfg("[databases]\nb = host=h\n");
        assert!(AuthScope::of(&none, none.database("b").unwrap(), "b").is_none());
    }
}
