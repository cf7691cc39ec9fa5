//! The endpoint's HTTP server, on hyper (HTTP/1.1, one request per connection), with every
//! resource a client can hold bounded: at most `MAX_CONNECTIONS` connections at once (more wait in
//! the listen backlog), a request head of at most `MAX_HEAD_BYTES` (431 past it), no request body
//! (413), the head within `HEAD_TIMEOUT` of the connection's start (TLS handshake included), and
//! the whole exchange within `REQUEST_DEADLINE`. TLS and basic auth come from `Access`, read
//! afresh for every connection so that RELOAD applies to the next one.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CONNECTION, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::access::Access;
use crate::app::App;
use crate::net::stream::reregister;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Request line and headers together.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// From the accept to the end of the request head (a TLS handshake included).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// From the accept to the last byte of the answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

const TEXT: &str = "text/plain; charset=utf-8";

/// Accept HTTP connections until the process exits (the endpoint stays up while shutting down so
/// probes can see "not ready").
pub async fn serve(app: Arc<App>, listener: TcpListener) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((sock, peer)) => {
                let app = app.clone();
                tokio::spawn(async move {
                    let access = app.metrics_access.load_full();
                    let served =
                        tokio::time::timeout(REQUEST_DEADLINE, connection(app, access, sock, peer))
                            .await;
                    if served.is_err() {
                        tracing::debug!("metrics: {peer}: request deadline passed, closed");
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!("metrics accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One connection: the TLS handshake when configured, then one request.
async fn connection(app: Arc<App>, access: Arc<Access>, sock: TcpStream, peer: SocketAddr) {
    let head_by = Instant::now() + HEAD_TIMEOUT;
    match access.tls.clone() {
        None => exchange(app, access, sock, peer, head_by).await,
        Some(config) => {
            // The handshake runs on the authentication threads, as the clients' and servers' do
            // (`auth::cpu`): a scraper's or a stranger's handshakes never take a relay worker's time.
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let accept = app
                .auth_cpu
                .run_socket(sock, move |tcp| acceptor.accept(tcp));
            match tokio::time::timeout_at(head_by, accept).await {
                Ok(Ok(Ok(mut tls))) => {
                    if let Err(e) = reregister(tls.get_mut().0) {
                        tracing::debug!("metrics: {peer}: {e}");
                        return;
                    }
                    exchange(app, access, tls, peer, head_by).await
                }
                Ok(Ok(Err(e)) | Err(e)) => {
                    tracing::debug!("metrics: {peer}: TLS handshake failed: {e}")
                }
                Err(_) => tracing::debug!("metrics: {peer}: TLS handshake timed out"),
            }
        }
    }
}

/// Serve one request on `io`, whose head must be in by `head_by`.
async fn exchange<S>(app: Arc<App>, access: Arc<Access>, io: S, peer: SocketAddr, head_by: Instant)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let answer = answer(&app, &access, &req, peer);
        async move { Ok::<_, Infallible>(answer) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_by.saturating_duration_since(Instant::now()))
        .max_header_size(MAX_HEAD_BYTES)
        // hyper refuses a buffer under 8 KiB; the head limit is what answers 431.
        .max_buf_size(MAX_HEAD_BYTES.max(8192))
        .keep_alive(false)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = served {
        tracing::debug!("metrics: {peer}: {e}");
    }
}

fn answer(
    app: &Arc<App>,
    access: &Access,
    req: &Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = response(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET and HEAD\n".into(),
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if !req.body().is_end_stream() {
        return response(
            StatusCode::PAYLOAD_TOO_LARGE,
            TEXT,
            "a request body is not accepted here\n".into(),
        );
    }
    let path = req.uri().path();
    if let Some(auth) = access.auth.as_ref().filter(|_| !super::is_probe(path)) {
        let given = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if !auth.allows(given) {
            tracing::debug!(
                "metrics: {peer}: {path}: {}",
                if given.is_some() {
                    "wrong credentials"
                } else {
                    "no credentials"
                }
            );
            let mut r = response(
                StatusCode::UNAUTHORIZED,
                TEXT,
                "authentication required\n".into(),
            );
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"sluice\""),
            );
            return r;
        }
    }
    let (status, ctype, body) = super::respond(app, path);
    response(status, ctype, body)
}

fn response(status: StatusCode, ctype: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(CONNECTION, HeaderValue::from_static("close"));
    r
}
