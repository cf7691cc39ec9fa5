//! The chaos soak's load (`chaos_common`) across an online restart (`sluice --takeover` half-way
//! through) and nothing else: every client, in transaction and session pooling, with prepared
//! statements, pipelines, COPY and cancels, goes on without one error, and the old process exits
//! once its last client has left.

mod chaos_common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_under_every_kind_of_load_drops_nobody() {
    chaos_common::soak(chaos_common::Mode::Takeover).await;
}
