//! A client's extended-protocol request that PostgreSQL would answer with an ERROR, but that the
//! pooler must decide itself because it renames prepared statements: a Bind or Describe of a
//! statement name the client has not prepared (never prepared, closed, or forgotten after its
//! DEALLOCATE ALL / DISCARD ALL: `26000 prepared statement "x" does not exist`), and a Parse of a
//! name it already uses (`42P05 prepared statement "x" already exists`).
//!
//! The connection stays, as on PostgreSQL. So that the server skips the rest of the batch until
//! Sync and fails an open transaction just as it would have, the request goes to the server as a
//! Bind of a statement that does not exist there (`REFUSED`), and the server's error for it is
//! replaced, in order, by PostgreSQL's error with the client's name.

use bytes::{Buf, BufMut};
use sluice_protocol::{encode_error, frontend_tag, Severity};

use super::core::{RelayCore, INSPECT_MAX};
use super::expect::Expect;
use super::protocol_state::BatchEvent;
use super::RelayEnd;

/// A statement name no server has: the pooler's own are `sluice_<n>`, clients' never reach it.
const REFUSED: &[u8] = b"sluice_refused";

pub(super) const INVALID_SQL_STATEMENT_NAME: &str = "26000";
const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";

/// PostgreSQL's words for a statement name that does not exist.
pub(super) fn missing(name: &str) -> String {
    format!("prepared statement \"{name}\" does not exist")
}

/// Why a client's statement name is refused.
pub(super) enum BadName {
    /// Bound or described, but never prepared (or closed, or forgotten).
    Missing(String),
    /// Prepared again while still in use.
    InUse(String),
}

impl BadName {
    /// PostgreSQL's error for it: what the client is told.
    fn error(&self) -> (&'static str, String) {
        match self {
            BadName::Missing(name) => (INVALID_SQL_STATEMENT_NAME, missing(name)),
            BadName::InUse(name) => (
                DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" already exists"),
            ),
        }
    }

    /// PgBouncer's log line for it, which operators grep for (PgBouncer then closes the client;
    /// here the client only gets PostgreSQL's error).
    fn log_line(&self) -> String {
        match self {
            BadName::Missing(name) => format!("prepared statement '{name}' not found"),
            BadName::InUse(name) => format!("prepared statement '{name}' was already prepared"),
        }
    }
}

/// The client-side step of a refusal (see `client_scan::Step`).
pub(super) enum Refusal {
    /// The message is not whole yet, or earlier output must go first.
    Wait,
    /// Consumed; its stand-in was injected.
    Consumed,
}

impl RelayCore<'_> {
    /// Refuse the client message of `total` bytes at the front of the buffer (`avail` of it read)
    /// with PostgreSQL's ERROR for `bad`, in its place in the batch, and note it for the log.
    pub(super) fn refuse_in_batch(&mut self, total: usize, avail: usize, bad: BadName) -> Refusal {
        let start = self.c.ready;
        if start > 0 {
            return Refusal::Wait;
        }
        if avail < total {
            self.c.need = start + total;
            return Refusal::Wait;
        }
        self.client.rbuf.advance(total);
        self.batch = self.batch.next(BatchEvent::Extended);
        self.mark_query_start();
        if self.batch.skipping() {
            // An earlier error in the batch: the server would skip this message, and so the
            // client gets no reply for it.
            return Refusal::Consumed;
        }
        self.scratch.log_notes.push(bad.log_line());
        let (sqlstate, message) = bad.error();
        let out = &mut self.scratch.c_inject;
        out.put_u8(frontend_tag::BIND);
        // length, empty portal name, the statement name, no formats, no parameters, no result formats
        out.put_u32((4 + 1 + REFUSED.len() + 1 + 2 + 2 + 2) as u32);
        out.put_u8(0);
        out.put_slice(REFUSED);
        out.put_u8(0);
        out.put_u16(0);
        out.put_u16(0);
        out.put_u16(0);
        self.note_sent(frontend_tag::BIND);
        self.push(Expect::Refused { sqlstate, message });
        Refusal::Consumed
    }

    /// The server's reply at the front of the queue answers a refused request: replace its
    /// ErrorResponse with the client's error. (Should the stand-in ever bind, the client ends.)
    /// `Ok(None)`: not such a reply. `Ok(Some(false))`: more must be read or written first.
    pub(super) fn replace_refused(
        &mut self,
        tag: u8,
        total: usize,
        avail: usize,
    ) -> Result<Option<bool>, RelayEnd> {
        let Some(Expect::Refused { sqlstate, message }) = self.scratch.expect.front() else {
            return Ok(None);
        };
        use sluice_protocol::backend_tag as b;
        if !matches!(tag, b::ERROR_RESPONSE | b::BIND_COMPLETE) {
            return Ok(None);
        }
        if total > INSPECT_MAX {
            return Err(self.server_gone());
        }
        // Dropped replies are cut from the front of the buffer: what precedes goes out first.
        if tag == b::BIND_COMPLETE {
            // A statement of that name exists after all (a session's own SQL PREPARE): the server
            // is not in the error state the client will believe it is in.
            return Err(RelayEnd::Fatal {
                notice: crate::error::ClientNotice::new(sqlstate, message.clone()),
                server_clean: false,
            });
        }
        if self.s.ready > 0 {
            return Ok(Some(false));
        }
        if avail < total {
            self.s.need = total;
            return Ok(Some(false));
        }
        let (sqlstate, message) = (*sqlstate, message.clone());
        encode_error(
            Severity::Error,
            sqlstate,
            &message,
            None,
            None,
            &mut self.scratch.s_inject,
        );
        if let Some(t) = self.tracker.as_deref_mut() {
            t.on_error();
        }
        self.server.rbuf.advance(total);
        self.s.need = 0;
        // As after any error in a batch: no replies until Sync (the queue's entries up to it go).
        self.error_in_batch();
        Ok(Some(true))
    }
}
