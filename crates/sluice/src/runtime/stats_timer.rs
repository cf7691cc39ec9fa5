//! The stats period's task: SHOW STATS averages, the advisor's windows, the stats log line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::App;

/// Every stats_period: close the averaging period (SHOW STATS avg_*) and log the stats line.
pub async fn run(app: Arc<App>) {
    app.stats_book
        .close_period(&crate::admin::show_stats::totals_by_db(&app), 1.0);
    let mut last_at = Instant::now();
    loop {
        let period = app.config().settings.stats_period.max(1);
        tokio::time::sleep(Duration::from_secs(period.into())).await;
        let now = crate::admin::show_stats::totals_by_db(&app);
        let secs = last_at.elapsed().as_secs_f64();
        let avg = app.stats_book.close_period(&now, secs);
        app.advisor.observe(&app.pools.all(), secs);
        last_at = Instant::now();
        if app.config().settings.log_stats {
            tracing::info!("{}", crate::stats::reporter::stats_line(&avg));
        }
    }
}
