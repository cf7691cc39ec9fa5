//! Ini lexer: `[section]` headers, `key = value` lines, comments, and `%include` with a depth limit.

use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// Deepest allowed `%include` nesting (the main file is level 0).
pub const MAX_INCLUDE_DEPTH: usize = 10;

/// One meaningful line of an ini file (includes already expanded in place).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum IniItem {
    Section {
        name: String,
        file: String,
        line: usize,
    },
    Pair {
        key: String,
        value: String,
        file: String,
        line: usize,
    },
}

/// Lex the file at `path`, following includes.
pub(crate) fn lex_file(path: &Path) -> Result<Vec<IniItem>, ConfigError> {
    let file = path.display().to_string();
    let text = read_text(path, &file)?;
    lex_str(&text, &file)
}

/// Lex `text` (named `file` in errors), following includes from disk.
pub(crate) fn lex_str(text: &str, file: &str) -> Result<Vec<IniItem>, ConfigError> {
    let mut out = Vec::new();
    lex(text, file, 0, &mut out)?;
    Ok(out)
}

/// Read a whole file as UTF-8; an invalid byte is reported with its line number.
pub(crate) fn read_text(path: &Path, file: &str) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError::io(file, e.to_string()))?;
    match String::from_utf8(bytes) {
        Ok(s) => Ok(s),
        Err(e) => {
            let upto = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..upto].iter().filter(|&&b| b == b'\n').count();
            Err(ConfigError::syntax(file, line, "invalid UTF-8"))
        }
    }
}

fn lex(text: &str, file: &str, depth: usize, out: &mut Vec<IniItem>) -> Result<(), ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (idx, raw) in text.lines().enumerate() {
        let line = idx + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with(';') || t.starts_with('#') {
            continue;
        }
        if let Some(rest) = t.strip_prefix('[') {
            out.push(section(rest, file, line)?);
        } else if let Some(rest) = t.strip_prefix("%include") {
            include(rest, file, line, depth, out)?;
        } else if t.starts_with('%') {
            let word = t.split_whitespace().next().unwrap_or(t);
            return Err(ConfigError::syntax(
                file,
                line,
                format!("unknown directive '{word}'"),
            ));
        } else {
            let (key, value) = pair(t, file, line)?;
            out.push(IniItem::Pair {
                key,
                value,
                file: file.to_string(),
                line,
            });
        }
    }
    Ok(())
}

fn section(rest: &str, file: &str, line: usize) -> Result<IniItem, ConfigError> {
    let Some((name, after)) = rest.split_once(']') else {
        return Err(ConfigError::syntax(
            file,
            line,
            "missing ']' in section header",
        ));
    };
    let after = after.trim();
    if !(after.is_empty() || after.starts_with(';') || after.starts_with('#')) {
        return Err(ConfigError::syntax(
            file,
            line,
            format!("unexpected text after section header: '{after}'"),
        ));
    }
    let name = name.trim();
    if name.is_empty() {
        return Err(ConfigError::syntax(file, line, "empty section name"));
    }
    Ok(IniItem::Section {
        name: name.to_string(),
        file: file.to_string(),
        line,
    })
}

fn include(
    rest: &str,
    file: &str,
    line: usize,
    depth: usize,
    out: &mut Vec<IniItem>,
) -> Result<(), ConfigError> {
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return Err(ConfigError::syntax(file, line, "unknown directive"));
    }
    let target = rest.trim();
    if target.is_empty() {
        return Err(ConfigError::syntax(
            file,
            line,
            "%include needs a file name",
        ));
    }
    if depth + 1 > MAX_INCLUDE_DEPTH {
        return Err(ConfigError::syntax(
            file,
            line,
            format!(
                "%include nested too deeply (more than {MAX_INCLUDE_DEPTH} levels): '{target}'"
            ),
        ));
    }
    let path = resolve_include(target, file);
    let name = path.display().to_string();
    let text = match read_text(&path, &name) {
        Ok(text) => text,
        Err(ConfigError::Io { reason, .. }) => {
            return Err(ConfigError::syntax(
                file,
                line,
                format!("cannot include '{target}': {reason}"),
            ))
        }
        Err(other) => return Err(other),
    };
    lex(&text, &name, depth + 1, out)
}

/// PgBouncer resolves relative includes against the working directory; when nothing is there we
/// also try the including file's directory, which is what operators usually mean.
fn resolve_include(target: &str, including_file: &str) -> PathBuf {
    let p = PathBuf::from(target);
    if p.is_absolute() || p.exists() {
        return p;
    }
    match Path::new(including_file).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            let candidate = dir.join(&p);
            if candidate.exists() {
                candidate
            } else {
                p
            }
        }
        _ => p,
    }
}

/// Split `key = value`; the key may be double-quoted (`""` inside stands for one quote).
fn pair(t: &str, file: &str, line: usize) -> Result<(String, String), ConfigError> {
    let (key, rest) = if let Some(quoted) = t.strip_prefix('"') {
        let mut key = String::new();
        let mut chars = quoted.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            if c == '"' {
                if quoted[i + 1..].starts_with('"') {
                    key.push('"');
                    chars.next();
                } else {
                    end = Some(i + 1);
                    break;
                }
            } else {
                key.push(c);
            }
        }
        let Some(end) = end else {
            return Err(ConfigError::syntax(file, line, "unterminated quoted key"));
        };
        (key, &quoted[end..])
    } else {
        let end = t
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(t.len());
        (t[..end].to_string(), &t[end..])
    };
    if key.is_empty() {
        return Err(ConfigError::syntax(file, line, "missing key before '='"));
    }
    let Some(value) = rest.trim_start().strip_prefix('=') else {
        return Err(ConfigError::syntax(
            file,
            line,
            format!("expected '=' after '{key}'"),
        ));
    };
    Ok((key, value.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[IniItem]) -> Vec<(String, String, usize)> {
        items
            .iter()
            .filter_map(|i| match i {
                IniItem::Pair {
                    key, value, line, ..
                } => Some((key.clone(), value.clone(), *line)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn sections_pairs_comments() {
        let text = "\u{feff}; comment\n# other\n\n[pgbouncer] ; trailing\r\n  listen_port = 6432  \r\nx=\n\"my db\" = host=a\n\"q\"\"x\"=1\n";
        let items = lex_str(text, "t.ini").unwrap();
        assert_eq!(
            items[0],
            IniItem::Section {
                name: "pgbouncer".into(),
                file: "t.ini".into(),
                line: 4
            }
        );
        assert_eq!(
            pairs(&items),
            vec![
                ("listen_port".into(), "6432".into(), 5),
                ("x".into(), "".into(), 6),
                ("my db".into(), "host=a".into(), 7),
                ("q\"x".into(), "1".into(), 8),
            ]
        );
    }

    #[test]
    fn value_keeps_inner_text() {
        let items = lex_str("a = b ; not a comment = c\n", "t").unwrap();
        assert_eq!(pairs(&items)[0].1, "b ; not a comment = c");
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let cases = [
            ("[pgbouncer\n", "t.ini:1: missing ']' in section header"),
            ("\n[]\n", "t.ini:2: empty section name"),
            (
                "[a] b\n",
                "t.ini:1: unexpected text after section header: 'b'",
            ),
            ("\n\nfoo\n", "t.ini:3: expected '=' after 'foo'"),
            ("foo bar = 1\n", "t.ini:1: expected '=' after 'foo'"),
            ("= 1\n", "t.ini:1: missing key before '='"),
            ("\"abc = 1\n", "t.ini:1: unterminated quoted key"),
            ("%include\n", "t.ini:1: %include needs a file name"),
            ("%includes x\n", "t.ini:1: unknown directive"),
            ("%foo\n", "t.ini:1: unknown directive '%foo'"),
        ];
        for (text, want) in cases {
            assert_eq!(
                lex_str(text, "t.ini").unwrap_err().to_string(),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn include_nested_relative_to_including_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("b.ini"), "b = 2\n%include c.ini\n").unwrap();
        std::fs::write(sub.join("c.ini"), "c = 3\n").unwrap();
        let a = dir.path().join("a.ini");
        std::fs::write(&a, "[s]\na = 1\n%include sub/b.ini\nd = 4\n").unwrap();
        let items = lex_file(&a).unwrap();
        let got: Vec<_> = pairs(&items).into_iter().map(|(k, v, _)| (k, v)).collect();
        let want: Vec<(String, String)> = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
        match &items[3] {
            IniItem::Pair { file, line, .. } => {
                assert!(file.ends_with("c.ini"));
                assert_eq!(*line, 1);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn include_missing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.ini");
        std::fs::write(&a, "\n%include /nonexistent/sluice-x.ini\n").unwrap();
        let err = lex_file(&a).unwrap_err().to_string();
        let prefix = format!(
            "{}:2: cannot include '/nonexistent/sluice-x.ini': ",
            a.display()
        );
        assert!(err.starts_with(&prefix), "{err}");
    }

    #[test]
    fn include_depth_limit() {
        let dir = tempfile::tempdir().unwrap();
        let selfref = dir.path().join("loop.ini");
        std::fs::write(&selfref, format!("%include {}\n", selfref.display())).unwrap();
        let err = lex_file(&selfref).unwrap_err().to_string();
        assert!(err.contains("nested too deeply"), "{err}");

        // Exactly MAX_INCLUDE_DEPTH levels below the main file are fine.
        for i in 0..MAX_INCLUDE_DEPTH {
            let next = dir.path().join(format!("f{}.ini", i + 1));
            std::fs::write(
                dir.path().join(format!("f{i}.ini")),
                format!("k{i} = {i}\n%include {}\n", next.display()),
            )
            .unwrap();
        }
        let last = dir.path().join(format!("f{MAX_INCLUDE_DEPTH}.ini"));
        std::fs::write(&last, "last = 1\n").unwrap();
        let items = lex_file(&dir.path().join("f0.ini")).unwrap();
        assert_eq!(pairs(&items).len(), MAX_INCLUDE_DEPTH + 1);
        std::fs::write(&last, format!("%include {}\n", selfref.display())).unwrap();
        assert!(lex_file(&dir.path().join("f0.ini")).is_err());
    }

    #[test]
    fn invalid_utf8_reports_line() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.ini");
        std::fs::write(&a, b"a = 1\nb = \xff\n").unwrap();
        let err = lex_file(&a).unwrap_err().to_string();
        assert_eq!(err, format!("{}:2: invalid UTF-8", a.display()));
        let err = lex_file(&dir.path().join("none.ini")).unwrap_err();
        assert!(matches!(err, ConfigError::Io { .. }));
    }
}
