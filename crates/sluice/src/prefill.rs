//! Pools made before any client comes: a [databases] entry with a forced user and a
//! min_pool_size gets its pool at start and after a reload (as PgBouncer 1.21+ does), so that the
//! janitor fills it to min_pool_size without waiting for a client.

use crate::app::App;
use crate::targets;

/// Make the missing pools of forced-user databases whose min_pool_size is above 0. Called by the
/// janitor on each tick: cheap when every such pool exists (one map lookup each).
pub fn forced_user_pools(app: &App) {
    let cfg = app.config();
    for db in &cfg.databases {
        let Some(user) = db.user.as_deref() else {
            continue;
        };
        if db.min_pool_size.unwrap_or(cfg.settings.min_pool_size) == 0 {
            continue;
        }
        let pool = app.pools.get_or_create(&db.name, user, || {
            targets::pool_settings(
                &cfg,
                db,
                user,
                app.credentials.lookup(user),
                app.tls.load().server.clone(),
                |_| app.pools.current_generation(),
            )
        });
        if app.control.db_paused(&db.name) && !pool.is_paused() {
            pool.set_paused(true);
        }
    }
}
