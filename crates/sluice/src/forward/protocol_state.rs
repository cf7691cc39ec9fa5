//! The relay's protocol state as three small state machines, each a plain `Copy` enum changed
//! only by its transition function (`next`, pure, tested as tables below): where the
//! extended-protocol batch stands (`Batch`), where a COPY FROM STDIN stands (`CopyState`), and
//! what the relay knows of the commands in flight (`Command`). `RelayCore` (`core.rs`) holds one
//! of each beside `pending_rfq` (the ReadyForQuery messages the server owes, a count), raises the
//! events as its scanners see messages go by, and reads them to tell whether the server owes
//! anything (`RelayCore::quiescent`), which timeout applies, and what a lost server owed.

use sluice_protocol::frontend_tag as t;

/// The extended-protocol batch: the messages up to a Sync, which the server skips after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Batch {
    /// Every extended-protocol message sent was followed by a Sync.
    Synced,
    /// Extended-protocol messages went out since the last Sync: their replies, and a
    /// ReadyForQuery only after the Sync, are still to come.
    Open,
    /// The server reported an error in the open batch: it skips what comes until the Sync, so
    /// those requests get no entry in the reply queue and the pooler prepares nothing for them.
    Failed,
    /// The server skips until Sync as in `Failed`, but every message the client sent was followed
    /// by a Sync as the relay counts them: the error came with no Sync of its batch left in the
    /// reply queue. Only after a COPY begun by a simple Query took in Syncs of messages pipelined
    /// behind it (`Command::Uncertain`, so the server is not reused anyway).
    FailedSynced,
}

/// What changes a `Batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchEvent {
    /// An extended-protocol message went out (Parse, Bind, Describe, Execute, Close, or a
    /// refusal's stand-in), or a COPY started by Execute took in the Syncs of its batch.
    Extended,
    /// The client's Sync went out (not into a COPY IN, where the server ignores it).
    Sync,
    /// The server reported an error in the batch, and no Sync of it is in the reply queue.
    Error,
    /// The server was lost: its replies are answered by the pooler (`lost.rs`).
    Lost,
}

impl Batch {
    /// The state after `ev`.
    #[inline]
    pub(super) fn next(self, ev: BatchEvent) -> Batch {
        use Batch::*;
        match (self, ev) {
            (_, BatchEvent::Sync) => Synced,
            (Synced | Open, BatchEvent::Extended) => Open,
            (Failed | FailedSynced, BatchEvent::Extended) => Failed,
            (Open | Failed, BatchEvent::Error) => Failed,
            (Synced | FailedSynced, BatchEvent::Error) => FailedSynced,
            (Synced | Open, BatchEvent::Lost) => Synced,
            (Failed | FailedSynced, BatchEvent::Lost) => FailedSynced,
        }
    }

    /// Extended-protocol messages went out since the last Sync.
    #[inline]
    pub(super) fn open(self) -> bool {
        matches!(self, Batch::Open | Batch::Failed)
    }

    /// The server skips the batch's messages until the client's next Sync.
    #[inline]
    pub(super) fn skipping(self) -> bool {
        matches!(self, Batch::Failed | Batch::FailedSynced)
    }
}

/// COPY FROM STDIN as the relay sees it. The server ignores the Syncs a client sends into a COPY
/// IN (no ReadyForQuery for them), and a client may send its whole copy, Syncs included, before
/// the server's CopyInResponse arrives: so after each command that may turn out to be such a
/// COPY the relay counts the Syncs that follow it, until the server says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CopyState {
    /// No COPY to account for: the client ended the last one (or no command was sent since).
    Closed,
    /// A command that may turn out to be COPY FROM STDIN went out, a Query or FunctionCall
    /// (`extended: false`) or an Execute (`true`), and `syncs` Syncs after it; `ended`: the
    /// client has since sent CopyDone or CopyFail, so later Syncs are not the copy's. A relay
    /// starts here (with nothing counted) as the old count did.
    Window {
        syncs: u32,
        extended: bool,
        ended: bool,
    },
    /// The server is in COPY IN and the client has not ended it: its Syncs are ignored, and only
    /// the copy's messages, Flush and Sync are defined. `extended` as in `Window`.
    In { extended: bool },
}

/// What changes a `CopyState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CopyEvent {
    /// A Query or FunctionCall (`extended: false`) or an Execute (`true`) went out.
    Command { extended: bool },
    /// A Sync went out.
    Sync,
    /// The client's CopyDone or CopyFail went out.
    ClientEnded,
    /// The server's CopyInResponse (or CopyBothResponse) arrived.
    ServerStarted,
    /// The server's CommandComplete or ErrorResponse arrived (it ends a COPY IN), or the server
    /// was lost.
    ServerEnded,
}

/// What a COPY's start did to the Syncs the client had sent into it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Swallowed {
    /// Syncs the server ignores: they owe no ReadyForQuery (nor a reply-queue entry).
    pub syncs: u32,
    /// They were the Syncs of an Execute's batch: it stays open (an implicit transaction, the
    /// COPY's CommandComplete still to come) until a Sync after the copy.
    pub reopens_batch: bool,
}

impl CopyState {
    /// Where a relay starts.
    pub(super) const START: CopyState = CopyState::Window {
        syncs: 0,
        extended: false,
        ended: false,
    };

    /// The state after `ev`, and (when the server starts a COPY) the Syncs it swallowed.
    #[inline]
    pub(super) fn next(self, ev: CopyEvent) -> (CopyState, Swallowed) {
        use CopyState::*;
        let none = Swallowed::default();
        match (self, ev) {
            // Not defined inside COPY IN (the client is ended first): the copy stays open.
            (In { .. }, CopyEvent::Command { extended }) => (In { extended }, none),
            (_, CopyEvent::Command { extended }) => (
                Window {
                    syncs: 0,
                    extended,
                    ended: false,
                },
                none,
            ),
            (
                Window {
                    syncs,
                    extended,
                    ended: false,
                },
                CopyEvent::Sync,
            ) => (
                Window {
                    syncs: syncs + 1,
                    extended,
                    ended: false,
                },
                none,
            ),
            (s, CopyEvent::Sync) => (s, none),
            (
                Window {
                    syncs: syncs @ 1..,
                    extended,
                    ..
                },
                CopyEvent::ClientEnded,
            ) => (
                Window {
                    syncs,
                    extended,
                    ended: true,
                },
                none,
            ),
            (_, CopyEvent::ClientEnded) => (Closed, none),
            (
                Window {
                    syncs,
                    extended,
                    ended,
                },
                CopyEvent::ServerStarted,
            ) => {
                let swallowed = Swallowed {
                    syncs,
                    reopens_batch: syncs > 0 && extended,
                };
                let state = if ended { Closed } else { In { extended } };
                (state, swallowed)
            }
            (s, CopyEvent::ServerStarted) => (s, none),
            (In { extended }, CopyEvent::ServerEnded) => (
                Window {
                    syncs: 0,
                    extended,
                    ended: false,
                },
                none,
            ),
            (s, CopyEvent::ServerEnded) => (s, none),
        }
    }

    /// The server is in COPY IN and the client has not ended it.
    #[inline]
    pub(super) fn is_in(self) -> bool {
        matches!(self, CopyState::In { .. })
    }
}

/// The commands in flight (Query, Execute, FunctionCall), and what the client sent behind them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Command {
    /// Every command sent was answered (a ReadyForQuery left nothing owed).
    Idle,
    /// A command went out whose replies are not all in; since then only CopyData, Flush, Sync,
    /// CopyDone or CopyFail.
    Running,
    /// ... and since then other messages too, pipelined behind it.
    Pipelined,
    /// A COPY began with such messages on their way: which of them the server takes inside the
    /// COPY (ignoring Syncs) and which after it (answering them) cannot be told, so the
    /// ReadyForQuery count is not trusted and the server is never called clean again (it is
    /// closed when the client leaves, not reused). Lasts for the rest of the relay: `Running`
    /// and `Pipelined` only serve to tell when to enter it.
    Uncertain,
}

/// What changes a `Command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CommandEvent {
    /// A client message with this tag went to the server (unchanged or rewritten).
    Sent(u8),
    /// The server's CopyInResponse (or CopyBothResponse) arrived.
    CopyStarted,
    /// A ReadyForQuery left nothing owed: no ReadyForQuery, no open batch.
    Answered,
}

impl Command {
    /// The state after `ev`.
    #[inline]
    pub(super) fn next(self, ev: CommandEvent) -> Command {
        use Command::*;
        match (self, ev) {
            (Uncertain, _) => Uncertain,
            (_, CommandEvent::Answered) => Idle,
            (Pipelined, CommandEvent::CopyStarted) => Uncertain,
            (s, CommandEvent::CopyStarted) => s,
            (Idle, CommandEvent::Sent(tag)) => {
                if is_command(tag) {
                    Running
                } else {
                    Idle
                }
            }
            (Running, CommandEvent::Sent(tag)) => {
                if matches!(
                    tag,
                    t::COPY_DATA | t::FLUSH | t::SYNC | t::COPY_DONE | t::COPY_FAIL
                ) {
                    Running
                } else {
                    Pipelined
                }
            }
            (Pipelined, CommandEvent::Sent(_)) => Pipelined,
        }
    }
}

/// A Query, Execute or FunctionCall: a message that runs something.
#[inline]
pub(super) fn is_command(tag: u8) -> bool {
    matches!(tag, t::QUERY | t::EXECUTE | t::FUNCTION_CALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: a state, an event, the state after it; every pair of the two enums once.
    #[test]
    fn batch_transitions() {
        use Batch::*;
        use BatchEvent as E;
        let table = [
            (Synced, E::Extended, Open),
            (Open, E::Extended, Open),
            (Failed, E::Extended, Failed),
            // The server still skips: a new batch's first message changes nothing of that.
            (FailedSynced, E::Extended, Failed),
            // A Sync ends any batch, and the skipping with it.
            (Synced, E::Sync, Synced),
            (Open, E::Sync, Synced),
            (Failed, E::Sync, Synced),
            (FailedSynced, E::Sync, Synced),
            (Open, E::Error, Failed),
            (Failed, E::Error, Failed),
            (Synced, E::Error, FailedSynced),
            (FailedSynced, E::Error, FailedSynced),
            // A lost server owes nothing: what skipped stays so (unread: the relay is over).
            (Synced, E::Lost, Synced),
            (Open, E::Lost, Synced),
            (Failed, E::Lost, FailedSynced),
            (FailedSynced, E::Lost, FailedSynced),
        ];
        let states = [Synced, Open, Failed, FailedSynced];
        let events = [E::Extended, E::Sync, E::Error, E::Lost];
        for s in states {
            for e in events {
                let rows = table.iter().filter(|r| r.0 == s && r.1 == e).count();
                assert_eq!(rows, 1, "{s:?} on {e:?}: {rows} rows");
            }
        }
        for (from, ev, to) in table {
            assert_eq!(from.next(ev), to, "{from:?} on {ev:?}");
        }
    }

    #[test]
    fn batch_open_and_skipping() {
        use Batch::*;
        // (state, extended messages since the last Sync, the server skips until Sync)
        let table = [
            (Synced, false, false),
            (Open, true, false),
            (Failed, true, true),
            (FailedSynced, false, true),
        ];
        for (s, open, skipping) in table {
            assert_eq!((s.open(), s.skipping()), (open, skipping), "{s:?}");
        }
    }

    /// A `CopyState::Window`.
    fn w(syncs: u32, extended: bool, ended: bool) -> CopyState {
        CopyState::Window {
            syncs,
            extended,
            ended,
        }
    }

    fn sw(syncs: u32, reopens_batch: bool) -> Swallowed {
        Swallowed {
            syncs,
            reopens_batch,
        }
    }

    /// Each row: a state, an event, the state after it and the Syncs swallowed. `w(syncs,
    /// extended, ended)` is a window; `in_q`/`in_x` COPY IN begun by a Query / an Execute.
    #[test]
    fn copy_transitions() {
        use CopyEvent as E;
        use CopyState::Closed;
        let query = E::Command { extended: false };
        let execute = E::Command { extended: true };
        let in_q = CopyState::In { extended: false };
        let in_x = CopyState::In { extended: true };
        let none = Swallowed::default();
        let table = [
            // A command opens a window, whatever came before...
            (Closed, query, w(0, false, false), none),
            (w(2, false, true), execute, w(0, true, false), none),
            (w(1, true, false), query, w(0, false, false), none),
            // ... except inside COPY IN, where the client cannot send one (it is refused).
            (in_q, execute, in_x, none),
            // Syncs count until the client ends a copy; none inside COPY IN or after it ended.
            (w(0, true, false), E::Sync, w(1, true, false), none),
            (w(1, false, false), E::Sync, w(2, false, false), none),
            (w(1, false, true), E::Sync, w(1, false, true), none),
            (Closed, E::Sync, Closed, none),
            (in_x, E::Sync, in_x, none),
            // The client ends a copy: counted Syncs wait for the server's CopyInResponse.
            (w(0, true, false), E::ClientEnded, Closed, none),
            (w(2, true, false), E::ClientEnded, w(2, true, true), none),
            (w(2, true, true), E::ClientEnded, w(2, true, true), none),
            (in_x, E::ClientEnded, Closed, none),
            (Closed, E::ClientEnded, Closed, none),
            // The server starts the COPY: the counted Syncs are swallowed, and an Execute's
            // batch stays open; the client is in the copy unless it already ended it.
            (w(0, false, false), E::ServerStarted, in_q, none),
            (w(0, true, false), E::ServerStarted, in_x, none),
            (w(2, false, false), E::ServerStarted, in_q, sw(2, false)),
            (w(1, true, false), E::ServerStarted, in_x, sw(1, true)),
            (w(2, true, true), E::ServerStarted, Closed, sw(2, true)),
            (w(2, false, true), E::ServerStarted, Closed, sw(2, false)),
            (in_x, E::ServerStarted, in_x, none),
            (Closed, E::ServerStarted, Closed, none),
            // The server ends a COPY IN (done, failed, or lost): Syncs count again.
            (in_x, E::ServerEnded, w(0, true, false), none),
            (in_q, E::ServerEnded, w(0, false, false), none),
            (w(1, true, false), E::ServerEnded, w(1, true, false), none),
            (w(1, true, true), E::ServerEnded, w(1, true, true), none),
            (Closed, E::ServerEnded, Closed, none),
        ];
        for (from, ev, to, swallowed) in table {
            assert_eq!(from.next(ev), (to, swallowed), "{from:?} on {ev:?}");
        }
        assert_eq!(CopyState::START, w(0, false, false));
        assert!(in_q.is_in() && !Closed.is_in() && !CopyState::START.is_in());
    }

    #[test]
    fn command_transitions() {
        use Command::*;
        use CommandEvent as E;
        let (query, execute, call) = (
            E::Sent(t::QUERY),
            E::Sent(t::EXECUTE),
            E::Sent(t::FUNCTION_CALL),
        );
        let (parse, sync, data, flush, done, fail) = (
            E::Sent(t::PARSE),
            E::Sent(t::SYNC),
            E::Sent(t::COPY_DATA),
            E::Sent(t::FLUSH),
            E::Sent(t::COPY_DONE),
            E::Sent(t::COPY_FAIL),
        );
        let table = [
            (Idle, query, Running),
            (Idle, execute, Running),
            (Idle, call, Running),
            (Idle, parse, Idle),
            (Idle, sync, Idle),
            (Idle, E::CopyStarted, Idle),
            (Idle, E::Answered, Idle),
            // Behind a running command, the copy's own messages, Flush and Sync are not
            // pipelining; anything else is, another command included.
            (Running, data, Running),
            (Running, flush, Running),
            (Running, sync, Running),
            (Running, done, Running),
            (Running, fail, Running),
            (Running, parse, Pipelined),
            (Running, query, Pipelined),
            (Running, execute, Pipelined),
            (Running, E::CopyStarted, Running),
            (Running, E::Answered, Idle),
            (Pipelined, sync, Pipelined),
            (Pipelined, query, Pipelined),
            (Pipelined, E::Answered, Idle),
            // A COPY with messages pipelined behind it: uncertain for good.
            (Pipelined, E::CopyStarted, Uncertain),
            (Uncertain, E::Answered, Uncertain),
            (Uncertain, query, Uncertain),
            (Uncertain, sync, Uncertain),
            (Uncertain, E::CopyStarted, Uncertain),
        ];
        for (from, ev, to) in table {
            assert_eq!(from.next(ev), to, "{from:?} on {ev:?}");
        }
    }
}
