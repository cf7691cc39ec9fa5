//! How the soak's clients log in (TCP, the Unix socket, TLS) and send their cancels.

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::Socket;

use super::*;

pub(super) const USERS: [(&str, &str); 2] =
    [("md5_user", "md5_pass"), ("scram_user", "scram_pass")];

pub(super) type Connection = (tokio_postgres::Client, tokio::task::JoinHandle<()>);

/// Log in as `user` to `db`, over TLS (required) in TLS mode, where a SCRAM login must bind to
/// the TLS channel (SCRAM-SHA-256-PLUS), else over TCP or `via` the Unix socket; the
/// connection's task is spawned.
pub(super) async fn open(
    ctx: &Ctx,
    user: (&str, &str),
    db: &str,
    via: Via,
) -> Result<Connection, tokio_postgres::Error> {
    open_with(ctx, user, db, via, None).await
}

/// A notification: (channel, payload).
pub(super) type Notification = (String, String);

/// `open`, passing the notifications the connection receives to `notify`.
pub(super) async fn open_with(
    ctx: &Ctx,
    user: (&str, &str),
    db: &str,
    via: Via,
    notify: Option<tokio::sync::mpsc::UnboundedSender<Notification>>,
) -> Result<Connection, tokio_postgres::Error> {
    async fn with<T>(
        conn_str: &str,
        tls: T,
        notify: Option<tokio::sync::mpsc::UnboundedSender<Notification>>,
    ) -> Result<Connection, tokio_postgres::Error>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        use futures_util::StreamExt;
        let (client, mut conn) = tokio_postgres::connect(conn_str, tls).await?;
        let task = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(m)) = messages.next().await {
                if let (tokio_postgres::AsyncMessage::Notification(n), Some(tx)) = (m, &notify) {
                    let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
                }
            }
        });
        Ok((client, task))
    }
    let conn_str = match via {
        Via::Unix if ctx.tls.is_none() => {
            let tcp = ctx.sluice.conn_str(user.0, user.1, db);
            tcp.replace("host=127.0.0.1", &format!("host={}", ctx.socket_dir))
        }
        _ => ctx.sluice.conn_str(user.0, user.1, db),
    };
    match &ctx.tls {
        Some(tls) => {
            let binding = if user.0 == "scram_user" {
                "require"
            } else {
                "disable"
            };
            let conn_str = format!("{conn_str} sslmode=require channel_binding={binding}");
            with(&conn_str, tls.clone(), notify).await
        }
        None => with(&conn_str, NoTls, notify).await,
    }
}

/// Send a CancelRequest the way the client logged in (over TLS in TLS mode).
pub(super) async fn cancel(tls: Option<tls::Rustls>, token: tokio_postgres::CancelToken) {
    let _ = match tls {
        Some(tls) => token.cancel_query(tls).await,
        None => token.cancel_query(NoTls).await,
    };
}

pub(super) async fn connect(
    ctx: &Ctx,
    user: (&str, &str),
    pooling: Pooling,
    via: Via,
) -> Option<Connection> {
    let db = pooling.db();
    match tokio::time::timeout(HANG, open(ctx, user, db, via)).await {
        Ok(Ok(connection)) => {
            ctx.tally.ok(match via {
                Via::Unix if ctx.tls.is_none() => "login, Unix socket",
                _ => "login",
            });
            Some(connection)
        }
        Ok(Err(e)) => {
            ctx.tally.error("login", pooling, &e);
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
        Err(_) => {
            ctx.tally
                .finding(format!("login as {} to {db} hung for {HANG:?}", user.0));
            None
        }
    }
}
