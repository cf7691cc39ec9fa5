//! `RelayCore` when its server is lost under it (`lost.rs`), over recorded message streams like
//! `core_tests.rs` (whose stream helpers it uses): what the client is told, and the state it is left in.

use bytes::BytesMut;
use sluice_config::PoolMode;
use sluice_protocol::{backend_tag, encode_parse, encode_sync, TransactionStatus};

use super::core_tests::*;
use super::sim::World;
use super::RelayEnd;

/// The server was lost: what the client gets and the state it is left in.
fn lost(end: RelayEnd) -> Box<super::lost::ServerLost> {
    match end {
        RelayEnd::ServerLost(l) => l,
        other => panic!("expected ServerLost, got {other:?}"),
    }
}

/// The message tags of a reply with each ReadyForQuery's status and each error's SQLSTATE.
fn spelled(mut b: &[u8]) -> String {
    let mut s = String::new();
    while !b.is_empty() {
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        let body = &b[5..1 + len];
        s.push(b[0] as char);
        if b[0] == b'Z' {
            s.push_str(&format!("({})", body[0] as char));
        }
        if b[0] == b'E' {
            let f = sluice_protocol::decode_error_fields(body).unwrap();
            assert_eq!(f.severity, "ERROR", "the client keeps its connection");
            s.push_str(&format!("({})", f.code));
        }
        s.push(' ');
        b = &b[1 + len..];
    }
    s.trim_end().to_string()
}

fn fatal(code: &str, text: &str) -> Vec<u8> {
    build(|b| {
        sluice_protocol::encode_error(sluice_protocol::Severity::Fatal, code, text, None, None, b)
    })
}

/// (statements answered before the running one, the running one, its outcome: reply, still
/// in a failed block after it)
#[test]
fn a_lost_request_gets_one_error_chosen_by_what_it_may_have_done() {
    let table: &[(&[&str], &str, &str, bool)] = &[
        // Autocommit: it may have committed.
        (&[], "SELECT pg_sleep(5)", "E(08007) Z(I)", false),
        (&[], "INSERT INTO t VALUES (1)", "E(08007) Z(I)", false),
        // Inside a block: rolled back with the server; the block is left failed.
        (
            &["BEGIN"],
            "INSERT INTO t VALUES (1)",
            "E(08006) Z(E)",
            true,
        ),
        (&["BEGIN"], "SELECT 1; SELECT 2", "E(08006) Z(E)", true),
        // Ending the block: unknown for a commit, over either way.
        (&["BEGIN"], "COMMIT", "E(08007) Z(I)", false),
        (&["BEGIN"], "end", "E(08007) Z(I)", false),
        (
            &["BEGIN"],
            "INSERT INTO t VALUES (1); COMMIT",
            "E(08007) Z(I)",
            false,
        ),
        (
            &["BEGIN"],
            "PREPARE TRANSACTION 'g'",
            "E(08007) Z(I)",
            false,
        ),
        (&["BEGIN"], "ROLLBACK", "E(08006) Z(I)", false),
    ];
    for (before, sql, want, failed) in table {
        let mut w = World::new();
        let mut r = w.relay(PoolMode::Transaction, false, true);
        for b in *before {
            client_sends(&mut r, &query(b)).unwrap();
            pump(&mut r);
            server_sends(
                &mut r,
                &[complete(b), ready(TransactionStatus::InTransaction)].concat(),
            );
            pump(&mut r);
        }
        client_sends(&mut r, &query(sql)).unwrap();
        pump(&mut r);
        let l = lost(r.server_lost("test"));
        assert_eq!(spelled(&l.reply), *want, "{before:?} {sql}");
        assert_eq!(l.state.in_failed_tx(), *failed, "{sql}");
        assert_eq!(l.state.is_done(), !failed, "{sql}");
        assert!(l.notice.message.contains("sim:5432"), "{:?}", l.notice);
    }
}

#[test]
fn a_server_fatal_is_not_forwarded_and_what_came_before_it_is() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("SELECT x FROM big")).unwrap();
    pump(&mut r);
    let row = message(backend_tag::DATA_ROW, &[0, 1, 0, 0, 0, 1, b'1']);
    r.server_wants(usize::MAX)
        .unwrap()
        .extend_from_slice(&[row, fatal("57P01", "terminating connection")].concat());
    let l = lost(r.read_from_server().unwrap_err());
    assert_eq!(spelled(&l.reply), "D E(08007) Z(I)");
    assert!(l
        .notice
        .message
        .contains("terminating connection (SQLSTATE 57P01)"));
    drop(r);
    // An ordinary error is forwarded as ever.
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("SELECT 1/0")).unwrap();
    pump(&mut r);
    let err = build(|b| {
        sluice_protocol::encode_error(
            sluice_protocol::Severity::Error,
            "22012",
            "x",
            None,
            None,
            b,
        )
    });
    server_sends(&mut r, &[err, ready(TransactionStatus::Idle)].concat());
    assert_eq!(tags(&pump(&mut r).1), "EZ");
}

#[test]
fn requests_pipelined_behind_the_lost_one_each_get_their_error() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, true, true);
    client_sends(&mut r, &query("BEGIN")).unwrap();
    pump(&mut r);
    server_sends(
        &mut r,
        &[complete("BEGIN"), ready(TransactionStatus::InTransaction)].concat(),
    );
    pump(&mut r);
    let batch = [
        extended("select 1", true),
        extended("select 2", true),
        extended("select 3", false),
    ];
    client_sends(&mut r, &batch.concat()).unwrap();
    pump(&mut r);
    let l = lost(r.server_lost("test"));
    // The running batch gets the loss, the ones behind it 25P02 (the block failed), and the
    // unsynced tail its error with the rest skipped to its Sync.
    assert_eq!(spelled(&l.reply), "E(08006) Z(E) E(25P02) Z(E) E(25P02)");
    assert!(!l.state.is_done() && l.state.in_failed_tx());
}

#[test]
fn idle_in_a_block_the_loss_is_told_at_the_next_statement() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("BEGIN")).unwrap();
    pump(&mut r);
    server_sends(
        &mut r,
        &[complete("BEGIN"), ready(TransactionStatus::InTransaction)].concat(),
    );
    pump(&mut r);
    let mut l = lost(r.server_lost("test"));
    assert_eq!(spelled(&l.reply), "", "nothing was asked");
    let mut out = BytesMut::new();
    let q = query("SELECT 1");
    l.state.on_message(b'Q', Some(&q[5..]), None, &mut out);
    assert_eq!(spelled(&out), "E(08006) Z(E)");
}

#[test]
fn a_lost_server_in_session_mode_or_mid_message_ends_the_client() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Session, false, true);
    client_sends(&mut r, &query("SELECT 1")).unwrap();
    pump(&mut r);
    assert!(matches!(r.server_lost("x"), RelayEnd::ServerGone(_)));
    drop(r);
    // A DataRow half-written to the client: nothing can follow it.
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("SELECT 1")).unwrap();
    pump(&mut r);
    let row = message(backend_tag::DATA_ROW, &[0; 200]);
    r.server_wants(usize::MAX)
        .unwrap()
        .extend_from_slice(&row[..50]);
    r.read_from_server().unwrap();
    pump(&mut r);
    assert!(matches!(r.server_lost("x"), RelayEnd::ServerGone(_)));
}

#[test]
fn a_lost_copy_in_drops_the_clients_data_and_statements_not_yet_parsed() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("COPY t FROM STDIN")).unwrap();
    pump(&mut r);
    server_sends(&mut r, &message(backend_tag::COPY_IN, &[0, 0, 0]));
    pump(&mut r);
    // Half a CopyData went out: its rest is dropped as it arrives.
    let data = message(b'd', &[b'x'; 100]);
    client_sends(&mut r, &data[..50]).unwrap();
    pump(&mut r);
    let l = lost(r.server_lost("test"));
    assert_eq!(spelled(&l.reply), "E(08007) Z(I)");
    assert_eq!(l.client_skip, 55);
    assert!(!l.state.is_done(), "the copy's data is still coming");
    drop(r);
    // A named Parse whose ParseComplete never came: the client's name is forgotten.
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, true, true);
    let parse = build(|b| {
        encode_parse("s1", "select 1", &[], b);
        encode_sync(b);
    });
    client_sends(&mut r, &parse).unwrap();
    pump(&mut r);
    let l = lost(r.server_lost("test"));
    // (A Parse alone runs nothing: 08006.)
    assert_eq!(spelled(&l.reply), "E(08006) Z(I)");
    drop(r);
    assert!(w.statements.get("s1").is_none());
}

/// Where the client's stream stands after each write, for the FATAL that may or may not follow a
/// relay's end (`RelayScratch::client_mid_message`): inside a row after a short write, at its end
/// after the rest, inside the next when a TLS layer took part of it unreported, and inside a row
/// whose rest has not arrived after writing all there is.
#[test]
fn the_clients_place_in_the_stream_is_known_after_every_write() {
    let mut w = World::new();
    let mut r = w.relay(PoolMode::Transaction, false, true);
    client_sends(&mut r, &query("SELECT 1")).unwrap();
    pump(&mut r);
    let row = message(backend_tag::DATA_ROW, &[0; 200]);
    let buf = r.server_wants(usize::MAX).unwrap();
    buf.extend_from_slice(&row);
    buf.extend_from_slice(&row[..50]);
    r.read_from_server().unwrap();
    let mid = |r: &super::core::RelayCore<'_>, unreported| {
        r.scratch.client_mid_message(&r.server.rbuf[..], unreported)
    };
    assert!(!mid(&r, 0), "nothing written yet");
    r.wrote_to_client(100);
    assert!(mid(&r, 0), "100 bytes into the first row");
    assert!(
        !mid(&r, row.len() - 100),
        "the TLS layer took the rest of it"
    );
    r.wrote_to_client(row.len() - 100);
    assert!(!mid(&r, 0), "the first row whole");
    assert!(mid(&r, 20), "the TLS layer took 20 bytes of the second");
    r.wrote_to_client(50);
    assert!(mid(&r, 0), "all there is of the second row");
    let buf = r.server_wants(usize::MAX).unwrap();
    buf.extend_from_slice(&row[50..]);
    r.read_from_server().unwrap();
    r.wrote_to_client(row.len() - 50);
    assert!(!mid(&r, 0), "the second row whole");
}
