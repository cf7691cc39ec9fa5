//! How a pool opens servers: the real PostgreSQL connector, replaceable in pool tests. The real
//! one also learns each server's facts (`server::facts`) on a fresh connection now and then.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_protocol::ScramKeys;

use crate::auth::cpu::AuthCpu;
use crate::error::ServerError;
use crate::hosts::HostBook;
use crate::server::connect::{self, ConnectOptions};
use crate::server::facts::{self, ServerFactsBook};
use crate::server::{ServerConn, ServerTarget};

pub type ConnectFuture = Pin<Box<dyn Future<Output = Result<ServerConn, ServerError>> + Send>>;

pub trait Connector: Send + Sync + 'static {
    fn connect(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture;

    /// A server for one client alone (a replication connection): connected and logged in as
    /// `connect` does, without asking it anything afterwards.
    fn connect_dedicated(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture {
        self.connect(target, keys, opts)
    }

    /// The number sequence its servers take their ids from, for the pooler's clients to share
    /// (None: clients number themselves). One sequence makes every id in SHOW SOCKETS unique, as
    /// PgBouncer's are.
    fn id_sequence(&self) -> Option<Arc<AtomicU64>> {
        None
    }

    /// What this connector has learned of the servers it connects to (None: it learns nothing).
    fn server_facts(&self) -> Option<&ServerFactsBook> {
        None
    }

    /// The host names it keeps resolved (None: it resolves none).
    fn dns(&self) -> Option<&crate::net::dns::DnsCache> {
        None
    }

    /// The health of the hosts of databases with failover (None: this connector checks none).
    fn host_book(&self) -> Option<&HostBook> {
        None
    }

    /// The bounded pool its logins run key derivations on, for the pooler's client logins to
    /// share (None: clients get a pool of their own).
    fn auth_cpu(&self) -> Option<AuthCpu> {
        None
    }
}

/// Connects to real servers over TCP or Unix sockets, numbering them (the S-<id> of log lines and
/// SHOW SERVERS) in the order they are opened, process-wide: one connector per `App`, whose
/// clients take their ids from the same sequence.
#[derive(Debug)]
pub struct PgConnector {
    next_id: Arc<AtomicU64>,
    facts: Arc<ServerFactsBook>,
    /// Server host names resolved (dns_max_ttl, dns_nxdomain_ttl).
    dns: Arc<crate::net::dns::DnsCache>,
    /// Host roles and health of databases with a host list or target_session_attrs.
    hosts: Arc<HostBook>,
    /// Where server logins derive SCRAM keys (shared with the clients' side through `auth_cpu`).
    cpu: AuthCpu,
}

impl Default for PgConnector {
    fn default() -> Self {
        let dns: Arc<crate::net::dns::DnsCache> = Arc::default();
        let cpu = AuthCpu::for_this_machine();
        PgConnector {
            next_id: Arc::new(AtomicU64::new(1)),
            facts: Arc::default(),
            cpu: cpu.clone(),
            hosts: Arc::new(HostBook::new(dns.clone(), cpu)),
            dns,
        }
    }
}

impl Connector for PgConnector {
    fn connect(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture {
        let id = crate::ids::ServerId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let book = self.facts.clone();
        let dns = self.dns.clone();
        let hosts = self.hosts.clone();
        let cpu = self.cpu.clone();
        Box::pin(async move {
            let mut conn = match &target.failover {
                Some(f) => hosts.connect(id, &target, keys.as_ref(), &opts, f).await?,
                None => connect::open(id, &target, keys.as_ref(), &opts, &dns, &cpu).await?,
            };
            let addr = conn.addr.to_string();
            if book.claim(&addr) {
                let asked = facts::learn(&mut conn, opts.max_packet_size);
                let failed = match tokio::time::timeout(opts.connect_timeout, asked).await {
                    Ok(Ok(Some(f))) => {
                        book.record(&addr, f);
                        None
                    }
                    Ok(Ok(None)) => None,
                    Ok(Err(e)) => Some(e),
                    Err(_) => Some(ServerError::ConnectTimeout),
                };
                if let Some(e) = failed {
                    opts.log.closing_conn(&conn, &e.close_reason());
                    return Err(e);
                }
            }
            Ok(conn)
        })
    }

    fn connect_dedicated(
        &self,
        target: Arc<ServerTarget>,
        keys: Option<ScramKeys>,
        opts: ConnectOptions,
    ) -> ConnectFuture {
        let id = crate::ids::ServerId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let dns = self.dns.clone();
        let cpu = self.cpu.clone();
        Box::pin(async move { connect::open(id, &target, keys.as_ref(), &opts, &dns, &cpu).await })
    }

    fn id_sequence(&self) -> Option<Arc<AtomicU64>> {
        Some(self.next_id.clone())
    }

    fn dns(&self) -> Option<&crate::net::dns::DnsCache> {
        Some(&self.dns)
    }

    fn server_facts(&self) -> Option<&ServerFactsBook> {
        Some(&self.facts)
    }

    fn host_book(&self) -> Option<&HostBook> {
        Some(&self.hosts)
    }

    fn auth_cpu(&self) -> Option<AuthCpu> {
        Some(self.cpu.clone())
    }
}
