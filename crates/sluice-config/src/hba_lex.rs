//! Tokens of pg_hba.conf / pg_ident.conf lines: words, "quoted words" (`""` escapes a quote),
//! commas, `#` comments and backslash line continuation.

/// One token of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// A word; `quoted` words are never keywords (`"all"` is a user named all).
    Word {
        text: String,
        quoted: bool,
    },
    Comma,
}

/// A logical line: its tokens and the physical line number it starts on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    pub number: usize,
    pub tokens: Vec<Token>,
}

/// Split `text` into logical lines of tokens, skipping empty and comment-only lines. A line ending
/// in `\` continues on the next one (pg_hba.conf allows it). Errors are (line, reason).
pub(crate) fn lex(text: &str) -> Result<Vec<Line>, (usize, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if pending.is_empty() {
            start = i + 1;
        }
        if let Some(head) = raw.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(raw);
        let tokens = tokenize(&pending).map_err(|r| (start, r))?;
        if !tokens.is_empty() {
            out.push(Line {
                number: start,
                tokens,
            });
        }
        pending.clear();
    }
    if !pending.is_empty() {
        let tokens = tokenize(&pending).map_err(|r| (start, r))?;
        if !tokens.is_empty() {
            out.push(Line {
                number: start,
                tokens,
            });
        }
    }
    Ok(out)
}

fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '#' {
            break;
        } else if c == ',' {
            chars.next();
            tokens.push(Token::Comma);
        } else if c == '"' {
            chars.next();
            let mut text = String::new();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        text.push('"');
                    }
                    Some('"') => break,
                    Some(ch) => text.push(ch),
                    None => return Err("unterminated quoted string".to_string()),
                }
            }
            tokens.push(Token::Word { text, quoted: true });
        } else {
            let mut text = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() || ch == ',' || ch == '#' || ch == '"' {
                    break;
                }
                text.push(ch);
                chars.next();
            }
            tokens.push(Token::Word {
                text,
                quoted: false,
            });
        }
    }
    Ok(tokens)
}

/// Consume one comma-separated field starting at `pos`: the words of the list, advancing `pos`.
/// Returns None when no word is at `pos`.
pub(crate) fn take_list(tokens: &[Token], pos: &mut usize) -> Option<Vec<(String, bool)>> {
    let mut items = Vec::new();
    loop {
        match tokens.get(*pos) {
            Some(Token::Word { text, quoted }) => {
                items.push((text.clone(), *quoted));
                *pos += 1;
            }
            _ => return None,
        }
        if tokens.get(*pos) == Some(&Token::Comma) {
            *pos += 1;
            continue;
        }
        return Some(items);
    }
}

/// Consume one single word at `pos`.
pub(crate) fn take_word(tokens: &[Token], pos: &mut usize) -> Option<(String, bool)> {
    match tokens.get(*pos) {
        Some(Token::Word { text, quoted }) => {
            *pos += 1;
            Some((text.clone(), *quoted))
        }
        _ => None,
    }
}
