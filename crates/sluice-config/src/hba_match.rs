//! Evaluating hba rules for one connection: a pure function of the connection's facts (kind,
//! address, TLS, certificate CN, Unix peer user, database, user, physical replication) to a
//! verdict. First matching line wins; no matching line means reject.

use std::net::IpAddr;

use crate::hba::{ClientCert, HbaConnType, HbaMethod, HbaRule, HbaRules};
use crate::ident::IdentMaps;

/// Where a client connected from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAddr {
    /// Unix socket (`local` lines).
    Unix,
    /// TCP (`host*` lines).
    Ip(IpAddr),
}

/// Everything the rules look at.
#[derive(Debug, Clone, Copy)]
pub struct HbaRequest<'a> {
    pub addr: ClientAddr,
    pub is_tls: bool,
    /// TLS client certificate common name, when one was presented.
    pub cert_cn: Option<&'a str>,
    /// OS user name of a Unix socket peer (SO_PEERCRED), when known.
    pub peer_user: Option<&'a str>,
    /// The database name the client asked for.
    pub database: &'a str,
    pub user: &'a str,
    /// `replication=true` (physical): only `replication` in the database column matches.
    pub physical_replication: bool,
}

/// What the pooler must do with the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HbaVerdict {
    /// Let in without a password (the user must still be known, like auth_type = trust).
    Trust,
    /// Ask for a password with this method (Md5, Password or ScramSha256).
    Password(HbaMethod),
    /// Identity proven by peer credentials or a client certificate.
    Identified,
    /// Refuse; the text says why (for the log, not for the client).
    Refuse(String),
    /// Refused by the line's `clientcert=`: no certificate, or (verify-full) its CN is not the
    /// user. The text says why (for the log).
    CertificateRequired(String),
}

impl HbaRules {
    /// The first rule that applies to the connection, if any.
    pub fn find(&self, req: &HbaRequest<'_>) -> Option<&HbaRule> {
        self.rules.iter().find(|r| rule_applies(r, req))
    }

    /// The verdict for a connection. `idents` is the auth_ident_file (None when not configured).
    pub fn evaluate(
        &self,
        idents: Option<&IdentMaps>,
        req: &HbaRequest<'_>,
    ) -> (Option<&HbaRule>, HbaVerdict) {
        let Some(rule) = self.find(req) else {
            return (
                None,
                HbaVerdict::Refuse("no hba line matches the connection".to_string()),
            );
        };
        let at = rule.location();
        if let Some(refused) = client_cert_refusal(rule, idents, req) {
            return (Some(rule), refused);
        }
        let verdict = match rule.method {
            HbaMethod::Trust => HbaVerdict::Trust,
            HbaMethod::Reject => HbaVerdict::Refuse(format!("rejected by hba line {at}")),
            m @ (HbaMethod::Md5 | HbaMethod::Password | HbaMethod::ScramSha256) => {
                HbaVerdict::Password(m)
            }
            HbaMethod::Peer => match req.peer_user {
                None => HbaVerdict::Refuse(format!(
                    "peer authentication failed (no peer credentials), hba line {at}"
                )),
                Some(os_user) => identify(rule, idents, os_user, req.user, "peer"),
            },
            HbaMethod::Cert => match (req.is_tls, req.cert_cn) {
                (false, _) => HbaVerdict::Refuse(format!(
                    "certificate authentication needs a TLS connection, hba line {at}"
                )),
                (true, None) => HbaVerdict::Refuse(format!(
                    "certificate authentication: no client certificate, hba line {at}"
                )),
                (true, Some(cn)) => identify(rule, idents, cn, req.user, "certificate"),
            },
        };
        (Some(rule), verdict)
    }
}

/// The line's `clientcert=`, checked before its method (as PostgreSQL does for verify-ca; for
/// verify-full the name is checked here too, before any password is asked for). A certificate
/// is only ever at hand verified (client_tls_ca_file); without one the line refuses.
fn client_cert_refusal(
    rule: &HbaRule,
    idents: Option<&IdentMaps>,
    req: &HbaRequest<'_>,
) -> Option<HbaVerdict> {
    let need = rule.client_cert?;
    let at = rule.location();
    let Some(cn) = req.cert_cn.filter(|_| req.is_tls) else {
        return Some(HbaVerdict::CertificateRequired(format!(
            "the connection has no valid client certificate (clientcert={}), hba line {at}",
            need.as_str()
        )));
    };
    if need == ClientCert::VerifyFull && rule.method != HbaMethod::Cert {
        if let HbaVerdict::Refuse(why) = identify(rule, idents, cn, req.user, "certificate") {
            return Some(HbaVerdict::CertificateRequired(format!(
                "clientcert=verify-full: {why}"
            )));
        }
    }
    None
}

/// Peer/cert: the external identity must equal the user, or the rule's ident map must permit it.
fn identify(
    rule: &HbaRule,
    idents: Option<&IdentMaps>,
    system_user: &str,
    user: &str,
    what: &str,
) -> HbaVerdict {
    let at = rule.location();
    let ok = match &rule.map {
        None => system_user == user,
        Some(map) => match idents {
            Some(i) if i.has_map(map) => i.permits(map, system_user, user),
            _ => {
                return HbaVerdict::Refuse(format!(
                    "{what} authentication: ident map \"{map}\" is not defined, hba line {at}"
                ))
            }
        },
    };
    if ok {
        HbaVerdict::Identified
    } else {
        HbaVerdict::Refuse(format!(
            "{what} authentication failed: \"{system_user}\" may not log in as \"{user}\", hba line {at}"
        ))
    }
}

fn rule_applies(rule: &HbaRule, req: &HbaRequest<'_>) -> bool {
    let addr_ok = match (req.addr, rule.conn) {
        (ClientAddr::Unix, HbaConnType::Local) => true,
        (ClientAddr::Unix, _) | (ClientAddr::Ip(_), HbaConnType::Local) => false,
        (ClientAddr::Ip(_), HbaConnType::HostSsl) if !req.is_tls => false,
        (ClientAddr::Ip(_), HbaConnType::HostNoSsl) if req.is_tls => false,
        (ClientAddr::Ip(ip), _) => rule.address.is_some_and(|a| a.contains(ip)),
    };
    addr_ok
        && rule
            .databases
            .matches_database(req.database, req.user, req.physical_replication)
        && rule.users.matches(req.user, req.user)
}
