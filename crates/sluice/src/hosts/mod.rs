//! Host roles, health and failover for [databases] entries that set target_session_attrs (with a
//! host list, or a role other than `any`): one shared health record and checker per distinct host (`health.rs`,
//! `checker.rs`), the pure host choice (`select.rs`), a server's role at login (`role.rs`), and
//! the connect that picks a host of the right role or holds its clients through a failover
//! (`connect.rs`). Entries without it never come here: they connect as PgBouncer's do.

mod checker;
mod connect;
pub mod health;
pub mod role;
pub mod select;
pub mod ticket;
pub mod view;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_protocol::ScramKeys;
use tokio::sync::Notify;

pub use health::HostHealth;
pub use view::{HostView, Role};

use crate::auth::cpu::AuthCpu;
use crate::net::dns::DnsCache;
use crate::server::connect::ConnectOptions;
use crate::server::{ServerAddr, ServerTarget};
use health::CheckLogin;

/// Every host some pool with failover has used, by address (one `HostHealth` and at most one
/// checker each, whatever the number of pools).
pub struct HostBook {
    hosts: Mutex<HashMap<ServerAddr, Arc<HostHealth>>>,
    /// Any host's view changed.
    changed: Arc<Notify>,
    /// The sequence every view's `poll_seq` is taken from.
    seq: Arc<std::sync::atomic::AtomicU64>,
    dns: Arc<DnsCache>,
    /// Where the checkers' and failover connects' SCRAM key derivations run.
    cpu: AuthCpu,
}

impl std::fmt::Debug for HostBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBook").finish_non_exhaustive()
    }
}

impl HostBook {
    pub fn new(dns: Arc<DnsCache>, cpu: AuthCpu) -> Self {
        HostBook {
            hosts: Mutex::default(),
            changed: Arc::new(Notify::new()),
            seq: Arc::default(),
            dns,
            cpu,
        }
    }

    /// The health of each host of `target`, in list order; `target`'s login checks any host that
    /// has no live one, and a checker starts for each host that has none running.
    pub fn members(
        &self,
        target: &Arc<ServerTarget>,
        keys: Option<&ScramKeys>,
        opts: &ConnectOptions,
    ) -> Vec<Arc<HostHealth>> {
        self.enlist(target, keys, opts, false)
    }

    /// A pool's new settings (reload): its target's login checks its hosts from now on (the old
    /// target, whose login they may have used, goes with the old settings).
    pub fn adopt(
        &self,
        target: &Arc<ServerTarget>,
        keys: Option<&ScramKeys>,
        opts: &ConnectOptions,
    ) {
        drop(self.enlist(target, keys, opts, true));
    }

    fn enlist(
        &self,
        target: &Arc<ServerTarget>,
        keys: Option<&ScramKeys>,
        opts: &ConnectOptions,
        take_over: bool,
    ) -> Vec<Arc<HostHealth>> {
        let members: Vec<Arc<HostHealth>> = {
            let mut hosts = self.hosts.lock();
            target
                .addrs
                .iter()
                .map(|a| {
                    hosts
                        .entry(a.clone())
                        .or_insert_with(|| {
                            Arc::new(HostHealth::new(
                                a.clone(),
                                self.changed.clone(),
                                self.seq.clone(),
                            ))
                        })
                        .clone()
                })
                .collect()
        };
        let database = opts.log.pool.split('/').next().unwrap_or("").to_string();
        for m in &members {
            m.add_peers(&members);
            {
                let mut dbs = m.databases.lock();
                if !dbs.contains(&database) {
                    dbs.insert(database.clone());
                }
            }
            {
                let mut login = m.login.lock();
                let live = login.as_ref().is_some_and(|l| l.target.strong_count() > 0);
                if !live || take_over {
                    *login = Some(CheckLogin {
                        target: Arc::downgrade(target),
                        keys: keys.cloned(),
                        opts: opts.clone(),
                    });
                } else if let (Some(l), Some(k)) = (login.as_mut(), keys) {
                    // SCRAM pass-through keys arrive with the first client.
                    if l.keys.is_none() && std::ptr::eq(l.target.as_ptr(), Arc::as_ptr(target)) {
                        l.keys = Some(k.clone());
                    }
                }
            }
            if !m.running.swap(true, Ordering::AcqRel) {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(checker::run(m.clone(), self.dns.clone(), self.cpu.clone()));
                } else {
                    m.running.store(false, Ordering::Release);
                }
            }
        }
        members
    }

    /// Every host known, by address (SHOW HOSTS, /metrics).
    pub fn all(&self) -> Vec<Arc<HostHealth>> {
        let mut v: Vec<Arc<HostHealth>> = self.hosts.lock().values().cloned().collect();
        v.sort_by_key(|h| h.addr.to_string());
        v
    }

    /// The views of `addrs`' hosts, in order (None for a host never used with failover): what
    /// read routing reads (role, in rotation, WAL positions with their poll sequence number).
    pub fn views(&self, addrs: &[ServerAddr]) -> Vec<Option<Arc<HostView>>> {
        let hosts = self.hosts.lock();
        addrs
            .iter()
            .map(|a| hosts.get(a).map(|h| h.view()))
            .collect()
    }

    /// The shared health of `addrs`' hosts, in order (None for a host never used with failover):
    /// a router keeps these and reads each `view()` with one atomic load.
    pub fn health_of(&self, addrs: &[ServerAddr]) -> Vec<Option<Arc<HostHealth>>> {
        let hosts = self.hosts.lock();
        addrs.iter().map(|a| hosts.get(a).cloned()).collect()
    }
}
