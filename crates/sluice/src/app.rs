//! The shared state of one pooler instance, passed to every task (no globals): config snapshot,
//! credentials, pools, cancel keys, lifecycle. Reload lives here because it touches all of them.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rand::RngCore;
use sluice_config::{Config, ConfigError, Effect, ReloadDiff};

use crate::auth::credentials::Credentials;
use crate::auth::hba_state::HbaState;
use crate::auth::scram_cache::ScramCache;
use crate::cancel::CancelRegistry;
use crate::client::kill::KillReason;
use crate::client::limits::ClientCounts;
use crate::client::registry::ClientRegistry;
use crate::lifecycle::{Control, Lifecycle};
use crate::pool::connector::Connector;
use crate::pool::registry::PoolRegistry;
use crate::prepared::StatementRegistry;
use crate::server::params::TrackedSet;
use crate::stats::period::StatsBook;
use crate::stats::PoolStats;
use crate::targets;
use crate::tls::TlsSetup;

pub struct App {
    pub config_path: PathBuf,
    pub config: ArcSwap<Config>,
    /// TLS configs of both sides, rebuilt on RELOAD (a broken certificate keeps the old ones).
    pub tls: ArcSwap<TlsSetup>,
    /// TLS and basic auth of the HTTP endpoint, rebuilt on RELOAD like `tls`.
    pub metrics_access: ArcSwap<crate::metrics::access::Access>,
    pub credentials: Credentials,
    /// auth_type = hba rules (auth_hba_file + auth_ident_file).
    pub hba: HbaState,
    /// SCRAM secrets derived from plaintext passwords.
    pub scram_cache: ScramCache,
    /// Where CPU-heavy login work runs (PBKDF2, TLS handshakes), off the relay threads; shared
    /// with the server side's connector.
    pub auth_cpu: crate::auth::cpu::AuthCpu,
    /// Failed client logins (sluice_client_login_failures_total).
    pub login_failures: AtomicU64,
    pub pools: PoolRegistry,
    pub cancels: Arc<CancelRegistry>,
    /// Cancels forwarded to the other processes of a peer group (`peers.rs`).
    pub peer_pools: crate::cancel::peers::PeerPools,
    /// Live clients (SHOW CLIENTS, KILL_CLIENT).
    pub registry: Arc<ClientRegistry>,
    /// Logged-in clients per database and per login user (max_*_client_connections).
    pub client_counts: Arc<ClientCounts>,
    /// Protocol-level prepared statements shared by all clients and servers.
    pub statements: StatementRegistry,
    pub lifecycle: Lifecycle,
    /// PAUSE / SUSPEND / DISABLE switches set from the admin console and signals.
    pub control: Control,
    /// Averages of the last stats_period (SHOW STATS avg_*, the stats log line).
    pub stats_book: StatsBook,
    /// The pool advisor's windows (SHOW ADVICE, /advice).
    pub advisor: crate::advice::history::Advisor,
    /// The admin console's own figures (its row in SHOW STATS / SHOW POOLS).
    pub admin_stats: PoolStats,
    /// Logged-in admin console clients.
    pub admin_clients: AtomicUsize,
    /// Set once the listeners accept connections (readiness in /health).
    pub listening: AtomicBool,
    pub started: SystemTime,
    /// track_extra_parameters is not reloadable, so the tracked set is fixed at start.
    pub tracked: TrackedSet,
    /// Connected clients (all phases), for max_client_conn and WAIT_FOR_CLIENTS.
    pub client_count: AtomicUsize,
    /// Client ids: the connector's server id sequence when it has one (ids unique among all
    /// connections, as PgBouncer's `id` column).
    next_client_id: Arc<AtomicU64>,
    /// Key for deterministic mock SCRAM salts of unknown users.
    pub mock_key: [u8; 32],
    warned_unsupported: Mutex<HashSet<String>>,
    /// The worker runtimes clients are spread over (none installed: the current runtime).
    pub workers: crate::workers::Workers,
    /// The logfile to reopen and the service manager to notify, set by `main` (none in tests).
    pub hooks: std::sync::OnceLock<crate::process::ProcessHooks>,
    /// Binary upgrades: this process's side of a takeover, either way.
    pub takeover: crate::takeover::handle::Takeover,
}

impl App {
    pub fn new(
        config_path: PathBuf,
        config: Config,
        connector: Arc<dyn Connector>,
    ) -> Result<Arc<Self>, ConfigError> {
        let credentials = Credentials::empty();
        credentials.load(config.settings.auth_file.as_deref())?;
        let hba = HbaState::default();
        hba.load(&config.settings)?;
        let tls = TlsSetup::load(&config.settings)
            .map_err(|e| e.into_config_error(&config_path.display().to_string()))?;
        let metrics_access = crate::metrics::access::Access::load(&config)?;
        let mut mock_key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut mock_key);
        let stat_shards = worker_count(config.sluice.workers);
        let ids = connector
            .id_sequence()
            .unwrap_or_else(|| Arc::new(AtomicU64::new(1)));
        let auth_cpu = connector
            .auth_cpu()
            .unwrap_or_else(crate::auth::cpu::AuthCpu::for_this_machine);
        let app = Arc::new(App {
            config_path,
            tracked: TrackedSet::new(&config.settings.track_extra_parameters),
            config: ArcSwap::from_pointee(config),
            tls: ArcSwap::from_pointee(tls),
            metrics_access: ArcSwap::from_pointee(metrics_access),
            credentials,
            hba,
            scram_cache: ScramCache::new(auth_cpu.clone()),
            auth_cpu,
            login_failures: AtomicU64::new(0),
            pools: PoolRegistry::new(connector, stat_shards),
            cancels: Arc::new(CancelRegistry::default()),
            peer_pools: Default::default(),
            registry: Arc::new(ClientRegistry::default()),
            client_counts: Arc::default(),
            statements: StatementRegistry::default(),
            lifecycle: Lifecycle::default(),
            control: Control::default(),
            stats_book: StatsBook::default(),
            advisor: Default::default(),
            admin_stats: PoolStats::default(),
            admin_clients: AtomicUsize::new(0),
            listening: AtomicBool::new(false),
            started: SystemTime::now(),
            client_count: AtomicUsize::new(0),
            next_client_id: ids,
            mock_key,
            warned_unsupported: Mutex::new(HashSet::new()),
            workers: Default::default(),
            hooks: std::sync::OnceLock::new(),
            takeover: Default::default(),
        });
        app.warn_unsupported();
        for note in &app.config().notes {
            tracing::info!("{note}");
        }
        Ok(app)
    }

    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    pub fn next_client_id(&self) -> crate::ids::ClientId {
        crate::ids::ClientId(self.next_client_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Log once per key that a setting is accepted but not implemented yet.
    fn warn_unsupported(&self) {
        let cfg = self.config();
        let mut seen = self.warned_unsupported.lock();
        for (key, place) in &cfg.unsupported {
            if seen.insert(key.clone()) {
                tracing::warn!("{place}: {key} is not supported by Sluice yet and is ignored");
            }
        }
    }

    /// RELOAD / SIGHUP: re-read the config and auth file; on error keep the old ones. The hba files
    /// are re-read too (a broken one keeps the old rules); auth_query and SCRAM caches are cleared.
    /// Pools get new
    /// settings; databases whose login changed get their servers replaced; removed ones are closed.
    pub fn reload(&self) -> Result<(), ConfigError> {
        self.notify("RELOADING=1");
        // The logfile first and whatever the config says: logrotate's `kill -HUP` must move the
        // log to a new file even when the config has an error.
        if let Some(log) = self.hooks.get().and_then(|h| h.log.file.as_ref()) {
            match log.reopen() {
                Ok(()) => tracing::info!("logfile {} reopened", log.path()),
                Err(e) => tracing::warn!("cannot reopen logfile {}: {e}", log.path()),
            }
        }
        let result = self.reload_config();
        self.notify(&format!("READY=1\n{}", self.status_line()));
        result
    }

    /// Switch syslog output to what the config says (`syslog`, `syslog_facility`, `syslog_ident`).
    pub fn apply_syslog(&self) {
        let Some(h) = self.hooks.get() else { return };
        let cfg = self.config();
        let s = &cfg.settings;
        if let Err(e) = h
            .log
            .set_syslog(s.syslog, &s.syslog_facility, &s.syslog_ident)
        {
            tracing::warn!("syslog: {e}; logging without it");
        }
    }

    /// Tell the service manager (sd_notify), when one is listening.
    pub fn notify(&self, state: &str) {
        if let Some(h) = self.hooks.get() {
            h.notify.send(state);
        }
    }

    /// sd_notify's STATUS= line: what `systemctl status` shows.
    pub fn status_line(&self) -> String {
        let servers: usize = self.pools.all().iter().map(|p| p.counts().total).sum();
        format!(
            "STATUS=clients: {}, servers: {servers}",
            self.client_count.load(Ordering::Relaxed)
        )
    }

    fn reload_config(&self) -> Result<(), ConfigError> {
        let mut new = sluice_config::load(&self.config_path)?;
        let old = self.config();
        let diff = sluice_config::diff(&old, &new);
        // Non-reloadable settings keep their running values, in [pgbouncer] and [sluice] alike
        // (SHOW CONFIG must show what runs, not what the file asks for after a restart).
        for key in &diff.ignored_nonreloadable {
            tracing::warn!(
                "reload: {key} cannot be changed without a restart; keeping the old value"
            );
            if sluice_config::find_def(sluice_config::PGBOUNCER_SETTINGS, key).is_some() {
                if let Some(v) = old.settings.get(key) {
                    let _ = new.settings.set(key, &v);
                }
            } else if let Some(v) = old.sluice.get(key) {
                let _ = new.sluice.set(key, &v);
            }
        }
        // The files behind the rules, certificates and secrets are read again whatever changed.
        self.apply(new, &diff, Effects::files(), false)?;
        tracing::info!(
            "RELOAD: configuration reloaded from {}",
            self.config_path.display()
        );
        Ok(())
    }

    /// Admin SET: change one `[pgbouncer]` or `[sluice]` setting at runtime. Non-reloadable keys are
    /// accepted and ignored, like PgBouncer. A TLS key whose TLS configuration cannot be built
    /// yet (a key file set before its certificate) is stored while TLS stays as it was, as in
    /// PgBouncer, so that such keys can be changed one SET at a time.
    pub fn set_setting(
        &self,
        key: &str,
        value: &str,
    ) -> Result<SetOutcome, sluice_config::SetError> {
        let def = sluice_config::find_def(sluice_config::PGBOUNCER_SETTINGS, key)
            .or_else(|| sluice_config::find_def(sluice_config::SLUICE_SETTINGS, key))
            .ok_or(sluice_config::SetError::UnknownKey)?;
        let old = self.config();
        let mut cfg = (*old).clone();
        if sluice_config::find_def(sluice_config::PGBOUNCER_SETTINGS, key).is_some() {
            cfg.settings.set(key, value)?;
        } else {
            cfg.sluice.set(key, value)?;
        }
        if !def.reloadable {
            return Ok(SetOutcome::Ignored);
        }
        let diff = sluice_config::diff(&old, &cfg);
        match self.apply(cfg, &diff, Effects::default(), true) {
            Ok(None) => Ok(SetOutcome::Applied),
            Ok(Some(tls_kept)) => Ok(SetOutcome::TlsKept(tls_kept)),
            Err(e) => Err(sluice_config::SetError::BadValue(e.to_string())),
        }
    }

    /// Put a changed config in place with what its changed keys take (`diff.changed_settings`,
    /// through the settings table's `effect` column), plus `also` (RELOAD: the files): everything that can fail (certificates, the HTTP endpoint's files, the
    /// auth file) is built first, so that a failure changes nothing; then the rules, caches and
    /// config are swapped, and every pool's targets recomputed (after any change: cheap).
    ///
    /// `tls_may_wait` (console SET): a TLS configuration that cannot be built does not stop the
    /// rest; TLS stays as it was and the reason comes back (`Ok(Some(..))`).
    fn apply(
        &self,
        new: Config,
        diff: &ReloadDiff,
        also: Effects,
        tls_may_wait: bool,
    ) -> Result<Option<String>, ConfigError> {
        let effects = diff
            .changed_settings
            .iter()
            .filter_map(|key| {
                sluice_config::find_def(sluice_config::PGBOUNCER_SETTINGS, key)
                    .or_else(|| sluice_config::find_def(sluice_config::SLUICE_SETTINGS, key))
            })
            .fold(also, |e, def| e.with(def.effect));
        let mut tls_kept = None;
        let tls = match effects.tls {
            true => match TlsSetup::load(&new.settings) {
                Ok(t) => Some(t),
                Err(e) => {
                    // PgBouncer's words, which its operators and test suite look for.
                    tracing::error!("TLS setup failed: {e}");
                    if !tls_may_wait {
                        return Err(e.into_config_error(&self.config_path.display().to_string()));
                    }
                    tls_kept = Some(e.to_string());
                    None
                }
            },
            false => None,
        };
        let metrics_access = match effects.metrics_access {
            true => Some(crate::metrics::access::Access::load(&new)?),
            false => None,
        };
        // Last of the fallible steps: it replaces the secrets in place.
        if effects.auth_file {
            self.credentials.load(new.settings.auth_file.as_deref())?;
            self.scram_cache.clear();
        }
        if effects.hba {
            self.hba.reload(&new.settings);
        }
        let verbose = (new.settings.verbose != self.config().settings.verbose)
            .then_some(new.settings.verbose);
        self.config.store(Arc::new(new));
        if let (Some(v), Some(h)) = (verbose, self.hooks.get()) {
            h.log.set_verbose(v);
        }
        if let Some(tls) = tls {
            self.tls.store(Arc::new(tls));
        }
        if let Some(access) = metrics_access {
            self.metrics_access.store(Arc::new(access));
        }
        if effects.syslog {
            self.apply_syslog();
        }
        self.warn_unsupported();
        self.refresh_pools();
        Ok(tls_kept)
    }

    /// Recompute every pool's settings from the current config. Servers are replaced when their
    /// login or the server-side TLS settings changed. The clients of a database the config no
    /// longer has are disconnected ("database removed", mid-transaction too), as PgBouncer does.
    pub fn refresh_pools(&self) {
        let cfg = self.config();
        let server_tls = self.tls.load().server.clone();
        let mut removed: Vec<String> = Vec::new();
        for pool in self.pools.all() {
            let Some(db) = targets::find_database(&cfg, &pool.key.database) else {
                tracing::info!("{}: database removed from config", pool.key);
                pool.mark_removed();
                if !removed.contains(&pool.key.database) {
                    removed.push(pool.key.database.clone());
                }
                continue;
            };
            let old = pool.settings();
            let listed = self.credentials.lookup(&pool.key.user);
            let secret = if listed == old.listed_secret && db.user.is_none() {
                old.target.secret.clone()
            } else {
                listed.clone()
            };
            pool.update_settings(targets::pool_settings(
                &cfg,
                &db,
                &pool.key.user,
                secret,
                server_tls.clone(),
                |target| {
                    if target.same_login(&old.target)
                        && old.connect.tls.fingerprint == server_tls.fingerprint
                    {
                        old.generation
                    } else {
                        tracing::info!(
                            "{}: connection settings changed, servers will be replaced",
                            pool.key
                        );
                        self.pools.next_generation()
                    }
                },
            ));
        }
        self.control
            .forget_databases(|d| targets::find_database(&cfg, d).is_some());
        if removed.is_empty() {
            return;
        }
        for c in self.registry.all() {
            if c.identity
                .get()
                .is_some_and(|(db, _)| removed.iter().any(|r| r == db))
            {
                c.kill.cancel_because(KillReason::Kill);
            }
        }
    }
}

/// What a console SET did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    Applied,
    /// Not changeable at runtime: accepted and ignored.
    Ignored,
    /// Stored, but the TLS configuration it makes cannot be built (the reason): TLS is unchanged.
    TlsKept(String),
}

/// What `App::apply` runs for a change, from the settings table's `effect` column.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Effects {
    hba: bool,
    auth_file: bool,
    tls: bool,
    metrics_access: bool,
    syslog: bool,
}

impl Effects {
    /// These and what a change of one key takes.
    fn with(mut self, effect: Effect) -> Self {
        let e = &mut self;
        match effect {
            Effect::None => {}
            Effect::Hba => e.hba = true,
            Effect::AuthFile => e.auth_file = true,
            Effect::Tls => e.tls = true,
            Effect::MetricsAccess => e.metrics_access = true,
            Effect::Syslog => e.syslog = true,
        }
        self
    }

    /// What RELOAD runs whatever keys changed: the HBA, auth, certificate and HTTP endpoint files
    /// are read again, the caches built from them cleared, the syslog socket connected again (as
    /// the logfile is reopened).
    fn files() -> Self {
        Effects {
            hba: true,
            auth_file: true,
            tls: true,
            metrics_access: true,
            syslog: true,
        }
    }
}

/// The worker threads `[sluice] workers` asks for (0 = one per CPU), as main.rs starts them.
pub fn worker_count(setting: u32) -> usize {
    match setting {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        n => n as usize,
    }
}
