//! Lexer and splitter tests: token kinds, quoting, comments, top-level semicolons.

use super::super::lexer::{Lexer, Splitter, TokenKind};
use super::kinds;

// ---- lexer ----

fn tokens(sql: &str) -> Vec<(TokenKind, &str)> {
    Lexer::new(sql.as_bytes())
        .map(|t| (t.kind, std::str::from_utf8(t.text).unwrap()))
        .collect()
}

#[test]
fn lexer_token_kinds() {
    use TokenKind::*;
    assert_eq!(
        tokens("SELECT a1$b, \"X\"\"y\", 'it''s', E'\\'', $1, 1.5e3, .5 ;"),
        vec![
            (Word, "SELECT"),
            (Word, "a1$b"),
            (Op, ","),
            (QuotedIdent, "\"X\"\"y\""),
            (Op, ","),
            (String, "'it''s'"),
            (Op, ","),
            (String, "E'\\''"),
            (Op, ","),
            (Param, "$1"),
            (Op, ","),
            (Number, "1.5e3"),
            (Op, ","),
            (Number, ".5"),
            (Semicolon, ";"),
        ]
    );
}

#[test]
fn lexer_prefixed_strings_and_dollar_quotes() {
    use TokenKind::*;
    assert_eq!(
        tokens("B'01' X'ff' N'n' U&'d\\0061' U&\"i\" $$a;b$$ $t$ $$ ; $t$ $x"),
        vec![
            (String, "B'01'"),
            (String, "X'ff'"),
            (String, "N'n'"),
            (String, "U&'d\\0061'"),
            (QuotedIdent, "U&\"i\""),
            (String, "$$a;b$$"),
            (String, "$t$ $$ ; $t$"),
            (Op, "$"),
            (Word, "x"),
        ]
    );
}

#[test]
fn lexer_skips_comments_nested_and_line() {
    use TokenKind::*;
    assert_eq!(
        tokens("/* a /* nested ; */ still; */ x -- LISTEN y;\r\n y --"),
        vec![(Word, "x"), (Word, "y")]
    );
    assert_eq!(tokens("a/* unterminated /* x */"), vec![(Word, "a")]);
    assert_eq!(tokens("a - -1 / 2"), {
        vec![
            (Word, "a"),
            (Op, "-"),
            (Op, "-"),
            (Number, "1"),
            (Op, "/"),
            (Number, "2"),
        ]
    });
}

#[test]
fn lexer_unterminated_tokens_run_to_end() {
    use TokenKind::*;
    assert_eq!(tokens("'abc; LISTEN x"), vec![(String, "'abc; LISTEN x")]);
    assert_eq!(tokens("\"abc; x"), vec![(QuotedIdent, "\"abc; x")]);
    assert_eq!(tokens("$q$ abc; x"), vec![(String, "$q$ abc; x")]);
    assert_eq!(tokens("E'\\"), vec![(String, "E'\\")]);
}

#[test]
fn lexer_backslash_quotes_only_without_standard_conforming_strings() {
    let sql = b"'a\\'; LISTEN x; --'";
    let on: Vec<_> = Lexer::with_scs(sql, true).map(|t| t.kind).collect();
    let off: Vec<_> = Lexer::with_scs(sql, false).map(|t| t.kind).collect();
    assert_eq!(on[0], TokenKind::String);
    assert_eq!(on[1], TokenKind::Semicolon);
    assert_eq!(off, vec![TokenKind::String]);
}

#[test]
fn splitter_top_level_semicolons() {
    let src = "SELECT 1; ; SELECT '2;' ;SELECT (3;4); -- c\n";
    let spans: Vec<_> = Splitter::new(Lexer::new(src.as_bytes()))
        .map(|s| &src[s.start..s.end])
        .collect();
    assert_eq!(spans, vec!["SELECT 1", "SELECT '2;'", "SELECT (3;4)"]);
}

#[test]
fn splitter_keeps_sql_standard_function_bodies_whole() {
    let src = "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql \
               BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; END";
    let spans: Vec<_> = Splitter::new(Lexer::new(src.as_bytes()))
        .map(|s| &src[s.start..s.end])
        .collect();
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert!(spans[0].ends_with("SELECT 2; END"));
    assert_eq!(spans[1], "END");
    // Outside CREATE FUNCTION, BEGIN is a statement of its own.
    assert_eq!(kinds("BEGIN; SELECT 1; END").len(), 3);
}
