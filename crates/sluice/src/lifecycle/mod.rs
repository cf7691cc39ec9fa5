//! Process phases (running, handing over to a successor, the two graceful shutdown modes, exit)
//! and the commands that move between them (signals, admin SHUTDOWN, a takeover), plus the
//! PAUSE/SUSPEND/DISABLE flags the admin console sets; `suspend.rs`: the SUSPEND gate.

pub mod suspend;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use suspend::SuspendGate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Running,
    /// SIGINT / SHUTDOWN WAIT_FOR_SERVERS: close the TCP listeners, fail queued clients, tell each
    /// idle client at its next request, exit when no server is in use.
    WaitForServers,
    /// SIGTERM / SHUTDOWN WAIT_FOR_CLIENTS: close the TCP listeners, exit when the last client
    /// leaves.
    WaitForClients,
    /// SIGQUIT, SHUTDOWN, or a second INT/TERM: exit now.
    Exit,
    /// A successor took the listeners (`takeover/`): clients go to it at their next transaction
    /// boundary; exit when no pool client is left. Back to Running if the successor goes away.
    HandingOver,
}

impl Phase {
    const ALL: [Phase; 5] = [
        Phase::Running,
        Phase::WaitForServers,
        Phase::WaitForClients,
        Phase::Exit,
        Phase::HandingOver,
    ];

    /// The phase stored as `phase as u8` (whatever the variants' order).
    fn from_u8(v: u8) -> Phase {
        Phase::ALL
            .into_iter()
            .find(|p| *p as u8 == v)
            .unwrap_or(Phase::Exit)
    }

    /// Phases in which an idle client is told "server shutting down" and let go at once. Not
    /// WaitForServers: as PgBouncer, an idle client is told at its next request (`client::session`),
    /// and one that sends none stays until the process exits.
    pub fn drops_idle_clients(self) -> bool {
        self == Phase::Exit
    }

    /// Phases in which the TCP listeners accept (the shutdown modes close them).
    pub fn accepts_tcp(self) -> bool {
        self == Phase::Running
    }

    /// Phases in which the Unix socket accepts: also the two shutdown modes, as PgBouncer's, so
    /// that an operator can still reach the admin console (pool logins are refused,
    /// `accepts_pool_logins`).
    pub fn accepts_unix(self) -> bool {
        matches!(
            self,
            Phase::Running | Phase::WaitForServers | Phase::WaitForClients
        )
    }

    /// Phases in which a client may log in to a pool (the admin console takes logins whenever
    /// a listener accepts them). A hand-over's clients are still served here until they move.
    pub fn accepts_pool_logins(self) -> bool {
        matches!(self, Phase::Running | Phase::HandingOver)
    }
}

/// The phase, for the few tasks that wait on it (`subscribe`) and as an atomic for the many that
/// only look at it: idle clients check it on every wake-up instead of each linking a waiter into
/// the channel's shared list per transaction; the main loop nudges them when it changes
/// (`lib.rs`).
#[derive(Debug)]
pub struct Lifecycle {
    tx: watch::Sender<Phase>,
    now: AtomicU8,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            tx: watch::Sender::new(Phase::Running),
            now: AtomicU8::new(Phase::Running as u8),
        }
    }
}

impl Lifecycle {
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.now.load(Ordering::Acquire))
    }

    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.tx.subscribe()
    }

    pub fn is_running(&self) -> bool {
        self.phase() == Phase::Running
    }

    /// Request a graceful mode; a second graceful request while one is active means exit now.
    /// While handing over, WAIT_FOR_CLIENTS is what already happens (the clients leave for the
    /// successor or for good), and WAIT_FOR_SERVERS stops the hand-over.
    pub fn request(&self, wanted: Phase) -> Phase {
        let next = match (self.phase(), wanted) {
            (_, Phase::Exit) => Phase::Exit,
            (_, Phase::HandingOver) => self.phase(),
            (Phase::Running, w) => w,
            (_, Phase::Running) => self.phase(),
            (Phase::HandingOver, Phase::WaitForClients) => Phase::HandingOver,
            (Phase::HandingOver, w) => w,
            _ => Phase::Exit,
        };
        self.set(next);
        next
    }

    fn set(&self, p: Phase) {
        self.now.store(p as u8, Ordering::Release);
        self.tx.send_replace(p);
    }

    /// Running → HandingOver (a takeover); false from any other phase.
    pub fn hand_over(&self) -> bool {
        self.switch(Phase::Running, Phase::HandingOver)
    }

    /// HandingOver → Running (the successor went away); false from any other phase.
    pub fn take_back(&self) -> bool {
        self.switch(Phase::HandingOver, Phase::Running)
    }

    fn switch(&self, from: Phase, to: Phase) -> bool {
        let mut done = false;
        self.tx.send_if_modified(|p| {
            if *p != from {
                return false;
            }
            *p = to;
            self.now.store(to as u8, Ordering::Release);
            done = true;
            true
        });
        done
    }
}

/// Why a PAUSE/RESUME/SUSPEND request is refused (PgBouncer's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("already suspended/paused")]
    AlreadyPaused,
    #[error("pooler is not paused/suspended")]
    NotPaused,
    #[error("database {0} is not paused")]
    DbNotPaused(String),
    #[error("database {0} is already paused")]
    DbAlreadyPaused(String),
    #[error("pooler is shutting down")]
    ShuttingDown,
    #[error("cannot suspend with paused databases")]
    PausedDatabases,
}

#[derive(Debug, Default)]
struct ControlState {
    paused: bool,
    suspended: bool,
    paused_dbs: BTreeSet<String>,
    disabled_dbs: BTreeSet<String>,
}

/// The admin console's switches: global PAUSE/SUSPEND, per-database PAUSE, DISABLE. Pools read
/// them when created; the admin commands push changes to existing pools. SUSPEND does not freeze
/// the pools (clients that already sent a request are served until they stop): it closes the
/// `SuspendGate` that listeners, idle clients and relays watch.
#[derive(Debug, Default)]
pub struct Control {
    state: Mutex<ControlState>,
    gate: Arc<SuspendGate>,
}

impl Control {
    /// New work for `db` must not get a server.
    pub fn db_paused(&self, db: &str) -> bool {
        let st = self.state.lock();
        st.paused || st.paused_dbs.contains(db)
    }

    /// The SUSPEND gate, for the tasks that stop at it.
    pub fn gate(&self) -> &Arc<SuspendGate> {
        &self.gate
    }

    pub fn is_suspended(&self) -> bool {
        self.state.lock().suspended
    }

    pub fn db_disabled(&self, db: &str) -> bool {
        self.state.lock().disabled_dbs.contains(db)
    }

    pub fn db_explicitly_paused(&self, db: &str) -> bool {
        self.state.lock().paused_dbs.contains(db)
    }

    /// (paused, suspended) for SHOW STATE.
    pub fn flags(&self) -> (bool, bool) {
        let st = self.state.lock();
        (st.paused, st.suspended)
    }

    pub fn pause_all(&self) -> Result<(), ControlError> {
        let mut st = self.state.lock();
        if st.paused || st.suspended {
            return Err(ControlError::AlreadyPaused);
        }
        st.paused = true;
        Ok(())
    }

    pub fn pause_db(&self, db: &str) -> Result<(), ControlError> {
        let mut st = self.state.lock();
        if st.paused || st.suspended {
            return Err(ControlError::AlreadyPaused);
        }
        if !st.paused_dbs.insert(db.to_string()) {
            return Err(ControlError::DbAlreadyPaused(db.to_string()));
        }
        Ok(())
    }

    /// KILL: pause each of `dbs` (a database already paused stays so). Refused while the pooler
    /// is paused or suspended, as PgBouncer refuses it.
    pub fn kill_pause<'a>(
        &self,
        dbs: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ControlError> {
        let mut st = self.state.lock();
        if st.paused || st.suspended {
            return Err(ControlError::AlreadyPaused);
        }
        for d in dbs {
            st.paused_dbs.insert(d.to_string());
        }
        Ok(())
    }

    /// SUSPEND: refused while paused or suspended, and while any database is paused (its clients
    /// could not flush what they hold).
    pub fn suspend(&self) -> Result<(), ControlError> {
        let mut st = self.state.lock();
        if st.paused || st.suspended {
            return Err(ControlError::AlreadyPaused);
        }
        if !st.paused_dbs.is_empty() {
            return Err(ControlError::PausedDatabases);
        }
        st.suspended = true;
        self.gate.suspend();
        Ok(())
    }

    /// RESUME (all): clears PAUSE and SUSPEND. A database paused by its own PAUSE or KILL stays
    /// paused until its own RESUME (PgBouncer's rule: a global RESUME does not end a database's
    /// maintenance), so with only such pauses in force there is nothing to resume.
    pub fn resume_all(&self) -> Result<(), ControlError> {
        let mut st = self.state.lock();
        if !st.paused && !st.suspended {
            return Err(ControlError::NotPaused);
        }
        st.paused = false;
        if st.suspended {
            st.suspended = false;
            self.gate.resume();
        }
        Ok(())
    }

    /// A RELOAD dropped databases: forget their PAUSE / KILL and DISABLE (as PgBouncer frees the
    /// database), so that no pause of a database that is gone blocks SUSPEND, and one added again
    /// starts afresh. `keep` says which names the new config still has.
    pub fn forget_databases(&self, keep: impl Fn(&str) -> bool) {
        let mut st = self.state.lock();
        st.paused_dbs.retain(|d| keep(d));
        st.disabled_dbs.retain(|d| keep(d));
    }

    pub fn resume_db(&self, db: &str) -> Result<(), ControlError> {
        let mut st = self.state.lock();
        if !st.paused_dbs.remove(db) {
            return Err(ControlError::DbNotPaused(db.to_string()));
        }
        Ok(())
    }

    pub fn set_disabled(&self, db: &str, disabled: bool) {
        let mut st = self.state.lock();
        if disabled {
            st.disabled_dbs.insert(db.to_string());
        } else {
            st.disabled_dbs.remove(db);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_atomic_phase_follows_every_request() {
        for p in Phase::ALL {
            assert_eq!(Phase::from_u8(p as u8), p);
        }
        let l = Lifecycle::default();
        assert_eq!(l.phase(), Phase::Running);
        assert_eq!(l.request(Phase::WaitForClients), Phase::WaitForClients);
        assert_eq!(
            (l.phase(), *l.subscribe().borrow()),
            (Phase::WaitForClients, Phase::WaitForClients)
        );
        assert_eq!(l.request(Phase::WaitForServers), Phase::Exit);
        assert_eq!(l.phase(), Phase::Exit);
    }

    #[test]
    fn pause_resume_rules() {
        let c = Control::default();
        assert_eq!(c.resume_all(), Err(ControlError::NotPaused));
        c.pause_db("app").unwrap();
        assert!(c.db_paused("app") && !c.db_paused("other"));
        assert_eq!(c.suspend(), Err(ControlError::PausedDatabases));
        assert!(!c.gate().is_suspended());
        assert_eq!(
            c.resume_db("other"),
            Err(ControlError::DbNotPaused("other".into()))
        );
        c.resume_db("app").unwrap();
        c.pause_all().unwrap();
        assert_eq!(c.pause_all(), Err(ControlError::AlreadyPaused));
        assert!(c.db_paused("other"));
        c.resume_all().unwrap();
        assert!(!c.db_paused("app"));
        // A global RESUME ends PAUSE only: a database's own pause stays until its own RESUME,
        // and with only those in force there is nothing for a global RESUME to do.
        c.pause_db("app").unwrap();
        c.pause_all().unwrap();
        c.resume_all().unwrap();
        assert!(c.db_paused("app") && !c.db_paused("other"));
        assert_eq!(c.resume_all(), Err(ControlError::NotPaused));
        c.resume_db("app").unwrap();
        // KILL: refused while paused; pauses each database it names.
        c.pause_all().unwrap();
        assert_eq!(c.kill_pause(["app"]), Err(ControlError::AlreadyPaused));
        c.resume_all().unwrap();
        c.kill_pause(["app", "other"]).unwrap();
        assert!(c.db_paused("app") && c.db_paused("other") && !c.db_paused("third"));
        // A RELOAD that drops `other`: its pause is forgotten, SUSPEND is no longer blocked by it.
        c.set_disabled("other", true);
        c.resume_db("app").unwrap();
        assert_eq!(c.suspend(), Err(ControlError::PausedDatabases));
        c.forget_databases(|d| d != "other");
        assert!(!c.db_paused("other") && !c.db_disabled("other"));
        c.suspend().unwrap();
        c.resume_all().unwrap();
    }

    #[test]
    fn suspend_closes_the_gate_and_resume_opens_it() {
        let c = Control::default();
        c.suspend().unwrap();
        assert!(c.gate().is_suspended() && c.is_suspended());
        assert_eq!(c.flags(), (false, true));
        assert!(!c.db_paused("app"), "SUSPEND does not freeze the pools");
        assert_eq!(c.suspend(), Err(ControlError::AlreadyPaused));
        assert_eq!(c.pause_all(), Err(ControlError::AlreadyPaused));
        c.resume_all().unwrap();
        assert!(!c.gate().is_suspended() && !c.is_suspended());
        assert_eq!(c.resume_all(), Err(ControlError::NotPaused));
    }

    #[test]
    fn a_hand_over_goes_back_to_running_only_from_itself() {
        let l = Lifecycle::default();
        assert!(!l.take_back());
        assert!(l.hand_over());
        assert!(!l.hand_over());
        assert_eq!(
            (l.phase(), *l.subscribe().borrow()),
            (Phase::HandingOver, Phase::HandingOver)
        );
        assert!(!l.phase().drops_idle_clients());
        assert_eq!(l.request(Phase::WaitForClients), Phase::HandingOver);
        assert_eq!(l.request(Phase::Running), Phase::HandingOver);
        assert!(l.take_back());
        assert!(l.is_running());
        assert!(l.hand_over());
        assert_eq!(l.request(Phase::WaitForServers), Phase::WaitForServers);
        assert!(!l.take_back(), "a shutdown is not undone");
        assert_eq!(l.request(Phase::HandingOver), Phase::WaitForServers);
    }

    #[test]
    fn the_unix_socket_outlives_tcp_into_the_shutdown_modes_for_the_console() {
        for p in [Phase::WaitForServers, Phase::WaitForClients] {
            assert!(!p.accepts_tcp() && p.accepts_unix(), "{p:?}");
            assert!(!p.accepts_pool_logins() && !p.drops_idle_clients(), "{p:?}");
        }
        assert!(Phase::Running.accepts_tcp() && Phase::Running.accepts_unix());
        assert!(!Phase::HandingOver.accepts_unix() && Phase::HandingOver.accepts_pool_logins());
        assert!(!Phase::Exit.accepts_unix() && Phase::Exit.drops_idle_clients());
    }

    #[test]
    fn second_graceful_signal_exits() {
        let l = Lifecycle::default();
        assert_eq!(l.request(Phase::WaitForClients), Phase::WaitForClients);
        assert_eq!(l.request(Phase::WaitForServers), Phase::Exit);
        let l = Lifecycle::default();
        assert_eq!(l.request(Phase::Exit), Phase::Exit);
    }
}
