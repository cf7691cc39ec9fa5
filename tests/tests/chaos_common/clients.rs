//! The soak's clients: those that keep a connection and those that make one per operation.

use super::connect::{connect, USERS};
use super::load::operate;
use super::*;

/// A client that keeps its connection (making a new one when chaos closes it).
pub(super) async fn steady(ctx: Arc<Ctx>, n: u64, mut rng: Rng) {
    let user = USERS[(n % 2) as usize];
    let pooling = if n >= 9 {
        Pooling::Statement
    } else if n.is_multiple_of(3) {
        Pooling::Session
    } else {
        Pooling::Transaction
    };
    // One client of each pool mode logs in through the Unix socket (TCP in TLS mode).
    let via = if matches!(n, 3 | 7 | 10) {
        Via::Unix
    } else {
        Via::Tcp
    };
    let mut conn = None;
    let mut kept = None;
    let mut memo = Memo::default();
    while Instant::now() < ctx.stop_at {
        if conn.is_none() {
            conn = connect(&ctx, user, pooling, via).await;
            kept = None;
            memo = Memo::default();
            continue;
        }
        let (client, _) = conn.as_mut().unwrap();
        // One statement prepared when the connection is made and used for its whole life: in
        // transaction pooling it meets servers that never saw it (new after a restart, a
        // RECONNECT or a RELOAD), where the pooler prepares it again unseen.
        if kept.is_none() {
            match client
                .prepare("SELECT $1::int8 - 1, current_user::text")
                .await
            {
                Ok(st) => kept = Some(st),
                Err(e) => {
                    ctx.tally.error("prepared once", pooling, &e);
                    if client.is_closed() {
                        conn = None;
                    }
                    continue;
                }
            }
        }
        if rng.below(3) == 0 {
            let x = rng.below(1 << 40) as i64;
            let st = kept.as_ref().unwrap();
            match tokio::time::timeout(HANG, client.query_one(st, &[&x])).await {
                Ok(Ok(row))
                    if row.get::<_, i64>(0) == x - 1 && row.get::<_, String>(1) == user.0 =>
                {
                    ctx.tally.ok("prepared once")
                }
                Ok(Ok(row)) => ctx.tally.finding(format!(
                    "prepared once: ({x}) answered ({}, {})",
                    row.get::<_, i64>(0),
                    row.get::<_, String>(1)
                )),
                Ok(Err(e)) => {
                    ctx.tally
                        .error_exposed("prepared once", pooling, &memo.own_cancel, &e)
                }
                Err(_) => ctx.tally.finding("prepared once: hung".into()),
            }
            if client.is_closed() {
                conn = None;
                kept = None;
            }
            continue;
        }
        if !operate(&ctx, client, pooling, &mut rng, &mut memo).await {
            conn = None;
            kept = None;
        }
    }
}

/// A client per operation; some go away in the middle of a query.
///
/// The pool modes take turns (of six logins: one session, one statement, four transaction, from
/// a random start) rather than a draw each: any stretch of the run, such as the part after a
/// takeover that the TLS soak checks the new process served in every mode, has logins of each.
/// Drawn, a seed could leave one mode a single login there (1795918186702728531 did).
pub(super) async fn churn(ctx: Arc<Ctx>, n: u64, mut rng: Rng) {
    let mut turn = rng.below(6);
    while Instant::now() < ctx.stop_at {
        let user = USERS[rng.below(2) as usize];
        let pooling = match turn % 6 {
            0 => Pooling::Session,
            1 => Pooling::Statement,
            _ => Pooling::Transaction,
        };
        turn += 1;
        if rng.below(6) == 0 {
            // A raw connection that reads a large result slowly (`slow.rs`).
            slow::slow_read(&ctx, pooling, &mut rng).await;
            continue;
        }
        let via = if rng.below(4) == 0 {
            Via::Unix
        } else {
            Via::Tcp
        };
        let Some((mut client, task)) = connect(&ctx, user, pooling, via).await else {
            continue;
        };
        if rng.below(3) == 0 {
            // Abandoned: the client's socket closes while its query runs on a server.
            let query = client.simple_query("SELECT pg_sleep(0.2)");
            let _ = tokio::time::timeout(Duration::from_millis(20 + n), query).await;
            ctx.tally.ok("abandoned");
        } else {
            operate(&ctx, &mut client, pooling, &mut rng, &mut Memo::default()).await;
        }
        drop(client);
        task.abort();
    }
}
