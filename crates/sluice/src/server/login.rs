//! Server login: the IO around `login_machine` (which decides what to answer and what to refuse).
//! Messages are read with the login's own length limit; SCRAM keys of a plaintext password are
//! derived once per pool and salt (`ServerTarget::login_keys`), on the bounded authentication
//! pool (`auth::cpu`), never on the thread that relays other clients' traffic.

use bytes::BytesMut;
use sluice_protocol::{ScramKeys, ServerSalt};
use tokio::io::AsyncWriteExt;

use super::login_machine::{LoginMachine, LoginRules, Step, MAX_LOGIN_MESSAGE};
use super::{ServerConn, ServerTarget};
use crate::auth::cpu::AuthCpu;
use crate::error::{sqlstate, ServerError};
use crate::net::framed::{read_message, ReadError};

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
    rules: &LoginRules,
    cpu: &AuthCpu,
) -> Result<(), ServerError> {
    let end_point = conn.tls.as_ref().and_then(|t| t.end_point.clone());
    let mut machine = LoginMachine::new(
        &target.user,
        target.secret.clone(),
        keys.cloned(),
        end_point,
        rules.clone(),
    );
    let max_len = max_len.min(MAX_LOGIN_MESSAGE);
    let mut out = BytesMut::with_capacity(256);
    loop {
        let (tag, body) = read_message(&mut conn.stream, &mut conn.rbuf, max_len)
            .await
            .map_err(|e| match e {
                // Oversized or malformed framing ends this login as a refusal (its clients are
                // told), not as a network failure retried in silence.
                ReadError::Protocol(p) => ServerError::Refused {
                    sqlstate: sqlstate::PROTOCOL_VIOLATION,
                    reason: format!("bad message from the server: {p}"),
                },
                e => e.into(),
            })?;
        match machine.on_message(tag, &body, &mut out)? {
            Step::Read => {}
            Step::Param(k, v) => {
                conn.params.set(k, v);
            }
            Step::KeyData(key) => conn.backend_key = key,
            Step::Derive(d) => {
                let keys = derive(target, cpu, d.password, d.salt).await?;
                machine.keys_derived(&keys, &mut out)?;
            }
            Step::Ready(status) => {
                conn.status = status;
                if let Some(m) = machine.mechanism().filter(|m| *m != "SCRAM-SHA-256") {
                    tracing::debug!("S-{}: logged in with {m}", conn.id);
                }
                return Ok(());
            }
        }
        if !out.is_empty() {
            conn.stream.write_all(&out).await?;
            out.clear();
        }
    }
}

/// The SCRAM keys of the target's password for this salt and iteration count: the pool's last
/// ones when the server's salt is the same (it is, until the role's password changes), else
/// derived on the authentication pool.
async fn derive(
    target: &ServerTarget,
    cpu: &AuthCpu,
    password: String,
    salt: ServerSalt,
) -> Result<ScramKeys, ServerError> {
    if let Some(keys) = target.cached_login_keys(&salt) {
        return Ok(keys);
    }
    let for_work = salt.clone();
    let keys = cpu
        .run(move || ScramKeys::from_password(&password, &for_work.salt, for_work.iterations))
        .await
        .ok_or_else(|| ServerError::Unexpected("shutting down during server login".into()))?;
    target.keep_login_keys(salt, &keys);
    Ok(keys)
}
