//! Renders the settings tables as Markdown, so the configuration docs come from the same table as the code.

use crate::settings::{PGBOUNCER_SETTINGS, SLUICE_SETTINGS};
use crate::settings_macro::SettingDef;

/// The reference of every `[pgbouncer]` and `[sluice]` key: default, reloadable, supported, description.
pub fn settings_markdown() -> String {
    let mut out = String::new();
    out.push_str("# Sluice configuration reference\n\n");
    out.push_str(
        "Generated from the settings table in `crates/sluice-config`. Sluice reads `pgbouncer.ini` \
         unchanged; keys marked unsupported are accepted, and a warning is logged when one is set \
         to a non-default value. Times are in seconds (fractions allowed) unless the description \
         says otherwise; booleans are 0/1.\n\n",
    );
    section(&mut out, "[pgbouncer]", PGBOUNCER_SETTINGS);
    section(&mut out, "[sluice]", SLUICE_SETTINGS);
    database_keys(&mut out);
    out
}

/// Keys of a `[databases]` connect string that Sluice adds to PgBouncer's: (key, default, doc).
/// PgBouncer's own keys (host, port, pool_mode, ...) keep PgBouncer's meaning and documentation.
const SLUICE_DATABASE_KEYS: &[(&str, &str, &str)] = &[
    (
        "target_session_attrs",
        "any",
        "libpq's meaning: the role a server of the entry must have (`any`, the default: whatever the host is; `read-write`: neither in recovery nor default_transaction_read_only; `read-only`: the opposite; `primary` / `standby`: not in / in recovery; `prefer-standby`: standbys first, else any). Learned at login from the in_hot_standby and default_transaction_read_only ParameterStatus (PostgreSQL 14+), else asked; a server of the wrong role is closed and the next host tried. An entry that sets it, with a host list or a value other than `any`, gets health checks and failover (failover_timeout, host_check_interval, max_replica_lag; SHOW HOSTS); an entry without it connects as PgBouncer's does, host list or not.",
    ),
    (
    "route_reads",
    "off",
    "Which transactions may run on a standby of a host list: off; explicit (transactions that \
     declare themselves read only: BEGIN/START TRANSACTION READ ONLY, SET TRANSACTION READ ONLY \
     after BEGIN, or default_transaction_read_only on for the session); auto (also single \
     statements the classifier proves cannot write, sent as a simple Query, in one \
     extended-protocol batch, or bound to a statement the client prepared earlier; such a read \
     the standby refuses with 25006 before any row reached the client runs again on the \
     primary). Needs a host list with target_session_attrs (health checks): \
     a transaction goes to a healthy standby only when it has replayed everything the client \
     wrote or read before (read-your-writes, monotonic reads), else to the primary. Transaction \
     pool mode only: session and statement mode route nothing, and a client pinned by session \
     state stays on its server. Read by a client at login (a RELOAD applies to new clients).",
    ),
];

fn database_keys(out: &mut String) {
    out.push_str("## [databases] keys added by Sluice\n\n");
    out.push_str("| Key | Default | Description |\n");
    out.push_str("|---|---|---|\n");
    for (key, default, doc) in SLUICE_DATABASE_KEYS {
        out.push_str(&format!("| `{key}` | `{default}` | {} |\n", cell(doc)));
    }
    out.push('\n');
}

fn section(out: &mut String, title: &str, defs: &[SettingDef]) {
    out.push_str(&format!("## {title}\n\n"));
    out.push_str("| Key | Default | Reloadable | Supported | Description |\n");
    out.push_str("|---|---|---|---|---|\n");
    for d in defs {
        let default = if d.default.is_empty() {
            "(empty)".to_string()
        } else {
            format!("`{}`", cell(d.default))
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            d.name,
            default,
            reloadable(d),
            yes_no(d.supported),
            cell(d.doc)
        ));
    }
    out.push('\n');
}

/// "yes", with what else a change takes when it takes more than the new value (`Effect`).
fn reloadable(d: &SettingDef) -> String {
    match d.effect.describe() {
        "" => yes_no(d.reloadable).to_string(),
        effect => format!("yes ({effect})"),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Escape what would break a table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_key() {
        let md = settings_markdown();
        for d in PGBOUNCER_SETTINGS.iter().chain(SLUICE_SETTINGS) {
            assert!(
                md.contains(&format!("| `{}` |", d.name)),
                "{} missing",
                d.name
            );
        }
        let rows = md.lines().filter(|l| l.starts_with("| `")).count();
        assert_eq!(
            rows,
            PGBOUNCER_SETTINGS.len() + SLUICE_SETTINGS.len() + SLUICE_DATABASE_KEYS.len()
        );
        assert!(md.contains("| `route_reads` | `off` |"));
        assert!(md.contains("| `target_session_attrs` | `any` |"));
        assert!(md.contains("| `listen_port` | `6432` | no | yes |"));
        assert!(md.contains("| `server_check_query` | `&lt;empty&gt;` | yes | yes |"));
    }
}
