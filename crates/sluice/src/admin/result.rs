//! Result sets of the admin console: typed columns (PgBouncer's wire types), text rows, and their
//! encoding as RowDescription + DataRow* + CommandComplete.

use std::time::SystemTime;

use bytes::BytesMut;
use sluice_protocol::{
    encode_command_complete, encode_data_row, encode_row_description, oid, FieldDesc,
};

/// Wire type of a column, as PgBouncer declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    Text,
    Int4,
    Int8,
    Numeric,
    /// Timestamps are sent as text (`YYYY-MM-DD HH:MM:SS UTC`).
    Time,
    Bytea,
}

impl Col {
    fn wire(self) -> (u32, i16) {
        match self {
            Col::Text | Col::Time => (oid::TEXT, -1),
            Col::Int4 => (oid::INT4, 4),
            Col::Int8 => (oid::INT8, 8),
            Col::Numeric => (oid::NUMERIC, -1),
            Col::Bytea => (oid::BYTEA, -1),
        }
    }
}

/// One value; `None` is SQL NULL.
pub type Value = Option<String>;

pub fn text(s: impl Into<String>) -> Value {
    Some(s.into())
}

pub fn num<T: std::fmt::Display>(n: T) -> Value {
    Some(n.to_string())
}

pub fn null() -> Value {
    None
}

pub fn yes_no(b: bool) -> Value {
    text(if b { "yes" } else { "no" })
}

/// PgBouncer's timestamp text, in UTC.
pub fn time(t: SystemTime) -> Value {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::OffsetDateTime::from(t)
        .format(fmt)
        .ok()
        .map(|s| format!("{s} UTC"))
}

#[derive(Debug, Clone)]
pub struct ResultSet {
    pub columns: &'static [(&'static str, Col)],
    pub rows: Vec<Vec<Value>>,
}

impl ResultSet {
    pub fn new(columns: &'static [(&'static str, Col)]) -> Self {
        ResultSet {
            columns,
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len(), "row width");
        self.rows.push(row);
    }

    pub fn encode(&self, out: &mut BytesMut) {
        let fields: Vec<FieldDesc<'_>> = self
            .columns
            .iter()
            .map(|(name, col)| {
                let (type_oid, type_len) = col.wire();
                FieldDesc {
                    name,
                    type_oid,
                    type_len,
                }
            })
            .collect();
        encode_row_description(&fields, out);
        for row in &self.rows {
            let vals: Vec<Option<&[u8]>> = row
                .iter()
                .map(|v| v.as_deref().map(str::as_bytes))
                .collect();
            encode_data_row(&vals, out);
        }
        encode_command_complete("SHOW", out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_shape() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86_400 + 3_661);
        assert_eq!(time(t).unwrap(), "1970-01-02 01:01:01 UTC");
    }
}
