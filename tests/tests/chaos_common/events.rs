//! The soak's operator and network events (chaos mode): console commands, terminated backends,
//! PostgreSQL restarts, garbage and wrong-password connections.

use super::*;

pub(super) async fn console(ctx: &Ctx) -> Option<Console> {
    match tokio::time::timeout(HANG, Console::connect(ctx.sluice.port, "trust_user", "")).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            ctx.tally.finding(format!("console login refused: {e:?}"));
            None
        }
        Err(_) => {
            ctx.tally.finding("console login hung".into());
            None
        }
    }
}

pub(super) async fn admin(ctx: &Ctx, console: &mut Console, command: &str) {
    match tokio::time::timeout(HANG, console.query(command)).await {
        Ok(Ok(_)) => {}
        // RESUME of a database no longer paused and the like: answered, not hung.
        Ok(Err(fields)) => {
            let mut errors = ctx.tally.errors.lock().unwrap();
            let entry = errors
                .entry(format!("console {command}"))
                .or_insert((0, format!("{fields:?}")));
            entry.0 += 1;
        }
        Err(_) => ctx.tally.finding(format!("console {command} hung")),
    }
}

/// A console command, and `held` later the one that undoes it.
async fn undone_after(ctx: &Ctx, console: &mut Console, command: &str, held: Duration, undo: &str) {
    admin(ctx, console, command).await;
    tokio::time::sleep(held).await;
    admin(ctx, console, undo).await;
}

/// The operator and the network, one event every 0.3 – 1.5 s.
pub(super) async fn chaos(ctx: Arc<Ctx>, mut rng: Rng) {
    let Some(mut console) = console(&ctx).await else {
        return;
    };
    let pg = PgCluster::get();
    let mut pool_size = 6;
    let mut reloads = 0u32;
    let mut last_restart = Instant::now();
    while Instant::now() < ctx.stop_at {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(1200))).await;
        match rng.below(9) {
            0 => {
                // Another pool size, and servers recycled every second (the first two
                // reloads, then every other two) or kept.
                reloads += 1;
                pool_size = if pool_size == 6 { 3 } else { 6 };
                let servers = if matches!(reloads % 4, 1 | 2) {
                    Servers::Recycled
                } else {
                    Servers::Kept
                };
                ctx.sluice
                    .rewrite_config(&ini(pool_size, servers, &ctx.socket_dir, ctx.mode));
                admin(&ctx, &mut console, "RELOAD").await;
                ctx.tally.chaos(match servers {
                    Servers::Kept => "reload",
                    Servers::Recycled => "reload, servers recycled",
                });
            }
            1 => {
                let held = Duration::from_millis(rng.below(500));
                let db = ["app_tx", "app_stmt"][rng.below(2) as usize];
                let (pause, resume) = (format!("PAUSE {db}"), format!("RESUME {db}"));
                undone_after(&ctx, &mut console, &pause, held, &resume).await;
                ctx.tally.chaos("pause/resume");
            }
            2 => {
                let db = Pooling::ALL[rng.below(3) as usize].db();
                admin(&ctx, &mut console, &format!("RECONNECT {db}")).await;
                ctx.tally.chaos("reconnect");
            }
            3 => {
                tokio::task::spawn_blocking(move || {
                    pg.psql(
                        "postgres",
                        "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM \
                         pg_stat_activity WHERE datname = 'app' AND backend_type = 'client backend' \
                         ORDER BY random() LIMIT 3) t",
                    )
                })
                .await
                .unwrap();
                ctx.tally.chaos("backends terminated");
            }
            6 => {
                // Every client of one database told to go (KILL), then let back in.
                let held = Duration::from_millis(rng.below(300));
                undone_after(&ctx, &mut console, "KILL app_tx", held, "RESUME app_tx").await;
                ctx.tally.chaos("kill/resume");
            }
            7 => {
                let held = Duration::from_millis(rng.below(300));
                undone_after(
                    &ctx,
                    &mut console,
                    "DISABLE app_sess",
                    held,
                    "ENABLE app_sess",
                )
                .await;
                ctx.tally.chaos("disable/enable");
            }
            4 if last_restart.elapsed() > Duration::from_secs(8) => {
                tokio::task::spawn_blocking(move || pg.restart_fast())
                    .await
                    .unwrap();
                last_restart = Instant::now();
                ctx.tally.chaos("postgresql restarted");
            }
            _ => {
                let port = ctx.sluice.port;
                let mut junk = Vec::new();
                for i in 0..10u64 {
                    let bytes: Vec<u8> = (0..(rng.below(200) + 1))
                        .map(|_| rng.below(256) as u8)
                        .collect();
                    junk.push(tokio::spawn(async move {
                        let mut c = RawConn::connect(port).await;
                        let said = if i % 2 == 0 {
                            // Then EOF: a partial packet (a few bytes, or a length that
                            // promises more) waits for the rest until client_login_timeout,
                            // as PgBouncer's does; the end of the stream must close it at once.
                            c.send(&bytes).await;
                            c.shutdown_write().await;
                            format!("garbage {bytes:?} and EOF")
                        } else {
                            c.send(&RawConn::startup_packet(&[
                                ("user", "md5_user"),
                                ("database", "app_tx"),
                            ]))
                            .await;
                            let first = c.read_message(Duration::from_secs(5)).await;
                            let said = format!("wrong password, first answer {first:?}");
                            if let Some((b'R', _)) = first {
                                c.send(&RawConn::message(
                                    b'p',
                                    b"md5ffffffffffffffffffffffffffffffff\0",
                                ))
                                .await;
                            }
                            said
                        };
                        let (rest, closed) = c.read_until_close(Duration::from_secs(5)).await;
                        (!closed).then(|| format!("{said}, then {rest:?}"))
                    }));
                }
                for j in junk {
                    if let Some(what) = j.await.unwrap() {
                        ctx.tally
                            .finding(format!("a bad connection was left open: {what}"));
                    }
                }
                ctx.tally.chaos("garbage and wrong passwords");
            }
        }
    }
}
