//! A cheap, allocation-free SQL lexer: just enough of PostgreSQL's scanner to find keywords,
//! names and top-level semicolons without being fooled by comments, strings or quoted names.

/// What a token is; operators are reported one byte at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// Unquoted identifier or keyword (compare with [`Token::is_kw`]).
    Word,
    /// `"name"` or `U&"name"`.
    QuotedIdent,
    /// `'...'`, `E'...'`, `B'...'`, `X'...'`, `N'...'`, `U&'...'`, `$$...$$`, `$tag$...$tag$`.
    String,
    Number,
    /// `$1`, `$2`, ...
    Param,
    Semicolon,
    /// Any other byte: `(`, `)`, `,`, `.`, `=`, `*`, ...
    Op,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'a> {
    pub kind: TokenKind,
    /// Source bytes of the whole token, quotes included (unterminated ones run to the end).
    pub text: &'a [u8],
    /// Byte offset of the token in the lexed source.
    pub start: usize,
}

impl<'a> Token<'a> {
    /// An unquoted word equal to `kw` (ASCII lower case), compared case-insensitively.
    pub fn is_kw(&self, kw: &str) -> bool {
        self.kind == TokenKind::Word && self.text.eq_ignore_ascii_case(kw.as_bytes())
    }

    pub fn is_op(&self, op: u8) -> bool {
        self.kind == TokenKind::Op && self.text == [op]
    }

    pub fn end(&self) -> usize {
        self.start + self.text.len()
    }

    /// A name as PostgreSQL resolves it: unquoted words fold to lower case, `"quoted"` ones are
    /// taken as written. True when that equals `name` (given in its resolved form).
    pub fn is_name(&self, name: &str) -> bool {
        match self.kind {
            TokenKind::Word => self.text.eq_ignore_ascii_case(name.as_bytes()),
            TokenKind::QuotedIdent => {
                self.text.len() == name.len() + 2
                    && &self.text[1..self.text.len() - 1] == name.as_bytes()
            }
            _ => false,
        }
    }
}

/// Lexer state; `Copy` so that peeking is a copy and a `next`.
#[derive(Clone, Copy, Debug)]
pub struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    /// `standard_conforming_strings`: when off, a backslash escapes the next byte in `'...'`.
    scs: bool,
}

impl<'a> Lexer<'a> {
    /// A lexer with `standard_conforming_strings = on` (the server default since 9.1).
    pub fn new(src: &'a [u8]) -> Self {
        Self::with_scs(src, true)
    }

    pub fn with_scs(src: &'a [u8], standard_conforming_strings: bool) -> Self {
        Lexer {
            src,
            pos: 0,
            scs: standard_conforming_strings,
        }
    }

    pub fn scs(&self) -> bool {
        self.scs
    }

    /// Byte offset of the next unread byte.
    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn peek(&self) -> Option<Token<'a>> {
        let mut copy = *self;
        copy.next()
    }

    /// Consume the next token when it is the keyword `kw`.
    pub fn eat_kw(&mut self, kw: &str) -> bool {
        match self.peek() {
            Some(t) if t.is_kw(kw) => {
                self.next();
                true
            }
            _ => false,
        }
    }

    pub fn eat_op(&mut self, op: u8) -> bool {
        match self.peek() {
            Some(t) if t.is_op(op) => {
                self.next();
                true
            }
            _ => false,
        }
    }

    fn byte(&self, i: usize) -> Option<u8> {
        self.src.get(i).copied()
    }

    /// Skip whitespace and comments; an unterminated block comment runs to the end.
    fn skip_trivia(&mut self) {
        let s = self.src;
        let mut i = self.pos;
        while i < s.len() {
            match s[i] {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => i += 1,
                b'-' if s.get(i + 1) == Some(&b'-') => {
                    while i < s.len() && s[i] != b'\n' && s[i] != b'\r' {
                        i += 1;
                    }
                }
                b'/' if s.get(i + 1) == Some(&b'*') => {
                    let mut depth = 1usize;
                    i += 2;
                    while i < s.len() && depth > 0 {
                        if s[i] == b'/' && s.get(i + 1) == Some(&b'*') {
                            depth += 1;
                            i += 2;
                        } else if s[i] == b'*' && s.get(i + 1) == Some(&b'/') {
                            depth -= 1;
                            i += 2;
                        } else {
                            i += 1;
                        }
                    }
                }
                _ => break,
            }
        }
        self.pos = i.min(s.len());
    }

    /// End of a `'...'` string whose opening quote is at `open`; `backslash` makes `\x` an escape.
    fn quoted_end(&self, open: usize, quote: u8, backslash: bool) -> usize {
        let s = self.src;
        let mut i = open + 1;
        while i < s.len() {
            let b = s[i];
            if backslash && b == b'\\' {
                i += 2;
            } else if b == quote {
                if s.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return i + 1;
                }
            } else {
                i += 1;
            }
        }
        s.len()
    }

    /// End of a dollar-quoted string starting at `open` (a `$`), or None when no valid opening
    /// delimiter is there.
    fn dollar_end(&self, open: usize) -> Option<usize> {
        let s = self.src;
        let mut i = open + 1;
        while i < s.len() && s[i] != b'$' {
            let b = s[i];
            let ok = if i == open + 1 {
                is_ident_start(b)
            } else {
                is_ident_start(b) || b.is_ascii_digit()
            };
            if !ok {
                return None;
            }
            i += 1;
        }
        if i >= s.len() {
            return None;
        }
        let delim = &s[open..=i];
        let body = i + 1;
        Some(
            find(&s[body..], delim)
                .map(|p| body + p + delim.len())
                .unwrap_or(s.len()),
        )
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        self.skip_trivia();
        let s = self.src;
        let start = self.pos;
        let b = *s.get(start)?;
        let next = self.byte(start + 1);
        let (kind, end) = match b {
            b'\'' => (TokenKind::String, self.quoted_end(start, b'\'', !self.scs)),
            b'"' => (TokenKind::QuotedIdent, self.quoted_end(start, b'"', false)),
            b'e' | b'E' if next == Some(b'\'') => {
                (TokenKind::String, self.quoted_end(start + 1, b'\'', true))
            }
            b'b' | b'B' | b'x' | b'X' | b'n' | b'N' if next == Some(b'\'') => (
                TokenKind::String,
                self.quoted_end(start + 1, b'\'', !self.scs),
            ),
            b'u' | b'U' if next == Some(b'&') && self.byte(start + 2) == Some(b'\'') => {
                (TokenKind::String, self.quoted_end(start + 2, b'\'', false))
            }
            b'u' | b'U' if next == Some(b'&') && self.byte(start + 2) == Some(b'"') => (
                TokenKind::QuotedIdent,
                self.quoted_end(start + 2, b'"', false),
            ),
            b'$' if next.is_some_and(|c| c.is_ascii_digit()) => {
                let mut i = start + 1;
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
                (TokenKind::Param, i)
            }
            b'$' => match self.dollar_end(start) {
                Some(end) => (TokenKind::String, end),
                None => (TokenKind::Op, start + 1),
            },
            b';' => (TokenKind::Semicolon, start + 1),
            _ if is_ident_start(b) => {
                let mut i = start + 1;
                while i < s.len() && is_ident_cont(s[i]) {
                    i += 1;
                }
                (TokenKind::Word, i)
            }
            _ if b.is_ascii_digit() || (b == b'.' && next.is_some_and(|c| c.is_ascii_digit())) => {
                let mut i = start + 1;
                while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_' || s[i] == b'.')
                {
                    i += 1;
                }
                (TokenKind::Number, i)
            }
            _ => (TokenKind::Op, start + 1),
        };
        let end = end.min(s.len());
        self.pos = end;
        Some(Token {
            kind,
            text: &s[start..end],
            start,
        })
    }
}

pub(crate) fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

pub(crate) fn is_ident_cont(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

/// First offset of `needle` in `hay` (exact bytes).
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    let first = needle[0];
    let last_start = hay.len().checked_sub(needle.len())?;
    (0..=last_start).find(|&i| hay[i] == first && &hay[i..i + needle.len()] == needle)
}

/// Splits a source into statements at top-level semicolons, like psql: semicolons inside
/// parentheses or inside the `BEGIN ... END` body of `CREATE [OR REPLACE] FUNCTION|PROCEDURE`
/// (SQL-standard bodies) do not end a statement.
#[derive(Clone, Copy, Debug)]
pub struct Splitter<'a> {
    lexer: Lexer<'a>,
}

/// One statement: the bytes from its first token to the end of its last one (no semicolon).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl<'a> Splitter<'a> {
    pub fn new(lexer: Lexer<'a>) -> Self {
        Splitter { lexer }
    }
}

impl Iterator for Splitter<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        loop {
            let mut span: Option<Span> = None;
            let mut parens = 0usize;
            let mut begin_depth = 0usize;
            // CREATE [OR REPLACE] FUNCTION|PROCEDURE recogniser: 1 = CREATE, 2 = CREATE OR,
            // 3 = CREATE OR REPLACE, 4 = a routine, 5 = something else.
            let mut head = 0u8;
            let mut ended = false;
            for t in self.lexer.by_ref() {
                match t.kind {
                    TokenKind::Semicolon if parens == 0 && begin_depth == 0 => {
                        ended = true;
                        break;
                    }
                    TokenKind::Op if t.text == b"(" => parens += 1,
                    TokenKind::Op if t.text == b")" => parens = parens.saturating_sub(1),
                    TokenKind::Word => {
                        let routine_kw = t.is_kw("function") || t.is_kw("procedure");
                        head = match head {
                            0 if t.is_kw("create") => 1,
                            1 | 3 if routine_kw => 4,
                            1 if t.is_kw("or") => 2,
                            2 if t.is_kw("replace") => 3,
                            4 => 4,
                            _ => 5,
                        };
                        let routine = head == 4;
                        if routine && parens == 0 {
                            if t.is_kw("begin") || t.is_kw("case") && begin_depth > 0 {
                                begin_depth += 1;
                            } else if t.is_kw("end") {
                                begin_depth = begin_depth.saturating_sub(1);
                            }
                        }
                    }
                    _ => {}
                }
                match &mut span {
                    None => {
                        span = Some(Span {
                            start: t.start,
                            end: t.end(),
                        })
                    }
                    Some(s) => s.end = t.end(),
                }
            }
            match span {
                Some(s) => return Some(s),
                None if ended => continue,
                None => return None,
            }
        }
    }
}
