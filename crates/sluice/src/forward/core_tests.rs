//! `RelayCore` over recorded message streams, with no socket: what reaches each side, when the
//! server may go back to the pool, and what the client is told when it breaks the protocol.

use bytes::BytesMut;
use sluice_config::PoolMode;
use sluice_protocol::{
    backend_tag, encode_bind_text, encode_command_complete, encode_describe, encode_execute,
    encode_flush, encode_parse, encode_query, encode_ready_for_query, encode_sync,
    encode_terminate, TransactionStatus,
};

use super::core::RelayCore;
use super::sim::World;
use super::RelayEnd;
use crate::prepared::ClientStatements;

/// The client's bytes arrive (as one read).
pub(super) fn client_sends(r: &mut RelayCore<'_>, bytes: &[u8]) -> Result<(), RelayEnd> {
    r.client_wants(usize::MAX)
        .expect("the relay reads the client")
        .extend_from_slice(bytes);
    r.read_from_client(bytes.len())
}

/// The server's bytes arrive (as one read).
pub(super) fn server_sends(r: &mut RelayCore<'_>, bytes: &[u8]) {
    r.server_wants(usize::MAX)
        .expect("the relay reads the server")
        .extend_from_slice(bytes);
    r.read_from_server()
        .expect("the server's replies are accepted");
}

/// Write everything the relay lets go, each side in full: (to the server, to the client).
pub(super) fn pump(r: &mut RelayCore<'_>) -> (Vec<u8>, Vec<u8>) {
    let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
    loop {
        let (a, b) = r.to_server();
        let n = a.len() + b.len();
        to_server.extend_from_slice(a);
        to_server.extend_from_slice(b);
        r.wrote_to_server(n);
        let (a, b) = r.to_client();
        let m = a.len() + b.len();
        to_client.extend_from_slice(a);
        to_client.extend_from_slice(b);
        r.wrote_to_client(m);
        r.after_writes().expect("scans after writes");
        if n == 0 && m == 0 {
            return (to_server, to_client);
        }
    }
}

/// The message tags in a byte stream.
pub(super) fn tags(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        out.push(bytes[0] as char);
        bytes = &bytes[1 + len..];
    }
    assert!(bytes.is_empty(), "a partial message in the stream");
    out
}

pub(super) fn build(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut b = BytesMut::new();
    f(&mut b);
    b.to_vec()
}

pub(super) fn query(sql: &str) -> Vec<u8> {
    build(|b| encode_query(sql, b))
}

pub(super) fn ready(status: TransactionStatus) -> Vec<u8> {
    build(|b| encode_ready_for_query(status, b))
}

pub(super) fn complete(tag: &str) -> Vec<u8> {
    build(|b| encode_command_complete(tag, b))
}

pub(super) fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Parse/Bind/Execute of an unnamed statement, optionally followed by Sync.
pub(super) fn extended(sql: &str, sync: bool) -> Vec<u8> {
    build(|b| {
        encode_parse("", sql, &[], b);
        encode_bind_text("", "", &[], b);
        encode_execute("", 0, b);
        if sync {
            encode_sync(b);
        }
    })
}

pub(super) fn replies(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const PARSE_COMPLETE: &[u8] = &[backend_tag::PARSE_COMPLETE, 0, 0, 0, 4];
const BIND_COMPLETE: &[u8] = &[backend_tag::BIND_COMPLETE, 0, 0, 0, 4];

#[test]
fn a_simple_query_releases_the_server_at_its_ready_for_query() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("select 1")).unwrap();
    let (to_server, _) = pump(&mut r);
    assert_eq!(tags(&to_server), "Q");
    assert!(r.outcome().is_none(), "the server owes its reply");
    let row = message(backend_tag::DATA_ROW, &[0, 1, 0, 0, 0, 1, b'1']);
    server_sends(&mut r, &[row, complete("SELECT 1")].concat());
    let (_, to_client) = pump(&mut r);
    assert_eq!(tags(&to_client), "DC");
    assert!(r.outcome().is_none(), "no ReadyForQuery yet");
    server_sends(&mut r, &ready(TransactionStatus::Idle));
    let (_, to_client) = pump(&mut r);
    assert_eq!(tags(&to_client), "Z");
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
    assert!(r.server_clean());
}

#[test]
fn a_pipeline_keeps_the_server_until_its_last_sync_is_answered() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    let batch = [extended("select 1", true), extended("select 2", true)].concat();
    client_sends(&mut r, &batch).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "PBESPBES");
    let first = replies(&[
        PARSE_COMPLETE,
        BIND_COMPLETE,
        &complete("SELECT 1"),
        &ready(TransactionStatus::Idle),
    ]);
    server_sends(&mut r, &first);
    assert_eq!(tags(&pump(&mut r).1), "12CZ");
    assert!(r.outcome().is_none(), "one Sync is still owed");
    server_sends(&mut r, &first);
    assert_eq!(tags(&pump(&mut r).1), "12CZ");
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn flush_without_sync_keeps_the_server_although_it_answered() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    let mut batch = extended("select 1", false);
    batch.extend(build(encode_flush));
    client_sends(&mut r, &batch).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "PBEH");
    server_sends(
        &mut r,
        &replies(&[PARSE_COMPLETE, BIND_COMPLETE, &complete("SELECT 1")]),
    );
    assert_eq!(tags(&pump(&mut r).1), "12C");
    assert!(
        r.outcome().is_none(),
        "unsynced: the batch may go on, the server is not the pool's"
    );
    client_sends(&mut r, &build(encode_sync)).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "S");
    server_sends(&mut r, &ready(TransactionStatus::Idle));
    pump(&mut r);
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn an_error_mid_batch_forgets_the_statement_it_named_and_ends_at_sync() {
    let mut w = World::new();
    {
        let mut r = w.relay(PoolMode::Transaction, true, true);
        let batch = build(|b| {
            encode_parse("s1", "selec 1", &[], b);
            encode_bind_text("", "s1", &[], b);
            encode_execute("", 0, b);
            encode_sync(b);
        });
        client_sends(&mut r, &batch).unwrap();
        let (to_server, _) = pump(&mut r);
        // The named Parse goes out under the pooler's name, the Bind rewritten to it.
        assert_eq!(tags(&to_server), "PBES");
        assert!(!to_server.windows(3).any(|w| w == b"s1\0"), "client's name");
        let error = message(
            backend_tag::ERROR_RESPONSE,
            b"SERROR\0C42601\0Msyntax error\0\0",
        );
        server_sends(&mut r, &replies(&[&error, &ready(TransactionStatus::Idle)]));
        assert_eq!(tags(&pump(&mut r).1), "EZ");
        assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
    }
    assert!(
        !w.statements.contains("s1"),
        "the failed Parse made nothing"
    );
    assert_eq!(w.server_prepared.len(), 0);
}

#[test]
fn a_named_statement_prepared_once_is_answered_by_the_pooler_the_second_time() {
    let mut w = World::new();
    let parse = build(|b| {
        encode_parse("s1", "select 1", &[], b);
        encode_sync(b);
    });
    {
        let mut r = w.relay(PoolMode::Transaction, true, true);
        client_sends(&mut r, &parse).unwrap();
        assert_eq!(tags(&pump(&mut r).0), "PS");
        server_sends(
            &mut r,
            &replies(&[PARSE_COMPLETE, &ready(TransactionStatus::Idle)]),
        );
        assert_eq!(tags(&pump(&mut r).1), "1Z");
        assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
    }
    // Another client prepares the same text on this server: no Parse reaches it.
    w.statements = ClientStatements::default();
    let mut r = w.relay(PoolMode::Transaction, true, true);
    client_sends(&mut r, &parse).unwrap();
    let (to_server, to_client) = pump(&mut r);
    assert_eq!(tags(&to_server), "S");
    assert_eq!(tags(&to_client), "1", "ParseComplete synthesized");
    server_sends(&mut r, &ready(TransactionStatus::Idle));
    assert_eq!(tags(&pump(&mut r).1), "Z");
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn copy_in_passes_its_data_and_ignores_syncs_inside_the_copy() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &extended("copy t from stdin", true)).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "PBES");
    let copy_in = message(backend_tag::COPY_IN, &[0, 0, 0]);
    server_sends(&mut r, &replies(&[PARSE_COMPLETE, BIND_COMPLETE, &copy_in]));
    assert_eq!(tags(&pump(&mut r).1), "12G");
    assert!(r.outcome().is_none(), "in COPY IN");
    let data = [
        message(b'd', b"1\n"),
        build(encode_sync),
        message(b'c', b""),
        build(encode_sync),
    ]
    .concat();
    client_sends(&mut r, &data).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "dScS");
    server_sends(
        &mut r,
        &replies(&[&complete("COPY 1"), &ready(TransactionStatus::Idle)]),
    );
    assert_eq!(tags(&pump(&mut r).1), "CZ");
    assert!(
        matches!(r.outcome(), Some(RelayEnd::Released)),
        "one ReadyForQuery owed, for the Sync after CopyDone"
    );
}

#[test]
fn a_message_type_the_protocol_does_not_define_is_refused_and_never_forwarded() {
    for tag in [0u8, 1, b'J', b'z', b'~'] {
        let mut w = World::new();
        let mut r = w.relay(PoolMode::Transaction, false, true);
        let end = client_sends(&mut r, &message(tag, b"junk")).unwrap_err();
        match end {
            RelayEnd::Fatal {
                notice,
                server_clean,
            } => {
                assert_eq!(notice.sqlstate, "08P01");
                assert!(
                    notice.message.contains("unknown pkt from client"),
                    "{notice:?}"
                );
                assert!(server_clean, "nothing reached the server");
            }
            other => panic!("{other:?}"),
        }
        let (inject, ready) = r.to_server();
        assert!(
            inject.is_empty() && ready.is_empty(),
            "bytes for the server"
        );
    }
}

#[test]
fn inside_copy_in_only_copy_messages_flush_and_sync_are_defined() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("copy t from stdin")).unwrap();
    pump(&mut r);
    server_sends(&mut r, &message(backend_tag::COPY_IN, &[0, 0, 0]));
    pump(&mut r);
    let end = client_sends(&mut r, &query("select 1")).unwrap_err();
    assert!(
        matches!(
            end,
            RelayEnd::Fatal {
                server_clean: false,
                ..
            }
        ),
        "{end:?}"
    );
}

#[test]
fn an_oversized_length_is_refused_at_the_header() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    // A Sync announcing 1 GiB: refused before any of its body arrives.
    let header = [b'S', 0x40, 0, 0, 0];
    let end = client_sends(&mut r, &header).unwrap_err();
    assert!(
        matches!(&end, RelayEnd::Fatal { notice, .. } if notice.message.contains("invalid message length")),
        "{end:?}"
    );
}

#[test]
fn a_transaction_block_keeps_the_server_until_the_server_is_idle_again() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("begin")).unwrap();
    pump(&mut r);
    server_sends(
        &mut r,
        &replies(&[&complete("BEGIN"), &ready(TransactionStatus::InTransaction)]),
    );
    pump(&mut r);
    assert!(r.outcome().is_none(), "in a transaction");
    assert!(!r.server_clean());
    client_sends(&mut r, &query("commit")).unwrap();
    pump(&mut r);
    server_sends(
        &mut r,
        &replies(&[&complete("COMMIT"), &ready(TransactionStatus::Idle)]),
    );
    pump(&mut r);
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn statement_mode_refuses_a_transaction_block() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Statement, false, true);
    client_sends(&mut r, &query("begin")).unwrap();
    pump(&mut r);
    r.server_wants(usize::MAX)
        .unwrap()
        .extend_from_slice(&replies(&[
            &complete("BEGIN"),
            &ready(TransactionStatus::InTransaction),
        ]));
    let end = r.read_from_server().unwrap_err();
    assert!(
        matches!(&end, RelayEnd::Fatal { notice, server_clean: false } if notice.sqlstate == "08P01"),
        "{end:?}"
    );
}

#[test]
fn terminate_ends_the_relay_without_reaching_the_server() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &build(encode_terminate)).unwrap();
    assert!(pump(&mut r).0.is_empty());
    assert!(matches!(
        r.outcome(),
        Some(RelayEnd::ClientGone {
            clean: true,
            eof: false
        })
    ));
}

#[test]
fn a_reply_cut_in_the_middle_keeps_the_server() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("select 1")).unwrap();
    pump(&mut r);
    let all = replies(&[&complete("SELECT 1"), &ready(TransactionStatus::Idle)]);
    // Everything but the ReadyForQuery's last byte.
    server_sends(&mut r, &all[..all.len() - 1]);
    pump(&mut r);
    assert!(r.outcome().is_none());
    assert!(!r.server_clean(), "a message is half-read");
    server_sends(&mut r, &all[all.len() - 1..]);
    pump(&mut r);
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn parameter_status_updates_both_sides_tracked_values() {
    let mut w = World::new();
    {
        let mut r = w.relay(PoolMode::Transaction, false, true);
        client_sends(&mut r, &query("set timezone = 'UTC'")).unwrap();
        pump(&mut r);
        let ps = message(backend_tag::PARAMETER_STATUS, b"TimeZone\0UTC\0");
        server_sends(
            &mut r,
            &replies(&[&complete("SET"), &ps, &ready(TransactionStatus::Idle)]),
        );
        assert_eq!(tags(&pump(&mut r).1), "CSZ");
        assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
    }
    assert_eq!(w.server_params.get("TimeZone"), Some("UTC"));
    assert_eq!(w.client_params.get("TimeZone"), Some("UTC"));
}

/// A client that pipelines more than copy messages behind a COPY, before the server's
/// CopyInResponse: the server ends the COPY at the first such message (an error), and answers
/// the Syncs after it, which the relay cannot tell from those it ignores inside the COPY. The
/// count of ReadyForQuery owed is then not trusted: the server is never called clean again (found
/// by the relay fuzzer: it was released with a ReadyForQuery still to come, for the next client).
#[test]
fn messages_pipelined_behind_a_copy_make_the_server_unsure() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    let mut batch = query("copy t from stdin");
    batch.extend(build(encode_sync));
    batch.extend(build(|b| encode_bind_text("", "", &[], b)));
    client_sends(&mut r, &batch).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "QSB");
    // The server: CopyInResponse, the Sync ignored in the COPY, the Bind fails it (ErrorResponse
    // and ReadyForQuery for the Query).
    let error = message(
        backend_tag::ERROR_RESPONSE,
        b"SERROR\0C08P01\0Munexpected message type 0x42 during COPY from stdin\0\0",
    );
    server_sends(
        &mut r,
        &replies(&[
            &message(backend_tag::COPY_IN, &[0, 0, 0]),
            &error,
            &ready(TransactionStatus::Idle),
        ]),
    );
    pump(&mut r);
    assert!(r.outcome().is_none());
    assert!(!r.server_clean());
    client_sends(&mut r, &build(encode_sync)).unwrap();
    pump(&mut r);
    server_sends(&mut r, &ready(TransactionStatus::Idle));
    pump(&mut r);
    assert!(r.outcome().is_none(), "never released");
    assert!(!r.server_clean());
}

/// The server ends a COPY by itself (an error in the data): its ReadyForQuery ends the relay.
#[test]
fn a_copy_the_server_failed_gives_the_server_back() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("copy t from stdin")).unwrap();
    pump(&mut r);
    server_sends(&mut r, &message(backend_tag::COPY_IN, &[0, 0, 0]));
    pump(&mut r);
    client_sends(&mut r, &message(b'd', b"not a number\n")).unwrap();
    pump(&mut r);
    let error = message(backend_tag::ERROR_RESPONSE, b"SERROR\0C22P02\0Mbad\0\0");
    server_sends(&mut r, &replies(&[&error, &ready(TransactionStatus::Idle)]));
    pump(&mut r);
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

/// An extended-protocol COPY whose Sync went out before the CopyInResponse: the server ignores
/// that Sync inside the COPY, so after the copy the batch is still open (its CommandComplete to
/// come, an implicit transaction) until the next Sync (found by the relay fuzzer: the server was
/// released with the COPY's CommandComplete unread).
#[test]
fn a_sync_the_copy_swallowed_leaves_the_batch_open() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    let mut batch = extended("copy t from stdin", true);
    batch.extend(message(b'c', b""));
    client_sends(&mut r, &batch).unwrap();
    assert_eq!(tags(&pump(&mut r).0), "PBESc");
    server_sends(
        &mut r,
        &replies(&[
            PARSE_COMPLETE,
            BIND_COMPLETE,
            &message(backend_tag::COPY_IN, &[0, 0, 0]),
        ]),
    );
    pump(&mut r);
    assert!(r.outcome().is_none(), "the COPY's batch is still open");
    server_sends(&mut r, &complete("COPY 0"));
    pump(&mut r);
    assert!(
        r.outcome().is_none(),
        "no Sync has reached the server since"
    );
    client_sends(&mut r, &build(encode_sync)).unwrap();
    pump(&mut r);
    server_sends(&mut r, &ready(TransactionStatus::Idle));
    pump(&mut r);
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn a_statement_name_never_prepared_gets_postgresqls_error_in_its_place_in_the_batch() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, true, true);
    let batch = build(|b| {
        encode_parse("s1", "select 1", &[], b);
        encode_bind_text("", "nope", &[], b);
        encode_execute("", 0, b);
        encode_sync(b);
    });
    client_sends(&mut r, &batch).unwrap();
    let (to_server, _) = pump(&mut r);
    // The Bind goes out as a stand-in naming a statement no server has: the server skips the
    // rest of the batch itself, as it would have for the client's name.
    assert_eq!(tags(&to_server), "PBES");
    assert!(to_server.windows(14).any(|w| w == b"sluice_refused"));
    assert!(!to_server.windows(4).any(|w| w == b"nope"), "client's name");
    let error = message(
        backend_tag::ERROR_RESPONSE,
        b"SERROR\0C26000\0Mprepared statement \"sluice_refused\" does not exist\0\0",
    );
    server_sends(
        &mut r,
        &replies(&[PARSE_COMPLETE, &error, &ready(TransactionStatus::Idle)]),
    );
    let (_, to_client) = pump(&mut r);
    assert_eq!(tags(&to_client), "1EZ");
    let text = String::from_utf8_lossy(&to_client);
    assert!(
        text.contains("prepared statement \"nope\" does not exist") && text.contains("26000"),
        "{text}"
    );
    assert!(!text.contains("sluice_refused"));
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
}

#[test]
fn a_statement_name_longer_than_postgresqls_small_message_limit_is_rewritten_not_refused() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Statement, true, true);
    let name = "a".repeat(16 * 1024);
    let batch = build(|b| {
        encode_parse(&name, "select 1", &[], b);
        encode_describe(b'S', &name, b);
        encode_sync(b);
    });
    // A 16 KiB Describe would make PostgreSQL hang up, but the server gets the pooler's name.
    client_sends(&mut r, &batch).unwrap();
    let (to_server, _) = pump(&mut r);
    assert_eq!(tags(&to_server), "PDS");
    assert!(
        to_server.len() < 100,
        "the client's name reached the server"
    );
}

#[test]
fn a_describe_passed_through_unchanged_keeps_postgresqls_limit() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Statement, true, true);
    let portal = "p".repeat(16 * 1024);
    let end = client_sends(&mut r, &build(|b| encode_describe(b'P', &portal, b))).unwrap_err();
    assert!(
        matches!(&end, RelayEnd::Fatal { notice, .. } if notice.message.contains("invalid message length")),
        "{end:?}"
    );
}

#[test]
fn parse_and_bind_counts_are_those_of_the_statements_the_pooler_rewrites() {
    let mut w = World::new();
    {
        let mut r = w.relay(PoolMode::Transaction, true, true);
        let batch = build(|b| {
            encode_parse("", "select 1", &[], b);
            encode_bind_text("", "", &[], b);
            encode_parse("s1", "select 2", &[], b);
            encode_bind_text("", "s1", &[], b);
            encode_bind_text("", "s1", &[], b);
            encode_sync(b);
        });
        client_sends(&mut r, &batch).unwrap();
        pump(&mut r);
    }
    let s = w.stats.snapshot();
    // The unnamed Parse and Bind pass through uncounted, as in PgBouncer.
    assert_eq!(
        (s.client_parse_count, s.server_parse_count, s.bind_count),
        (1, 1, 2)
    );
    // Without rewriting (max_prepared_statements = 0) nothing is counted.
    let mut w = World::new();
    {
        let mut r = w.relay(PoolMode::Transaction, false, true);
        client_sends(&mut r, &extended("select 1", true)).unwrap();
        pump(&mut r);
    }
    let s = w.stats.snapshot();
    assert_eq!(
        (s.client_parse_count, s.server_parse_count, s.bind_count),
        (0, 0, 0)
    );
}

/// A sequence read on a server whose values are another client's (`sequences_foreign`), with
/// the session's SETs already sent ahead: `DISCARD SEQUENCES` goes in front of everything, both
/// leading queries' replies are dropped, and the client's SET commits with its own
/// ReadyForQuery (the tracker's request numbers moved back by one).
#[test]
fn a_sequence_read_on_a_foreign_server_goes_behind_discard_sequences() {
    let mut w = World::new();
    w.scratch.send_ahead("SET work_mem = '5MB'");
    w.scratch.sequences_foreign();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    let mut sent = query("SET app.x = 'a'");
    sent.extend(query("SELECT lastval()"));
    client_sends(&mut r, &sent).unwrap();
    let (to_server, _) = pump(&mut r);
    assert_eq!(tags(&to_server), "QQQQ");
    assert_eq!(
        &to_server[..query("DISCARD SEQUENCES").len()],
        &query("DISCARD SEQUENCES")[..]
    );
    let idle = ready(TransactionStatus::Idle);
    server_sends(
        &mut r,
        &replies(&[
            &complete("DISCARD SEQUENCES"),
            &idle,
            &complete("SET"),
            &idle,
        ]),
    );
    let (_, to_client) = pump(&mut r);
    assert_eq!(tags(&to_client), "", "the pooler's replies are dropped");
    server_sends(&mut r, &replies(&[&complete("SET"), &idle]));
    let (_, to_client) = pump(&mut r);
    assert_eq!(tags(&to_client), "CZ");
    let row = message(backend_tag::DATA_ROW, &[0, 1, 0, 0, 0, 1, b'7']);
    server_sends(&mut r, &replies(&[&row, &complete("SELECT 1"), &idle]));
    let (_, to_client) = pump(&mut r);
    assert_eq!(tags(&to_client), "DCZ");
    assert!(matches!(r.outcome(), Some(RelayEnd::Released)));
    drop(r);
    assert_eq!(
        w.stats
            .sequence_discards
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let keys: Vec<_> = w
        .tracker
        .tracked_sets()
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, ["app.x"], "the client's SET committed");
}

/// Once anything of the relay went to the server, a read is forwarded as it is (an earlier
/// statement of the transaction may have made the value); on a server whose values may be the
/// client's, nothing is added either.
#[test]
fn a_sequence_read_after_the_first_write_or_on_its_own_server_is_forwarded() {
    let mut w = World::new();
    w.scratch.sequences_foreign();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("BEGIN")).unwrap();
    let (to_server, _) = pump(&mut r);
    assert_eq!(tags(&to_server), "Q");
    server_sends(
        &mut r,
        &replies(&[&complete("BEGIN"), &ready(TransactionStatus::InTransaction)]),
    );
    client_sends(&mut r, &query("SELECT lastval()")).unwrap();
    let (to_server, _) = pump(&mut r);
    assert_eq!(to_server, query("SELECT lastval()"));
    drop(r);
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("SELECT lastval()")).unwrap();
    let (to_server, _) = pump(&mut r);
    assert_eq!(to_server, query("SELECT lastval()"));
}
