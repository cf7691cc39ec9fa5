//! A client that reads a large result slowly (a raw connection, over TLS in TLS mode), so that
//! the pooler's writes to it wait for room while the chaos ends servers, kills clients and
//! restarts PostgreSQL: what must hold is that every row that arrives is the right one, in order,
//! and that the result ends with ReadyForQuery, an error, or the connection closed.

use std::pin::Pin;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::*;

trait Io: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> Io for T {}

/// The user the slow reader logs in as: trust at Sluice (hba) and at PostgreSQL.
pub(super) const SLOW_USER: &str = "trust_user";

/// How the slow read ended, when it is not a finding.
enum Ended {
    /// All rows, then ReadyForQuery.
    Whole,
    /// An ErrorResponse (its SQLSTATE).
    Error(String),
    /// The connection closed (or a read failed) before ReadyForQuery.
    Closed,
}

async fn open(ctx: &Ctx) -> std::io::Result<Pin<Box<dyn Io>>> {
    // A small receive buffer: the result cannot sit in the kernel's buffers (a loopback socket's
    // grow to megabytes), so the pooler's writes wait on this reader.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(16 * 1024)?;
    let mut tcp = socket
        .connect(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            ctx.sluice.port,
        )))
        .await?;
    let Some(tls) = &ctx.tls else {
        return Ok(Box::pin(tcp));
    };
    tcp.write_all(&RawConn::ssl_request()).await?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await?;
    if answer[0] != b'S' {
        return Err(std::io::Error::other("SSLRequest refused"));
    }
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let stream = tokio_rustls::TlsConnector::from(tls.config())
        .connect(name, tcp)
        .await?;
    Ok(Box::pin(stream))
}

/// Messages read from `io` (through `buf`); a small read size and a pause between reads keep the
/// pooler's writes waiting.
struct Reader {
    io: Pin<Box<dyn Io>>,
    buf: Vec<u8>,
}

impl Reader {
    /// The next message, or None when the connection closed first.
    async fn next(&mut self, slow: bool) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]])
                    as usize;
                if self.buf.len() > len {
                    let body = self.buf[5..len + 1].to_vec();
                    let tag = self.buf[0];
                    self.buf.drain(..len + 1);
                    return Some((tag, body));
                }
            }
            if slow {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let mut chunk = [0u8; 8192];
            match self.io.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

fn sqlstate(body: &[u8]) -> String {
    sluice_e2e::error_fields(body)
        .get(&b'C')
        .cloned()
        .unwrap_or_default()
}

/// Log in, ask for `rows` rows of 500 bytes and read them slowly. Err = a finding.
async fn read_slowly(ctx: &Ctx, db: &str, rows: i64) -> Result<Ended, String> {
    let Ok(io) = open(ctx).await else {
        return Ok(Ended::Closed);
    };
    let mut r = Reader {
        io,
        buf: Vec::new(),
    };
    let startup = RawConn::startup_packet(&[("user", SLOW_USER), ("database", db)]);
    if r.io.write_all(&startup).await.is_err() || r.io.flush().await.is_err() {
        return Ok(Ended::Closed);
    }
    loop {
        match r.next(false).await {
            None => return Ok(Ended::Closed),
            Some((b'Z', _)) => break,
            Some((b'E', body)) => return Ok(Ended::Error(sqlstate(&body))),
            Some((b'R', body)) if body[..4] != [0, 0, 0, 0] => {
                return Err(format!("slow reader: asked to authenticate: {body:?}"));
            }
            Some(_) => {}
        }
    }
    let mut sql =
        format!("SELECT g, repeat('x', 500) FROM generate_series(1, {rows}) g").into_bytes();
    sql.push(0);
    if r.io.write_all(&RawConn::message(b'Q', &sql)).await.is_err() || r.io.flush().await.is_err() {
        return Ok(Ended::Closed);
    }
    let mut seen = 0i64;
    let mut error = None;
    loop {
        match r.next(true).await {
            None => return Ok(Ended::Closed),
            Some((b'D', body)) => {
                // Two columns: g as text, then 500 x's.
                let field = |at: usize| -> Option<(&[u8], usize)> {
                    let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
                    let end = at + 4 + usize::try_from(len).ok()?;
                    Some((body.get(at + 4..end)?, end))
                };
                let row = body.get(..2).filter(|n| n == &[0, 2]).and_then(|_| {
                    let (g, next) = field(2)?;
                    let (x, _) = field(next)?;
                    Some((String::from_utf8_lossy(g).into_owned(), x.to_vec()))
                });
                seen += 1;
                match row {
                    Some((g, x)) if g == seen.to_string() && x == vec![b'x'; 500] => {}
                    Some((g, x)) => {
                        return Err(format!(
                            "slow reader: row {seen} of {rows} said g = {g} with {} bytes",
                            x.len()
                        ))
                    }
                    None => {
                        return Err(format!(
                            "slow reader: row {seen} of {rows} unreadable: {} bytes",
                            body.len()
                        ))
                    }
                }
            }
            Some((b'E', body)) => error = Some(sqlstate(&body)),
            Some((b'Z', _)) => {
                return match error {
                    Some(code) => Ok(Ended::Error(code)),
                    None if seen == rows => Ok(Ended::Whole),
                    None => Err(format!(
                        "slow reader: {seen} of {rows} rows, then ReadyForQuery"
                    )),
                };
            }
            // RowDescription, CommandComplete, notices, parameter reports.
            Some((b'T' | b'C' | b'N' | b'S', _)) => {}
            Some((tag, body)) => {
                return Err(format!(
                    "slow reader: after {seen} rows an unexpected message '{}' of {} bytes",
                    tag as char,
                    body.len()
                ))
            }
        }
    }
}

/// One slow read, its outcome counted; a wrong row or a hang is a finding.
pub(super) async fn slow_read(ctx: &Ctx, pooling: Pooling, rng: &mut Rng) {
    let rows = 3_000 + rng.below(5_000) as i64;
    match tokio::time::timeout(HANG, read_slowly(ctx, pooling.db(), rows)).await {
        Err(_) => ctx.tally.finding(format!(
            "slow reader ({}): hung for {HANG:?}",
            pooling.name()
        )),
        Ok(Err(finding)) => ctx.tally.finding(format!("{finding} ({})", pooling.name())),
        Ok(Ok(Ended::Whole)) => ctx.tally.ok("slow read"),
        // Expected under chaos, a finding across a takeover (every error is).
        Ok(Ok(ended)) => {
            let what = match ended {
                Ended::Error(code) => code,
                _ => "connection closed".to_string(),
            };
            let mut errors = ctx.tally.errors.lock().unwrap();
            let key = format!("slow read ({} pooling) {what}", pooling.name());
            errors.entry(key).or_insert((0, what)).0 += 1;
        }
    }
}
