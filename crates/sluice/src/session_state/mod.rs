//! Session-state classification of SQL sent in transaction/statement mode: a cheap lexer and a
//! classifier that say which statements create, change or clear state tied to a server session.
