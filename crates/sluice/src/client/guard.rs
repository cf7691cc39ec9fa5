//! A connected client's place in `App::client_count` (max_client_conn, WAIT_FOR_CLIENTS), held
//! from accept (`dispatch::serve`) or adoption (`takeover::state`) until the client is gone.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::app::App;

/// Counts a connected client while it lives.
pub struct ClientGuard {
    app: Arc<App>,
}

impl ClientGuard {
    pub fn new(app: &Arc<App>) -> (Self, usize) {
        let n = app.client_count.fetch_add(1, Ordering::AcqRel) + 1;
        (ClientGuard { app: app.clone() }, n)
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.app.client_count.fetch_sub(1, Ordering::AcqRel);
    }
}
