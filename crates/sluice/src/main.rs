//! The `sluice` command: PgBouncer's command line, logging, the tokio runtime, and signals turned
//! into lifecycle commands. Nothing else lives here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{ArgAction, Parser};
use sluice::app::App;
use sluice::lifecycle::Phase;
use sluice::pool::connector::PgConnector;
use tokio::signal::unix::{signal, SignalKind};

/// mimalloc instead of glibc's malloc: a login allocates and frees a few dozen objects of
/// mixed sizes (boxed login and session futures of several KiB, parameter strings), which glibc
/// serves through its slower bins and heap consolidation (~17% of a login's instructions in
/// callgrind); mimalloc's per-thread free lists make those a few dozen instructions each.
/// The allocator has to be a process-wide static: that is how Rust installs one. Built without
/// the `mimalloc` feature, the system allocator serves (for heap profilers that hook malloc).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    about = "Sluice: a multi-core PostgreSQL connection pooler, drop-in for PgBouncer",
    disable_version_flag = true
)]
struct Cli {
    /// Run in the background (requires pidfile in the config).
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Take over from the running process of this config: its listening sockets, then its
    /// clients at their next transaction boundary (PgBouncer's -R, online restart).
    #[arg(short = 'R', long = "takeover", visible_alias = "reboot")]
    takeover: bool,
    /// Do not log to stderr.
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
    /// More logging; repeat for more.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Switch to this Unix user after binding the listeners.
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Print the version and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// pgbouncer.ini
    config: Option<PathBuf>,
}

/// The environment variable that lets Sluice run as root without switching user.
const ROOT_ALLOWED: &str = "SLUICE_ALLOW_ROOT";

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.version {
        // The same line as the console's SHOW VERSION.
        println!("{}", sluice::admin::show_config::version_string());
        return ExitCode::SUCCESS;
    }
    let Some(path) = cli.config.clone() else {
        eprintln!("sluice: no config file given\nUsage: sluice [-d] [-q] [-v] [-u user] [-R] [-V] [-h] config.ini");
        return ExitCode::from(1);
    };
    let config = match sluice_config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: cannot load config file: {e}");
            if cli.takeover {
                eprintln!("sluice: no takeover; the running process keeps serving");
            }
            return ExitCode::from(1);
        }
    };
    let s = &config.settings;
    // As PgBouncer: root only to switch to another user (-u or `user`, after the listeners are
    // bound). SLUICE_ALLOW_ROOT=1 lets a confined root run it (the test harness, a container
    // whose only user is root).
    let switches_user = cli
        .user
        .as_deref()
        .or(s.user.as_deref())
        .is_some_and(|u| !u.is_empty());
    if nix::unistd::geteuid().is_root()
        && !switches_user
        && std::env::var_os(ROOT_ALLOWED).is_none_or(|v| v != "1")
    {
        eprintln!(
            "sluice: Sluice should not run as root (set -u or `user` to switch to another user, \
             or {ROOT_ALLOWED}=1 where root is confined)"
        );
        return ExitCode::from(1);
    }
    if cli.daemon {
        if s.pidfile.as_deref().unwrap_or("").is_empty() {
            eprintln!("sluice: daemon mode (-d) needs pidfile in the config");
            return ExitCode::from(1);
        }
        if let Err(e) = daemonize() {
            eprintln!("sluice: cannot daemonize: {e}");
            return ExitCode::from(1);
        }
    }
    let verbose = s.verbose.max(cli.verbose.into());
    let logfile = match sluice::process::logging::init(
        s.logfile.as_deref(),
        cli.quiet || cli.daemon,
        verbose,
        cli.verbose.into(),
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sluice: cannot open logfile: {e}");
            return ExitCode::from(1);
        }
    };
    raise_fd_limit(s.max_client_conn);
    let pidfile = s.pidfile.clone().filter(|p| !p.is_empty());
    // A takeover replaces the process the pidfile names.
    if let Some(p) = pidfile.as_ref().filter(|_| !cli.takeover) {
        if let Err(e) = sluice::process::check_pidfile(p) {
            tracing::error!("{e}");
            return ExitCode::from(1);
        }
    }
    // Written once the listeners are bound, and removed at exit only by the process that wrote it:
    // a second instance that fails to start never touches the running one's.
    let wrote_pidfile = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let wrote = wrote_pidfile.clone();
    let pidfile_to_write = pidfile.clone();
    let workers = sluice::app::worker_count(config.sluice.workers);
    let started = match sluice::workers::start(workers) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let user = cli
        .user
        .clone()
        .or_else(|| s.user.clone())
        .filter(|u| !u.is_empty());
    let sluice::workers::Started {
        runtime,
        handles: worker_handles,
        clocks: worker_clocks,
    } = started;
    let takeover = cli.takeover;
    let code = runtime.block_on(async move {
        // Before anything binds: from `listen()` on, the kernel completes connections, so whoever
        // starts us may take the port's answer (or the pidfile) for readiness and send a SIGHUP
        // at once, which without a handler ends the process (its default action).
        let signals = match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot install signal handlers: {e}");
                return ExitCode::from(1);
            }
        };
        let write_pidfile = || {
            if let Some(p) = &pidfile_to_write {
                if let Err(e) = sluice::process::write_pidfile(p) {
                    tracing::error!("cannot write pidfile {p}: {e}");
                    return false;
                }
                wrote.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            true
        };
        let (listeners, successor) = if takeover {
            // The running process hands its sockets only to a process of its own user: switch
            // first.
            if let Some(u) = &user {
                if let Err(e) = switch_user(u) {
                    tracing::error!("cannot switch to user {u}: {e}");
                    return ExitCode::from(1);
                }
            }
            match sluice::takeover::take::connect(&config, workers).await {
                Ok((l, s)) => (l, Some(s)),
                Err(e) => {
                    tracing::error!("takeover failed: {e}; the running process keeps serving");
                    return ExitCode::from(1);
                }
            }
        } else {
            let listeners = match sluice::net::listen::bind(&config, workers) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("{e}");
                    return ExitCode::from(1);
                }
            };
            if !write_pidfile() {
                return ExitCode::from(1);
            }
            if let Some(u) = user {
                if let Err(e) = switch_user(&u) {
                    tracing::error!("cannot switch to user {u}: {e}");
                    return ExitCode::from(1);
                }
            }
            (listeners, None)
        };
        let app = match App::new(path, config, Arc::new(PgConnector::default())) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!("{e}");
                if takeover {
                    tracing::error!("takeover failed; the running process keeps serving");
                }
                return ExitCode::from(1);
            }
        };
        let _ = app.hooks.set(sluice::process::ProcessHooks {
            log: logfile,
            notify: sluice::process::Notifier::from_env(),
        });
        app.apply_syslog();
        let packed = app.config().sluice.worker_spread_percent > 0;
        app.workers.install(worker_handles, worker_clocks, packed);
        tracing::info!(
            "Sluice {} started with {workers} worker threads",
            env!("CARGO_PKG_VERSION")
        );
        if let Some(s) = successor {
            let old = s.old_pid;
            let serve: sluice::takeover::take::ServeAdopted =
                |app, guard, registration, client, session| {
                    Box::pin(sluice::dispatch::serve_adopted(
                        app,
                        guard,
                        registration,
                        client,
                        session,
                    ))
                };
            if let Err(e) = s.take(&app, serve).await {
                tracing::error!("takeover failed: {e}; process {old} keeps serving");
                return ExitCode::from(1);
            }
            write_pidfile();
        }
        tokio::spawn(handle_signals(app.clone(), signals));
        sluice::run(app.clone(), listeners).await;
        // A successor took over: the pidfile is its own.
        if app.takeover.handed_over() {
            wrote.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        ExitCode::SUCCESS
    });
    if let Some(p) = pidfile.filter(|_| wrote_pidfile.load(std::sync::atomic::Ordering::Relaxed)) {
        let _ = std::fs::remove_file(p);
    }
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

/// The signals Sluice answers, registered with the runtime. Made before the listeners are bound
/// (and so before READY=1 goes to systemd): a SIGHUP that comes once the port answers would
/// otherwise meet the default action (exit) while the handling task has not run yet.
struct Signals {
    hup: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

async fn handle_signals(app: Arc<App>, signals: Signals) {
    let Signals {
        mut hup,
        mut int,
        mut term,
        mut quit,
        mut usr1,
        mut usr2,
    } = signals;
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("got SIGHUP, re-reading config");
                if let Err(e) = app.reload() {
                    tracing::error!("RELOAD failed, keeping the old configuration: {e}");
                }
            }
            // PgBouncer's words for each signal, whichever state it finds.
            _ = int.recv() => {
                if app.lifecycle.is_running() {
                    tracing::info!("got SIGINT, shutting down, waiting for all servers connections to be released");
                } else {
                    tracing::info!("got SIGINT while shutting down, fast exit");
                }
                app.lifecycle.request(Phase::WaitForServers);
            }
            _ = term.recv() => {
                if app.lifecycle.is_running() {
                    tracing::info!("got SIGTERM, shutting down, waiting for all clients disconnect");
                } else {
                    tracing::info!("got SIGTERM while shutting down, fast exit");
                }
                app.lifecycle.request(Phase::WaitForClients);
            }
            _ = quit.recv() => {
                tracing::info!("got SIGQUIT, fast exit");
                app.lifecycle.request(Phase::Exit);
            }
            _ = usr1.recv() => {
                let (paused, suspended) = app.control.flags();
                if paused || suspended {
                    tracing::info!("got SIGUSR1, but already paused/suspended");
                } else {
                    tracing::info!("got SIGUSR1, pausing all activity");
                    if let Err(e) = sluice::admin::control::pause_all(&app) {
                        tracing::warn!("SIGUSR1: {e}");
                    }
                }
            }
            _ = usr2.recv() => {
                // Ignored while shutting down, like PgBouncer.
                let (paused, suspended) = app.control.flags();
                if !app.lifecycle.is_running() {
                    tracing::info!("got SIGUSR2 while shutting down, ignoring");
                } else if !paused && !suspended {
                    tracing::info!("got SIGUSR2, but not paused/suspended");
                } else {
                    if suspended {
                        tracing::info!("got SIGUSR2, continuing from SUSPEND");
                    } else {
                        tracing::info!("got SIGUSR2, continuing from PAUSE");
                    }
                    if let Err(e) = sluice::admin::control::resume_all(&app) {
                        tracing::warn!("SIGUSR2: {e}");
                    }
                }
            }
        }
    }
}

/// Soft RLIMIT_NOFILE up to the hard limit, logged; a limit below max_client_conn is worth a warning.
fn raise_fd_limit(max_client_conn: u32) {
    match sluice::net::fd_limit::raise_to_hard() {
        Ok(l) => {
            if l.now != l.before {
                tracing::info!("raised open files limit from {} to {}", l.before, l.now);
            }
            if l.now < u64::from(max_client_conn) {
                tracing::warn!(
                    "open files limit {} is below max_client_conn {max_client_conn}",
                    l.now
                );
            }
        }
        Err(e) => tracing::warn!("cannot raise the open files limit: {e}"),
    }
}

fn daemonize() -> nix::Result<()> {
    use nix::unistd::{fork, setsid, ForkResult};
    // SAFETY: called before any thread (runtime, logging) exists, so fork is safe.
    match unsafe { fork() }? {
        ForkResult::Parent { .. } => std::process::exit(0),
        ForkResult::Child => {}
    }
    setsid()?;
    if let Ok(devnull) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this process.
            unsafe { libc::dup2(devnull.as_raw_fd(), fd) };
        }
    }
    Ok(())
}

fn switch_user(name: &str) -> Result<(), String> {
    use nix::unistd::{setgid, setuid, User};
    let u = User::from_name(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "no such user".to_string())?;
    setgid(u.gid).map_err(|e| e.to_string())?;
    setuid(u.uid).map_err(|e| e.to_string())?;
    Ok(())
}
