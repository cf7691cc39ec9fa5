//! Chaos soak: many kinds of client work at once while an operator and the network do their
//! worst at random (`chaos_common`). Its own test process: it restarts this process's cluster.

mod chaos_common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_at_once_leaves_the_pooler_clean_and_every_answer_right() {
    chaos_common::soak(chaos_common::Mode::Chaos).await;
}
