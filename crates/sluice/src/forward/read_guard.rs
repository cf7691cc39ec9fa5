//! Read routing's replay guard (`route_reads = auto`): a request that the classifier proved a
//! read (a single simple Query, or an extended-protocol batch through its Sync that executes one
//! statement, `client/route.rs`) runs on a standby with its replies held back until the first
//! one that carries no row and no outcome (RowDescription, NoticeResponse, ParseComplete,
//! BindComplete, ParameterDescription, NoData) is seen. When that is an ErrorResponse with SQLSTATE 25006
//! (read_only_sql_transaction: a write hidden in a function) and the server owes nothing else,
//! the relay ends with nothing forwarded and `RelayScratch::take_read_refused` says so: the
//! session closes the standby's server and runs the same request on the primary. Anything else
//! lifts the guard and the replies go through as usual.

use sluice_protocol::{backend_tag, decode_error_fields, peek_header};

use super::core::{RelayCore, INSPECT_MAX};
use super::RelayEnd;
use crate::error::ClientNotice;

/// read_only_sql_transaction.
const READ_ONLY_SQL_TRANSACTION: &str = "25006";

impl RelayCore<'_> {
    /// `scan_server` with the guard armed (only a routed read's relay comes here): the pooler's
    /// own replies first, as `scan_server` takes them, then the guard; once it is lifted, the
    /// usual scan. Replies the relay synthesizes (a ParseComplete for a statement the server
    /// already has) wait meanwhile (`emit_fakes`), so that a refused read left nothing at the
    /// client.
    pub(super) fn scan_guarded(&mut self) -> Result<(), RelayEnd> {
        while self.scratch.leads > 0 {
            if !self.skip_lead()? {
                return Ok(());
            }
        }
        if self.s.ready >= self.server.rbuf.len() || !self.guard_read()? {
            return Ok(()); // not yet known whether the standby refused
        }
        self.scan_server()
    }

    /// With the guard armed: Ok(true) when scanning may go on (the guard is lifted), Ok(false)
    /// when more of the server's replies must be read first, Err when the standby refused.
    fn guard_read(&mut self) -> Result<bool, RelayEnd> {
        // Only while nothing of this relay's replies was made ready to forward, one request
        // owed, and nothing sent after it.
        if self.s.ready != 0 || self.s.remaining != 0 || self.pending_rfq != 1 || self.batch.open()
        {
            self.scratch.read_guard = false;
            return Ok(true);
        }
        let buf = &self.server.rbuf[..];
        let mut at = 0;
        loop {
            let h = match peek_header(&buf[at..], self.max_packet) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    self.s.need = at + 5;
                    return Ok(false);
                }
                Err(_) => return Err(self.server_gone()),
            };
            let total = h.total_len();
            if total > INSPECT_MAX {
                break;
            }
            if buf.len() - at < total {
                self.s.need = at + total;
                return Ok(false);
            }
            match h.tag {
                backend_tag::ROW_DESCRIPTION
                | backend_tag::NOTICE_RESPONSE
                | backend_tag::PARSE_COMPLETE
                | backend_tag::BIND_COMPLETE
                | backend_tag::PARAMETER_DESCRIPTION
                | backend_tag::NO_DATA => at += total,
                backend_tag::ERROR_RESPONSE => {
                    let refused = decode_error_fields(&buf[at + 5..at + total])
                        .is_ok_and(|f| f.code == READ_ONLY_SQL_TRANSACTION);
                    if refused {
                        self.scratch.read_guard = false;
                        self.scratch.read_refused = true;
                        return Err(RelayEnd::Fatal {
                            notice: ClientNotice::new(READ_ONLY_SQL_TRANSACTION, "replayed"),
                            server_clean: false,
                        });
                    }
                    break;
                }
                _ => break,
            }
        }
        self.s.need = 0;
        self.scratch.read_guard = false;
        Ok(true)
    }
}
