//! SCRAM server side: the pooler verifying a client against a stored (or mock) verifier, with
//! tls-server-end-point channel binding when the client connection is TLS.

use std::fmt;
use std::mem;

use super::channel_binding::{server_accepts, SCRAM_SHA_256_PLUS};
use super::message::{as_text, parse_client_final, parse_client_first};
use super::{b64, hmac_sha256, sha256, xor32, ScramKeys, ScramSecret, SCRAM_SHA_256};
use crate::auth::constant_time::constant_time_eq;
use crate::error::ProtocolError;

/// What the server remembers between the two round trips.
struct Exchange {
    /// gs2 header plus binding data: what the client-final's `c=` must decode to.
    cbind_input: Vec<u8>,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

enum State {
    AwaitClientFirst,
    AwaitClientFinal(Exchange),
    Done,
    /// Any error ends the exchange; later calls fail too.
    Failed,
}

/// Server side of SCRAM: the pooler verifying a client.
pub struct ScramServer {
    secret: ScramSecret,
    server_nonce: String,
    /// tls-server-end-point data of our certificate when the client connection is TLS.
    binding: Option<Vec<u8>>,
    /// The client chose SCRAM-SHA-256-PLUS.
    plus: bool,
    state: State,
}

impl ScramServer {
    /// `server_nonce_raw` = 18 random bytes supplied by the caller (base64-encoded into the nonce).
    pub fn new(secret: ScramSecret, server_nonce_raw: [u8; 18]) -> Self {
        Self::with_nonce(secret, &b64(&server_nonce_raw))
    }

    /// Uses `server_nonce` verbatim as the server's nonce suffix (for test vectors). It must be
    /// printable ASCII without commas for clients to accept it.
    pub fn with_nonce(secret: ScramSecret, server_nonce: &str) -> Self {
        ScramServer {
            secret,
            server_nonce: server_nonce.to_owned(),
            binding: None,
            plus: false,
            state: State::AwaitClientFirst,
        }
    }

    /// Offers SCRAM-SHA-256-PLUS bound to `end_point` (the hash of our TLS certificate).
    pub fn with_channel_binding(mut self, end_point: Vec<u8>) -> Self {
        self.binding = Some(end_point);
        self
    }

    /// Mechanisms for AuthenticationSASL, preferred first.
    pub fn mechanisms(&self) -> &'static [&'static str] {
        if self.binding.is_some() {
            &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]
        } else {
            &[SCRAM_SHA_256]
        }
    }

    /// The mechanism named in SASLInitialResponse; call before `handle_client_first` (without the
    /// call, SCRAM-SHA-256 is assumed).
    pub fn select_mechanism(&mut self, mechanism: &str) -> Result<(), ProtocolError> {
        if !self.mechanisms().contains(&mechanism) {
            return Err(ProtocolError::Scram("invalid SASL mechanism"));
        }
        self.plus = mechanism == SCRAM_SHA_256_PLUS;
        Ok(())
    }

    /// True when the client bound the exchange to the TLS channel.
    pub fn used_channel_binding(&self) -> bool {
        self.plus
    }

    /// True once a client proof has verified.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// client-first-message (the SASLInitialResponse data) -> server-first-message bytes.
    pub fn handle_client_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ProtocolError> {
        let State::AwaitClientFirst = mem::replace(&mut self.state, State::Failed) else {
            return Err(ProtocolError::Scram("unexpected client-first-message"));
        };
        let first = parse_client_first(as_text(msg)?)?;
        let data = server_accepts(self.plus, first.flag, self.binding.as_deref())?;
        let mut cbind_input = first.gs2_header.as_bytes().to_vec();
        cbind_input.extend_from_slice(data);
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            b64(&self.secret.salt),
            self.secret.iterations
        );
        self.state = State::AwaitClientFinal(Exchange {
            cbind_input,
            client_first_bare: first.bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
        });
        Ok(server_first.into_bytes())
    }

    /// client-final-message -> Ok((server-final-message, keys)) when the proof verifies (constant-time);
    /// Err(Scram("invalid proof")) otherwise. Nonce and channel-binding echo are checked.
    pub fn handle_client_final(
        &mut self,
        msg: &[u8],
    ) -> Result<(Vec<u8>, ScramKeys), ProtocolError> {
        let State::AwaitClientFinal(ex) = mem::replace(&mut self.state, State::Failed) else {
            return Err(ProtocolError::Scram("unexpected client-final-message"));
        };
        let fin = parse_client_final(as_text(msg)?)?;
        if !constant_time_eq(&fin.channel_binding, &ex.cbind_input) {
            return Err(ProtocolError::Scram("channel binding mismatch"));
        }
        if !constant_time_eq(fin.nonce.as_bytes(), ex.nonce.as_bytes()) {
            return Err(ProtocolError::Scram("nonce mismatch"));
        }
        let auth_message = [
            ex.client_first_bare.as_bytes(),
            b",",
            ex.server_first.as_bytes(),
            b",",
            fin.without_proof.as_bytes(),
        ];
        let client_signature = hmac_sha256(&self.secret.stored_key, &auth_message);
        let client_key = xor32(&fin.proof, &client_signature);
        if !constant_time_eq(&sha256(&client_key), &self.secret.stored_key) {
            return Err(ProtocolError::Scram("invalid proof"));
        }
        let server_signature = hmac_sha256(&self.secret.server_key, &auth_message);
        self.state = State::Done;
        let keys = ScramKeys {
            client_key,
            server_key: self.secret.server_key,
        };
        Ok((format!("v={}", b64(&server_signature)).into_bytes(), keys))
    }
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::AwaitClientFirst => "await client-first",
            State::AwaitClientFinal(_) => "await client-final",
            State::Done => "done",
            State::Failed => "failed",
        };
        f.debug_struct("ScramServer")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
