//! Open a server connection: TCP (with TLS per server_tls_sslmode) or Unix socket, startup
//! packet, login, connect_query, all under server_connect_timeout.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sluice_protocol::{encode_startup, ScramKeys};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use super::log::ServerLog;
use super::login_machine::LoginRules;
use super::{login, query, ServerAddr, ServerConn, ServerTarget};
use crate::auth::cpu::AuthCpu;
use crate::error::ServerError;
use crate::net::socket::{connect_tuned, TcpTuning};
use crate::net::Stream;
use crate::tls::{ServerTls, ServerTlsError};

/// Settings that shape every new server connection.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub connect_timeout: Duration,
    pub tcp: TcpTuning,
    pub max_packet_size: usize,
    /// server_tls_* as of the pool's last settings refresh.
    pub tls: Arc<ServerTls>,
    /// dns_max_ttl / dns_nxdomain_ttl.
    pub dns_ttl: crate::net::dns::DnsTtl,
    /// log_connections / log_disconnections and the pool's name in those lines.
    pub log: ServerLog,
    /// server_scram_max_iterations, server_require_auth.
    pub login: LoginRules,
}

/// Connect and log in. The result is idle (ReadyForQuery 'I').
pub async fn open(
    id: crate::ids::ServerId,
    target: &ServerTarget,
    keys: Option<&ScramKeys>,
    opts: &ConnectOptions,
    dns: &crate::net::dns::DnsCache,
    cpu: &AuthCpu,
) -> Result<ServerConn, ServerError> {
    let Some((index, addr)) = target.pick_addr() else {
        return Err(ServerError::Unexpected("database has no host".into()));
    };
    let addr = addr.clone();
    let r = open_addr(id, &addr, target, keys, opts, dns, cpu).await;
    if r.is_err() {
        target.connect_failed(index);
    }
    r
}

/// `open` to one given host of the target (failover's host choice, the health checker).
pub async fn open_addr(
    id: crate::ids::ServerId,
    addr: &ServerAddr,
    target: &ServerTarget,
    keys: Option<&ScramKeys>,
    opts: &ConnectOptions,
    dns: &crate::net::dns::DnsCache,
    cpu: &AuthCpu,
) -> Result<ServerConn, ServerError> {
    let addr = addr.clone();
    let started = tokio::time::Instant::now();
    let work = async {
        let (stream, tls) = match &addr {
            ServerAddr::Tcp { host, port } => {
                let ips = dns
                    .resolve(host, opts.dns_ttl)
                    .await
                    .map_err(|e| ServerError::Dns(e.to_string()))?;
                let addrs: Vec<std::net::SocketAddr> = ips
                    .into_iter()
                    .map(|ip| std::net::SocketAddr::new(ip, *port))
                    .collect();
                let s = connect_tuned(&addrs, &opts.tcp).await?;
                opts.tls.connect(s, host, cpu).await.map_err(|e| match e {
                    // The server went away while asked for TLS: a network failure (retried after
                    // server_login_retry), not a refusal.
                    ServerTlsError::Io(io) => ServerError::Io(io),
                    e => ServerError::Tls(e.to_string()),
                })?
            }
            ServerAddr::Unix { path } => (Stream::Unix(UnixStream::connect(path).await?), None),
        };
        let mut conn = ServerConn::new(id, stream, addr.clone());
        conn.tls = tls;
        // Once connected, before the login, as PgBouncer writes it: a login the server then
        // refuses has its `new connection` line too.
        opts.log.connected(&conn);
        let mut params: Vec<(&str, &str)> =
            vec![("user", &target.user), ("database", &target.dbname)];
        for (k, v) in &target.startup_params {
            params.push((k, v));
        }
        let mut out = BytesMut::with_capacity(128);
        encode_startup(&params, &mut out);
        conn.stream.write_all(&out).await?;
        login::login(
            &mut conn,
            target,
            keys,
            opts.max_packet_size,
            &opts.login,
            cpu,
        )
        .await?;
        if let Some(q) = target.connect_query.as_deref().filter(|q| !q.is_empty()) {
            match query::run_simple(&mut conn, q, opts.max_packet_size).await {
                Ok(()) => {}
                Err(ServerError::Query(f)) => {
                    tracing::warn!("connect_query failed on {}: {}", conn.addr, f.message)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(conn)
    };
    let r = match tokio::time::timeout(opts.connect_timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(ServerError::ConnectTimeout),
    };
    match &r {
        Ok(_) => {}
        Err(e) => {
            match e {
                ServerError::Login(f) => opts.log.login_refused(id, &addr, &f.severity, &f.message),
                // The pooler's own refusal of what a server sent: always logged, naming the
                // server (a hostile or broken server is an operator's business).
                ServerError::Refused { reason, .. } => tracing::warn!(
                    "S-{}: {}/{} {}: server login refused: {}",
                    id,
                    target.dbname,
                    target.user,
                    addr,
                    reason
                ),
                _ => {}
            }
            opts.log
                .closing(id, &addr, started.elapsed(), &e.close_reason());
        }
    }
    r
}
