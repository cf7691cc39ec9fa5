//! Process phases (running, the two graceful shutdown modes, exit) and the commands that move
//! between them: signals and, later, admin console commands.

use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// SIGINT / SHUTDOWN WAIT_FOR_SERVERS: stop accepting, fail queued clients, exit when no server is in use.
    WaitForServers,
    /// SIGTERM / SHUTDOWN WAIT_FOR_CLIENTS: close TCP listeners, exit when the last client leaves.
    WaitForClients,
    /// SIGQUIT, SHUTDOWN, or a second INT/TERM: exit now.
    Exit,
}

#[derive(Debug)]
pub struct Lifecycle {
    tx: watch::Sender<Phase>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            tx: watch::Sender::new(Phase::Running),
        }
    }
}

impl Lifecycle {
    pub fn phase(&self) -> Phase {
        *self.tx.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Phase> {
        self.tx.subscribe()
    }

    pub fn is_running(&self) -> bool {
        self.phase() == Phase::Running
    }

    /// Request a graceful mode; a second graceful request while one is active means exit now.
    pub fn request(&self, wanted: Phase) -> Phase {
        let next = match (self.phase(), wanted) {
            (_, Phase::Exit) => Phase::Exit,
            (Phase::Running, w) => w,
            (_, Phase::Running) => self.phase(),
            _ => Phase::Exit,
        };
        self.tx.send_replace(next);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_graceful_signal_exits() {
        let l = Lifecycle::default();
        assert_eq!(l.request(Phase::WaitForClients), Phase::WaitForClients);
        assert_eq!(l.request(Phase::WaitForServers), Phase::Exit);
        let l = Lifecycle::default();
        assert_eq!(l.request(Phase::Exit), Phase::Exit);
    }
}
