//! libpq-like `key=value key2='quoted value'` strings used by [databases], [users] and [peers].

use crate::modes::PoolMode;
use crate::value::SettingValue;

/// Split a connect string into (key, value) pairs in order. Values may be single-quoted with `''`
/// (or `\'`) standing for a quote; empty values are refused, as PgBouncer does.
pub(crate) fn parse_pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok(pairs);
        }
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        if key.is_empty() {
            return Err("missing parameter name before '='".to_string());
        }
        let Some(after_eq) = rest[key_end..].trim_start().strip_prefix('=') else {
            return Err(format!("expected '=' after '{key}'"));
        };
        let after_eq = after_eq.trim_start();
        let (value, next) = if let Some(quoted) = after_eq.strip_prefix('\'') {
            quoted_value(quoted).ok_or_else(|| format!("unterminated quoted value for '{key}'"))?
        } else {
            let end = after_eq.find(char::is_whitespace).unwrap_or(after_eq.len());
            (after_eq[..end].to_string(), &after_eq[end..])
        };
        if !(next.is_empty() || next.starts_with(char::is_whitespace)) {
            return Err(format!("unexpected text after quoted value for '{key}'"));
        }
        if value.is_empty() {
            return Err(format!("empty value for '{key}'"));
        }
        pairs.push((key.to_string(), value));
        rest = next;
    }
}

/// Read up to the closing quote; returns the unescaped value and the text after the quote.
fn quoted_value(s: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if matches!(chars.peek(), Some((_, '\''))) => {
                value.push('\'');
                chars.next();
            }
            '\'' => return Some((value, &s[i + 1..])),
            '\\' if matches!(chars.peek(), Some((_, '\''))) => {
                value.push('\'');
                chars.next();
            }
            _ => value.push(c),
        }
    }
    None
}

/// A per-db / per-user integer (PgBouncer's `atoi` whole numbers); `-1` means "not set".
pub(crate) fn opt_u32(key: &str, value: &str) -> Result<Option<u32>, String> {
    if value == "-1" {
        return Ok(None);
    }
    value
        .parse::<u32>()
        .map(Some)
        .map_err(|_| format!("invalid integer for '{key}': '{value}'"))
}

pub(crate) fn pool_mode(value: &str) -> Result<PoolMode, String> {
    PoolMode::parse(value)
}

pub(crate) fn port(value: &str) -> Result<u16, String> {
    match value.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(format!("invalid port: '{value}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<(String, String)> {
        parse_pairs(s).unwrap()
    }

    fn kv(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plain_and_quoted() {
        assert_eq!(p(""), kv(&[]));
        assert_eq!(p("   "), kv(&[]));
        assert_eq!(
            p("host=127.0.0.1 port=5432  dbname=content"),
            kv(&[
                ("host", "127.0.0.1"),
                ("port", "5432"),
                ("dbname", "content")
            ])
        );
        assert_eq!(p("a = 1\tb =2"), kv(&[("a", "1"), ("b", "2")]));
        assert_eq!(
            p("password='it''s a secret' user=x"),
            kv(&[("password", "it's a secret"), ("user", "x")])
        );
        assert_eq!(p(r"password='a\'b'"), kv(&[("password", "a'b")]));
        assert_eq!(p(r"password='a\b'"), kv(&[("password", r"a\b")]));
        assert_eq!(
            p("connect_query='SET x = 1; SELECT ''y'''"),
            kv(&[("connect_query", "SET x = 1; SELECT 'y'")])
        );
        assert_eq!(p("password=ab'c"), kv(&[("password", "ab'c")]));
        assert_eq!(p("k='ünïcode'"), kv(&[("k", "ünïcode")]));
    }

    #[test]
    fn errors() {
        let cases = [
            ("host", "expected '=' after 'host'"),
            ("host 1", "expected '=' after 'host'"),
            ("=x", "missing parameter name before '='"),
            ("host=", "empty value for 'host'"),
            ("host='' port=1", "empty value for 'host'"),
            ("host='abc", "unterminated quoted value for 'host'"),
            ("host='a'b", "unexpected text after quoted value for 'host'"),
            ("password='x\\'", "unterminated quoted value for 'password'"),
        ];
        for (s, want) in cases {
            assert_eq!(parse_pairs(s).unwrap_err(), want, "{s}");
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(opt_u32("pool_size", "10"), Ok(Some(10)));
        assert_eq!(opt_u32("pool_size", "-1"), Ok(None));
        assert!(opt_u32("pool_size", "x").is_err());
        assert!(opt_u32("pool_size", "-2").is_err());
        assert_eq!(port("6432"), Ok(6432));
        assert!(port("0").is_err());
        assert!(port("70000").is_err());
    }
}
