//! What the console is and how it is set: SHOW HELP, VERSION and CONFIG.

use std::sync::Arc;

use sluice_config::{SettingDef, PGBOUNCER_SETTINGS, SLUICE_SETTINGS};

use super::result::{text, yes_no, Col, ResultSet};
use super::PGBOUNCER_COMPAT;
use crate::app::App;

/// SHOW HELP's NOTICE detail (its message is "Console usage"), as PgBouncer 1.25.2 sends it:
/// starting with a line break.
pub const HELP: &str = "
\tSHOW HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|VERSION
\tSHOW PEERS|PEER_POOLS
\tSHOW FDS|SOCKETS|ACTIVE_SOCKETS|LISTS|MEM|STATE
\tSHOW DNS_HOSTS|DNS_ZONES
\tSHOW STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS
\tSET key = arg
\tRELOAD
\tPAUSE [<db>]
\tRESUME [<db>]
\tDISABLE <db>
\tENABLE <db>
\tRECONNECT [<db>]
\tKILL [<db>]
\tKILL_CLIENT <client_id>
\tSUSPEND
\tSHUTDOWN
\tSHUTDOWN WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS
\tWAIT_CLOSE [<db>]";

pub const VERSION_COLUMNS: &[(&str, Col)] = &[("version", Col::Text)];

/// The PgBouncer release whose console this is comes first, so tools that read the version to pick
/// a column layout pick the right one; Sluice's own version follows.
pub fn version_string() -> String {
    format!(
        "PgBouncer {PGBOUNCER_COMPAT} (Sluice {})",
        env!("CARGO_PKG_VERSION")
    )
}

pub fn version() -> ResultSet {
    let mut rs = ResultSet::new(VERSION_COLUMNS);
    rs.push(vec![text(version_string())]);
    rs
}

pub const CONFIG_COLUMNS: &[(&str, Col)] = &[
    ("key", Col::Text),
    ("value", Col::Text),
    ("default", Col::Text),
    ("changeable", Col::Text),
];

/// PgBouncer's SHOW CONFIG order: its alphabetical table, except pool_idle_timeout after pool_mode.
fn pgbouncer_order() -> Vec<&'static SettingDef> {
    let mut defs: Vec<&SettingDef> = PGBOUNCER_SETTINGS.iter().collect();
    if let Some(i) = defs.iter().position(|d| d.name == "pool_idle_timeout") {
        let d = defs.remove(i);
        let at = defs
            .iter()
            .position(|d| d.name == "pool_mode")
            .map_or(defs.len(), |p| p + 1);
        defs.insert(at, d);
    }
    defs
}

/// A row's value and default as PgBouncer 1.25.2 shows them where the stored text differs: the
/// file it runs on as `conffile` (unless SET), unix_socket_mode in decimal (its default still
/// `0777`), no default for verbose.
fn shown(app: &App, d: &SettingDef, value: String) -> (String, &'static str) {
    match d.name {
        "conffile" if value.is_empty() => (app.config_path.display().to_string(), d.default),
        "unix_socket_mode" => match u32::from_str_radix(&value, 8) {
            Ok(mode) => (mode.to_string(), d.default),
            Err(_) => (value, d.default),
        },
        "verbose" => (value, ""),
        _ => (value, d.default),
    }
}

pub fn config(app: &Arc<App>) -> ResultSet {
    let cfg = app.config();
    let mut rs = ResultSet::new(CONFIG_COLUMNS);
    // service_name is job_name's alias, which PgBouncer does not list apart.
    for d in pgbouncer_order()
        .into_iter()
        .filter(|d| d.name != "service_name")
    {
        let (value, default) = shown(app, d, cfg.settings.get(d.name).unwrap_or_default());
        rs.push(vec![
            text(d.name),
            text(value),
            text(default),
            yes_no(d.reloadable),
        ]);
    }
    // Sluice's own [sluice] keys follow PgBouncer's.
    for d in SLUICE_SETTINGS {
        rs.push(vec![
            text(d.name),
            text(cfg.sluice.get(d.name).unwrap_or_default()),
            text(d.default),
            yes_no(d.reloadable),
        ]);
    }
    rs
}
