//! The logged-in client: idle (unlinked) until a request arrives, waiting for a server, then linked
//! and relaying until the pool mode says the server goes back (transaction/statement) or the client
//! leaves (session). Every way out decides whether the server is clean enough to reuse.

mod idle;
mod lost;

use idle::{wait_for_request, Idle};

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use tokio::time::Instant;

use super::kill::KillSwitch;
use bytes::BytesMut;
use sluice_config::PoolMode;
use sluice_protocol::{encode_notice, Severity};
use tokio::io::AsyncWriteExt;

use super::registry::{ClientEntry, ClientState};
use crate::app::App;
use crate::cancel::CancelHandle;
use crate::conn::{ClientConn, EndReason};
use crate::error::{invalid_server_parameter, sqlstate, ClientNotice};
use crate::forward::{Prepared, Relay, RelayEnd, RelayRules, RelayScratch, SessionParts};
use crate::lifecycle::Phase;
use crate::pool::{Pool, PooledServer};
use crate::pool::{PoolSettings, SettingsSnapshot};
use crate::prepared::ClientStatements;
use crate::server::log::reason;
use crate::server::params::{adopt_canonical, set_all_statement, set_statement, ParamMap};
use crate::server::{query, ServerConn};
use crate::session_state::policy::Feature;
use crate::session_state::tracker::{SessionTracker, CLEANUP_SQL, PIN_CHECK_SQL, RESET_SQL};
use crate::stats::PoolStats;

/// A logged-in client's place: its pool, its expected parameters, its cancel key.
pub struct Session {
    pub pool: Arc<Pool>,
    /// This client's registry entry (state for SHOW CLIENTS, kill switch).
    pub entry: Arc<ClientEntry>,
    pub params: ParamMap,
    /// The client's protocol-level prepared statements (transaction/statement mode).
    pub statements: ClientStatements,
    /// Session state the client created (tracked parameters, pins), transaction/statement mode.
    pub tracker: SessionTracker,
    /// This client is counted in its pool's pinned clients.
    pub counted_pinned: bool,
    /// A server has accepted this client's tracked parameter values (its startup values once a
    /// server matched them or took their SETs; later values come from the server's own reports):
    /// SETs of them go ahead of a request instead of in a round trip of their own.
    pub params_confirmed: bool,
    /// The server where this client last ran a Query or Execute (0: none yet): with
    /// `ServerConn::seq_owner`, whether a server's sequence values (`currval()`, `lastval()`) may be
    /// this client's.
    pub last_server: u64,
    pub cancel: CancelHandle,
    /// Buffers the relay reuses from one transaction to the next.
    pub relay_scratch: RelayScratch,
    /// The client_idle_timeout timer, made at the first wait that needs one and reset at each
    /// (inline in the wait, it sized every client's session state whether the timeout was set or not).
    pub idle_sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The server this client was using was lost and its failed transaction, batch or COPY is
    /// not over: its requests are answered without a server (`lost.rs`). Boxed: rare.
    pub after_loss: Option<Box<crate::forward::after_loss::AfterLoss>>,
    /// Read routing's state (None when the pool routes nothing: decided at login).
    pub route: Option<Box<super::route::ClientRoute>>,
    /// The successor refused it, or it cannot move (`dispatch` hands it over): it is not
    /// offered again.
    pub stays_here: bool,
    /// Leaves the pool's client count on drop.
    pub(crate) _member: PoolMember,
}

/// Membership in the pool's client count, and in the database's and login user's counts
/// (max_db_client_connections, max_user_client_connections): leaves them on drop.
pub(crate) struct PoolMember {
    pub(crate) pool: Arc<Pool>,
    pub(crate) _admitted: super::limits::Admitted,
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.counted_pinned {
            self.pool.pin_changed(self.entry.id, None);
        }
    }
}

impl Drop for PoolMember {
    fn drop(&mut self) {
        self.pool.client_left();
    }
}

/// How a session run ends: the client is gone, it is between transactions and should carry on
/// on another worker (`workers::Workers::move_target`), or it is between transactions and a
/// successor takes the clients: hand me over (`dispatch`, through `takeover::give`; when that
/// fails the session runs on here).
pub enum Outcome {
    End(EndReason),
    Move(usize, Box<Session>),
    HandOver(Box<Session>),
}

/// How serving one request ended.
enum Served {
    /// The session goes on.
    Next,
    End(EndReason),
    /// Idle, and a successor takes the clients: hand this one over.
    HandOver,
}

pub async fn run(app: &Arc<App>, client: &mut ClientConn, mut s: Box<Session>) -> Outcome {
    // Kept across requests; a reload is seen at the next request (`refresh_settings`).
    let mut settings = s.pool.settings_snapshot();
    // This task is the one a KILL wakes, from here on (a moved session runs on a new task): the
    // waits below then check the switch with one load (`cancelled_armed`).
    s.entry.kill.arm().await;
    // TLS state cannot leave this process; a client the successor refused is not offered again.
    let may_hand_over = !client.stream.is_tls() && !s.stays_here;
    loop {
        // Between transactions, linked to no server: a successor may take the client over.
        // (Not while a lost server's failed transaction is open: that state is not handed over.)
        if may_hand_over && s.after_loss.is_none() && app.lifecycle.phase() == Phase::HandingOver {
            return Outcome::HandOver(s);
        }
        // Between transactions (no server linked, nothing half-read): the one place a client may
        // change worker. Not while SUSPEND or a shutdown phase holds: those count on clients
        // staying where they are.
        if let Some(to) = app.workers.move_target() {
            if app.lifecycle.phase() == Phase::Running && !client.suspend.is_suspended() {
                // The idle timer belongs to this worker's time driver: the next worker makes its own.
                s.idle_sleep = None;
                return Outcome::Move(to, s);
            }
        }
        s.pool.refresh_settings(&mut settings);
        let may_hand_over_now = may_hand_over && s.after_loss.is_none();
        let served = serve_request(app, client, &mut s, &mut settings, may_hand_over_now).await;
        if let Some(home) = s.route.as_mut().and_then(|r| r.end()) {
            s.pool = home;
        }
        match served {
            Served::Next | Served::HandOver => {}
            Served::End(reason) => return Outcome::End(reason),
        }
    }
}

/// Wait for the next request and serve it.
async fn serve_request(
    app: &Arc<App>,
    client: &mut ClientConn,
    s: &mut Session,
    snapshot: &mut SettingsSnapshot,
    may_hand_over: bool,
) -> Served {
    let max_packet = snapshot.connect.max_packet_size;
    let idle_limit = snapshot.relay.client_idle_timeout;
    let rewrites_names = snapshot.mode != PoolMode::Session && snapshot.session.max_prepared > 0;
    s.entry.set_state(ClientState::Idle);
    match wait_for_request(
        client,
        max_packet,
        rewrites_names,
        idle_limit,
        &mut s.idle_sleep,
        &app.lifecycle,
        may_hand_over,
        &s.entry.kill,
        &s.pool.stats,
    )
    .await
    {
        Idle::Request => {}
        Idle::Terminate => return Served::End(EndReason::ClientClosed),
        Idle::Closed => return Served::End(EndReason::ClientEof),
        Idle::Timeout => {
            return Served::End(EndReason::Error(ClientNotice::new(
                sqlstate::PROTOCOL_VIOLATION,
                "client_idle_timeout",
            )))
        }
        Idle::Shutdown => return Served::End(EndReason::Shutdown),
        Idle::HandOver => return Served::HandOver,
        Idle::Bad(m) => {
            return Served::End(EndReason::Error(ClientNotice::new(
                sqlstate::PROTOCOL_VIOLATION,
                m,
            )))
        }
        Idle::Killed => return Served::End(killed(&s.entry.kill)),
    }
    if app.lifecycle.phase() == Phase::WaitForServers {
        return Served::End(EndReason::Shutdown);
    }
    // A SET or RELOAD while the client was idle applies to the request that just arrived (an
    // admin's `SET max_prepared_statements = 0` is seen by the next Bind, as in PgBouncer).
    s.pool.refresh_settings(snapshot);
    if s.after_loss.is_some() {
        // Its server was lost: answered without one until the failed transaction is over.
        match Box::pin(lost::answer(app, client, s, snapshot)).await {
            Ok(lost::Answered::Done) => return Served::Next,
            Ok(lost::Answered::HandOff) => {}
            Err(reason) => return Served::End(reason),
        }
    }
    // Read routing: a transaction that may run on a fresh standby takes its server from the
    // standby's sibling pool (swapped back in `run` when the request is served).
    let routed = match s.route.as_mut() {
        Some(r) => {
            // A guard armed for a request that never reached a relay does not carry over.
            s.relay_scratch.take_read_refused();
            let pinned = s.tracker.pinned().is_some();
            let names = (snapshot.session.max_prepared > 0).then_some(&s.statements);
            r.begin(&s.pool, &client.rbuf, &s.params, pinned, names)
                .map(|reader| {
                    if r.replayable() {
                        s.relay_scratch.guard_read();
                    }
                    let settings = reader.settings();
                    r.keep_home(std::mem::replace(&mut s.pool, reader));
                    settings
                })
        }
        None => None,
    };
    let settings: &Arc<PoolSettings> = routed.as_ref().unwrap_or(snapshot);
    // The request's one clock reading: its wait and the hand-out share it (and the relay's start
    // when the server is handed over at once).
    let arrived = Instant::now();
    s.entry.request_arrived(arrived.into_std());
    if s.entry.kill.is_cancelled() {
        return Served::End(killed(&s.entry.kill));
    }
    // An idle server at once needs no future (the common case below pool_size); otherwise wait
    // in line. `biased`: no random branch order to draw per request; the kill switch goes first
    // so a busy client cannot outrun a KILL.
    let checkout = match s.pool.try_checkout_now(arrived, settings) {
        Ok(server) => Ok((server, arrived)),
        Err(queued) => {
            // In line, the request waits in an allocation of its own size; the read buffer goes
            // back to the worker's spares (a storm queues thousands of clients at once).
            crate::net::spare_buffers::park_request(
                &mut client.rbuf,
                crate::conn::CLIENT_READ_CHUNK,
            );
            let wait = s.pool.checkout_at(arrived, settings, queued);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    biased;
                    _ = s.entry.kill.cancelled_armed() => return Served::End(killed(&s.entry.kill)),
                    r = &mut wait => break r,
                    // query_wait_notify: the janitor marked this wait and nudged the task (no
                    // waker of its own: the kill switch's wakes it).
                    _ = poll_fn(|_| if s.entry.take_wait_notice() { Poll::Ready(()) } else { Poll::Pending }) => {
                        let mut notice = bytes::BytesMut::new();
                        // PgBouncer 1.25's NOTICE, word for word.
                        encode_notice(
                            Severity::Notice,
                            "00000",
                            "No server connection available in postgres backend, client being queued",
                            &mut notice,
                        );
                        if client.stream.write_all(&notice).await.is_err() {
                            return Served::End(EndReason::ClientEof);
                        }
                    }
                }
            }
        }
    };
    let (mut server, handed_at) = match checkout {
        Ok(handed) => handed,
        Err(e) => return Served::End(EndReason::Error(e.client_notice())),
    };
    s.entry.set_state(ClientState::Active);
    s.entry.server_id.store(server.id.0, Ordering::Relaxed);
    if let Some(r) = s.route.as_mut() {
        r.linked(&server);
    }
    // The server's sequence values can be this client's only if the last work that ran on it was
    // this client's, and the client ran nothing anywhere else since.
    let conn: &ServerConn = &server;
    if s.last_server != conn.id.0 || conn.seq_owner != client.id.0 {
        s.relay_scratch.sequences_foreign();
    }
    // The relay's first clock reading: when the server was linked (query and transaction times
    // count from there, as PgBouncer's do: the wait is wait_time), after any queries it needed.
    let prepared = match server_prep(app, client.id, s, &mut server) {
        Prep::Ready => Ok(false),
        // Statements known to succeed go out in the same write as the request: no round trip
        // per hand-out between clients whose parameters differ.
        Prep::Ahead(sql) => {
            s.relay_scratch.send_ahead(&sql);
            PoolStats::add(&s.pool.stats.syncs_ahead, 1);
            Ok(false)
        }
        // Boxed: the query's future would otherwise size every client's task for a rare step.
        Prep::RoundTrip(sql) => {
            PoolStats::add(&s.pool.stats.syncs_round_trip, 1);
            let done = Box::pin(query::run_simple(&mut server, &sql, max_packet)).await;
            if done.is_ok() {
                adopt_canonical_values(app, client, s, &server);
            }
            done.map(|()| true)
        }
    };
    let mut relay_from = match prepared {
        Ok(false) => handed_at,
        Ok(true) => Instant::now(),
        Err(e) => {
            tracing::warn!(
                "C-{}: {} invalid server parameter: {e}",
                client.id,
                client.label()
            );
            s.pool.discard(server);
            return Served::End(EndReason::Error(invalid_server_parameter(&e)));
        }
    };
    s.params_confirmed = true;
    server.show_application_name();
    if !s.relay_scratch.ahead_pending() {
        // (Else the relay links it once the statements sent ahead are answered.)
        s.cancel.slot.link(&server.addr, server.backend_key);
    }
    // The request's arrival is its first query's start; a relay after a pin check starts afresh.
    let mut stamped = true;
    let end = loop {
        let end = relay_once(app, client, s, &mut server, settings, relay_from, stamped).await;
        stamped = false;
        sync_pin_count(s);
        if s.relay_scratch.take_ran() {
            // A Query or Execute went: it may have called nextval() (`sequences_foreign`).
            let conn: &mut ServerConn = &mut server;
            conn.seq_owner = client.id.0;
            s.last_server = conn.id.0;
        }
        if !matches!(end, RelayEnd::PinCheck) {
            break end;
        }
        // A pinned client may have released what pinned it: ask the server. (The relay's last
        // clock reading is then too old for the release.) Boxed, as `finish` below: a rare step
        // whose future would otherwise size every client's session state.
        s.relay_scratch.take_last_clock();
        if !s.tracker.pin_checkable() {
            // A pin the check query cannot see (LOAD, an unreplayable SET): counted above.
            relay_from = Instant::now();
            continue;
        }
        match Box::pin(pin_check(client, s, &mut server, max_packet)).await {
            Some(end) => break end,
            None => relay_from = Instant::now(),
        }
    };
    if matches!(end, RelayEnd::ServerGone(_) | RelayEnd::Fatal { .. }) {
        // The client is closed with a FATAL, unless its stream stopped mid-message: then it is
        // only closed (a FATAL there would be read as the rest of the message).
        client.mid_message = s
            .relay_scratch
            .client_mid_message(&server.rbuf, client.stream.unreported());
    }
    let end = match end {
        RelayEnd::ServerLost(lost) => {
            // The client goes on; the broken server is closed, never back to the pool.
            s.relay_scratch.take_last_clock();
            s.entry.set_prepared(s.statements.len());
            s.cancel.slot.unlink();
            s.entry.server_id.store(0, Ordering::Relaxed);
            let id = server.id;
            s.pool.discard(server);
            sync_pin_count(s);
            let told = Box::pin(lost::server_lost(client, s, id, lost)).await;
            sync_pin_count(s);
            return match told {
                Ok(()) => Served::Next,
                Err(reason) => Served::End(reason),
            };
        }
        end => end,
    };
    let released_at = s.relay_scratch.take_last_clock();
    s.entry.set_prepared(s.statements.len());
    s.cancel.slot.unlink();
    s.entry.server_id.store(0, Ordering::Relaxed);
    sync_pin_count(s);
    if let Some(r) = s.route.as_mut() {
        if s.relay_scratch.take_read_refused() {
            // A write hidden in the read: the standby said 25006 before anything reached the
            // client. Its server owes replies (closed); the request runs again on the primary.
            tracing::debug!(
                "C-{}: read refused by standby, replayed on the primary",
                client.id
            );
            s.pool.discard(server);
            r.refused(&mut client.rbuf, &mut s.statements);
            return Served::Next;
        }
    }
    if s.cancel.slot.in_flight() > 0 {
        // A cancel this client sent is still on its way to this server. PostgreSQL signals the
        // backend twice for one cancel, and a signal that lands after the cancelled query has
        // ended cancels the next one it runs, which in transaction pooling may be another
        // client's: the server stays out of the pool until the cancel has landed (PgBouncer's
        // being_canceled). Boxed: rare, and it would size every session's future.
        Box::pin(s.pool.hold_while_canceled(&server, s.cancel.slot.settled())).await;
    }
    if s.tracker.take_touched() || s.tracker.has_tracked() {
        server.gucs_owner = Some(client.id);
        server.gucs_dirty = true;
        server.gucs_version = s.tracker.version();
    }
    if matches!(end, RelayEnd::Released | RelayEnd::PinCheck) && release_reset(settings).is_none() {
        // The common end (transaction mode, no reset query): straight back, without building
        // `finish`'s future in the session's frame (cold memory at many clients).
        release_clean(&s.pool, server, released_at, settings);
        return Served::Next;
    }
    // Boxed: its future (~820 bytes: reset queries, cleanup) was the largest part of every
    // client's session state, although the common end above does not use it.
    match Box::pin(finish(s, server, end, settings, released_at)).await {
        Some(reason) => Served::End(reason),
        None => Served::Next,
    }
}

/// Ask a pinned client's server whether anything still pins the session: Some(end) ends the
/// relay (released, or a side gone), None relays on (still pinned).
async fn pin_check(
    client: &mut ClientConn,
    s: &mut Session,
    server: &mut PooledServer,
    max_packet: usize,
) -> Option<RelayEnd> {
    let mut notes = BytesMut::new();
    let check = query::run_scalar(server, PIN_CHECK_SQL, max_packet, &mut notes).await;
    if !notes.is_empty() && client.stream.write_all(&notes).await.is_err() {
        return Some(RelayEnd::ClientGone {
            clean: false,
            eof: true,
        });
    }
    match check {
        Ok(Some(n)) if n == "0" => {
            s.tracker.unpin();
            sync_pin_count(s);
            Some(RelayEnd::Released)
        }
        Ok(_) => None,
        Err(e) => Some(RelayEnd::ServerGone(e.client_notice())),
    }
}

/// The reset query a server runs when a transaction-mode client lets it go (server_reset_query
/// with server_reset_query_always), if any.
fn release_reset(settings: &PoolSettings) -> Option<&str> {
    settings
        .reset_always
        .then(|| settings.reset_query())
        .flatten()
}

/// Keep the pool's count of pinned clients in step with this client's tracker.
fn sync_pin_count(s: &mut Session) {
    let by = s.tracker.pinned();
    if by.is_some() != s.counted_pinned {
        match by {
            Some(f) => tracing::debug!("C-{}: pinned to its server: {}", s.entry.id, f.describe()),
            None => tracing::debug!("C-{}: unpinned", s.entry.id),
        }
        s.pool.pin_changed(s.entry.id, by);
        s.counted_pinned = by.is_some();
    }
}

/// What a freshly linked server needs before it carries this client's session.
enum Prep {
    /// Nothing: it carries this client's session state (or neither has any) and its tracked
    /// parameters match.
    Ready,
    /// These statements, known to succeed, sent ahead of the request (`RelayScratch::send_ahead`).
    Ahead(String),
    /// These statements, run and answered before the request goes.
    RoundTrip(String),
}

/// Decide `Prep` without a future (the common case is `Ready`).
///
/// Statements go ahead of the request only when a failure is not expected: the request behind
/// them would run anyway (the client is then ended with the error). So only once a server has
/// accepted this client's values (`Session::params_confirmed`; the tracker's replay holds only
/// statements that committed), and never for a replay that changes the role.
fn server_prep(
    app: &App,
    client_id: crate::ids::ClientId,
    s: &Session,
    server: &mut PooledServer,
) -> Prep {
    // This client's parameters as they are now, not an older version of them (it changed them
    // on another server since it last used this one).
    let carries_mine = server.gucs_dirty
        && server.gucs_owner == Some(client_id)
        && server.gucs_version == s.tracker.version();
    // Another client's changes to undo and/or this client's to replay.
    let replay = !carries_mine && (server.gucs_dirty || s.tracker.has_tracked());
    let sql = catch_up_sql(app, s, server, replay);
    if replay {
        server.gucs_dirty = s.tracker.has_tracked();
    }
    server.gucs_owner = Some(client_id);
    server.gucs_version = s.tracker.version();
    if let Some(sql) = &sql {
        // PgBouncer's debug line (verbose >= 1), which its tests look for.
        tracing::debug!("S-{}: {} varcache_apply: {sql}", server.id, s.pool.key);
    }
    match sql {
        None => Prep::Ready,
        Some(sql) if s.params_confirmed && !(replay && s.tracker.replays_identity()) => {
            Prep::Ahead(sql)
        }
        Some(sql) => Prep::RoundTrip(sql),
    }
}

/// After the pooler's SETs came back: the server's spelling of each value becomes the client's
/// (`params::adopt_canonical`), so the next server is not set again for a mere spelling.
fn adopt_canonical_values(app: &App, client: &ClientConn, s: &mut Session, server: &PooledServer) {
    for (name, old, new) in adopt_canonical(&app.tracked, &mut s.params, &server.params) {
        tracing::debug!(
            "C-{}: {} varcache_set_canonical: setting {name} to its canonical version {old} -> {new}",
            client.id,
            client.label()
        );
    }
}

/// The statements that make a linked server carry this client's session: with `replay`, undo
/// another client's parameter changes and replay this client's; then set the tracked parameters
/// that differ (all of them after a RESET ALL, which leaves the server's defaults, not known
/// here). None when there is nothing to do.
fn catch_up_sql(app: &App, s: &Session, server: &mut PooledServer, replay: bool) -> Option<String> {
    if !replay {
        return set_statement(&app.tracked, &s.params, &mut server.params);
    }
    let mut sql = String::new();
    let sets = if server.gucs_dirty {
        sql.push_str(RESET_SQL);
        sql.push(';');
        set_all_statement(&app.tracked, &s.params)
    } else {
        set_statement(&app.tracked, &s.params, &mut server.params)
    };
    if let Some(replay) = s.tracker.replay_sql() {
        sql.push_str(&replay);
    }
    if let Some(sets) = sets {
        sql.push_str(&sets);
    }
    (!sql.is_empty()).then_some(sql)
}

/// One relay run over the linked server, stopped early by KILL_CLIENT.
async fn relay_once(
    app: &Arc<App>,
    client: &mut ClientConn,
    s: &mut Session,
    server: &mut PooledServer,
    settings: &PoolSettings,
    from: Instant,
    stamped: bool,
) -> RelayEnd {
    let pooled = settings.mode != PoolMode::Session;
    let knobs = settings.session;
    let max_prepared = knobs.max_prepared;
    let prepared = (pooled && max_prepared > 0).then(|| Prepared {
        registry: &app.statements,
        client: &mut s.statements,
        max_per_server: max_prepared,
    });
    // Session state may pin this client unless pinning is off or the pool's pins are used up.
    let max_pinned = knobs.max_pinned_clients;
    let may_pin = knobs.pin_session_state
        && (s.tracker.pinned().is_some()
            || max_pinned == 0
            || s.pool.pinned_clients() < max_pinned);
    let tracking = pooled.then_some((&mut s.tracker, may_pin));
    let relay_ahead = s.relay_scratch.ahead_pending();
    let parts = SessionParts {
        client_params: &mut s.params,
        tracked: &app.tracked,
        // A routed transaction counts in the pool the client logged in to (SHOW STATS).
        stats: match s.route.as_deref().and_then(|r| r.home()) {
            Some(home) => &home.stats,
            None => &s.pool.stats,
        },
        prepared,
        tracking,
        scratch: &mut s.relay_scratch,
        shown: Some((&s.entry, stamped)),
    };
    let rules = RelayRules {
        mode: settings.mode,
        max_packet: settings.connect.max_packet_size,
        timeouts: &settings.relay,
        refuse_simple_query: settings.session.refuse_simple_query,
        write_cap: settings.connect.tcp.socket_buffer,
    };
    let mut relay = Relay::new(client, server, parts, rules, from);
    if relay_ahead {
        relay.link_cancel_after_lead(&s.cancel.slot);
    }
    if !pooled {
        relay.close_when_idle(&s.entry.close_when_idle);
    }
    // Dropping the relay mid-way is safe: the server is then not clean and gets closed.
    tokio::select! {
        biased;
        _ = s.entry.kill.cancelled_armed() => RelayEnd::Fatal { notice: s.entry.kill.notice(), server_clean: false },
        end = relay.run() => end,
    }
}

/// Settle the server after a relay; Some(reason) when the session ends.
async fn finish(
    s: &Session,
    server: PooledServer,
    end: RelayEnd,
    settings: &PoolSettings,
    released_at: Option<Instant>,
) -> Option<EndReason> {
    // A client that leaves while pinned leaves state behind: clean it (or close after LOAD).
    let pinned = s.tracker.pinned();
    let leave_reset: Vec<&str> = match pinned {
        Some(Feature::LoadModule) => Vec::new(),
        Some(_) => CLEANUP_SQL.to_vec(),
        None if settings.mode == PoolMode::Session || settings.reset_always => {
            settings.reset_query().into_iter().collect()
        }
        None => Vec::new(),
    };
    match end {
        RelayEnd::Released | RelayEnd::PinCheck => {
            let reset = release_reset(settings);
            give_back(&s.pool, server, reset.as_slice(), released_at, settings).await;
            None
        }
        RelayEnd::ClientGone { clean, .. }
        | RelayEnd::Fatal {
            server_clean: clean,
            ..
        } if clean && pinned != Some(Feature::LoadModule) => {
            give_back(&s.pool, server, &leave_reset, released_at, settings).await;
            Some(match end {
                RelayEnd::Fatal { notice, .. } => EndReason::Error(notice),
                RelayEnd::ClientGone { eof: true, .. } => EndReason::ClientEof,
                _ => EndReason::ClientClosed,
            })
        }
        RelayEnd::ClientGone { clean, eof } => {
            if clean {
                tracing::debug!("S-{}: closing server: client left after LOAD", server.id);
            } else {
                settings
                    .connect
                    .log
                    .closing_conn(&server, reason::NOT_READY);
            }
            s.pool.discard(server);
            Some(if eof {
                EndReason::ClientEof
            } else {
                EndReason::ClientClosed
            })
        }
        RelayEnd::Fatal {
            notice,
            server_clean,
        } => {
            if !server_clean {
                let why = crate::forward::Timeout::of_text(&notice.message)
                    .map_or(reason::NOT_READY, crate::forward::Timeout::text);
                settings.connect.log.closing_conn(&server, why);
            }
            s.pool.discard(server);
            Some(EndReason::Error(notice))
        }
        RelayEnd::ServerGone(notice) => {
            s.pool.discard(server);
            Some(EndReason::Error(notice))
        }
        // (Handled before `finish`: the client goes on.)
        RelayEnd::ServerLost(lost) => {
            s.pool.discard(server);
            Some(EndReason::Error(lost.notice))
        }
    }
}

fn killed(kill: &KillSwitch) -> EndReason {
    EndReason::Error(kill.notice())
}

/// Return a clean server, after the reset queries when they apply (the pool counts it as
/// sv_tested meanwhile); a failing reset closes it. `at`: the relay's last clock reading.
async fn give_back(
    pool: &Arc<Pool>,
    server: PooledServer,
    reset: &[&str],
    at: Option<Instant>,
    settings: &PoolSettings,
) {
    if reset.is_empty() {
        release_clean(pool, server, at, settings);
    } else {
        pool.reset_and_release(server, reset).await;
    }
}

/// Straight back to the pool, no pooler query to run, at the relay's last clock reading.
fn release_clean(
    pool: &Arc<Pool>,
    server: PooledServer,
    at: Option<Instant>,
    settings: &PoolSettings,
) {
    pool.release_at(server, true, at.unwrap_or_else(Instant::now), settings);
}
