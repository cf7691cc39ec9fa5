//! auth_type = hba: gather the connection's facts (Unix or TCP address, TLS, peer credentials) and
//! ask the loaded rules (`sluice_config::HbaRules::evaluate`) which method applies.

use sluice_config::{ClientAddr, HbaMethod, HbaRequest, HbaVerdict};

use crate::app::App;
use crate::conn::ClientConn;
use crate::error::{sqlstate, ClientNotice};
use crate::net::{PeerAddr, Stream};

/// How the client must prove who it is: small and `Copy`, so that a login waiting for its
/// client's password does not keep a refusal's text in its state.
#[derive(Debug, Clone, Copy)]
pub enum Exchange {
    /// auth_type = any: the user name is not checked.
    Any,
    /// No password (the user must be known).
    Trust,
    /// Cleartext password.
    Plain,
    /// md5 (SCRAM when the stored secret is SCRAM).
    Md5,
    Scram,
    /// Identity already proven (peer credentials, client certificate); the user must be known.
    Identified(&'static str),
}

/// A login refused before any exchange: what the client is told, and the reason for the log.
#[derive(Debug)]
pub struct Refusal {
    pub notice: ClientNotice,
    pub why: String,
}

/// The method auth_type, the hba rules or the client certificate say applies, or why none does:
/// the one definition of a login's method (`exchange.rs` runs it).
pub type Method = Result<Exchange, Box<Refusal>>;

/// A refusal as a `Method`.
pub fn refuse(notice: ClientNotice, why: String) -> Method {
    Err(Box::new(Refusal { notice, why }))
}

/// OS user name of the process at the other end of a Unix socket (SO_PEERCRED).
fn peer_os_user(stream: &Stream) -> Option<String> {
    let uid = match stream {
        Stream::Unix(s) => s.peer_cred().ok()?.uid(),
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The method the hba file assigns to this connection (`physical_replication`: the client asked
/// for `replication=true`, which only `replication` lines match).
pub fn hba_method(
    app: &App,
    client: &ClientConn,
    user: &str,
    database: &str,
    physical_replication: bool,
) -> Method {
    let addr = match &client.peer {
        PeerAddr::Unix { .. } => ClientAddr::Unix,
        PeerAddr::Tcp(a) => ClientAddr::Ip(a.ip()),
    };
    let where_from = match addr {
        ClientAddr::Unix => "unix socket".to_string(),
        ClientAddr::Ip(ip) => ip.to_string(),
    };
    let Some(set) = app.hba.current() else {
        return refuse_no_entry(&where_from, user, database, "no hba rules are loaded");
    };
    let peer_user = match addr {
        ClientAddr::Unix => peer_os_user(&client.stream),
        ClientAddr::Ip(_) => None,
    };
    let (is_tls, cert_cn) = match client.tls.as_deref() {
        Some(t) => (true, t.peer_cert_cn.as_deref()),
        None => (false, None),
    };
    let req = HbaRequest {
        addr,
        is_tls,
        cert_cn,
        peer_user: peer_user.as_deref(),
        database,
        user,
        physical_replication,
    };
    let (rule, verdict) = set.rules.evaluate(set.idents.as_ref(), &req);
    match verdict {
        HbaVerdict::Trust => Ok(Exchange::Trust),
        HbaVerdict::Password(HbaMethod::Password) => Ok(Exchange::Plain),
        HbaVerdict::Password(HbaMethod::ScramSha256) => Ok(Exchange::Scram),
        HbaVerdict::Password(_) => Ok(Exchange::Md5),
        HbaVerdict::Identified => Ok(Exchange::Identified(match rule.map(|r| r.method) {
            Some(HbaMethod::Cert) => "certificate",
            _ => "peer",
        })),
        HbaVerdict::CertificateRequired(why) => refuse(
            ClientNotice::new(
                sqlstate::INVALID_AUTHORIZATION,
                match req.cert_cn {
                    None => "connection requires a valid client certificate".to_string(),
                    Some(_) => format!("certificate authentication failed for user \"{user}\""),
                },
            ),
            why,
        ),
        HbaVerdict::Refuse(why) => match rule.map(|r| r.method) {
            None => refuse_no_entry(&where_from, user, database, &why),
            Some(HbaMethod::Reject) => refuse(
                ClientNotice::new(
                    sqlstate::INVALID_AUTHORIZATION,
                    format!(
                        "hba rejects connection for host \"{where_from}\", user \"{user}\", database \"{database}\""
                    ),
                ),
                why,
            ),
            Some(m) => refuse(
                ClientNotice::new(
                    sqlstate::INVALID_AUTHORIZATION,
                    format!(
                        "{} authentication failed for user \"{user}\"",
                        if m == HbaMethod::Cert { "certificate" } else { "peer" }
                    ),
                ),
                why,
            ),
        },
    }
}

fn refuse_no_entry(where_from: &str, user: &str, database: &str, why: &str) -> Method {
    refuse(
        ClientNotice::new(
            sqlstate::INVALID_AUTHORIZATION,
            format!(
                "no hba entry for host \"{where_from}\", user \"{user}\", database \"{database}\""
            ),
        ),
        why.to_string(),
    )
}
