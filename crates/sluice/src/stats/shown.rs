//! A text the admin views show that its connection's task updates as it changes (SHOW CLIENTS /
//! SHOW SERVERS `application_name`): publishing an unchanged value costs one atomic load, so the
//! task can publish at every release without a lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Debug, Default)]
pub struct ShownText {
    /// The address of the value held in `value` (0: none). The value held keeps its allocation
    /// alive, so an equal address is the same value.
    at: AtomicUsize,
    value: Mutex<Option<Arc<str>>>,
}

fn address(v: Option<&Arc<str>>) -> usize {
    v.map_or(0, |a| Arc::as_ptr(a).cast::<u8>() as usize)
}

impl ShownText {
    /// Show `v` from now on (one writer: the connection's task).
    #[inline]
    pub fn publish(&self, v: Option<&Arc<str>>) {
        let at = address(v);
        if self.at.load(Ordering::Relaxed) != at {
            self.replace(v, at);
        }
    }

    #[cold]
    fn replace(&self, v: Option<&Arc<str>>, at: usize) {
        let mut held = self.value.lock();
        *held = v.cloned();
        self.at.store(at, Ordering::Relaxed);
    }

    /// Show `v` (a value the caller does not share).
    pub fn publish_str(&self, v: &str) {
        self.publish(Some(&Arc::from(v)));
    }

    /// What is shown ("" before anything was published).
    pub fn get(&self) -> String {
        self.value.lock().as_deref().unwrap_or_default().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_latest_value_published() {
        let s = ShownText::default();
        assert_eq!(s.get(), "");
        let a: Arc<str> = Arc::from("app");
        s.publish(Some(&a));
        assert_eq!(s.get(), "app");
        // The same allocation again: nothing to do; another one with other text: shown.
        s.publish(Some(&a.clone()));
        assert_eq!(s.get(), "app");
        s.publish(Some(&Arc::from("other")));
        assert_eq!(s.get(), "other");
        s.publish_str("third");
        assert_eq!(s.get(), "third");
        s.publish(None);
        assert_eq!(s.get(), "");
    }
}
