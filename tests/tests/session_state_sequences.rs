//! Sequence values in transaction pooling: `currval()` and `lastval()` never return another
//! client's value (docs/session-state.md, "Sequence values").

use tokio_postgres::SimpleQueryMessage;

mod session_state_common;
use session_state_common::{start, value};

/// The code of a failed query.
fn code_of(r: Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>, what: &str) -> String {
    match r {
        Ok(rows) => panic!("{what}: answered {:?}", rows_of(&rows)),
        Err(e) => e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| panic!("{what}: {e:?}")),
    }
}

fn rows_of(msgs: &[SimpleQueryMessage]) -> Vec<String> {
    msgs.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("").to_string()),
            _ => None,
        })
        .collect()
}

/// currval() and lastval() read what the session's last nextval() left, and in transaction
/// pooling the session is a server's that clients share: PgBouncer 1.25.2 answers A's
/// `SELECT lastval()` below with B's id. A read on a server whose last work was another client's
/// (or after the client ran work elsewhere) goes behind a DISCARD SEQUENCES: the client gets its
/// own value, or PostgreSQL's 55000 ("not yet defined in this session"), never another's.
#[tokio::test]
async fn a_sequence_read_never_returns_another_clients_value() {
    let port = sluice_e2e::free_port();
    let s = start(&format!(
        "default_pool_size = 1\n\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{port}"
    ));
    let a = s.connect("trust_user", "", "app").await.unwrap();
    let b = s.connect("trust_user", "", "app").await.unwrap();
    a.batch_execute(
        "DROP TABLE IF EXISTS state_seq_reads; \
         CREATE TABLE state_seq_reads(id serial PRIMARY KEY, who text)",
    )
    .await
    .unwrap();
    let insert =
        |who: &str| format!("INSERT INTO state_seq_reads(who) VALUES ('{who}') RETURNING id");
    let seq = "'state_seq_reads_id_seq'";

    // A's insert, then its read on the same server with nobody in between: its own value.
    let a1 = value(&a, &insert("a1")).await;
    assert_eq!(value(&a, "SELECT lastval()").await, a1);
    assert_eq!(value(&a, &format!("SELECT currval({seq})")).await, a1);

    // B inserts on the only server: what A would read there is B's.
    let b1 = value(&b, &insert("b1")).await;
    assert_ne!(b1, a1);
    let code = code_of(a.simple_query("SELECT lastval()").await, "lastval after B");
    assert_eq!(code, "55000", "not B's {b1}");
    let _ = value(&b, &insert("b2")).await;
    let code = code_of(
        a.simple_query(&format!("SELECT currval({seq})")).await,
        "currval after B",
    );
    assert_eq!(code, "55000");

    // A prepared statement (prepared in a round trip of its own, run in the next): the
    // preparation ran nothing, so the value on the server is still B's.
    let _ = value(&b, &insert("b3")).await;
    let err = a
        .query_one(
            "SELECT currval($1::text::regclass)::text",
            &[&"state_seq_reads_id_seq"],
        )
        .await
        .expect_err("B's value");
    assert_eq!(err.code().map(|c| c.code()), Some("55000"), "{err:?}");

    // A statement that makes its own value reads it, as does a request that inserts first.
    let _ = value(&b, &insert("b4")).await;
    assert_eq!(
        value(
            &a,
            &format!("SELECT (nextval({seq}) = currval({seq}))::text")
        )
        .await,
        "true"
    );
    let _ = value(&b, &insert("b5")).await;
    let rows = a
        .simple_query(
            "INSERT INTO state_seq_reads(who) VALUES ('a2'); \
             SELECT who FROM state_seq_reads WHERE id = lastval()",
        )
        .await
        .unwrap();
    assert_eq!(rows_of(&rows), ["a2"]);
    // A transaction that inserts before it reads: nothing discarded mid-way.
    let _ = value(&b, &insert("b6")).await;
    a.batch_execute("BEGIN").await.unwrap();
    let a3 = value(&a, &insert("a3")).await;
    assert_eq!(value(&a, "SELECT lastval()").await, a3);
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        value(&a, "SELECT lastval()").await,
        a3,
        "its own, after COMMIT"
    );
    // Counted: the two reads after B, the prepared one, and the two requests that made their own.
    let discards = sluice_e2e::sample(
        &sluice_e2e::metrics(port).await,
        "sluice_session_sequence_discards_total{database=\"app\"}",
    );
    assert_eq!(discards, 5.0);
}
