//! SCRAM client side: the pooler logging in to a PostgreSQL server with a password or pass-through
//! keys, bound to the server's TLS certificate when it offers SCRAM-SHA-256-PLUS.

use std::fmt;
use std::mem;

use super::channel_binding::ClientBinding;
use super::message::{
    as_text, escape_saslname, parse_server_final, parse_server_first, ServerFinal,
};
use super::{b64, hmac_sha256, xor32, ScramKeys};
use crate::auth::constant_time::constant_time_eq;
use crate::error::ProtocolError;

/// What the pooler logs in with.
#[derive(Clone, PartialEq, Eq)]
pub enum ScramCredential {
    /// A plaintext password: keys are derived from the server's salt and iteration count.
    Password(String),
    /// Keys recovered from a client's exchange (SCRAM pass-through); salt and iterations from
    /// the server are not needed, but the server's secret must equal ours.
    Keys(ScramKeys),
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScramCredential::Password(_) => f.write_str("Password(<redacted>)"),
            ScramCredential::Keys(_) => f.write_str("Keys(<redacted>)"),
        }
    }
}

enum State {
    AwaitServerFirst,
    AwaitServerFinal { server_signature: [u8; 32] },
    Done,
    Failed,
}

/// Client side of SCRAM: the pooler logging in to a PostgreSQL server.
pub struct ScramClient {
    credential: ScramCredential,
    nonce: String,
    client_first_bare: String,
    binding: ClientBinding,
    state: State,
    /// Most PBKDF2 iterations a server may ask for (`with_max_iterations`).
    max_iterations: u32,
}

/// What key derivation needs from a server-first-message: its salt and iteration count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSalt {
    pub salt: Vec<u8>,
    pub iterations: u32,
}

impl ScramClient {
    /// `client_nonce_raw` = 18 random bytes from the caller.
    pub fn new(credential: ScramCredential, client_nonce_raw: [u8; 18]) -> Self {
        Self::with_nonce(credential, "", &b64(&client_nonce_raw))
    }

    /// Explicit user name and nonce (for test vectors). PostgreSQL ignores the SCRAM user name
    /// and libpq sends an empty one, which is what [`ScramClient::new`] does.
    pub fn with_nonce(credential: ScramCredential, user: &str, client_nonce: &str) -> Self {
        ScramClient {
            credential,
            nonce: client_nonce.to_owned(),
            client_first_bare: format!("n={},r={client_nonce}", escape_saslname(user)),
            binding: ClientBinding::NotSupported,
            state: State::AwaitServerFirst,
            max_iterations: u32::MAX,
        }
    }

    /// Sets the channel binding choice (default: "n", none).
    pub fn with_binding(mut self, binding: ClientBinding) -> Self {
        self.binding = binding;
        self
    }

    /// Refuse a server-first-message asking for more than `max` PBKDF2 iterations
    /// ([`ProtocolError::ScramIterations`]): the count is the server's to choose, and the work of
    /// a password login grows with it (2^31 - 1 iterations is about half an hour of one core).
    pub fn with_max_iterations(mut self, max: u32) -> Self {
        self.max_iterations = max;
        self
    }

    /// True when the keys must be derived from a password (PBKDF2 over the server's salt and
    /// iteration count) before the server-first-message can be answered.
    pub fn needs_derived_keys(&self) -> bool {
        matches!(self.credential, ScramCredential::Password(_))
    }

    /// The password to derive keys from (None with pass-through keys).
    pub fn password(&self) -> Option<&str> {
        match &self.credential {
            ScramCredential::Password(p) => Some(p),
            ScramCredential::Keys(_) => None,
        }
    }

    /// Check a server-first-message (state, syntax, nonce, iteration bound) without answering it,
    /// and return the salt and iteration count to derive keys with. Nothing changes on success;
    /// on failure the exchange is failed.
    pub fn server_salt(&mut self, msg: &[u8]) -> Result<ServerSalt, ProtocolError> {
        let checked = self.check_server_first(msg).map(|(_, salt)| salt);
        if checked.is_err() {
            self.state = State::Failed;
        }
        checked
    }

    fn check_server_first<'m>(
        &self,
        msg: &'m [u8],
    ) -> Result<(&'m str, ServerSalt), ProtocolError> {
        let State::AwaitServerFirst = self.state else {
            return Err(ProtocolError::Scram("unexpected server-first-message"));
        };
        let server_first = as_text(msg)?;
        let sf = parse_server_first(server_first)?;
        let extends_ours = sf.nonce.len() > self.nonce.len() && sf.nonce.starts_with(&self.nonce);
        if !extends_ours {
            return Err(ProtocolError::Scram("nonce mismatch"));
        }
        if sf.iterations > self.max_iterations {
            return Err(ProtocolError::ScramIterations {
                asked: sf.iterations,
                max: self.max_iterations,
            });
        }
        Ok((
            server_first,
            ServerSalt {
                salt: sf.salt,
                iterations: sf.iterations,
            },
        ))
    }

    /// The mechanism to name in SASLInitialResponse.
    pub fn mechanism(&self) -> &'static str {
        self.binding.mechanism()
    }

    /// True once the server's signature has verified.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// "<gs2 header>n=,r=<nonce>": the SASLInitialResponse data.
    pub fn client_first(&self) -> Vec<u8> {
        format!("{}{}", self.binding.gs2_header(), self.client_first_bare).into_bytes()
    }

    /// server-first-message (SASLContinue data) -> client-final-message (SASLResponse data).
    /// With a password this runs PBKDF2 here; callers that want it elsewhere use `server_salt`
    /// and `handle_server_first_with_keys`.
    pub fn handle_server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ProtocolError> {
        let keys = match self.credential.clone() {
            ScramCredential::Password(p) => {
                let salt = self.server_salt(msg)?;
                ScramKeys::from_password(&p, &salt.salt, salt.iterations)
            }
            ScramCredential::Keys(k) => k,
        };
        self.handle_server_first_with_keys(msg, &keys)
    }

    /// Answer a server-first-message with keys derived from this client's password and the
    /// message's salt and iteration count (`server_salt`), or with the pass-through keys.
    pub fn handle_server_first_with_keys(
        &mut self,
        msg: &[u8],
        keys: &ScramKeys,
    ) -> Result<Vec<u8>, ProtocolError> {
        let (server_first, _) = match self.check_server_first(msg) {
            Ok(ok) => ok,
            Err(e) => {
                self.state = State::Failed;
                return Err(e);
            }
        };
        let without_proof = format!(
            "c={},r={}",
            b64(&self.binding.cbind_input()),
            server_nonce(server_first)
        );
        let auth_message = [
            self.client_first_bare.as_bytes(),
            b",",
            server_first.as_bytes(),
            b",",
            without_proof.as_bytes(),
        ];
        let client_signature = hmac_sha256(&keys.stored_key(), &auth_message);
        let proof = xor32(&keys.client_key, &client_signature);
        let server_signature = hmac_sha256(&keys.server_key, &auth_message);
        self.state = State::AwaitServerFinal { server_signature };
        Ok(format!("{without_proof},p={}", b64(&proof)).into_bytes())
    }

    /// Verifies the server signature (constant time). Err(Scram("invalid server signature")) otherwise.
    pub fn handle_server_final(&mut self, msg: &[u8]) -> Result<(), ProtocolError> {
        let State::AwaitServerFinal { server_signature } =
            mem::replace(&mut self.state, State::Failed)
        else {
            return Err(ProtocolError::Scram("unexpected server-final-message"));
        };
        match parse_server_final(as_text(msg)?)? {
            ServerFinal::Error => Err(ProtocolError::Scram("server reported an error")),
            ServerFinal::Verifier(sig) if constant_time_eq(&sig, &server_signature) => {
                self.state = State::Done;
                Ok(())
            }
            ServerFinal::Verifier(_) => Err(ProtocolError::Scram("invalid server signature")),
        }
    }
}

/// The nonce of a server-first-message already checked by `parse_server_first` ("r=<nonce>,...").
fn server_nonce(server_first: &str) -> &str {
    server_first
        .split(',')
        .next()
        .and_then(|r| r.strip_prefix("r="))
        .unwrap_or_default()
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::AwaitServerFirst => "await server-first",
            State::AwaitServerFinal { .. } => "await server-final",
            State::Done => "done",
            State::Failed => "failed",
        };
        f.debug_struct("ScramClient")
            .field("credential", &self.credential)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
