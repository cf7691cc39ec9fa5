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
    databases_extras(&mut out);
    out
}

/// The `[databases]` connect-string keys Sluice adds to PgBouncer's.
fn databases_extras(out: &mut String) {
    out.push_str(
        "## [databases] keys Sluice adds

",
    );
    out.push_str(
        "| Key | Values | Description |
|---|---|---|
",
    );
    out.push_str(&format!(
        "| `target_session_attrs` | {} | libpq's meaning: the role a server of the entry must have (`any`, the default: whatever the host is; `read-write`: neither in recovery nor default_transaction_read_only; `read-only`: the opposite; `primary` / `standby`: not in / in recovery; `prefer-standby`: standbys first, else any). Learned at login from the in_hot_standby and default_transaction_read_only ParameterStatus (PostgreSQL 14+), else asked; a server of the wrong role is closed and the next host tried. An entry that sets it, with a host list or a value other than `any`, gets health checks and failover (failover_timeout, host_check_interval, max_replica_lag; SHOW HOSTS); an entry without it connects as PgBouncer's does, host list or not. |\n\n",
        crate::TargetSessionAttrs::KEYWORDS
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
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
        // One more: the [databases] key Sluice adds.
        assert_eq!(rows, PGBOUNCER_SETTINGS.len() + SLUICE_SETTINGS.len() + 1);
        assert!(md.contains("| `target_session_attrs` | `any`, `read-write`"));
        assert!(md.contains("| `listen_port` | `6432` | no | yes |"));
        assert!(md.contains("| `server_check_query` | `&lt;empty&gt;` | yes | yes |"));
    }
}
