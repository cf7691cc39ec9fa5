//! The names read routing knows: functions and relations whose use needs the primary, and
//! built-in functions known to be plain reads (for the "calls an unknown function" mark).

use crate::session_state::lexer::{Token, TokenKind};

/// Why a name keeps a statement on the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeedsPrimary {
    /// Writes, or takes something (a sequence value, a transaction id, a slot) only the primary has.
    Writes,
    /// Session or server-local state whose answer on a standby differs from the primary's
    /// (sequence session values, advisory locks, backends, statistics, files, settings).
    ServerLocal,
    /// Asks which role the server has (pg_is_in_recovery, transaction_read_only, in_hot_standby):
    /// a standby would answer for itself, and libpq's target_session_attrs asks exactly this.
    Role,
}

/// `(name, what)`: a name equal to `name`. Sorted (binary search).
const EXACT: &[(&str, NeedsPrimary)] = {
    use NeedsPrimary::*;
    &[
        ("currval", ServerLocal),
        ("in_hot_standby", Role),
        ("inet_server_addr", ServerLocal),
        ("inet_server_port", ServerLocal),
        ("lastval", ServerLocal),
        ("loread", ServerLocal),
        ("lowrite", Writes),
        ("nextval", Writes),
        ("pg_backend_memory_contexts", ServerLocal),
        ("pg_backend_pid", ServerLocal),
        ("pg_blocking_pids", ServerLocal),
        ("pg_cancel_backend", ServerLocal),
        ("pg_conf_load_time", ServerLocal),
        ("pg_current_logfile", ServerLocal),
        ("pg_export_snapshot", ServerLocal),
        ("pg_get_wal_replay_pause_state", Role),
        ("pg_hba_file_rules", ServerLocal),
        ("pg_ident_file_mappings", ServerLocal),
        ("pg_import_system_collations", Writes),
        ("pg_is_in_backup", ServerLocal),
        ("pg_is_in_recovery", Role),
        ("pg_is_wal_replay_paused", Role),
        ("pg_is_xlog_replay_paused", Role),
        ("pg_listening_channels", ServerLocal),
        ("pg_locks", ServerLocal),
        ("pg_notification_queue_usage", ServerLocal),
        ("pg_notify", Writes),
        ("pg_postmaster_start_time", ServerLocal),
        ("pg_prepared_xacts", ServerLocal),
        ("pg_promote", Writes),
        ("pg_reload_conf", ServerLocal),
        ("pg_rotate_logfile", ServerLocal),
        ("pg_safe_snapshot_blocking_pids", ServerLocal),
        ("pg_settings", ServerLocal),
        ("pg_shmem_allocations", ServerLocal),
        ("pg_start_backup", Writes),
        ("pg_stop_backup", Writes),
        ("pg_switch_wal", Writes),
        ("pg_switch_xlog", Writes),
        ("pg_terminate_backend", ServerLocal),
        ("pg_xact_status", ServerLocal),
        ("set_config", ServerLocal),
        ("setval", Writes),
        ("transaction_read_only", Role),
    ]
};

/// `(prefix, what)`: a name starting with `prefix` (families of functions and views).
const PREFIX: &[(&str, NeedsPrimary)] = {
    use NeedsPrimary::*;
    &[
        ("pg_advisory_", ServerLocal),
        ("pg_try_advisory_", ServerLocal),
        ("txid_", Writes),
        ("pg_current_", Writes),
        ("lo_", Writes),
        ("dblink", Writes),
        ("pg_create_", Writes),
        ("pg_drop_", Writes),
        ("pg_copy_", Writes),
        ("pg_sync_", Writes),
        ("pg_replication_", Writes),
        ("pg_logical_", Writes),
        ("pg_backup_", Writes),
        ("pg_wal_", Role),
        ("pg_xlog", Role),
        ("pg_walfile_name", Role),
        ("pg_last_", Role),
        ("pg_log_", ServerLocal),
        ("pg_stat_", ServerLocal),
        ("pg_statio_", ServerLocal),
        ("pg_ls_", ServerLocal),
        ("pg_read_", ServerLocal),
        ("pg_file_", ServerLocal),
        ("pg_control_", ServerLocal),
    ]
};

/// Words that are followed by `(` without being a function call, type names that take a
/// modifier, and built-in functions that only read. Sorted (binary search).
const KNOWN_READS: &[&str] = &[
    "abs",
    "age",
    "all",
    "and",
    "any",
    "array",
    "array_agg",
    "array_length",
    "array_position",
    "array_to_string",
    "as",
    "ascii",
    "avg",
    "between",
    "bit",
    "bit_and",
    "bit_length",
    "bit_or",
    "bool_and",
    "bool_or",
    "btrim",
    "by",
    "cardinality",
    "case",
    "cast",
    "cbrt",
    "ceil",
    "ceiling",
    "char",
    "char_length",
    "character",
    "character_length",
    "chr",
    "clock_timestamp",
    "coalesce",
    "col_description",
    "concat",
    "concat_ws",
    "count",
    "cube",
    "cume_dist",
    "current_database",
    "current_schema",
    "current_setting",
    "date",
    "date_part",
    "date_trunc",
    "decimal",
    "decode",
    "degrees",
    "dense_rank",
    "distinct",
    "div",
    "else",
    "encode",
    "every",
    "except",
    "exists",
    "exp",
    "explain",
    "extract",
    "filter",
    "first_value",
    "float",
    "floor",
    "format",
    "format_type",
    "from",
    "gen_random_uuid",
    "generate_series",
    "generate_subscripts",
    "greatest",
    "grouping",
    "having",
    "in",
    "initcap",
    "intersect",
    "interval",
    "is",
    "join",
    "json_agg",
    "json_array_elements",
    "json_build_array",
    "json_build_object",
    "json_each",
    "json_object_agg",
    "jsonb_agg",
    "jsonb_array_elements",
    "jsonb_build_array",
    "jsonb_build_object",
    "jsonb_each",
    "jsonb_extract_path_text",
    "jsonb_object_agg",
    "jsonb_path_query",
    "jsonb_set",
    "lag",
    "last_value",
    "lateral",
    "lead",
    "least",
    "left",
    "length",
    "like",
    "limit",
    "ln",
    "log",
    "lower",
    "lpad",
    "ltrim",
    "make_date",
    "make_interval",
    "make_timestamp",
    "make_timestamptz",
    "materialized",
    "max",
    "md5",
    "min",
    "mod",
    "mode",
    "not",
    "now",
    "nth_value",
    "ntile",
    "nullif",
    "numeric",
    "obj_description",
    "octet_length",
    "offset",
    "on",
    "or",
    "over",
    "overlay",
    "partition",
    "percent_rank",
    "percentile_cont",
    "percentile_disc",
    "pg_column_size",
    "pg_database_size",
    "pg_relation_size",
    "pg_size_pretty",
    "pg_sleep",
    "pg_table_size",
    "pg_total_relation_size",
    "pg_typeof",
    "pi",
    "position",
    "power",
    "quote_ident",
    "quote_literal",
    "quote_nullable",
    "radians",
    "random",
    "rank",
    "regexp_match",
    "regexp_matches",
    "regexp_replace",
    "regexp_split_to_array",
    "regexp_split_to_table",
    "repeat",
    "replace",
    "reverse",
    "right",
    "rollup",
    "round",
    "row",
    "row_number",
    "row_to_json",
    "rpad",
    "rtrim",
    "select",
    "sets",
    "sha256",
    "sign",
    "some",
    "split_part",
    "sqrt",
    "statement_timestamp",
    "stddev",
    "string_agg",
    "string_to_array",
    "strpos",
    "substr",
    "substring",
    "sum",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "timestamptz",
    "timezone",
    "to_char",
    "to_date",
    "to_json",
    "to_jsonb",
    "to_number",
    "to_regclass",
    "to_timestamp",
    "to_tsquery",
    "to_tsvector",
    "transaction_timestamp",
    "trim",
    "trunc",
    "union",
    "unnest",
    "upper",
    "using",
    "values",
    "varchar",
    "variance",
    "version",
    "when",
    "where",
    "width_bucket",
    "with",
    "within",
];

/// Longest name compared; longer ones are neither needing the primary nor known reads.
const MAX_NAME: usize = 64;

/// A bit per name length that some listed name has, per first byte and per last byte: most
/// words are rejected with two loads and shifts, before any copy or search.
#[derive(Clone, Copy)]
struct LengthFilter {
    first: [u64; 256],
    last: [u64; 256],
}

impl LengthFilter {
    const fn new(names: &[&str]) -> Self {
        let mut f = LengthFilter {
            first: [0; 256],
            last: [0; 256],
        };
        let mut i = 0;
        while i < names.len() {
            let n = names[i].as_bytes();
            f.first[n[0] as usize] |= 1 << n.len();
            f.last[n[n.len() - 1] as usize] |= 1 << n.len();
            i += 1;
        }
        f
    }

    fn may_hold(&self, first: u8, last: u8, len: usize) -> bool {
        len < 64 && self.first[first as usize] & self.last[last as usize] & (1 << len) != 0
    }
}

/// The first three bytes of every entry of [`PREFIX`] (a test keeps the two in step).
const PREFIX_HEADS: [&[u8; 3]; 4] = [b"pg_", b"lo_", b"txi", b"dbl"];

const fn exact_names() -> [&'static str; EXACT.len()] {
    let mut names = [""; EXACT.len()];
    let mut i = 0;
    while i < EXACT.len() {
        names[i] = EXACT[i].0;
        i += 1;
    }
    names
}

const EXACT_FILTER: LengthFilter = LengthFilter::new(&exact_names());
const KNOWN_READS_FILTER: LengthFilter = LengthFilter::new(KNOWN_READS);

/// The name of a word or quoted identifier as written (without quotes), and whether it folds to
/// lower case (unquoted); `None` for other tokens, quoted names with `""` inside (none of ours
/// has a quote) and `U&"..."` names with escapes (not decoded: such a name is not ours).
fn raw_name<'a>(t: &Token<'a>) -> Option<(&'a [u8], bool)> {
    match t.kind {
        TokenKind::Word => Some((t.text, true)),
        TokenKind::QuotedIdent => {
            let open = if t.text.first() == Some(&b'"') { 1 } else { 3 };
            let inner = t.text.get(open..t.text.len().checked_sub(1)?)?;
            if inner.contains(&b'"') || (open == 3 && inner.contains(&b'\\')) {
                return None;
            }
            Some((inner, false))
        }
        _ => None,
    }
}

/// Where a name may be listed, from cheap looks at its bytes.
#[derive(Clone, Copy)]
struct Maybe {
    exact: bool,
    prefix: bool,
}

/// The name as the server resolves it (unquoted words fold to lower case), into `buf`, when
/// `filter` says a name of its length and first and last bytes may be listed, or (`prefixes`)
/// it starts like an entry of [`PREFIX`].
fn resolved<'b>(
    t: &Token<'_>,
    buf: &'b mut [u8; MAX_NAME],
    filter: &LengthFilter,
    prefixes: bool,
) -> Option<(&'b [u8], Maybe)> {
    let (raw, fold) = raw_name(t)?;
    let lower = |b: u8| if fold { b.to_ascii_lowercase() } else { b };
    let first = lower(*raw.first()?);
    let last = lower(*raw.last()?);
    let maybe = Maybe {
        exact: filter.may_hold(first, last, raw.len()),
        prefix: prefixes
            && raw.len() >= 3
            && PREFIX_HEADS
                .iter()
                .any(|h| h[0] == first && h[1] == lower(raw[1]) && h[2] == lower(raw[2])),
    };
    if !maybe.exact && !maybe.prefix {
        return None;
    }
    let out = buf.get_mut(..raw.len())?;
    out.copy_from_slice(raw);
    if fold {
        out.make_ascii_lowercase();
    }
    Some((out, maybe))
}

/// Whether the name `t` (a function, relation or setting name anywhere in a statement) keeps the
/// statement on the primary, and the listed name that matched.
pub(crate) fn needs_primary(t: &Token<'_>) -> Option<(&'static str, NeedsPrimary)> {
    let mut buf = [0u8; MAX_NAME];
    let (name, maybe) = resolved(t, &mut buf, &EXACT_FILTER, true)?;
    if maybe.exact {
        if let Ok(i) = EXACT.binary_search_by(|(n, _)| n.as_bytes().cmp(name)) {
            return Some(EXACT[i]);
        }
    }
    if !maybe.prefix {
        return None;
    }
    PREFIX
        .iter()
        .find(|(p, _)| name.starts_with(p.as_bytes()))
        .copied()
}

/// A string literal naming a setting that says which role the server has
/// (`current_setting('transaction_read_only')`, `... WHERE name = 'in_hot_standby'`).
pub(crate) fn names_role_setting(t: &Token<'_>) -> bool {
    if t.kind != TokenKind::String || t.text.len() < 2 || t.text[0] != b'\'' {
        return false;
    }
    let inner = &t.text[1..t.text.len() - 1];
    inner.eq_ignore_ascii_case(b"transaction_read_only")
        || inner.eq_ignore_ascii_case(b"in_hot_standby")
}

/// True when `t`, followed by `(`, is a keyword, a type modifier or a built-in read; false for
/// anything else (a user-defined function, an extension's, a table alias with column names).
pub(crate) fn known_read_call(t: &Token<'_>) -> bool {
    let mut buf = [0u8; MAX_NAME];
    match resolved(t, &mut buf, &KNOWN_READS_FILTER, false) {
        Some((name, _)) => KNOWN_READS
            .binary_search_by(|k| k.as_bytes().cmp(name))
            .is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_state::lexer::Lexer;

    fn tok(s: &str) -> Token<'_> {
        Lexer::new(s.as_bytes()).next().unwrap()
    }

    #[test]
    fn known_reads_are_sorted_and_lower_case() {
        for w in KNOWN_READS.windows(2) {
            assert!(w[0] < w[1], "{} before {}", w[0], w[1]);
        }
        for (p, _) in PREFIX {
            assert!(
                PREFIX_HEADS
                    .iter()
                    .any(|h| p.as_bytes().starts_with(&h[..])),
                "{p}"
            );
        }
        for w in EXACT.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        for n in KNOWN_READS.iter().chain(EXACT.iter().map(|(n, _)| n)) {
            assert_eq!(n.to_ascii_lowercase(), *n);
            assert!(n.len() <= MAX_NAME);
        }
    }

    #[test]
    fn names_fold_like_the_server() {
        assert_eq!(
            needs_primary(&tok("NEXTVAL")),
            Some(("nextval", NeedsPrimary::Writes))
        );
        assert_eq!(
            needs_primary(&tok("\"nextval\"")),
            Some(("nextval", NeedsPrimary::Writes))
        );
        // A quoted name keeps its case: "NextVal" is some other function.
        assert_eq!(needs_primary(&tok("\"NextVal\"")), None);
        assert_eq!(
            needs_primary(&tok("U&\"nextval\"")),
            Some(("nextval", NeedsPrimary::Writes))
        );
        assert_eq!(
            needs_primary(&tok("u&\"pg_notify\"")),
            Some(("pg_notify", NeedsPrimary::Writes))
        );
        assert_eq!(needs_primary(&tok("U&\"nextva\\006c\"")), None);
        assert_eq!(needs_primary(&tok("\"unterminated")), None);
        assert_eq!(
            needs_primary(&tok("pg_try_advisory_xact_lock")),
            Some(("pg_try_advisory_", NeedsPrimary::ServerLocal))
        );
        assert_eq!(needs_primary(&tok("'nextval'")), None);
        assert_eq!(needs_primary(&tok("next_value")), None);
        assert!(known_read_call(&tok("COUNT")));
        assert!(!known_read_call(&tok("my_func")));
        assert!(names_role_setting(&tok("'Transaction_Read_Only'")));
        assert!(!names_role_setting(&tok("\"transaction_read_only\"")));
        let long = "x".repeat(100);
        assert_eq!(needs_primary(&tok(&long)), None);
    }
}
