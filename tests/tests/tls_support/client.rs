//! A minimal PostgreSQL client over TLS (tokio-rustls): SSLRequest or direct TLS with or without
//! ALPN, trust login, simple queries. It records the certificate Sluice presented.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use sluice_e2e::{error_fields, RawConn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiation {
    /// SSLRequest, 'S', then the handshake.
    SslRequest,
    /// ClientHello right away (PostgreSQL 17 `sslnegotiation=direct`), with or without ALPN.
    Direct { alpn: bool },
}

pub struct PgTls {
    stream: TlsStream<TcpStream>,
    /// DER of the certificate the server presented.
    pub peer_cert: Vec<u8>,
    pub alpn: Option<Vec<u8>>,
}

/// A client config trusting the CAs in `ca_pem` (ring, safe defaults), ALPN "postgresql" or none.
pub fn config(ca_pem: &str, alpn: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    if alpn {
        cfg.alpn_protocols = vec![b"postgresql".to_vec()];
    }
    Arc::new(cfg)
}

impl PgTls {
    /// Connect to 127.0.0.1:`port`, verify the certificate for "localhost" against `ca_pem`.
    pub async fn connect(port: u16, ca_pem: &str, how: Negotiation) -> io::Result<PgTls> {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await?;
        let alpn = match how {
            Negotiation::SslRequest => {
                tcp.write_all(&RawConn::ssl_request()).await?;
                let mut a = [0u8; 1];
                tokio::time::timeout(WAIT, tcp.read_exact(&mut a))
                    .await
                    .map_err(|_| io::Error::other("no answer to SSLRequest"))??;
                if a[0] != b'S' {
                    return Err(io::Error::other(format!(
                        "SSLRequest answered '{}'",
                        a[0] as char
                    )));
                }
                false
            }
            Negotiation::Direct { alpn } => alpn,
        };
        let connector = tokio_rustls::TlsConnector::from(config(ca_pem, alpn));
        let name = ServerName::try_from("localhost").unwrap();
        let stream = tokio::time::timeout(WAIT, connector.connect(name, tcp))
            .await
            .map_err(|_| io::Error::other("handshake timeout"))??;
        let (_, conn) = stream.get_ref();
        let peer_cert = conn.peer_certificates().unwrap()[0].as_ref().to_vec();
        let alpn = conn.alpn_protocol().map(|a| a.to_vec());
        Ok(PgTls {
            stream,
            peer_cert,
            alpn,
        })
    }

    async fn read_message(&mut self) -> io::Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        tokio::time::timeout(WAIT, self.stream.read_exact(&mut head))
            .await
            .map_err(|_| io::Error::other("read timeout"))??;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        tokio::time::timeout(WAIT, self.stream.read_exact(&mut body))
            .await
            .map_err(|_| io::Error::other("read timeout"))??;
        Ok((head[0], body))
    }

    /// Startup as `user` (a trust login) and read until ReadyForQuery.
    pub async fn startup(&mut self, user: &str, db: &str) -> Result<(), HashMap<u8, String>> {
        let pkt = RawConn::startup_packet(&[("user", user), ("database", db)]);
        self.stream.write_all(&pkt).await.map_err(io_err)?;
        self.stream.flush().await.map_err(io_err)?;
        self.until_ready().await.map(|_| ())
    }

    /// Run a simple query; the first column of the first row.
    pub async fn query(&mut self, sql: &str) -> Result<Option<String>, HashMap<u8, String>> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.stream
            .write_all(&RawConn::message(b'Q', &body))
            .await
            .map_err(io_err)?;
        // tokio-rustls may keep ciphertext buffered until flushed.
        self.stream.flush().await.map_err(io_err)?;
        self.until_ready().await
    }

    /// Send already framed messages (an extended-protocol batch ending with Sync); the first
    /// column of the first row.
    pub async fn send_batch(&mut self, msgs: &[u8]) -> Result<Option<String>, HashMap<u8, String>> {
        self.stream.write_all(msgs).await.map_err(io_err)?;
        self.stream.flush().await.map_err(io_err)?;
        self.until_ready().await
    }

    /// Send already framed messages and read nothing.
    pub async fn send(&mut self, msgs: &[u8]) -> io::Result<()> {
        self.stream.write_all(msgs).await?;
        self.stream.flush().await
    }

    /// Read until the server closes the stream (true) or `timeout` passes (false); the bytes read.
    pub async fn read_until_close(&mut self, timeout: Duration) -> (Vec<u8>, bool) {
        let mut all = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (all, true),
                Ok(Ok(n)) => all.extend_from_slice(&chunk[..n]),
                Err(_) => return (all, false),
            }
        }
    }

    async fn until_ready(&mut self) -> Result<Option<String>, HashMap<u8, String>> {
        let mut first = None;
        let mut error = None;
        loop {
            let (tag, body) = self.read_message().await.map_err(io_err)?;
            match tag {
                b'D' if first.is_none() => {
                    let len = i32::from_be_bytes([body[2], body[3], body[4], body[5]]);
                    if len >= 0 {
                        first =
                            Some(String::from_utf8_lossy(&body[6..6 + len as usize]).into_owned());
                    }
                }
                b'E' => {
                    let f = error_fields(&body);
                    if f.get(&b'S').map(String::as_str) == Some("FATAL") {
                        return Err(f);
                    }
                    error = Some(f);
                }
                b'Z' => {
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(first),
                    }
                }
                _ => {}
            }
        }
    }
}

fn io_err(e: io::Error) -> HashMap<u8, String> {
    HashMap::from([(b'M', format!("io: {e}"))])
}
