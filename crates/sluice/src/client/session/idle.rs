//! Between transactions: an unlinked client waits for the header of its next request, while
//! the kill switch, client_idle_timeout, SUSPEND and the lifecycle may end the wait first.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use sluice_protocol::{frontend_tag, peek_header};
use tokio::time::{Instant, Sleep};

use super::super::kill::KillSwitch;
use crate::conn::{ClientConn, CLIENT_READ_CHUNK};
use crate::forward::request_len_limit;
use crate::lifecycle::{Lifecycle, Phase};
use crate::stats::PoolStats;

/// How the wait for a request ended.
pub(super) enum Idle {
    Request,
    Killed,
    Terminate,
    Closed,
    Timeout,
    Shutdown,
    /// A successor takes the clients (`takeover/`).
    HandOver,
    Bad(String),
}

/// Wait, unlinked, until the client buffer holds the header of a request.
#[allow(clippy::too_many_arguments)]
pub(super) async fn wait_for_request(
    client: &mut ClientConn,
    max_packet: usize,
    // Describe/Close with a statement name are rewritten: PostgreSQL's small limit does not apply.
    rewrites_names: bool,
    idle_limit: Option<Duration>,
    idle_sleep: &mut Option<Pin<Box<Sleep>>>,
    lifecycle: &Lifecycle,
    may_hand_over: bool,
    kill: &KillSwitch,
    stats: &PoolStats,
) -> Idle {
    let mut timer = match idle_limit {
        Some(d) => {
            let deadline = Instant::now() + d;
            match idle_sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => *idle_sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            idle_sleep.as_mut()
        }
        None => None,
    };
    loop {
        match peek_header(&client.rbuf, max_packet) {
            Ok(Some(h)) if h.tag == frontend_tag::TERMINATE => return Idle::Terminate,
            // Refused before any server is touched (PostgreSQL would answer FATAL and close).
            Ok(Some(h)) if !frontend_tag::is_defined_after_login(h.tag) => {
                return Idle::Bad(frontend_tag::undefined_message(h.tag))
            }
            Ok(Some(h)) if h.len > request_len_limit(h.tag, rewrites_names) => {
                return Idle::Bad(frontend_tag::oversized_message(h.tag, h.len))
            }
            Ok(Some(_)) => return Idle::Request,
            Ok(None) => {}
            Err(e) => return Idle::Bad(format!("bad packet header: {e}")),
        }
        let sleep = poll_fn(|cx| match timer.as_mut() {
            Some(t) => t.as_mut().poll(cx),
            None => Poll::Pending,
        });
        // SUSPEND: with nothing half-read, stop reading (and timing out) until RESUME.
        let suspended = client.suspend.is_suspended();
        let park = suspended && client.rbuf.is_empty();
        tokio::select! {
            biased;
            _ = kill.cancelled_armed() => return Idle::Killed,
            // With nothing buffered, the idle client holds no read buffer (`read_when_ready`).
            r = client.stream.read_when_ready(&mut client.rbuf, CLIENT_READ_CHUNK), if !park => match r {
                Ok(0) | Err(_) => return Idle::Closed,
                Ok(n) => PoolStats::add(&stats.bytes_received, n as u64),
            },
            _ = client.suspend.parked_until_resume(client.id), if park => {}
            _ = client.suspend.closed_on_wake(), if !suspended => {}
            _ = sleep, if !park => return Idle::Timeout,
            // No waiter of its own: the main loop nudges every client (its kill switch's waker,
            // armed when the session started) when the phase changes, and this poll then sees it.
            idle = poll_fn(|_| match lifecycle.phase() {
                p if p.drops_idle_clients() => Poll::Ready(Idle::Shutdown),
                Phase::HandingOver if may_hand_over => Poll::Ready(Idle::HandOver),
                _ => Poll::Pending,
            }) => return idle,
        }
    }
}
