//! Server -> client scanning: ReadyForQuery ends requests (and maybe the transaction),
//! ParameterStatus updates both parameter caches, and, while rewriting prepared statements, replies
//! are matched to the request queue to drop injected ones and synthesize absorbed ones.

use bytes::Buf;
use sluice_protocol::{
    backend_tag, decode_error_fields, decode_parameter_status, decode_ready_for_query, peek_header,
};

use super::core::{RelayCore, INSPECT_MAX};
use super::expect::{Action, Expect};
use super::lost::fatal_cause;
use super::protocol_state::{BatchEvent, CommandEvent, CopyEvent};
use super::RelayEnd;
use crate::error::{invalid_server_parameter, ServerError};

/// What to do with one server reply.
enum Route {
    Forward,
    Drop,
}

const PARSE_COMPLETE: [u8; 5] = [backend_tag::PARSE_COMPLETE, 0, 0, 0, 4];
const CLOSE_COMPLETE: [u8; 5] = [backend_tag::CLOSE_COMPLETE, 0, 0, 0, 4];

impl RelayCore<'_> {
    pub(super) fn scan_server(&mut self) -> Result<(), RelayEnd> {
        if self.scratch.read_guard {
            // Read routing (`read_guard.rs`): checked once per scan, not per reply.
            return self.scan_guarded();
        }
        let rewriting = self.prepared.is_some();
        loop {
            let len = self.server.rbuf.len();
            if self.s.remaining > 0 {
                if self.s.ready >= len {
                    return Ok(());
                }
                let take = self.s.remaining.min(len - self.s.ready);
                self.s.ready += take;
                self.s.remaining -= take;
                continue;
            }
            if self.scratch.leads > 0 {
                if !self.skip_lead()? {
                    return Ok(()); // the rest of the pooler's replies has not arrived
                }
                continue;
            }
            if rewriting && !self.drain_fakes() {
                return Ok(()); // a synthesized reply waits for the output to drain
            }
            if self.s.ready >= len {
                return Ok(());
            }
            let header = match peek_header(&self.server.rbuf[self.s.ready..], self.max_packet) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(()),
                Err(_) => return Err(self.server_gone()),
            };
            let tag = header.tag;
            let total = header.total_len();
            let avail = len - self.s.ready;
            let tracking = self.tracker.is_some();
            if tracking && tag == backend_tag::ERROR_RESPONSE && total <= INSPECT_MAX {
                // A FATAL is the server going away: the client is not to see it, but the loss
                // (`lost.rs`). Errors are read whole to tell (longer ones are not FATALs a
                // server sends when it goes).
                if avail < total {
                    self.s.need = self.s.ready + total;
                    return Ok(());
                }
                let body = &self.server.rbuf[self.s.ready + 5..self.s.ready + total];
                if let Some(cause) = decode_error_fields(body)
                    .ok()
                    .as_ref()
                    .and_then(fatal_cause)
                {
                    return Err(self.server_lost(&cause));
                }
            }
            let inspect = matches!(
                tag,
                backend_tag::READY_FOR_QUERY | backend_tag::PARAMETER_STATUS
            ) || (tracking && tag == backend_tag::COMMAND_COMPLETE)
                || (rewriting
                    && matches!(
                        tag,
                        backend_tag::PARSE_COMPLETE
                            | backend_tag::CLOSE_COMPLETE
                            | backend_tag::COMMAND_COMPLETE
                    ));
            if inspect {
                if total > INSPECT_MAX {
                    return Err(self.server_gone());
                }
                if avail < total {
                    self.s.need = self.s.ready + total;
                    return Ok(());
                }
            }
            if rewriting {
                match self.replace_refused(tag, total, avail)? {
                    Some(true) => continue,
                    Some(false) => return Ok(()),
                    None => {}
                }
            }
            let start = self.s.ready;
            if self.copy.is_in()
                && matches!(
                    tag,
                    backend_tag::COMMAND_COMPLETE | backend_tag::ERROR_RESPONSE
                )
            {
                // The COPY ended on the server's side: done, or failed (a message other than the
                // copy's the client had pipelined before the CopyInResponse came). The client's
                // Syncs from here on are answered again.
                self.copy = self.copy.next(CopyEvent::ServerEnded).0;
            }
            match tag {
                backend_tag::READY_FOR_QUERY => {
                    let body = &self.server.rbuf[start + 5..start + total];
                    let status = decode_ready_for_query(body).map_err(|_| self.server_gone())?;
                    if rewriting {
                        self.pop_through_sync();
                    }
                    let answered = self.answered + 1;
                    if let Some(t) = self.tracker.as_deref_mut() {
                        t.on_ready_through(
                            status == sluice_protocol::TransactionStatus::Idle,
                            answered,
                        );
                    }
                    self.s.ready += total;
                    self.s.need = 0;
                    self.ready_for_query(status)?;
                    continue;
                }
                backend_tag::COPY_IN | backend_tag::COPY_BOTH => self.copy_in_started(),
                backend_tag::PARAMETER_STATUS => {
                    let body = &self.server.rbuf[start + 5..start + total];
                    if let Ok((k, v)) = decode_parameter_status(body) {
                        // One copy for both maps: the next hand-out compares pointers.
                        let v: std::sync::Arc<str> = v.into();
                        self.server.params.set_shared(k, &v);
                        if let Some(name) = self.tracked.canonical(k) {
                            self.client_params.set_shared(name, &v);
                            // The client's own SET: SHOW CLIENTS shows it.
                            if let (Some((entry, _)), "application_name") = (self.shown, name) {
                                entry.application_name.publish(Some(&v));
                            }
                        }
                    }
                }
                backend_tag::ERROR_RESPONSE | backend_tag::COMMAND_COMPLETE if tracking => {
                    if let Some(t) = self.tracker.as_deref_mut() {
                        if tag == backend_tag::ERROR_RESPONSE {
                            t.on_error();
                        } else {
                            let body = &self.server.rbuf[start + 5..start + total];
                            let tag = body.strip_suffix(b"\0").unwrap_or(body);
                            // Replies come in order: this answers the first unanswered request.
                            t.on_command_complete_in(tag, self.answered);
                        }
                    }
                    if rewriting {
                        // Prepared-statement bookkeeping sees the same reply.
                        let _ = self.route(tag, start, total);
                    }
                }
                _ if rewriting => {
                    if self.s.ready > 0 && self.reply_is_dropped(tag) {
                        return Ok(()); // dropped replies are cut from the front of the buffer
                    }
                    if let Route::Drop = self.route(tag, start, total) {
                        self.server.rbuf.advance(total);
                        self.s.need = 0;
                        continue;
                    }
                }
                _ => {}
            }
            let take = total.min(avail);
            self.s.ready += take;
            self.s.remaining = total - take;
            self.s.need = 0;
        }
    }

    /// Drop the replies to a query the pooler sent ahead of the client's request
    /// (`RelayScratch::send_ahead`), through its ReadyForQuery, keeping the server's parameter
    /// reports. True when they are all gone; false when more must be read. A failure ends the
    /// client: its request went out behind the query and must not run on a server that is not in
    /// the state the client expects (the server is closed).
    pub(super) fn skip_lead(&mut self) -> Result<bool, RelayEnd> {
        // Nothing of this relay's server bytes was forwarded yet: the replies are at the front.
        debug_assert!(self.s.ready == 0 && self.s.remaining == 0);
        loop {
            let header = match peek_header(self.server.rbuf, self.max_packet) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(false),
                Err(_) => return Err(self.server_gone()),
            };
            let total = header.total_len();
            if total > INSPECT_MAX {
                return Err(self.server_gone());
            }
            if self.server.rbuf.len() < total {
                self.s.need = total;
                return Ok(false);
            }
            let body = &self.server.rbuf[5..total];
            match header.tag {
                backend_tag::READY_FOR_QUERY => {
                    *self.server.status =
                        decode_ready_for_query(body).map_err(|_| self.server_gone())?;
                    self.pending_rfq = self.pending_rfq.saturating_sub(1);
                    self.answered += 1;
                    self.scratch.leads -= 1;
                    if self.scratch.leads == 0 {
                        if let Some(slot) = self.cancel_after_lead.take() {
                            slot.link(self.server.addr, self.server.backend_key);
                        }
                    }
                }
                backend_tag::PARAMETER_STATUS => {
                    if let Ok((k, v)) = decode_parameter_status(body) {
                        self.server.params.set(k, v);
                    }
                }
                backend_tag::ERROR_RESPONSE => {
                    let fields = decode_error_fields(body).map_err(|_| self.server_gone())?;
                    if let Some(cause) = fatal_cause(&fields) {
                        return Err(self.server_lost(&cause));
                    }
                    let notice = invalid_server_parameter(&ServerError::Query(Box::new(fields)));
                    return Err(RelayEnd::Fatal {
                        notice,
                        server_clean: false,
                    });
                }
                backend_tag::COPY_IN | backend_tag::COPY_OUT | backend_tag::COPY_BOTH => {
                    return Err(self.server_gone());
                }
                _ => {}
            }
            self.server.rbuf.advance(total);
            self.s.need = 0;
            if self.scratch.leads == 0 {
                return Ok(true);
            }
        }
    }

    /// Is this reply the answer to a request the pooler injected?
    fn reply_is_dropped(&self, tag: u8) -> bool {
        match (tag, self.scratch.expect.front()) {
            (backend_tag::PARSE_COMPLETE, Some(Expect::Parse { action, .. }))
            | (backend_tag::CLOSE_COMPLETE, Some(Expect::Close { action })) => {
                *action == Action::Skip
            }
            _ => false,
        }
    }

    /// Match a reply against the request queue (rewriting mode only).
    fn route(&mut self, tag: u8, start: usize, total: usize) -> Route {
        let front = self.scratch.expect.front();
        match tag {
            backend_tag::ERROR_RESPONSE => {
                if front.is_some_and(Expect::is_extended) {
                    self.error_in_batch();
                }
                Route::Forward
            }
            backend_tag::PARSE_COMPLETE => match front {
                Some(Expect::Parse { action, .. }) => {
                    let drop = *action == Action::Skip;
                    self.scratch.expect.pop_front();
                    if drop {
                        Route::Drop
                    } else {
                        Route::Forward
                    }
                }
                _ => Route::Forward,
            },
            backend_tag::CLOSE_COMPLETE => match front {
                Some(Expect::Close { action }) => {
                    let drop = *action == Action::Skip;
                    self.scratch.expect.pop_front();
                    if drop {
                        Route::Drop
                    } else {
                        Route::Forward
                    }
                }
                _ => Route::Forward,
            },
            backend_tag::BIND_COMPLETE => {
                if front == Some(&Expect::Bind) {
                    self.scratch.expect.pop_front();
                }
                Route::Forward
            }
            backend_tag::ROW_DESCRIPTION | backend_tag::NO_DATA => {
                if front == Some(&Expect::Describe) {
                    self.scratch.expect.pop_front();
                }
                Route::Forward
            }
            backend_tag::COMMAND_COMPLETE
            | backend_tag::EMPTY_QUERY
            | backend_tag::PORTAL_SUSPENDED => {
                if tag == backend_tag::COMMAND_COMPLETE {
                    let body = &self.server.rbuf[start + 5..start + total];
                    if body == b"DISCARD ALL\0" || body == b"DEALLOCATE ALL\0" {
                        self.server.prepared.clear();
                        if let Some(p) = self.prepared.as_mut() {
                            p.client.clear();
                        }
                    }
                }
                if front == Some(&Expect::Execute) {
                    self.scratch.expect.pop_front();
                }
                Route::Forward
            }
            _ => Route::Forward,
        }
    }

    /// An error in an extended-protocol batch: the failed request and everything up to the next
    /// Sync get no (further) reply. Statements whose Parse did not happen are forgotten.
    pub(super) fn error_in_batch(&mut self) {
        while let Some(e) = self.scratch.expect.front() {
            if *e == Expect::Sync {
                return;
            }
            if let Some(Expect::Parse {
                client_name,
                cached,
                ..
            }) = self.scratch.expect.pop_front()
            {
                if let Some(id) = cached {
                    self.server.prepared.remove(id);
                }
                if let (Some(name), Some(p)) = (client_name, self.prepared.as_mut()) {
                    p.client.remove(&name);
                }
            }
        }
        self.batch = self.batch.next(BatchEvent::Error);
    }

    /// The server entered COPY IN: Syncs the client sent since the COPY command and before ending
    /// the copy are ignored by the server, so they owe no ReadyForQuery.
    fn copy_in_started(&mut self) {
        self.command = self.command.next(CommandEvent::CopyStarted);
        let (copy, swallowed) = self.copy.next(CopyEvent::ServerStarted);
        self.copy = copy;
        self.pending_rfq = self.pending_rfq.saturating_sub(swallowed.syncs);
        self.answered += u64::from(swallowed.syncs);
        if swallowed.reopens_batch {
            // Those Syncs never reached the batch: it stays open (an implicit transaction, the
            // COPY's CommandComplete still to come) until a Sync after the copy.
            self.batch = self.batch.next(BatchEvent::Extended);
        }
        let mut to_remove = swallowed.syncs;
        let mut i = 0;
        while i < self.scratch.expect.len() && to_remove > 0 {
            if self.scratch.expect.get(i) == Some(&Expect::Sync) {
                self.scratch.expect.remove(i);
                to_remove -= 1;
            } else {
                i += 1;
            }
        }
    }

    /// ReadyForQuery answers the oldest Sync / Query / FunctionCall.
    fn pop_through_sync(&mut self) {
        while let Some(e) = self.scratch.expect.pop_front() {
            if matches!(e, Expect::Sync | Expect::UntilReady) {
                return;
            }
        }
    }

    /// Emit synthesized replies that are due (queue front) once everything before them was written.
    /// Returns false when a due reply still waits for the output to drain.
    ///
    /// Inlined check first: this runs for every server message while rewriting, and the front of
    /// the queue is almost never a synthesized reply.
    #[inline]
    pub(super) fn drain_fakes(&mut self) -> bool {
        match self.scratch.expect.front() {
            Some(front) if front.action() == Action::Fake => self.emit_fakes(),
            _ => true,
        }
    }

    fn emit_fakes(&mut self) -> bool {
        if self.scratch.read_guard {
            // Read routing: nothing reaches the client before the standby's first reply shows it
            // took the read (`read_guard.rs`); then these go first, in their place.
            return true;
        }
        while let Some(front) = self.scratch.expect.front() {
            if front.action() != Action::Fake {
                return true;
            }
            if self.s.ready > 0 || self.s.remaining > 0 {
                return false;
            }
            let bytes = match front {
                Expect::Close { .. } => &CLOSE_COMPLETE,
                _ => &PARSE_COMPLETE,
            };
            self.scratch.s_inject.extend_from_slice(bytes);
            self.scratch.expect.pop_front();
        }
        true
    }
}
