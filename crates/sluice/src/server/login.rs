//! Server login: answer the server's authentication request (cleartext, md5, SCRAM-SHA-256 with a
//! password or with pass-through keys, SCRAM-SHA-256-PLUS over TLS when the server offers it) and
//! collect ParameterStatus and BackendKeyData.

use bytes::BytesMut;
use rand::RngCore;
use sluice_protocol::{
    backend_tag, decode_authentication, decode_backend_key_data, decode_error_fields,
    decode_parameter_status, decode_ready_for_query, encode_password, encode_sasl_initial,
    encode_sasl_response, md5_response_from_secret, md5_secret, Authentication, ClientBinding,
    ScramClient, ScramCredential, ScramKeys, StoredSecret,
};
use tokio::io::AsyncWriteExt;

use super::{ServerConn, ServerTarget};
use crate::error::ServerError;
use crate::net::framed::{read_message, ReadError};

const SCRAM: &str = "SCRAM-SHA-256";

impl From<ReadError> for ServerError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => ServerError::Io(e),
            ReadError::Protocol(p) => ServerError::Protocol(p),
            ReadError::Closed => ServerError::Closed,
        }
    }
}

/// Run the login exchange until ReadyForQuery.
pub async fn login(
    conn: &mut ServerConn,
    target: &ServerTarget,
    keys: Option<&ScramKeys>,
    max_len: usize,
) -> Result<(), ServerError> {
    let mut scram: Option<ScramClient> = None;
    let mut out = BytesMut::with_capacity(256);
    let end_point = conn.tls.as_ref().and_then(|t| t.end_point.clone());
    loop {
        let (tag, body) = read_message(&mut conn.stream, &mut conn.rbuf, max_len).await?;
        match tag {
            backend_tag::AUTHENTICATION => {
                let auth = decode_authentication(&body)?;
                let binding = end_point.as_deref();
                answer_auth(auth, target, keys, binding, &mut scram, &mut out)?;
                if !out.is_empty() {
                    conn.stream.write_all(&out).await?;
                    out.clear();
                }
            }
            backend_tag::PARAMETER_STATUS => {
                let (k, v) = decode_parameter_status(&body)?;
                conn.params.set(k, v);
            }
            backend_tag::BACKEND_KEY_DATA => conn.backend_key = decode_backend_key_data(&body)?,
            backend_tag::READY_FOR_QUERY => {
                conn.status = decode_ready_for_query(&body)?;
                if let Some(c) = scram.as_ref().filter(|c| c.mechanism() != SCRAM) {
                    tracing::debug!("S-{}: logged in with {}", conn.id, c.mechanism());
                }
                return Ok(());
            }
            backend_tag::ERROR_RESPONSE => {
                return Err(ServerError::Login(Box::new(decode_error_fields(&body)?)))
            }
            backend_tag::NOTICE_RESPONSE | backend_tag::NEGOTIATE_PROTOCOL_VERSION => {}
            other => {
                return Err(ServerError::Unexpected(format!(
                    "message type '{}' during login",
                    other as char
                )))
            }
        }
    }
}

fn answer_auth(
    auth: Authentication<'_>,
    target: &ServerTarget,
    keys: Option<&ScramKeys>,
    end_point: Option<&[u8]>,
    scram: &mut Option<ScramClient>,
    out: &mut BytesMut,
) -> Result<(), ServerError> {
    let missing = || {
        ServerError::Auth(format!(
            "no password for user \"{}\" to log in to the server",
            target.user
        ))
    };
    match auth {
        Authentication::Ok => {}
        Authentication::CleartextPassword => match &target.secret {
            Some(StoredSecret::Plain(p)) => encode_password(p, out),
            Some(_) => {
                return Err(ServerError::WrongPasswordType(
                    "server asks for a cleartext password but only a hashed secret is known",
                ))
            }
            None => return Err(missing()),
        },
        Authentication::Md5Password { salt } => {
            let secret = match &target.secret {
                Some(StoredSecret::Plain(p)) => md5_secret(&target.user, p),
                Some(StoredSecret::Md5(s)) => s.clone(),
                Some(StoredSecret::Scram(_)) => {
                    return Err(ServerError::WrongPasswordType(
                        "server asks for md5 but the stored secret is SCRAM",
                    ))
                }
                None => return Err(missing()),
            };
            encode_password(&md5_response_from_secret(&secret, salt), out);
        }
        Authentication::Sasl { mechanisms } => {
            if !mechanisms.contains(&SCRAM) {
                return Err(ServerError::Auth(format!(
                    "server offers no supported SASL mechanism ({})",
                    mechanisms.join(", ")
                )));
            }
            let credential = match (&target.secret, keys) {
                (Some(StoredSecret::Plain(p)), _) => ScramCredential::Password(p.clone()),
                (Some(StoredSecret::Scram(_)), Some(k)) => ScramCredential::Keys(k.clone()),
                (Some(StoredSecret::Scram(_)), None) => return Err(ServerError::WrongPasswordType(
                    "password is SCRAM secret but client authentication did not provide SCRAM keys",
                )),
                (Some(StoredSecret::Md5(_)), _) => {
                    return Err(ServerError::WrongPasswordType(
                        "server asks for SCRAM but the stored secret is md5",
                    ))
                }
                (None, _) => return Err(missing()),
            };
            let mut nonce = [0u8; 18];
            rand::thread_rng().fill_bytes(&mut nonce);
            let client = ScramClient::new(credential, nonce)
                .with_binding(ClientBinding::choose(&mechanisms, end_point));
            encode_sasl_initial(client.mechanism(), &client.client_first(), out);
            *scram = Some(client);
        }
        Authentication::SaslContinue(data) => {
            let client = scram
                .as_mut()
                .ok_or_else(|| ServerError::Unexpected("SASLContinue without SASL".into()))?;
            let reply = client.handle_server_first(data)?;
            encode_sasl_response(&reply, out);
        }
        Authentication::SaslFinal(data) => {
            let client = scram
                .as_mut()
                .ok_or_else(|| ServerError::Unexpected("SASLFinal without SASL".into()))?;
            client.handle_server_final(data)?;
        }
        Authentication::Other(code) => {
            return Err(ServerError::Auth(format!(
                "unsupported server authentication method {code}"
            )))
        }
    }
    Ok(())
}
