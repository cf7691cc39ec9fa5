//! auth_file (userlist.txt) parsing: `"user" "password-or-secret"` per line.

use std::path::Path;

use crate::error::ConfigError;
use crate::ini::read_text;

/// Parse an auth file. Each line is `"user" "secret" anything-else`; `""` inside quotes stands for
/// one quote; blank lines and lines starting with ';' or '#' are skipped. Anything else malformed is
/// a `ConfigError::Syntax` ("broken auth file: ...") with file and line. Entries come back in file
/// order (the caller's map lets later duplicates win).
pub fn parse_userlist(text: &str, file: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut entries = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let t = raw.trim_start();
        if t.is_empty() || t.starts_with(';') || t.starts_with('#') {
            continue;
        }
        let broken =
            |why: &str| ConfigError::syntax(file, idx + 1, format!("broken auth file: {why}"));
        let Some(rest) = t.strip_prefix('"') else {
            return Err(broken("expected a double-quoted user name"));
        };
        let (user, rest) = quoted(rest).ok_or_else(|| broken("unterminated user name"))?;
        let Some(rest) = rest.trim_start().strip_prefix('"') else {
            return Err(broken(
                "expected a double-quoted password after the user name",
            ));
        };
        let (password, _) = quoted(rest).ok_or_else(|| broken("unterminated password"))?;
        entries.push((user, password));
    }
    Ok(entries)
}

/// Read and parse the auth file at `path`.
pub fn load_userlist(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let file = path.display().to_string();
    let text = read_text(path, &file)?;
    parse_userlist(&text, &file)
}

/// Text up to the closing quote (after the opening one), with `""` unescaped, and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '"' {
            if matches!(chars.peek(), Some((_, '"'))) {
                out.push('"');
                chars.next();
            } else {
                return Some((out, &s[i + 1..]));
            }
        } else {
            out.push(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect()
    }

    #[test]
    fn entries_comments_escapes() {
        let text = "\
; comment
# also a comment

\"postgres\" \"SCRAM-SHA-256$4096:fOF4mQWQhMp3f2HgUCvBEg==$m5xC=:bZgL=\"
  \"md5user\"   \"md5abcdef0123456789abcdef0123456789\" trailing stuff
\"we\"\"ird\" \"pa\"\"ss\"\"\"\r
\"empty\" \"\"
\"postgres\" \"second\"
";
        let got = parse_userlist(text, "userlist.txt").unwrap();
        assert_eq!(
            got,
            pairs(&[
                (
                    "postgres",
                    "SCRAM-SHA-256$4096:fOF4mQWQhMp3f2HgUCvBEg==$m5xC=:bZgL="
                ),
                ("md5user", "md5abcdef0123456789abcdef0123456789"),
                ("we\"ird", "pa\"ss\""),
                ("empty", ""),
                ("postgres", "second"),
            ])
        );
    }

    #[test]
    fn broken_lines() {
        let cases = [
            ("user \"pw\"", 1, "expected a double-quoted user name"),
            ("\"a\" \"b\"\n\"user", 2, "unterminated user name"),
            (
                "\n\n\"user\"",
                3,
                "expected a double-quoted password after the user name",
            ),
            (
                "\"user\" pw",
                1,
                "expected a double-quoted password after the user name",
            ),
            ("\"user\" \"pw", 1, "unterminated password"),
        ];
        for (text, line, why) in cases {
            let err = parse_userlist(text, "ul.txt").unwrap_err();
            assert_eq!(
                err,
                ConfigError::Syntax {
                    file: "ul.txt".into(),
                    line,
                    reason: format!("broken auth file: {why}")
                },
                "{text:?}"
            );
            assert!(err
                .to_string()
                .starts_with(&format!("ul.txt:{line}: broken auth file")));
        }
    }

    #[test]
    fn from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("userlist.txt");
        std::fs::write(&p, "\"u\" \"p\"\n").unwrap();
        assert_eq!(load_userlist(&p).unwrap(), pairs(&[("u", "p")]));
        let err = load_userlist(&dir.path().join("missing.txt")).unwrap_err();
        assert!(matches!(err, ConfigError::Io { .. }), "{err:?}");
    }
}
