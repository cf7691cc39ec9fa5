//! Client authentication: trust, any, plain, md5 (SCRAM when the secret is SCRAM), scram-sha-256
//! (-PLUS over TLS), cert (`cert.rs`) and hba (the method per connection comes from `hba_check.rs`). Secrets come from auth_file, else
//! from auth_query (`crate::auth::query`). Unknown users go through a mock exchange and fail exactly
//! like a wrong password, so user names cannot be probed. Failed logins are logged with the client
//! address (never a secret) and counted (`sluice_client_login_failures_total`).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::RngCore;
use sluice_config::{AuthType, DatabaseEntry};
use sluice_protocol::{
    constant_time_eq, decode_password, decode_sasl_initial, encode_auth_cleartext, encode_auth_md5,
    encode_auth_ok, encode_auth_sasl, encode_auth_sasl_continue, encode_auth_sasl_final,
    frontend_tag, md5_secret, md5_verify, ScramKeys, ScramSecret, ScramServer, StoredSecret,
};

use super::hba_check::{hba_method, refuse, Exchange, Method};
use super::query::{self, AuthScope, Lookup};
use crate::admin::ADMIN_DB;
use crate::app::App;
use crate::conn::{ClientConn, EndReason};
use crate::error::{sqlstate, ClientNotice};

/// Password messages are bounded (PgBouncer's MAX_PASSWORD plus framing).
const MAX_AUTH_MESSAGE: usize = 65_536 + 512;

/// Who is logging in, to what.
#[derive(Debug, Clone, Copy)]
pub struct AuthRequest<'a> {
    pub user: &'a str,
    /// The database name the client asked for (hba rules match it).
    pub database: &'a str,
    /// Its [databases] entry; None for the admin console (the global auth_user applies) or an
    /// unknown database (no auth_query).
    pub db: Option<&'a DatabaseEntry>,
    /// `replication=true`: hba rules match it by their `replication` keyword only.
    pub physical_replication: bool,
}

/// A verified client.
#[derive(Debug, Default)]
pub struct Authenticated {
    /// The user's stored secret, used to log in to the server as that user.
    pub secret: Option<StoredSecret>,
    /// Recovered by a SCRAM exchange against a stored SCRAM secret: enables SCRAM pass-through.
    pub scram_keys: Option<ScramKeys>,
    /// The secret came from auth_query (the pool's server login follows it when it changes).
    pub from_auth_query: bool,
}

/// A failed password check, in PgBouncer's words and SQLSTATE (08P01, no user name: the same for a
/// wrong password and an unknown user). The log line has the user.
fn auth_failed(_user: &str) -> EndReason {
    EndReason::Error(ClientNotice::new(
        sqlstate::PROTOCOL_VIOLATION,
        "password authentication failed",
    ))
}

/// A failed SCRAM exchange, as PgBouncer answers it.
fn sasl_failed() -> EndReason {
    EndReason::Error(ClientNotice::new(
        sqlstate::PROTOCOL_VIOLATION,
        "SASL authentication failed",
    ))
}

/// A failed authentication: what ends the client, plus a more precise reason for the log.
struct Failure {
    end: EndReason,
    detail: Option<String>,
}

impl From<EndReason> for Failure {
    fn from(end: EndReason) -> Self {
        Failure { end, detail: None }
    }
}

/// Authenticate the client. AuthenticationOk is queued in `client.wbuf` on success (not yet flushed).
pub async fn authenticate(
    app: &Arc<App>,
    client: &mut ClientConn,
    req: &AuthRequest<'_>,
) -> Result<Authenticated, EndReason> {
    let auth_type = app.config().settings.auth_type;
    let method: Method = match auth_type {
        AuthType::Any => Ok(Exchange::Any),
        AuthType::Trust => Ok(Exchange::Trust),
        AuthType::Plain => Ok(Exchange::Plain),
        AuthType::Md5 => Ok(Exchange::Md5),
        AuthType::ScramSha256 => Ok(Exchange::Scram),
        AuthType::Hba => hba_method(
            app,
            client,
            req.user,
            req.database,
            req.physical_replication,
        ),
        AuthType::Cert => super::cert::method(client, req.user),
        other => refuse(
            ClientNotice::new(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("auth_type {other} is not supported by Sluice yet"),
            ),
            format!("auth_type {other} is not supported"),
        ),
    };
    let outcome = match method {
        Ok(exchange) => run(app, client, req, exchange).await,
        Err(r) => Err(Failure {
            end: EndReason::Error(r.notice),
            detail: Some(r.why),
        }),
    };
    match outcome {
        Ok(a) => {
            encode_auth_ok(&mut client.wbuf);
            Ok(a)
        }
        Err(f) => {
            if let EndReason::Error(n) = &f.end {
                app.login_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "C-{}: {} login failed: {}",
                    client.id,
                    client.label(),
                    f.detail.as_deref().unwrap_or(&n.message)
                );
            }
            Err(f.end)
        }
    }
}

async fn run(
    app: &Arc<App>,
    client: &mut ClientConn,
    req: &AuthRequest<'_>,
    method: Exchange,
) -> Result<Authenticated, Failure> {
    let user = req.user;
    if let Exchange::Any = method {
        return Ok(Authenticated {
            secret: app.credentials.lookup(user),
            ..Authenticated::default()
        });
    }
    let (secret, from_auth_query) = match find_secret(app, req).await? {
        Found::User {
            secret,
            from_auth_query,
        } => (Some(secret), from_auth_query),
        Found::Unknown { asked_auth_query } => (None, asked_auth_query),
    };
    let known = |secret: Option<StoredSecret>| Authenticated {
        secret,
        scram_keys: None,
        from_auth_query,
    };
    // `secret`: None = no such user; Some(None) = a user without a usable secret (auth_query's
    // NULL or empty one), whom only trust (and peer/cert) let in.
    let mut done = match method {
        Exchange::Trust => match secret {
            Some(s) => Ok(known(s)),
            // PgBouncer's words when auth_query has no row for the user. Harmless under trust: a
            // user that exists logs in with no secret at all, so the text tells nothing more.
            None if from_auth_query => Err(EndReason::Error(ClientNotice::new(
                sqlstate::PROTOCOL_VIOLATION,
                "no such user",
            ))),
            // PgBouncer's words for a trust login of a user the auth file does not list.
            None => Err(EndReason::Error(ClientNotice::new(
                sqlstate::PROTOCOL_VIOLATION,
                "\"trust\" authentication failed",
            ))),
        },
        Exchange::Identified(how) => match secret {
            Some(s) => Ok(known(s)),
            // PgBouncer refuses peer/cert logins of users it does not know.
            None => Err(EndReason::Error(ClientNotice::new(
                sqlstate::INVALID_AUTHORIZATION,
                format!("{how} authentication failed for user \"{user}\""),
            ))),
        },
        Exchange::Plain => plain(app, client, user, secret.flatten().as_ref()).await,
        Exchange::Md5 => match secret.flatten() {
            Some(StoredSecret::Scram(s)) => Box::pin(scram(app, client, user, Some(s), true)).await,
            other => md5(client, user, other.as_ref())
                .await
                .map(|()| known(other)),
        },
        Exchange::Scram => match secret.flatten() {
            Some(StoredSecret::Scram(s)) => Box::pin(scram(app, client, user, Some(s), true)).await,
            Some(StoredSecret::Plain(p)) => {
                let iterations = app.config().settings.scram_iterations;
                let adhoc = app
                    .scram_cache
                    .adhoc(user, &p, iterations, &app.mock_key)
                    .await;
                Box::pin(scram(app, client, user, Some(adhoc), false))
                    .await
                    .map(|_| known(Some(StoredSecret::Plain(p))))
            }
            // md5 secrets cannot verify SCRAM; run the mock so the failure looks like any other
            // to the client, and tell the operator why (PgBouncer logs "user has MD5 secret").
            Some(StoredSecret::Md5(_)) => {
                let end = Box::pin(scram(app, client, user, None, false))
                    .await
                    .err()
                    .unwrap_or_else(sasl_failed);
                return Err(Failure {
                    detail: matches!(end, EndReason::Error(_)).then(|| {
                        "SCRAM authentication failed: the user's stored secret is md5, which \
                         cannot verify SCRAM-SHA-256 (store a SCRAM or plaintext secret, or \
                         let md5 lines serve the user)"
                            .to_string()
                    }),
                    end,
                });
            }
            None => Box::pin(scram(app, client, user, None, false)).await,
        },
        Exchange::Any => Err(auth_failed(user)),
    }?;
    done.from_auth_query = from_auth_query;
    Ok(done)
}

/// Whether the login of `user` to `database` (a pool database) cannot find the user at all: an
/// auth_type that needs it, not in the auth file, and no auth_query that could know it. PgBouncer
/// logs such a client as `(nodb)/(nouser)` ... `no such user: <user>` before its login attempt,
/// and then as `(nodb)/<user>`; the client's answer is the one for a wrong password all the same.
pub fn unknown_user(app: &App, cfg: &sluice_config::Config, user: &str, database: &str) -> bool {
    if cfg.settings.auth_type == AuthType::Any || app.credentials.contains(user) {
        return false;
    }
    match crate::targets::find_database(cfg, database) {
        Some(db) => AuthScope::of(cfg, &db, database).is_none(),
        None => true,
    }
}

/// What the auth file and auth_query know of a user.
enum Found {
    /// The user exists; `secret` None = auth_query's row has no usable secret.
    User {
        secret: Option<StoredSecret>,
        from_auth_query: bool,
    },
    /// Neither knows the user (`asked_auth_query`: auth_query ran and had no row).
    Unknown { asked_auth_query: bool },
}

/// The user's secret: auth_file first, then auth_query when an auth_user applies (the console's
/// is the global one). A failing auth_query fails the login with its reason (the same for every
/// user name).
async fn find_secret(app: &Arc<App>, req: &AuthRequest<'_>) -> Result<Found, Failure> {
    if let Some(s) = app.credentials.lookup(req.user) {
        return Ok(Found::User {
            secret: Some(s),
            from_auth_query: false,
        });
    }
    let scope = {
        let cfg = app.config();
        match req.db {
            Some(db) => AuthScope::of(&cfg, db, req.database),
            // The console has no [databases] entry (an unknown database has none either).
            None if req.database == ADMIN_DB => AuthScope::console(&cfg),
            None => None,
        }
    };
    let Some(scope) = scope else {
        return Ok(Found::Unknown {
            asked_auth_query: false,
        });
    };
    // Boxed, as the SCRAM exchange: a login holds the largest of its steps' states while it
    // waits for its client, and these rarer steps would size every md5 login for them.
    match Box::pin(query::lookup(app, &scope, req.user)).await {
        Ok(Lookup::Found(secret)) => Ok(Found::User {
            secret,
            from_auth_query: true,
        }),
        Ok(Lookup::NoSuchUser) => Ok(Found::Unknown {
            asked_auth_query: true,
        }),
        Err(e) => Err(Failure {
            end: EndReason::Error(e.client_notice()),
            detail: Some(e.to_string()),
        }),
    }
}

/// Send what is queued and read the client's next authentication message ('p').
async fn exchange(client: &mut ClientConn) -> Result<bytes::BytesMut, EndReason> {
    // A client that leaves at a password request (psql's first connection, when it has to ask
    // for one) is not logged, as by PgBouncer.
    client.flush().await.map_err(|_| EndReason::NoSession)?;
    let read = crate::net::framed::read_message_when_ready(
        &mut client.stream,
        &mut client.rbuf,
        MAX_AUTH_MESSAGE,
        crate::conn::CLIENT_READ_CHUNK,
        Some(frontend_tag::PASSWORD),
    );
    match read.await {
        Ok((frontend_tag::PASSWORD, body)) => Ok(body),
        Ok((tag, _)) => Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!("expected password message, got '{}'", tag.escape_ascii()),
        ))),
        Err(crate::net::framed::ReadError::Closed) => Err(EndReason::NoSession),
        Err(e) => Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!("bad auth packet: {e}"),
        ))),
    }
}

async fn plain(
    app: &App,
    client: &mut ClientConn,
    user: &str,
    secret: Option<&StoredSecret>,
) -> Result<Authenticated, EndReason> {
    encode_auth_cleartext(&mut client.wbuf);
    let body = exchange(client).await?;
    let password = decode_password(&body).map_err(|_| auth_failed(user))?;
    if password.is_empty() {
        // PgBouncer's answer, the same for every user name.
        return Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            "empty password returned by client",
        )));
    }
    let ok = match secret {
        Some(StoredSecret::Plain(p)) => constant_time_eq(p.as_bytes(), password.as_bytes()),
        Some(StoredSecret::Md5(m)) => {
            constant_time_eq(m.as_bytes(), md5_secret(user, password).as_bytes())
        }
        // Only a right password is cached: wrong ones neither grow the cache nor displace others.
        Some(StoredSecret::Scram(s)) => app.scram_cache.verify(user, password, s).await,
        None => false,
    };
    if !ok {
        return Err(auth_failed(user));
    }
    // A verified cleartext password logs in to any server method.
    Ok(Authenticated {
        secret: Some(StoredSecret::Plain(password.to_string())),
        ..Authenticated::default()
    })
}

/// An md5 exchange against `secret` (borrowed: the caller keeps it for the login).
async fn md5(
    client: &mut ClientConn,
    user: &str,
    secret: Option<&StoredSecret>,
) -> Result<(), EndReason> {
    let mut salt = [0u8; 4];
    rand::thread_rng().fill_bytes(&mut salt);
    encode_auth_md5(salt, &mut client.wbuf);
    let body = exchange(client).await?;
    let response = decode_password(&body).map_err(|_| auth_failed(user))?;
    let stored = match secret {
        Some(StoredSecret::Plain(p)) if !p.is_empty() => Some(Cow::Owned(md5_secret(user, p))),
        Some(StoredSecret::Md5(m)) => Some(Cow::Borrowed(m.as_str())),
        _ => None,
    };
    match stored {
        Some(m) if md5_verify(&m, salt, response) => Ok(()),
        _ => Err(auth_failed(user)),
    }
}

/// SCRAM-SHA-256 exchange. `secret` None = mock exchange for an unknown user (always fails).
/// `passthrough` = the secret is the stored one, so the recovered keys can log in to the server.
async fn scram(
    app: &Arc<App>,
    client: &mut ClientConn,
    user: &str,
    secret: Option<ScramSecret>,
    passthrough: bool,
) -> Result<Authenticated, EndReason> {
    let real = secret.is_some();
    let iterations = app.config().settings.scram_iterations;
    let secret = secret.unwrap_or_else(|| ScramSecret::mock(user, &app.mock_key, iterations));
    let mut nonce = [0u8; 18];
    rand::thread_rng().fill_bytes(&mut nonce);
    let mut server = ScramServer::new(secret.clone(), nonce);
    // Over TLS, SCRAM-SHA-256-PLUS is offered, bound to our certificate (tls-server-end-point).
    if let Some(end_point) = client.tls.as_ref().and_then(|t| t.channel_binding.clone()) {
        server = server.with_channel_binding(end_point);
    }
    encode_auth_sasl(server.mechanisms(), &mut client.wbuf);
    let body = exchange(client).await?;
    let initial = decode_sasl_initial(&body).map_err(|_| sasl_failed())?;
    if server.select_mechanism(initial.mechanism).is_err() {
        return Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            "client selected an invalid SASL authentication mechanism",
        )));
    }
    let first = server
        .handle_client_first(initial.data)
        .map_err(|_| sasl_failed())?;
    encode_auth_sasl_continue(&first, &mut client.wbuf);
    let body = exchange(client).await?;
    let (final_msg, keys) = server
        .handle_client_final(&body)
        .map_err(|_| sasl_failed())?;
    if !real {
        return Err(sasl_failed());
    }
    encode_auth_sasl_final(&final_msg, &mut client.wbuf);
    Ok(Authenticated {
        secret: Some(StoredSecret::Scram(secret)),
        scram_keys: passthrough.then_some(keys),
        from_auth_query: false,
    })
}
