//! Helpers shared by the session_state* tests: Sluice in transaction pooling over the shared
//! cluster's `app` database, and one value read with a simple query.

use sluice_e2e::Sluice;
use tokio_postgres::SimpleQueryMessage;

const USERLIST: &str = "\"trust_user\" \"\"\n";

pub fn start(extra: &str) -> Sluice {
    let ini = Sluice::basic_ini(
        &format!("auth_type = trust\npool_mode = transaction\nquery_wait_timeout = 5\n{extra}"),
        "app = host={pg_host} port={pg_port} dbname=app",
    );
    Sluice::builder(&ini).userlist(USERLIST).start()
}

pub async fn value(c: &tokio_postgres::Client, sql: &str) -> String {
    for m in c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
    {
        if let SimpleQueryMessage::Row(r) = m {
            return r.get(0).unwrap_or("").to_string();
        }
    }
    panic!("no row for {sql}");
}
