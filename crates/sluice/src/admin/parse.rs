//! The admin console grammar (PgBouncer's): `WORD [WORD] [;]`, `SET key = value` / `SET key TO
//! value`, `SELECT x` as an alias of `SHOW x`. Words are `[0-9a-z_]+` (any case) or double-quoted.

/// PgBouncer's limits: command words, arguments and SET values.
const MAX_CMD: usize = 15;
const MAX_ARG: usize = 63;
const MAX_VALUE: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An empty query string.
    Empty,
    /// `SHOW x` (lower-cased subject).
    Show(String),
    Set {
        key: String,
        value: String,
    },
    /// Any other command (lower-cased) with its optional argument (case kept).
    Word {
        cmd: String,
        arg: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid command '{0}', use SHOW HELP;")]
pub struct ParseError(pub String);

enum Token {
    Word(String),
    Quoted(String),
    Literal(String),
    Equals,
}

fn tokenize(s: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '=' {
            chars.next();
            out.push(Token::Equals);
        } else if c == '"' || c == '\'' {
            chars.next();
            let mut v = String::new();
            loop {
                match chars.next()? {
                    q if q == c => {
                        if chars.peek() == Some(&c) {
                            chars.next();
                            v.push(c);
                        } else {
                            break;
                        }
                    }
                    other => v.push(other),
                }
            }
            out.push(if c == '"' {
                Token::Quoted(v)
            } else {
                Token::Literal(v)
            });
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' || c == '/' {
            let mut v = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || "_.-/:".contains(c) {
                    v.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Word(v));
        } else {
            return None;
        }
    }
    Some(out)
}

fn is_plain_word(w: &str) -> bool {
    !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub fn parse(query: &str) -> Result<Command, ParseError> {
    let bad = || ParseError(query.trim().to_string());
    let text = query.trim();
    let text = text.strip_suffix(';').unwrap_or(text).trim();
    if text.is_empty() {
        return Ok(Command::Empty);
    }
    let tokens = tokenize(text).ok_or_else(bad)?;
    let mut it = tokens.into_iter();
    let cmd = match it.next() {
        Some(Token::Word(w)) if is_plain_word(&w) && w.len() <= MAX_CMD => w.to_ascii_lowercase(),
        _ => return Err(bad()),
    };
    let rest: Vec<Token> = it.collect();
    if cmd == "set" {
        let mut r = rest.into_iter();
        let key = match r.next() {
            Some(Token::Word(k)) if is_plain_word(&k) && k.len() <= MAX_ARG => {
                k.to_ascii_lowercase()
            }
            _ => return Err(bad()),
        };
        match r.next() {
            Some(Token::Equals) => {}
            Some(Token::Word(w)) if w.eq_ignore_ascii_case("to") => {}
            _ => return Err(bad()),
        }
        let value = match r.next() {
            Some(Token::Word(v)) | Some(Token::Literal(v)) if v.len() <= MAX_VALUE => v,
            _ => return Err(bad()),
        };
        if r.next().is_some() {
            return Err(bad());
        }
        return Ok(Command::Set { key, value });
    }
    let arg = match rest.len() {
        0 => None,
        1 => match rest.into_iter().next() {
            Some(Token::Word(w)) if is_plain_word(&w) && w.len() <= MAX_ARG => Some(w),
            Some(Token::Quoted(w)) if w.len() <= MAX_ARG => Some(w),
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    match cmd.as_str() {
        "show" | "select" => match arg {
            Some(a) => Ok(Command::Show(a.to_ascii_lowercase())),
            None => Err(bad()),
        },
        _ => Ok(Command::Word { cmd, arg }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(cmd: &str, arg: Option<&str>) -> Command {
        Command::Word {
            cmd: cmd.into(),
            arg: arg.map(Into::into),
        }
    }

    #[test]
    fn grammar() {
        assert_eq!(parse("show pools;").unwrap(), Command::Show("pools".into()));
        assert_eq!(
            parse("  SHOW  STATS  ").unwrap(),
            Command::Show("stats".into())
        );
        assert_eq!(
            parse("select version").unwrap(),
            Command::Show("version".into())
        );
        assert_eq!(parse("PAUSE").unwrap(), word("pause", None));
        assert_eq!(parse("pause App_1;").unwrap(), word("pause", Some("App_1")));
        assert_eq!(
            parse("kill \"My Db\"").unwrap(),
            word("kill", Some("My Db"))
        );
        assert_eq!(
            parse("kill_client 42").unwrap(),
            word("kill_client", Some("42"))
        );
        assert_eq!(parse("").unwrap(), Command::Empty);
        assert_eq!(parse(";").unwrap(), Command::Empty);
        assert_eq!(
            parse("SET default_pool_size = 5").unwrap(),
            Command::Set {
                key: "default_pool_size".into(),
                value: "5".into()
            }
        );
        assert_eq!(
            parse("set server_reset_query to 'DISCARD ALL'").unwrap(),
            Command::Set {
                key: "server_reset_query".into(),
                value: "DISCARD ALL".into()
            }
        );
        assert_eq!(
            parse("set admin_users = 'a,''b'''").unwrap(),
            Command::Set {
                key: "admin_users".into(),
                value: "a,'b'".into()
            }
        );
    }

    #[test]
    fn refusals() {
        for q in [
            "show",
            "show a b",
            "pause a b",
            "select 1 + 1",
            "show pools; show stats",
            "averyveryverylongcommand",
            "set x",
            "set x = ",
            "set x y z",
            "show 'pools'",
        ] {
            assert!(parse(q).is_err(), "{q}");
        }
        assert_eq!(
            parse("bogus!").unwrap_err().to_string(),
            "invalid command 'bogus!', use SHOW HELP;"
        );
    }
}
