//! tokio-postgres over rustls, for the soak's TLS clients: Sluice's certificate is verified
//! against the test CA, and SCRAM-SHA-256-PLUS is offered (tls-server-end-point), so scram_user
//! logs in with channel binding.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use sha2::{Digest, Sha384};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// A connector for `tokio_postgres::connect` and `CancelToken::cancel_query`.
#[derive(Clone)]
pub struct Rustls(Arc<rustls::ClientConfig>);

impl Rustls {
    pub fn new(ca_pem: &str) -> Rustls {
        Rustls(super::tls_support::client::config(ca_pem, false))
    }

    pub fn config(&self) -> Arc<rustls::ClientConfig> {
        self.0.clone()
    }
}

pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        let (_, conn) = self.0.get_ref();
        match conn.peer_certificates().and_then(|c| c.first()) {
            // The test CA signs with ecdsa-with-SHA384, so RFC 5929 hashes with SHA-384.
            Some(cert) => {
                ChannelBinding::tls_server_end_point(Sha384::digest(cert.as_ref()).to_vec())
            }
            None => ChannelBinding::none(),
        }
    }
}

impl<S> MakeTlsConnect<S> for Rustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        Ok(Connect {
            config: self.0.clone(),
            domain: domain.to_string(),
        })
    }
}

pub struct Connect {
    config: Arc<rustls::ClientConfig>,
    domain: String,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            // "127.0.0.1": Sluice's test certificate names that address too.
            let name = ServerName::try_from(self.domain).map_err(io::Error::other)?;
            let tls = tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await?;
            Ok(Stream(tls))
        })
    }
}
