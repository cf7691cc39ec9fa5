//! auth_type = cert: the client proved a certificate signed by client_tls_ca_file during the TLS
//! handshake (client_tls_sslmode verify-ca / verify-full); its subject CN must equal the user name.

use sluice_protocol::StoredSecret;

use super::auth::Authenticated;
use super::{ClientConn, EndReason};
use crate::error::{sqlstate, ClientNotice};

/// Check the client certificate's CN against `user`. `secret` (from auth_file, if any) is kept
/// for logging in to the server.
pub fn authenticate(
    client: &ClientConn,
    user: &str,
    secret: Option<StoredSecret>,
) -> Result<Authenticated, EndReason> {
    let failed = |why: &str| {
        tracing::warn!(
            "C-{}: {} certificate authentication failed: {why}",
            client.id,
            client.label
        );
        EndReason::Error(ClientNotice::new(
            sqlstate::INVALID_AUTHORIZATION,
            format!("certificate authentication failed for user \"{user}\""),
        ))
    };
    if !client.tls.is_tls {
        return Err(failed("connection is not TLS"));
    }
    match client.tls.peer_cert_cn.as_deref() {
        None => Err(failed("no verified client certificate with a common name")),
        Some(cn) if cn == user => Ok(Authenticated {
            secret,
            scram_keys: None,
        }),
        Some(cn) => Err(failed(&format!(
            "certificate CN \"{cn}\" does not match user \"{user}\""
        ))),
    }
}
