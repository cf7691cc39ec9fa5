//! max_db_client_connections and max_user_client_connections: logged-in clients counted per
//! database and per user they logged in as (not a database's forced user: PgBouncer counts the
//! login user), admitted under one lock so that logins at the same moment cannot pass a limit
//! together, and given back when the client leaves (`Admitted` is dropped with the session).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

#[derive(Default)]
pub struct ClientCounts {
    inner: Mutex<Counts>,
}

/// Keyed by shared names: a login's `Admitted` holds a clone of the key, not a copy of the name.
#[derive(Default)]
struct Counts {
    databases: HashMap<Arc<str>, usize>,
    users: HashMap<Arc<str>, usize>,
}

/// `name`'s key and count, if counted (the key cloned: one look-up gives both).
fn counted(map: &HashMap<Arc<str>, usize>, name: &str) -> Option<(Arc<str>, usize)> {
    map.get_key_value(name).map(|(k, n)| (k.clone(), *n))
}

/// One more client on a name whose key `counted` gave, or on a new name: the key, shared.
fn count_in(map: &mut HashMap<Arc<str>, usize>, name: &str, known: Option<Arc<str>>) -> Arc<str> {
    if let Some(key) = known {
        if let Some(n) = map.get_mut(&*key) {
            *n += 1;
            return key;
        }
    }
    let key: Arc<str> = Arc::from(name);
    map.insert(key.clone(), 1);
    key
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

/// One counted client: its database and user counts go down when it is dropped.
pub struct Admitted {
    counts: Arc<ClientCounts>,
    database: Arc<str>,
    user: Arc<str>,
}

impl ClientCounts {
    /// Count a client of `database` logged in as `user`, unless that passes a limit (0 = none);
    /// the database's limit is checked first, as PgBouncer does.
    pub fn admit(
        self: &Arc<Self>,
        database: &str,
        user: &str,
        db_limit: usize,
        user_limit: usize,
    ) -> Result<Admitted, Refused> {
        let mut c = self.inner.lock();
        let on_db = counted(&c.databases, database);
        if db_limit != 0 && on_db.as_ref().map_or(0, |d| d.1) >= db_limit {
            return Err(Refused::Database);
        }
        let of_user = counted(&c.users, user);
        if user_limit != 0 && of_user.as_ref().map_or(0, |u| u.1) >= user_limit {
            return Err(Refused::User);
        }
        let database = count_in(&mut c.databases, database, on_db.map(|d| d.0));
        let user = count_in(&mut c.users, user, of_user.map(|u| u.0));
        Ok(Admitted {
            counts: self.clone(),
            database,
            user,
        })
    }

    /// Logged-in clients of a database (SHOW DATABASES current_client_connections).
    pub fn database(&self, name: &str) -> usize {
        self.inner.lock().databases.get(name).copied().unwrap_or(0)
    }

    /// Logged-in clients of a user (SHOW USERS current_client_connections).
    pub fn user(&self, name: &str) -> usize {
        self.inner.lock().users.get(name).copied().unwrap_or(0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut guard = self.counts.inner.lock();
        let c = &mut *guard;
        // Names that reach 0 leave the maps: auto-databases and passing users do not pile up.
        for (map, name) in [
            (&mut c.databases, &self.database),
            (&mut c.users, &self.user),
        ] {
            if let Some(n) = map.get_mut(&**name) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&**name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_per_database_and_login_user_and_give_back() {
        let c = Arc::new(ClientCounts::default());
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
        assert!(!c.inner.lock().databases.contains_key("app"));
        // The database's limit is checked first.
        let _x = c.admit("db", "u", 1, 1).unwrap();
        assert_eq!(c.admit("db", "u", 1, 1).err(), Some(Refused::Database));
    }
}
