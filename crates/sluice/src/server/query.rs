//! Pooler-run simple queries on a server (reset, check, SET of tracked parameters, connect_query):
//! send, consume the whole answer through ReadyForQuery, keep the parameter cache current.

use bytes::{BufMut, BytesMut};
use sluice_protocol::{
    backend_tag, decode_data_row, decode_error_fields, decode_parameter_status,
    decode_ready_for_query, encode_query, ErrorFields,
};
use tokio::io::AsyncWriteExt;

use super::ServerConn;
use crate::error::ServerError;
use crate::net::framed::read_message;

/// Read a pooler-run query's whole answer, through its ReadyForQuery: the one place that knows what
/// such an answer may hold. ParameterStatus keeps the server's parameter cache current; DISCARD
/// ALL / DEALLOCATE ALL empty its prepared-statement cache; a COPY in either direction is refused
/// (the server must then be closed); NotificationResponse messages go to `notifications` when
/// given; each DataRow body goes to `on_row`, which may report a failure of its own. After
/// `Err(Query)` the server is in sync (ReadyForQuery consumed); after any other `Err` it must be
/// closed.
pub async fn drain_to_ready(
    conn: &mut ServerConn,
    max_len: usize,
    mut notifications: Option<&mut BytesMut>,
    mut on_row: impl FnMut(&[u8]) -> Option<ErrorFields>,
) -> Result<(), ServerError> {
    let mut failure: Option<ErrorFields> = None;
    loop {
        let (tag, body) = read_message(&mut conn.stream, &mut conn.rbuf, max_len).await?;
        match tag {
            backend_tag::READY_FOR_QUERY => {
                conn.status = decode_ready_for_query(&body)?;
                return match failure {
                    Some(f) => Err(ServerError::Query(Box::new(f))),
                    None => Ok(()),
                };
            }
            backend_tag::PARAMETER_STATUS => {
                let (k, v) = decode_parameter_status(&body)?;
                conn.params.set(k, v);
            }
            backend_tag::ERROR_RESPONSE => failure = Some(decode_error_fields(&body)?),
            backend_tag::COMMAND_COMPLETE
                if &body[..] == b"DISCARD ALL\0" || &body[..] == b"DEALLOCATE ALL\0" =>
            {
                conn.prepared.clear();
            }
            backend_tag::COPY_IN | backend_tag::COPY_OUT | backend_tag::COPY_BOTH => {
                return Err(ServerError::Unexpected(
                    "COPY started by a pooler query".into(),
                ))
            }
            backend_tag::NOTIFICATION => {
                if let Some(n) = notifications.as_deref_mut() {
                    n.put_u8(tag);
                    n.put_u32(body.len() as u32 + 4);
                    n.extend_from_slice(&body);
                }
            }
            backend_tag::DATA_ROW => {
                if let Some(f) = on_row(&body) {
                    failure.get_or_insert(f);
                }
            }
            _ => {}
        }
    }
}

/// Run `sql` and return the first column of its first row (None for no row or NULL), plus any
/// NotificationResponse messages that arrived meanwhile (whole, to pass on to the client).
pub async fn run_scalar(
    conn: &mut ServerConn,
    sql: &str,
    max_len: usize,
    notifications: &mut BytesMut,
) -> Result<Option<String>, ServerError> {
    send_query(conn, sql).await?;
    let mut value = None;
    let mut first = true;
    drain_to_ready(conn, max_len, Some(notifications), |body| {
        if std::mem::take(&mut first) {
            if let Ok(row) = decode_data_row(body) {
                value = row
                    .first()
                    .cloned()
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
            }
        }
        None
    })
    .await?;
    Ok(value)
}

/// Run `sql`; Ok when it completed without error. After Err(Query) the server is still in sync
/// (ReadyForQuery consumed); after any other Err it must be closed.
pub async fn run_simple(
    conn: &mut ServerConn,
    sql: &str,
    max_len: usize,
) -> Result<(), ServerError> {
    send_query(conn, sql).await?;
    drain_to_ready(conn, max_len, None, |_| None).await
}

/// Send `sql` as a simple Query (its answer is read by `drain_to_ready`).
pub(crate) async fn send_query(conn: &mut ServerConn, sql: &str) -> Result<(), ServerError> {
    let mut out = BytesMut::with_capacity(sql.len() + 8);
    encode_query(sql, &mut out);
    conn.stream.write_all(&out).await?;
    Ok(())
}

/// Run `sql` and return every column of its first row as text (empty for no row), for the
/// pooler's own look at a server (its role, its WAL position).
pub async fn run_row(
    conn: &mut ServerConn,
    sql: &str,
    max_len: usize,
) -> Result<Vec<Option<String>>, ServerError> {
    send_query(conn, sql).await?;
    let mut values = Vec::new();
    let mut first = true;
    drain_to_ready(conn, max_len, None, |body| {
        if std::mem::take(&mut first) {
            if let Ok(row) = decode_data_row(body) {
                values = row
                    .into_iter()
                    .map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned()))
                    .collect();
            }
        }
        None
    })
    .await?;
    Ok(values)
}
