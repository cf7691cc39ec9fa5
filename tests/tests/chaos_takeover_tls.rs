//! The chaos soak's load (`chaos_common`) over TLS on both legs across an online restart
//! (`sluice --takeover` half-way through) and nothing else. TLS clients cannot move (their TLS
//! state lives in the old process): they stay there until they leave, while new logins go to the
//! new process. Nobody may see an error, and the old process exits once its last client has left.

mod chaos_common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_with_tls_clients_and_servers_drops_nobody() {
    chaos_common::soak(chaos_common::Mode::TakeoverTls).await;
}
