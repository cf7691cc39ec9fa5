//! Startup phase: SSLRequest answered 'S' and upgraded when client TLS is on ('N' otherwise), direct
//! TLS (PostgreSQL 17) accepted, GSSENCRequest answered 'N', CancelRequest forwarded, StartupMessage
//! validated into user, database and tracked parameters (PgBouncer's rules for unknown parameters).

use std::sync::Arc;

use sluice_protocol::{
    decode_startup, encode_negotiate_protocol_version, startup_len, StartupPacket,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::app::App;
use crate::cancel;
use crate::cancel::peers;
use crate::conn::{ClientConn, EndReason, CLIENT_READ_CHUNK};
use crate::error::{sqlstate, ClientNotice};
use crate::server::params::ParamMap;
use crate::server::ServerAddr;

/// Longest user name and database name accepted (PgBouncer's limits).
const MAX_USER_LEN: usize = 127;
const MAX_DBNAME_LEN: usize = 63;

/// What the client asked for.
#[derive(Debug, Clone)]
pub struct StartupInfo {
    pub user: String,
    pub database: String,
    /// Tracked parameters from the startup packet and `options -c`.
    pub params: ParamMap,
    /// `replication=database|true` (a replication client: its own server, `replication.rs`).
    /// Such a client's `options` is kept in `params` as it is, for its server.
    pub replication: Replication,
}

/// The `replication` startup parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replication {
    /// Absent or false: an ordinary client.
    #[default]
    None,
    /// `database`: logical replication (SQL allowed too).
    Logical,
    /// A true boolean: physical replication.
    Physical,
}

impl Replication {
    /// PostgreSQL's reading of the value: `database` (exactly), or a boolean as its `parse_bool`
    /// takes one (true/false, yes/no, on/off, 1/0, any case, unambiguous prefixes). None: invalid.
    pub fn parse(v: &str) -> Option<Replication> {
        if v == "database" {
            return Some(Replication::Logical);
        }
        let l = v.to_ascii_lowercase();
        let prefix_of = |word: &str, min: usize| l.len() >= min && word.starts_with(l.as_str());
        if l == "1" || prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) {
            Some(Replication::Physical)
        } else if l == "0" || prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) {
            Some(Replication::None)
        } else {
            None
        }
    }

    /// SHOW CLIENTS / SHOW SERVERS `replication`.
    pub fn as_str(self) -> &'static str {
        match self {
            Replication::None => "none",
            Replication::Logical => "logical",
            Replication::Physical => "physical",
        }
    }

    /// The `login attempt` log line's `replication=` (PgBouncer 1.25.2's words).
    pub fn log_value(self) -> &'static str {
        match self {
            Replication::None => "no",
            Replication::Logical => "database",
            Replication::Physical => "yes",
        }
    }

    /// The value sent to the server.
    pub(super) fn startup_value(self) -> &'static str {
        match self {
            Replication::Logical => "database",
            _ => "true",
        }
    }
}

/// Returned once and taken apart at once: boxing the large variant would cost every login an
/// allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Startup {
    Login(StartupInfo),
    /// The connection was a cancel request (handled) or closed before a startup packet.
    Done,
}

fn protocol_error(msg: impl Into<String>) -> EndReason {
    EndReason::Error(ClientNotice::new(sqlstate::PROTOCOL_VIOLATION, msg))
}

pub async fn read_startup(app: &Arc<App>, client: &mut ClientConn) -> Result<Startup, EndReason> {
    // One TLS snapshot for the whole handshake, so a RELOAD in between cannot mix configs.
    let tls = app.tls.load_full();
    if tls.client.offered() {
        match crate::tls::handshake::peek_direct(client).await {
            // Boxed: a TLS handshake's state (~1.3 KiB) would otherwise size every plaintext
            // login in flight for it.
            Ok(true) => {
                Box::pin(crate::tls::handshake::upgrade(
                    &tls.client,
                    client,
                    true,
                    &app.auth_cpu,
                ))
                .await?
            }
            Ok(false) => {}
            Err(_) => return Ok(Startup::Done),
        }
    }
    // libpq may ask for GSS encryption and then for TLS, once each; a second request of the same
    // kind is refused, as PostgreSQL does (otherwise a client could loop here until the timeout).
    let (mut asked_ssl, mut asked_gss) = (false, false);
    loop {
        // Split off whole, and decoded from there: the parameters borrow these bytes until the
        // login has copied what it keeps (no string per parameter).
        let frame = loop {
            match startup_len(&client.rbuf) {
                Ok(Some(len)) => break client.rbuf.split_to(len),
                Ok(None) => {
                    // Nothing of the packet yet: no buffer held while waiting for it
                    // (`read_when_ready`); a packet begun is read on into the same buffer.
                    let read = if client.rbuf.is_empty() {
                        client
                            .stream
                            .read_when_ready(&mut client.rbuf, CLIENT_READ_CHUNK)
                            .await
                    } else {
                        client.rbuf.reserve(512);
                        client.stream.read_buf(&mut client.rbuf).await
                    };
                    match read {
                        Ok(0) | Err(_) => {
                            return if client.rbuf.is_empty() {
                                Ok(Startup::Done)
                            } else {
                                Err(protocol_error("bad startup packet: truncated"))
                            }
                        }
                        Ok(_) => {}
                    }
                }
                Err(e) => return Err(protocol_error(format!("bad startup packet: {e}"))),
            }
        };
        let packet = match decode_startup(&frame) {
            Ok(Some((p, _))) => p,
            Ok(None) => return Err(protocol_error("bad startup packet: truncated")),
            Err(e) => return Err(protocol_error(format!("bad startup packet: {e}"))),
        };
        match packet {
            StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
                if !client.rbuf.is_empty() {
                    // Bytes pipelined after an encryption request would be read as plaintext
                    // (or, after 'S', as if they came through TLS: CVE-2021-23222).
                    return Err(protocol_error("unexpected data after SSLRequest"));
                }
                if client.stream.is_tls() {
                    return Err(protocol_error(
                        "unexpected encryption request after TLS was negotiated",
                    ));
                }
                let ssl = matches!(packet, StartupPacket::SslRequest);
                let asked = if ssl { &mut asked_ssl } else { &mut asked_gss };
                if std::mem::replace(asked, true) {
                    return Err(protocol_error(if ssl {
                        "duplicate SSLRequest"
                    } else {
                        "duplicate GSSENCRequest"
                    }));
                }
                if ssl && tls.client.offered() && client.stream.tcp().is_some() {
                    client
                        .stream
                        .write_all(b"S")
                        .await
                        .map_err(|_| EndReason::ClientClosed)?;
                    Box::pin(crate::tls::handshake::upgrade(
                        &tls.client,
                        client,
                        false,
                        &app.auth_cpu,
                    ))
                    .await?;
                    continue;
                }
                client
                    .stream
                    .write_all(b"N")
                    .await
                    .map_err(|_| EndReason::ClientClosed)?;
            }
            StartupPacket::Cancel(key) => {
                // Boxed: forwarding a cancel (~1.2 KiB of state) would size every login for it.
                Box::pin(handle_cancel(app, key)).await;
                return Ok(Startup::Done);
            }
            StartupPacket::Startup { minor, params } => {
                if tls.client.required() && !client.stream.is_tls() && !client.stream.is_unix() {
                    return Err(EndReason::Error(
                        ClientNotice::new(sqlstate::INVALID_AUTHORIZATION, "SSL required")
                            .with_hint(format!(
                                "client_tls_sslmode is {}: connect with TLS (sslmode=require or stronger)",
                                tls.client.mode
                            )),
                    ));
                }
                return validate(app, client, minor, params)
                    .await
                    .map(Startup::Login);
            }
        }
    }
}

/// Forward a CancelRequest; the client's connection closes once the server has closed the
/// forwarded one (see `cancel::forward`), or at once for an unknown key.
async fn handle_cancel(app: &Arc<App>, mut key: sluice_protocol::CancelKey) {
    let own = app.config().settings.peer_id;
    if own > 0 {
        let peer = peers::peer_of(&key);
        if peer != own {
            return forward_to_peer(app, peer, key).await;
        }
        // A key that came through peers has a lower TTL than the one registered.
        key = peers::with_ttl(&key, peers::TTL_MAX);
    }
    let limit = app.config().settings.cancel_wait_timeout.as_duration();
    let Some(cancel) = app.cancels.lookup(&key) else {
        // A client still served by the process this one took over from (mid-transaction, TLS,
        // session mode): the cancel goes there.
        if !app.takeover.forward_cancel(key, limit).await {
            tracing::debug!("cancel request with unknown key ignored");
        }
        return;
    };
    // `cancel` (counted on the client's slot) lives until PostgreSQL has closed the forwarded
    // connection: a server the client releases meanwhile waits for it (`CancelSlot::settled`).
    if let Err(e) = cancel::forward((*cancel.addr).clone(), cancel.server_key, limit).await {
        tracing::warn!("cancel request to {} failed: {e}", cancel.addr);
    }
}

/// A cancel for another process of the peer group: forwarded, key and all, with one hop less.
async fn forward_to_peer(app: &Arc<App>, peer: u16, key: sluice_protocol::CancelKey) {
    let ttl = peers::ttl(&key);
    if ttl == 0 {
        tracing::debug!("cancel request for peer {peer} dropped: forwarded too often");
        return;
    }
    let cfg = app.config();
    let Some(entry) = cfg.peer(peer) else {
        tracing::debug!("cancel request for unknown peer {peer} ignored");
        return;
    };
    let Some(addr) = ServerAddr::parse_hosts(Some(&entry.host), entry.port, "")
        .into_iter()
        .next()
    else {
        return;
    };
    let size = entry.pool_size.unwrap_or(cfg.settings.default_pool_size) as usize;
    let limit = cfg.settings.cancel_wait_timeout.as_duration();
    let pool = app.peer_pools.get(peer, size);
    let forwarded = peers::with_ttl(&key, ttl - 1);
    if let Err(e) = pool
        .run(cancel::forward(addr.clone(), forwarded, limit))
        .await
    {
        tracing::warn!("cancel request to peer {peer} ({addr}) failed: {e}");
    }
}

async fn validate(
    app: &Arc<App>,
    client: &mut ClientConn,
    minor: u16,
    params: Vec<(&str, &str)>,
) -> Result<StartupInfo, EndReason> {
    let cfg = app.config();
    let ignore = &cfg.settings.ignore_startup_parameters;
    let ignored = |name: &str| ignore.iter().any(|i| i.eq_ignore_ascii_case(name));
    let mut user = None;
    let mut database = None;
    let mut tracked = ParamMap::new();
    let mut negotiate: Vec<&str> = Vec::new();
    // Known before `options` is read: a replication client's goes to its server untouched.
    let mut replication = Replication::None;
    for (k, v) in &params {
        if *k == "replication" {
            replication = Replication::parse(v).ok_or_else(|| {
                EndReason::Error(ClientNotice::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid value for parameter \"replication\": \"{v}\""),
                ))
            })?;
        }
    }
    for (k, v) in params {
        match k {
            "user" => user = Some(v),
            "database" => database = Some(v),
            "replication" => {}
            "options" if replication != Replication::None => {
                tracked.set("options", v);
            }
            "options" => parse_options(app, v, &mut tracked, ignored)?,
            _ if k.starts_with("_pq_.") => negotiate.push(k),
            _ => {
                if let Some(name) = app.tracked.canonical(k) {
                    tracked.set(name, v);
                } else if !ignored(k) {
                    return Err(protocol_error(format!(
                        "unsupported startup parameter: {k}"
                    )));
                }
            }
        }
    }
    let user = user
        .filter(|u| !u.is_empty())
        .ok_or_else(|| protocol_error("no username supplied"))?
        .to_owned();
    if user.len() > MAX_USER_LEN {
        return Err(protocol_error("username too long"));
    }
    let database = database
        .filter(|d| !d.is_empty())
        .map_or_else(|| user.clone(), str::to_owned);
    if database.len() > MAX_DBNAME_LEN {
        return Err(protocol_error("database name too long"));
    }
    if minor > 0 || !negotiate.is_empty() {
        encode_negotiate_protocol_version(0, &negotiate, &mut client.wbuf);
    }
    client.names = Some(crate::conn::ClientNames::new(&database, &user));
    Ok(StartupInfo {
        user,
        database,
        params: tracked,
        replication,
    })
}

/// `options`, read as PgBouncer 1.25 reads it: settings `-c name=value` (space after `-c`
/// optional) or `--name=value`, separated by whitespace, a backslash taking the next character
/// as it is (`\ ` a space, `\\` a backslash). Tracked parameters are kept (and sent to servers as
/// SETs); another name is dropped when ignore_startup_parameters lists it or `options`, and
/// refused otherwise. Anything that is not such a setting (trailing whitespace included) is
/// refused, whatever ignore_startup_parameters says.
fn parse_options(
    app: &Arc<App>,
    options: &str,
    tracked: &mut ParamMap,
    ignored: impl Fn(&str) -> bool,
) -> Result<(), EndReason> {
    for setting in option_settings(options)? {
        let (k, v) = setting;
        if let Some(name) = app.tracked.canonical(&k) {
            tracked.set(name, &v);
        } else if !(ignored(&k) || ignored("options")) {
            return Err(protocol_error(format!(
                "unsupported startup parameter in options: {k}"
            )));
        }
    }
    Ok(())
}

/// The (name, value) settings of an `options` value, or PgBouncer's refusal of its form.
fn option_settings(options: &str) -> Result<Vec<(String, String)>, EndReason> {
    let only = || {
        protocol_error(
            "unsupported options startup parameter: only '-c config=val' and '--config=val' are allowed",
        )
    };
    // C's isspace(), as PgBouncer skips it.
    let space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c');
    let mut out = Vec::new();
    let mut rest = options;
    while !rest.is_empty() {
        rest = rest.trim_start_matches(space);
        rest = if let Some(r) = rest.strip_prefix("-c") {
            r.trim_start_matches(space)
        } else if let Some(r) = rest.strip_prefix("--") {
            r
        } else {
            return Err(only());
        };
        let mut arg = String::new();
        let mut chars = rest.char_indices();
        let mut end = rest.len();
        while let Some((i, c)) = chars.next() {
            if space(c) {
                end = i;
                break;
            }
            if c == '\\' {
                match chars.next() {
                    Some((_, n)) => arg.push(n),
                    None => break,
                }
            } else {
                arg.push(c);
            }
        }
        rest = &rest[end..];
        let (k, v) = arg.split_once('=').ok_or_else(only)?;
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::option_settings;

    fn settings(o: &str) -> Option<Vec<(String, String)>> {
        option_settings(o).ok()
    }

    fn pairs(p: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
        Some(
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn options_are_read_as_pgbouncer_reads_them() {
        assert_eq!(settings(""), pairs(&[]));
        assert_eq!(
            settings("-c DateStyle=YMD -cTimeZone=UTC  --application_name=a=b"),
            pairs(&[
                ("DateStyle", "YMD"),
                ("TimeZone", "UTC"),
                ("application_name", "a=b")
            ])
        );
        assert_eq!(
            settings(r"-c application_name=my\ app\\x"),
            pairs(&[("application_name", r"my app\x")])
        );
        assert_eq!(
            settings("  -c DateStyle=YMD"),
            pairs(&[("DateStyle", "YMD")])
        );
        // PgBouncer refuses these forms.
        for bad in [
            "   ",
            "-c DateStyle=YMD ",
            "-x",
            "-c DateStyle",
            "-c",
            "DateStyle=YMD",
        ] {
            assert_eq!(settings(bad), None, "{bad:?}");
        }
    }
}
