//! Pooler-run simple queries on a server (reset, check, SET of tracked parameters, connect_query):
//! send, consume the whole answer through ReadyForQuery, keep the parameter cache current.

use bytes::{BufMut, BytesMut};
use sluice_protocol::{
    backend_tag, decode_data_row, decode_error_fields, decode_parameter_status,
    decode_ready_for_query, encode_query,
};
use tokio::io::AsyncWriteExt;

use super::ServerConn;
use crate::error::ServerError;
use crate::net::framed::read_message;

/// Run `sql` and return the first column of its first row (None for no row or NULL), plus any
/// NotificationResponse messages that arrived meanwhile (whole, to pass on to the client).
pub async fn run_scalar(
    conn: &mut ServerConn,
    sql: &str,
    max_len: usize,
    notifications: &mut BytesMut,
) -> Result<Option<String>, ServerError> {
    let mut out = BytesMut::with_capacity(sql.len() + 8);
    encode_query(sql, &mut out);
    conn.stream.write_all(&out).await?;
    let mut failure = None;
    let mut value = None;
    loop {
        let (tag, body) = read_message(&mut conn.stream, &mut conn.rbuf, max_len).await?;
        match tag {
            backend_tag::READY_FOR_QUERY => {
                conn.status = decode_ready_for_query(&body)?;
                return match failure {
                    Some(f) => Err(ServerError::Query(Box::new(f))),
                    None => Ok(value),
                };
            }
            backend_tag::NOTIFICATION => {
                notifications.put_u8(tag);
                notifications.put_u32(body.len() as u32 + 4);
                notifications.extend_from_slice(&body);
            }
            backend_tag::DATA_ROW if value.is_none() => {
                if let Ok(row) = decode_data_row(&body) {
                    value = row
                        .first()
                        .cloned()
                        .flatten()
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                }
            }
            backend_tag::ERROR_RESPONSE => failure = Some(decode_error_fields(&body)?),
            _ => {}
        }
    }
}

/// Run `sql`; Ok when it completed without error. After Err(Query) the server is still in sync
/// (ReadyForQuery consumed); after any other Err it must be closed.
pub async fn run_simple(
    conn: &mut ServerConn,
    sql: &str,
    max_len: usize,
) -> Result<(), ServerError> {
    let mut out = BytesMut::with_capacity(sql.len() + 8);
    encode_query(sql, &mut out);
    conn.stream.write_all(&out).await?;
    let mut failure = None;
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
            backend_tag::COPY_IN | backend_tag::COPY_BOTH => {
                return Err(ServerError::Unexpected(
                    "COPY started by a pooler query".into(),
                ))
            }
            _ => {}
        }
    }
}
