//! max_db_client_connections and max_user_client_connections: logged-in clients counted per
//! database and per user they logged in as (not a database's forced user: PgBouncer counts the
//! login user), admitted under one lock so that logins at the same moment cannot pass a limit
//! together, and given back when the client leaves (`Admitted` is dropped with the session).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::keyed_hash::NameKeys;

#[derive(Default)]
pub struct ClientCounts {
    inner: Mutex<Counts>,
}

/// One counter per name. A login's `Admitted` holds its two counters and gives its places back
/// through them, without a look-up; counters nobody holds are dropped when a new name comes in and
/// the map has grown (`NameCounts::make_room`), so auto-databases and passing users do not pile up.
#[derive(Default)]
struct Counts {
    databases: NameCounts,
    users: NameCounts,
}

#[derive(Default)]
struct NameCounts {
    map: HashMap<Box<str>, Arc<AtomicUsize>, NameKeys>,
    /// The size at which the next new name first drops the unheld counters.
    prune_at: usize,
}

/// The fewest names kept before unheld counters are dropped.
const PRUNE_FLOOR: usize = 64;

impl NameCounts {
    /// The clients counted on `name`.
    fn get(&self, name: &str) -> usize {
        self.map.get(name).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// `name`'s counter, made when missing.
    fn counter(&mut self, name: &str) -> Arc<AtomicUsize> {
        if let Some(c) = self.map.get(name) {
            return c.clone();
        }
        self.make_room();
        let c = Arc::<AtomicUsize>::default();
        self.map.insert(name.into(), c.clone());
        c
    }

    /// Before a new name goes in: once the map has doubled since the last time, drop the counters
    /// no `Admitted` holds (only the map does: a count of 0). Amortized, a login pays nothing.
    fn make_room(&mut self) {
        if self.map.len() < self.prune_at.max(PRUNE_FLOOR) {
            return;
        }
        self.map.retain(|_, c| Arc::strong_count(c) > 1);
        self.prune_at = self.map.len() * 2;
    }
}

/// Which limit refused a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Database,
    User,
}

impl Refused {
    /// PgBouncer 1.25's words (SQLSTATE 08P01).
    pub fn message(self) -> &'static str {
        match self {
            Refused::Database => "client connections exceeded (max_db_client_connections)",
            Refused::User => "client connections exceeded (max_user_client_connections)",
        }
    }
}

/// One counted client: its database's and user's counts go down when it is dropped.
pub struct Admitted {
    database: Arc<AtomicUsize>,
    user: Arc<AtomicUsize>,
}

impl ClientCounts {
    /// Count a client of `database` logged in as `user`, unless that passes a limit (0 = none);
    /// the database's limit is checked first, as PgBouncer does. Checked and counted under the
    /// lock, so that logins at the same moment cannot pass a limit together; a client leaving at
    /// the same time only lowers a count.
    pub fn admit(
        &self,
        database: &str,
        user: &str,
        db_limit: usize,
        user_limit: usize,
    ) -> Result<Admitted, Refused> {
        let mut c = self.inner.lock();
        let on_db = c.databases.counter(database);
        if db_limit != 0 && on_db.load(Ordering::Relaxed) >= db_limit {
            return Err(Refused::Database);
        }
        let of_user = c.users.counter(user);
        if user_limit != 0 && of_user.load(Ordering::Relaxed) >= user_limit {
            return Err(Refused::User);
        }
        on_db.fetch_add(1, Ordering::Relaxed);
        of_user.fetch_add(1, Ordering::Relaxed);
        Ok(Admitted {
            database: on_db,
            user: of_user,
        })
    }

    /// Logged-in clients of a database (SHOW DATABASES current_client_connections).
    pub fn database(&self, name: &str) -> usize {
        self.inner.lock().databases.get(name)
    }

    /// Logged-in clients of a user (SHOW USERS current_client_connections).
    pub fn user(&self, name: &str) -> usize {
        self.inner.lock().users.get(name)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.database.fetch_sub(1, Ordering::Relaxed);
        self.user.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_per_database_and_login_user_and_give_back() {
        let c = ClientCounts::default();
        let a = c.admit("app", "alice", 2, 0).unwrap();
        let b = c.admit("app", "bob", 2, 0).unwrap();
        assert_eq!(c.admit("app", "carol", 2, 0).err(), Some(Refused::Database));
        // Another database is not limited by app's count.
        let o = c.admit("other", "alice", 2, 1);
        assert_eq!(o.err(), Some(Refused::User));
        assert_eq!((c.database("app"), c.user("alice")), (2, 1));
        drop(a);
        assert_eq!((c.database("app"), c.user("alice")), (1, 0));
        let _o = c.admit("other", "alice", 2, 1).unwrap();
        drop(b);
        assert_eq!(c.database("app"), 0);
        // The database's limit is checked first.
        let _x = c.admit("db", "u", 1, 1).unwrap();
        assert_eq!(c.admit("db", "u", 1, 1).err(), Some(Refused::Database));
    }

    #[test]
    fn counters_nobody_holds_are_dropped_as_new_names_come() {
        let c = ClientCounts::default();
        let kept = c.admit("kept", "u", 0, 0).unwrap();
        for i in 0..1000 {
            drop(c.admit(&format!("auto{i}"), "u", 0, 0).unwrap());
        }
        let names = c.inner.lock().databases.map.len();
        assert!(names <= 2 * PRUNE_FLOOR, "{names} database names kept");
        // A held counter survives every prune, with its count.
        assert_eq!(c.database("kept"), 1);
        drop(kept);
        assert_eq!((c.database("kept"), c.user("u")), (0, 0));
    }
}
