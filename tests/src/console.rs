//! A raw admin-console client for e2e tests: logs in (trust or cleartext password) over TCP and runs
//! simple queries, returning column names with their wire type OIDs, rows and the command tag.

use std::collections::HashMap;
use std::time::Duration;

use crate::raw::{error_fields, RawConn};

const WAIT: Duration = Duration::from_secs(5);

/// One query's answer.
#[derive(Debug, Clone, Default)]
pub struct ConsoleResult {
    /// (name, type OID) per column, from RowDescription.
    pub columns: Vec<(String, u32)>,
    pub rows: Vec<Vec<Option<String>>>,
    /// CommandComplete tag.
    pub tag: String,
    /// NoticeResponse messages ('M' field).
    pub notices: Vec<String>,
    /// Their DETAIL fields ('D'; empty where a notice has none), in the same order.
    pub notice_details: Vec<String>,
}

impl ConsoleResult {
    pub fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Value of `col` in the row whose first column is `key`.
    pub fn get(&self, key: &str, col: &str) -> Option<String> {
        let i = self.columns.iter().position(|(n, _)| n == col)?;
        self.rows
            .iter()
            .find(|r| r.first().and_then(|v| v.as_deref()) == Some(key))?
            .get(i)?
            .clone()
    }

    /// Value of `col` in the first row matching `pred` on the whole row.
    pub fn find(&self, col: &str, pred: impl Fn(&[Option<String>]) -> bool) -> Option<String> {
        let i = self.columns.iter().position(|(n, _)| n == col)?;
        self.rows.iter().find(|r| pred(r))?.get(i)?.clone()
    }

    pub fn col(&self, name: &str) -> usize {
        self.columns
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.names()))
    }
}

pub struct Console {
    conn: RawConn,
}

fn cstr(body: &[u8], pos: &mut usize) -> String {
    let end = body[*pos..]
        .iter()
        .position(|&b| b == 0)
        .map_or(body.len(), |e| *pos + e);
    let s = String::from_utf8_lossy(&body[*pos..end]).into_owned();
    *pos = end + 1;
    s
}

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

impl Console {
    /// Log in to database `pgbouncer` on 127.0.0.1:`port`. Err = the server's error fields.
    pub async fn connect(
        port: u16,
        user: &str,
        password: &str,
    ) -> Result<Console, HashMap<u8, String>> {
        let mut conn = RawConn::connect(port).await;
        conn.send(&RawConn::startup_packet(&[
            ("user", user),
            ("database", "pgbouncer"),
        ]))
        .await;
        loop {
            let (tag, body) = conn
                .read_message(WAIT)
                .await
                .expect("console login: no answer");
            match tag {
                b'R' if body[..4] == [0, 0, 0, 3] => {
                    let mut p = password.as_bytes().to_vec();
                    p.push(0);
                    conn.send(&msg(b'p', &p)).await;
                }
                b'R' | b'S' | b'K' => {}
                b'Z' => return Ok(Console { conn }),
                b'E' => return Err(error_fields(&body)),
                other => panic!("console login: unexpected message {}", other as char),
            }
        }
    }

    /// Send raw bytes (e.g. an extended-protocol message).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.conn.send(bytes).await;
    }

    pub async fn read_raw(&mut self) -> Option<(u8, Vec<u8>)> {
        self.conn.read_message(WAIT).await
    }

    /// Run one simple query. Err = the ErrorResponse fields (the session stays usable).
    pub async fn query(&mut self, sql: &str) -> Result<ConsoleResult, HashMap<u8, String>> {
        self.query_timeout(sql, WAIT).await
    }

    pub async fn query_timeout(
        &mut self,
        sql: &str,
        timeout: Duration,
    ) -> Result<ConsoleResult, HashMap<u8, String>> {
        let mut q = sql.as_bytes().to_vec();
        q.push(0);
        self.conn.send(&msg(b'Q', &q)).await;
        let mut res = ConsoleResult::default();
        let mut err = None;
        loop {
            let (tag, body) = self
                .conn
                .read_message(timeout)
                .await
                .unwrap_or_else(|| panic!("no answer to {sql:?} within {timeout:?}"));
            match tag {
                b'T' => {
                    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
                    let mut pos = 2;
                    for _ in 0..n {
                        let name = cstr(&body, &mut pos);
                        let oid = u32::from_be_bytes(body[pos + 6..pos + 10].try_into().unwrap());
                        pos += 18;
                        res.columns.push((name, oid));
                    }
                }
                b'D' => {
                    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
                    let mut pos = 2;
                    let mut row = Vec::with_capacity(n);
                    for _ in 0..n {
                        let len = i32::from_be_bytes(body[pos..pos + 4].try_into().unwrap());
                        pos += 4;
                        if len < 0 {
                            row.push(None);
                        } else {
                            let end = pos + len as usize;
                            row.push(Some(String::from_utf8_lossy(&body[pos..end]).into_owned()));
                            pos = end;
                        }
                    }
                    res.rows.push(row);
                }
                b'C' => res.tag = cstr(&body, &mut 0),
                b'N' => {
                    let mut f = error_fields(&body);
                    res.notices.push(f.remove(&b'M').unwrap_or_default());
                    res.notice_details.push(f.remove(&b'D').unwrap_or_default());
                }
                b'E' => err = Some(error_fields(&body)),
                b'I' => {}
                b'Z' => return err.map_or(Ok(res), Err),
                other => panic!("unexpected message {} after {sql:?}", other as char),
            }
        }
    }
}
