//! auth_type = cert: the client proved a certificate signed by client_tls_ca_file during the TLS
//! handshake (client_tls_sslmode verify-ca / verify-full); its subject CN must equal the user name.

use super::hba_check::{refuse, Exchange, Method};
use crate::conn::ClientConn;
use crate::error::{sqlstate, ClientNotice};

/// The method for a cert login: identified when the certificate's CN is `user`, else refused
/// (the reason goes to the log, the client gets PostgreSQL's message).
pub fn method(client: &ClientConn, user: &str) -> Method {
    let refused = |why: String| {
        refuse(
            ClientNotice::new(
                sqlstate::INVALID_AUTHORIZATION,
                format!("certificate authentication failed for user \"{user}\""),
            ),
            format!("certificate authentication failed: {why}"),
        )
    };
    let Some(tls) = client.tls.as_deref() else {
        return refused("connection is not TLS".into());
    };
    match tls.peer_cert_cn.as_deref() {
        None => refused("no verified client certificate with a common name".into()),
        Some(cn) if cn == user => Ok(Exchange::Identified("certificate")),
        Some(cn) => refused(format!(
            "certificate CN \"{cn}\" does not match user \"{user}\""
        )),
    }
}
