//! The chaos soak (`chaos_common`) with TLS on both legs: clients verify Sluice's certificate and
//! log in with SCRAM-SHA-256-PLUS or md5 over TLS only (`hostssl`), Sluice verifies PostgreSQL's
//! certificate (verify-ca), and every server it opens, after each PostgreSQL restart too, is TLS.
//! Its own test process: it restarts this process's cluster.

mod chaos_common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_at_once_over_tls_leaves_the_pooler_clean_and_every_answer_right() {
    chaos_common::soak(chaos_common::Mode::ChaosTls).await;
}
