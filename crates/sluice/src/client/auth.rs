//! Client authentication against auth_file secrets: trust, any, plain, md5 (SCRAM when the secret is
//! SCRAM), scram-sha-256 (-PLUS over TLS), cert (`cert_auth.rs`). Unknown users go through a mock
//! exchange and fail exactly like a wrong password, so user names cannot be probed.

use std::sync::Arc;

use rand::RngCore;
use sluice_config::AuthType;
use sluice_protocol::{
    constant_time_eq, decode_password, decode_sasl_initial, encode_auth_cleartext, encode_auth_md5,
    encode_auth_ok, encode_auth_sasl, encode_auth_sasl_continue, encode_auth_sasl_final,
    frontend_tag, md5_secret, md5_verify, ScramKeys, ScramSecret, ScramServer, StoredSecret,
};

use super::{ClientConn, EndReason};
use crate::app::App;
use crate::error::{sqlstate, ClientNotice};
use crate::net::framed::read_message;

/// Password messages are bounded (PgBouncer's MAX_PASSWORD plus framing).
const MAX_AUTH_MESSAGE: usize = 65_536 + 512;

/// A verified client.
#[derive(Debug, Default)]
pub struct Authenticated {
    /// The user's stored secret, used to log in to the server as that user.
    pub secret: Option<StoredSecret>,
    /// Recovered by a SCRAM exchange against a stored SCRAM secret: enables SCRAM pass-through.
    pub scram_keys: Option<ScramKeys>,
}

fn auth_failed(user: &str) -> EndReason {
    EndReason::Error(ClientNotice::new(
        sqlstate::INVALID_PASSWORD,
        format!("password authentication failed for user \"{user}\""),
    ))
}

/// Authenticate `user`. AuthenticationOk is queued in `client.wbuf` on success (not yet flushed).
pub async fn authenticate(
    app: &Arc<App>,
    client: &mut ClientConn,
    user: &str,
) -> Result<Authenticated, EndReason> {
    let cfg = app.config();
    let secret = app.credentials.lookup(user);
    let result = match cfg.settings.auth_type {
        AuthType::Any => Ok(Authenticated {
            secret,
            scram_keys: None,
        }),
        AuthType::Trust => match secret {
            Some(s) => Ok(Authenticated {
                secret: Some(s),
                scram_keys: None,
            }),
            None => Err(auth_failed(user)),
        },
        AuthType::Plain => plain(client, user, secret).await,
        AuthType::Md5 => match secret {
            Some(StoredSecret::Scram(s)) => scram(app, client, user, Some(s), true).await,
            other => md5(client, user, other).await,
        },
        AuthType::ScramSha256 => match secret {
            Some(StoredSecret::Scram(s)) => scram(app, client, user, Some(s), true).await,
            Some(StoredSecret::Plain(p)) => {
                let adhoc = app.credentials.adhoc_scram(user, &p);
                scram(app, client, user, Some(adhoc), false)
                    .await
                    .map(|_| Authenticated {
                        secret: Some(StoredSecret::Plain(p)),
                        scram_keys: None,
                    })
            }
            // md5 secrets cannot verify SCRAM; run the mock so the failure looks like any other.
            Some(StoredSecret::Md5(_)) | None => scram(app, client, user, None, false).await,
        },
        AuthType::Cert => super::cert_auth::authenticate(client, user, secret),
        other => Err(EndReason::Error(ClientNotice::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!("auth_type {other:?} is not supported by Sluice yet"),
        ))),
    };
    match &result {
        Ok(_) => encode_auth_ok(&mut client.wbuf),
        Err(_) => tracing::warn!("C-{}: {} login failed", client.id, client.label),
    }
    result
}

/// Send what is queued and read the client's next authentication message ('p').
async fn exchange(client: &mut ClientConn) -> Result<bytes::BytesMut, EndReason> {
    client.flush().await.map_err(|_| EndReason::ClientClosed)?;
    match read_message(&mut client.stream, &mut client.rbuf, MAX_AUTH_MESSAGE).await {
        Ok((frontend_tag::PASSWORD, body)) => Ok(body),
        Ok((tag, _)) => Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!("expected password message, got '{}'", tag as char),
        ))),
        Err(crate::net::framed::ReadError::Closed) => Err(EndReason::ClientClosed),
        Err(e) => Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!("bad auth packet: {e}"),
        ))),
    }
}

async fn plain(
    client: &mut ClientConn,
    user: &str,
    secret: Option<StoredSecret>,
) -> Result<Authenticated, EndReason> {
    encode_auth_cleartext(&mut client.wbuf);
    let body = exchange(client).await?;
    let password = decode_password(&body).map_err(|_| auth_failed(user))?;
    if password.is_empty() {
        return Err(auth_failed(user));
    }
    let ok = match &secret {
        Some(StoredSecret::Plain(p)) => constant_time_eq(p.as_bytes(), password.as_bytes()),
        Some(StoredSecret::Md5(m)) => {
            constant_time_eq(m.as_bytes(), md5_secret(user, password).as_bytes())
        }
        Some(StoredSecret::Scram(s)) => {
            let derived = ScramSecret::from_password(password, &s.salt, s.iterations);
            constant_time_eq(&derived.stored_key, &s.stored_key)
                & constant_time_eq(&derived.server_key, &s.server_key)
        }
        None => false,
    };
    if !ok {
        return Err(auth_failed(user));
    }
    // A verified cleartext password logs in to any server method.
    Ok(Authenticated {
        secret: Some(StoredSecret::Plain(password.to_string())),
        scram_keys: None,
    })
}

async fn md5(
    client: &mut ClientConn,
    user: &str,
    secret: Option<StoredSecret>,
) -> Result<Authenticated, EndReason> {
    let mut salt = [0u8; 4];
    rand::thread_rng().fill_bytes(&mut salt);
    encode_auth_md5(salt, &mut client.wbuf);
    let body = exchange(client).await?;
    let response = decode_password(&body).map_err(|_| auth_failed(user))?;
    let stored = match &secret {
        Some(StoredSecret::Plain(p)) if !p.is_empty() => Some(md5_secret(user, p)),
        Some(StoredSecret::Md5(m)) => Some(m.clone()),
        _ => None,
    };
    match stored {
        Some(m) if md5_verify(&m, salt, response) => Ok(Authenticated {
            secret,
            scram_keys: None,
        }),
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
    let secret = secret.unwrap_or_else(|| ScramSecret::mock(user, &app.mock_key, 4096));
    let mut nonce = [0u8; 18];
    rand::thread_rng().fill_bytes(&mut nonce);
    let mut server = ScramServer::new(secret.clone(), nonce);
    // Over TLS, SCRAM-SHA-256-PLUS is offered, bound to our certificate (tls-server-end-point).
    if let Some(end_point) = client.tls.channel_binding.clone() {
        server = server.with_channel_binding(end_point);
    }
    encode_auth_sasl(server.mechanisms(), &mut client.wbuf);
    let body = exchange(client).await?;
    let initial = decode_sasl_initial(&body).map_err(|_| auth_failed(user))?;
    if server.select_mechanism(initial.mechanism).is_err() {
        return Err(EndReason::Error(ClientNotice::new(
            sqlstate::PROTOCOL_VIOLATION,
            "client selected an invalid SASL authentication mechanism",
        )));
    }
    let first = server
        .handle_client_first(initial.data)
        .map_err(|_| auth_failed(user))?;
    encode_auth_sasl_continue(&first, &mut client.wbuf);
    let body = exchange(client).await?;
    let (final_msg, keys) = server
        .handle_client_final(&body)
        .map_err(|_| auth_failed(user))?;
    if !real {
        return Err(auth_failed(user));
    }
    encode_auth_sasl_final(&final_msg, &mut client.wbuf);
    Ok(Authenticated {
        secret: Some(StoredSecret::Scram(secret)),
        scram_keys: passthrough.then_some(keys),
    })
}
