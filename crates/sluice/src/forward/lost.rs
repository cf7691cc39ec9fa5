//! A server lost under a running relay (transaction and statement mode): it closed, its socket
//! failed, or it sent FATAL (pg_terminate_backend, a shutdown, a crash, a failover). The client
//! keeps its connection: what the server had sent is still written, every reply it still owed
//! becomes one ErrorResponse (and its ReadyForQuery), and the client is left in the state
//! PostgreSQL would leave it in after such an error (`after_loss.rs` answers from there).
//!
//! Which error: 08007 (transaction_resolution_unknown) when an unanswered request may have
//! committed (a command sent outside a transaction block, or a COMMIT / END / PREPARE
//! TRANSACTION inside one: `RelayCore::outstanding`), else 08006 (connection_failure). Nothing
//! is sent again to another server: the client decides.

use bytes::{Buf, BytesMut};
use sluice_protocol::{encode_ready_for_query, ErrorFields, TransactionStatus};

use super::after_loss::{aborted_notice, encode_notice_error, AfterLoss};
use super::core::{RelayCore, Scan};
use super::expect::Expect;
use super::protocol_state::{BatchEvent, CopyEvent};
use super::RelayEnd;
use crate::error::ClientNotice;
use crate::server::ServerAddr;

/// SQLSTATE 08007: the request's outcome cannot be known.
pub const TRANSACTION_RESOLUTION_UNKNOWN: &str = "08007";

/// What a relay leaves when its server was lost and the client goes on.
#[derive(Debug)]
pub struct ServerLost {
    /// For the client, in order: the lost server's replies that were read but not yet written,
    /// then the stand-ins for the replies it still owed.
    pub reply: BytesMut,
    /// The error the client is (or will be) told, for the log too.
    pub notice: ClientNotice,
    /// How the client's next messages are answered, until it may have a server again.
    pub state: AfterLoss,
    /// The rest of a client message that was half-way to the server: dropped as it arrives.
    pub client_skip: usize,
}

/// The error a client gets for the request its server was lost under.
pub fn lost_notice(addr: &ServerAddr, cause: &str, unknown: bool, in_tx: bool) -> ClientNotice {
    if unknown {
        let mut n = ClientNotice::new(
            TRANSACTION_RESOLUTION_UNKNOWN,
            format!("server connection to {addr} was lost while the transaction could have been committing: {cause}"),
        );
        n.detail = Some("Whether it committed is unknown: check before running it again.".into());
        return n;
    }
    let mut n = ClientNotice::new(
        crate::error::sqlstate::CONNECTION_FAILURE,
        format!("server connection to {addr} was lost: {cause}"),
    );
    n.detail = Some(if in_tx {
        "The transaction was rolled back; end it with ROLLBACK.".into()
    } else {
        "The statement did not complete; nothing was run again.".into()
    });
    n
}

/// The server's FATAL (or PANIC) error, as the cause of the loss; None for any other error.
pub(super) fn fatal_cause(fields: &ErrorFields) -> Option<String> {
    // The non-localized severity when the server sent one (9.6+), else its own words.
    matches!(fields.severity.as_str(), "FATAL" | "PANIC")
        .then(|| format!("{} (SQLSTATE {})", fields.message, fields.code))
}

impl RelayCore<'_> {
    /// The server was lost (`cause` for the client and the log). In session mode, or when a
    /// message to the client was cut mid-way by the loss (nothing can follow it), the client is
    /// closed as before (`server_gone`).
    pub(super) fn server_lost(&mut self, cause: &str) -> RelayEnd {
        if self.tracker.is_none() || self.s.remaining > 0 {
            return self.server_gone();
        }
        let status = *self.server.status;
        let in_tx = status != TransactionStatus::Idle;
        let owed = self.pending_rfq.saturating_sub(self.scratch.leads);
        let running = owed > 0 || self.batch.open();
        let unknown = running && self.outstanding.may_commit;
        // The transaction block goes on, failed, unless a lost request may have ended it.
        let failed_tx = in_tx && !(running && self.outstanding.ends);
        let notice = lost_notice(self.server.addr, cause, unknown, in_tx);

        let mut reply = BytesMut::new();
        reply.extend_from_slice(&self.scratch.s_inject);
        reply.extend_from_slice(&self.server.rbuf[..self.s.ready]);
        let after = if failed_tx {
            TransactionStatus::Failed
        } else {
            TransactionStatus::Idle
        };
        let mut state = AfterLoss::new(failed_tx);
        // One error per request the server owed an answer: the running one gets the loss; later
        // ones, pipelined behind it, 25P02 inside the failed block (as PostgreSQL), else the loss.
        let mut told = false;
        let mut error_for_next = |reply: &mut BytesMut| {
            if !told || !failed_tx {
                encode_notice_error(&notice, reply);
            } else {
                encode_notice_error(&aborted_notice(), reply);
            }
            told = true;
        };
        for _ in 0..owed {
            error_for_next(&mut reply);
            encode_ready_for_query(after, &mut reply);
        }
        if self.batch.open() {
            // Extended messages after the last Sync: the error now, the rest skipped to Sync.
            error_for_next(&mut reply);
            state.skip_to_sync();
        }
        if !told && failed_tx {
            // Nothing was running (idle in the block): the client's next statement is told.
            state.tell_next(notice.clone());
        }
        if self.copy.is_in() {
            state.drain_copy();
        }
        // Statements whose Parse was not answered were not created (as after an error).
        while let Some(e) = self.scratch.expect.pop_front() {
            if let (
                Expect::Parse {
                    client_name: Some(name),
                    ..
                },
                Some(p),
            ) = (e, self.prepared.as_mut())
            {
                p.client.remove(&name);
            }
        }
        if let Some(t) = self.tracker.as_deref_mut() {
            // The lost transaction's SETs did not commit (or cannot be known to have).
            t.on_lost();
        }
        // What the client sent that was counted is answered above; the rest of a message
        // half-way to the server is dropped as it arrives; unscanned bytes stay for later.
        self.client.rbuf.advance(self.c.ready);
        let client_skip = self.c.remaining;
        self.c = Scan::default();
        self.s = Scan::default();
        self.server.rbuf.clear();
        self.scratch.s_inject.clear();
        self.pending_rfq = 0;
        self.batch = self.batch.next(BatchEvent::Lost);
        self.copy = self.copy.next(CopyEvent::ServerEnded).0;
        RelayEnd::ServerLost(Box::new(ServerLost {
            reply,
            notice,
            state,
            client_skip,
        }))
    }
}
