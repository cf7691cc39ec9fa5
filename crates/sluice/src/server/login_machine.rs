//! The decisions of a server login, without IO (`login.rs` reads and writes for it): what to answer
//! each authentication request with (cleartext, md5, SCRAM-SHA-256 with a password or with
//! pass-through keys, SCRAM-SHA-256-PLUS over TLS when the server offers it), and what a server may
//! not do. A server is trusted no more than the network between it and the pooler:
//!
//! - each message is held to `MAX_LOGIN_MESSAGE` bytes (the reader's limit, the same as a client's
//!   authentication messages), and the whole login to `MAX_LOGIN_BYTES` and `MAX_LOGIN_MESSAGES`
//!   (a ParameterStatus or NoticeResponse flood ends the login, it does not fill memory);
//! - one authentication request per login (a second one, or one after AuthenticationOk, ends it);
//! - a SCRAM challenge asking for more than `server_scram_max_iterations` is refused before any
//!   key derivation; the derivation itself is the caller's (`Step::Derive`, run off the relay
//!   threads);
//! - a SCRAM exchange, once started, must end with a verified server signature before
//!   AuthenticationOk counts (the server proves it knows the secret; libpq checks the same);
//! - `server_require_auth` names the methods the server may ask for (libpq's `require_auth`).
//!
//! Every refusal is a `ServerError::Refused` that ends that login only.

use bytes::BytesMut;
use rand::RngCore;
use sluice_config::{RequireAuth, ServerAuthMethod};
use sluice_protocol::{
    backend_tag, decode_authentication, decode_backend_key_data, decode_error_fields,
    decode_parameter_status, decode_ready_for_query, encode_password, encode_sasl_initial,
    encode_sasl_response, md5_response_from_secret, md5_secret, Authentication, CancelKey,
    ClientBinding, ProtocolError, ScramClient, ScramCredential, ScramKeys, ServerSalt,
    StoredSecret, TransactionStatus,
};

use crate::error::{sqlstate, ServerError};

const SCRAM: &str = "SCRAM-SHA-256";

/// Largest message a server may send during login: the limit on a client's authentication
/// messages. PostgreSQL's own login messages are far smaller (a SCRAM challenge is ~100 bytes,
/// a ParameterStatus a few dozen, an ErrorResponse a few hundred).
pub const MAX_LOGIN_MESSAGE: usize = 65_536 + 512;
/// Most bytes a whole login may read (PostgreSQL sends about 500).
pub const MAX_LOGIN_BYTES: usize = 1 << 20;
/// Most messages a whole login may read (PostgreSQL sends about 20).
pub const MAX_LOGIN_MESSAGES: usize = 1_000;

/// What the configuration allows a server during login.
#[derive(Debug, Clone)]
pub struct LoginRules {
    /// server_scram_max_iterations.
    pub max_iterations: u32,
    /// server_require_auth.
    pub require_auth: RequireAuth,
}

impl Default for LoginRules {
    fn default() -> Self {
        LoginRules {
            max_iterations: DEFAULT_MAX_ITERATIONS,
            require_auth: RequireAuth::default(),
        }
    }
}

/// What the caller does after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'m> {
    /// Send what was appended to `out` (maybe nothing) and read the next message.
    Read,
    /// The server reported a parameter.
    Param(&'m str, &'m str),
    /// The server's cancel key.
    KeyData(CancelKey),
    /// Derive SCRAM keys from the password (PBKDF2, heavy: off the relay threads), then call
    /// `keys_derived`.
    Derive(DeriveKeys),
    /// Logged in.
    Ready(TransactionStatus),
}

/// A PBKDF2 to run: the login's password, the server's salt and iteration count (within bound).
#[derive(PartialEq, Eq)]
pub struct DeriveKeys {
    pub password: String,
    pub salt: ServerSalt,
}

impl std::fmt::Debug for DeriveKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeriveKeys")
            .field("salt", &self.salt)
            .finish_non_exhaustive()
    }
}

/// One server login's state.
pub struct LoginMachine {
    user: String,
    secret: Option<StoredSecret>,
    keys: Option<ScramKeys>,
    /// The server certificate's hash for SCRAM-SHA-256-PLUS (TLS only).
    end_point: Option<Vec<u8>>,
    rules: LoginRules,
    /// The method the server asked for (None until it asks).
    asked: Option<ServerAuthMethod>,
    scram: Option<ScramClient>,
    /// The server-first-message waiting for its derived keys.
    pending_first: Option<Vec<u8>>,
    authenticated: bool,
    bytes: usize,
    messages: usize,
    /// The SCRAM client nonce (random unless injected: `with_nonce`).
    nonce: Option<[u8; 18]>,
}

impl LoginMachine {
    pub fn new(
        user: &str,
        secret: Option<StoredSecret>,
        keys: Option<ScramKeys>,
        end_point: Option<Vec<u8>>,
        rules: LoginRules,
    ) -> Self {
        LoginMachine {
            user: user.to_string(),
            secret,
            keys,
            end_point,
            rules,
            asked: None,
            scram: None,
            pending_first: None,
            authenticated: false,
            bytes: 0,
            messages: 0,
            nonce: None,
        }
    }

    /// Use this SCRAM client nonce instead of a random one (the fuzz target replays exchanges).
    pub fn with_nonce(mut self, nonce: [u8; 18]) -> Self {
        self.nonce = Some(nonce);
        self
    }

    /// The SCRAM mechanism in use, once the exchange started.
    pub fn mechanism(&self) -> Option<&'static str> {
        self.scram.as_ref().map(|c| c.mechanism())
    }

    /// Handle one message from the server (`tag`, `body` without its header).
    pub fn on_message<'m>(
        &mut self,
        tag: u8,
        body: &'m [u8],
        out: &mut BytesMut,
    ) -> Result<Step<'m>, ServerError> {
        self.messages += 1;
        self.bytes += body.len() + 5;
        if self.messages > MAX_LOGIN_MESSAGES || self.bytes > MAX_LOGIN_BYTES {
            return Err(refused(format!(
                "the server sent more than {MAX_LOGIN_MESSAGES} messages or {MAX_LOGIN_BYTES} bytes during login"
            )));
        }
        if self.pending_first.is_some() {
            return Err(refused(
                "a message while SCRAM keys were being derived".into(),
            ));
        }
        match tag {
            backend_tag::AUTHENTICATION => {
                let auth = decode_authentication(body).map_err(bad)?;
                self.answer(auth, out)
            }
            backend_tag::PARAMETER_STATUS => {
                let (k, v) = decode_parameter_status(body).map_err(bad)?;
                Ok(Step::Param(k, v))
            }
            backend_tag::BACKEND_KEY_DATA => {
                Ok(Step::KeyData(decode_backend_key_data(body).map_err(bad)?))
            }
            backend_tag::READY_FOR_QUERY => {
                if !self.authenticated {
                    return Err(refused("ReadyForQuery before AuthenticationOk".into()));
                }
                Ok(Step::Ready(decode_ready_for_query(body).map_err(bad)?))
            }
            backend_tag::ERROR_RESPONSE => Err(ServerError::Login(Box::new(
                decode_error_fields(body).map_err(bad)?,
            ))),
            backend_tag::NOTICE_RESPONSE | backend_tag::NEGOTIATE_PROTOCOL_VERSION => {
                Ok(Step::Read)
            }
            other => Err(refused(format!(
                "unexpected message type '{}' during login",
                other.escape_ascii()
            ))),
        }
    }

    /// Answer the server-first-message that `Step::Derive` held, with the keys derived for it.
    pub fn keys_derived(
        &mut self,
        keys: &ScramKeys,
        out: &mut BytesMut,
    ) -> Result<(), ServerError> {
        let (Some(first), Some(client)) = (self.pending_first.take(), self.scram.as_mut()) else {
            return Err(refused("keys derived without a SCRAM challenge".into()));
        };
        let reply = client
            .handle_server_first_with_keys(&first, keys)
            .map_err(bad)?;
        encode_sasl_response(&reply, out);
        Ok(())
    }

    /// The first authentication request of a login: allowed by server_require_auth, and only one.
    fn asked_for(&mut self, method: ServerAuthMethod) -> Result<(), ServerError> {
        if self.authenticated || self.asked.is_some() {
            return Err(refused(format!(
                "a second authentication request ({}) in one login",
                method.as_str()
            )));
        }
        if !self.rules.require_auth.allows(method) {
            return Err(ServerError::Refused {
                sqlstate: sqlstate::INVALID_AUTHORIZATION,
                reason: format!(
                    "server_require_auth does not allow the server's authentication method \"{}\"",
                    method.as_str()
                ),
            });
        }
        self.asked = Some(method);
        Ok(())
    }

    fn answer<'m>(
        &mut self,
        auth: Authentication<'_>,
        out: &mut BytesMut,
    ) -> Result<Step<'m>, ServerError> {
        let missing = |user: &str| {
            ServerError::Auth(format!(
                "no password for user \"{user}\" to log in to the server"
            ))
        };
        match auth {
            Authentication::Ok => {
                if self.authenticated {
                    return Err(refused("a second AuthenticationOk".into()));
                }
                if self.asked.is_none() {
                    self.asked_for(ServerAuthMethod::None)?;
                }
                if self.scram.as_ref().is_some_and(|c| !c.is_done()) {
                    return Err(refused(
                        "the server accepted the login before proving it knows the SCRAM secret"
                            .into(),
                    ));
                }
                self.authenticated = true;
            }
            Authentication::CleartextPassword => {
                self.asked_for(ServerAuthMethod::Password)?;
                match &self.secret {
                    Some(StoredSecret::Plain(p)) => encode_password(p, out),
                    Some(_) => return Err(ServerError::WrongPasswordType(
                        "server asks for a cleartext password but only a hashed secret is known",
                    )),
                    None => return Err(missing(&self.user)),
                }
            }
            Authentication::Md5Password { salt } => {
                self.asked_for(ServerAuthMethod::Md5)?;
                let secret = match &self.secret {
                    Some(StoredSecret::Plain(p)) => md5_secret(&self.user, p),
                    Some(StoredSecret::Md5(s)) => s.clone(),
                    Some(StoredSecret::Scram(_)) => {
                        return Err(ServerError::WrongPasswordType(
                            "server asks for md5 but the stored secret is SCRAM",
                        ))
                    }
                    None => return Err(missing(&self.user)),
                };
                encode_password(&md5_response_from_secret(&secret, salt), out);
            }
            Authentication::Sasl { mechanisms } => {
                self.asked_for(ServerAuthMethod::ScramSha256)?;
                if !mechanisms.contains(&SCRAM) {
                    return Err(ServerError::Auth(format!(
                        "server offers no supported SASL mechanism ({})",
                        mechanisms.join(", ")
                    )));
                }
                let credential = match (&self.secret, &self.keys) {
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
                    (None, _) => return Err(missing(&self.user)),
                };
                let nonce = self.nonce.unwrap_or_else(|| {
                    let mut n = [0u8; 18];
                    rand::thread_rng().fill_bytes(&mut n);
                    n
                });
                let client = ScramClient::new(credential, nonce)
                    .with_binding(ClientBinding::choose(
                        &mechanisms,
                        self.end_point.as_deref(),
                    ))
                    .with_max_iterations(self.rules.max_iterations);
                encode_sasl_initial(client.mechanism(), &client.client_first(), out);
                self.scram = Some(client);
            }
            Authentication::SaslContinue(data) => {
                let client = self
                    .scram
                    .as_mut()
                    .ok_or_else(|| refused("SASLContinue without SASL".into()))?;
                if client.needs_derived_keys() {
                    let salt = client.server_salt(data).map_err(|e| match e {
                        ProtocolError::ScramIterations { asked, max } => refused(format!(
                            "the server asked for {asked} SCRAM iterations, more than server_scram_max_iterations ({max})"
                        )),
                        e => bad(e),
                    })?;
                    let password = client.password().unwrap_or_default().to_string();
                    self.pending_first = Some(data.to_vec());
                    return Ok(Step::Derive(DeriveKeys { password, salt }));
                }
                let reply = client.handle_server_first(data).map_err(bad)?;
                encode_sasl_response(&reply, out);
            }
            Authentication::SaslFinal(data) => {
                let client = self
                    .scram
                    .as_mut()
                    .ok_or_else(|| refused("SASLFinal without SASL".into()))?;
                client.handle_server_final(data).map_err(bad)?;
            }
            Authentication::Other(code) => {
                return Err(ServerError::Auth(format!(
                    "unsupported server authentication method {code}"
                )))
            }
        }
        Ok(Step::Read)
    }
}

/// server_scram_max_iterations' default, for rules built without settings.
pub const DEFAULT_MAX_ITERATIONS: u32 = 100_000;

fn refused(reason: String) -> ServerError {
    ServerError::Refused {
        sqlstate: sqlstate::PROTOCOL_VIOLATION,
        reason,
    }
}

/// A message that does not decode ends the login like any other refusal.
fn bad(e: ProtocolError) -> ServerError {
    refused(format!("bad message from the server: {e}"))
}

#[cfg(test)]
#[path = "login_machine_tests.rs"]
mod tests;
