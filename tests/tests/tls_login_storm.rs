//! A burst of TLS logins beside an established client's queries: every login and every query
//! succeeds, and the handshakes ran on Sluice's authentication threads (`sluice-auth`, shared with
//! PBKDF2), off the worker threads that relay the established client's traffic. How much a storm
//! delays the queries is measured in bench/login_storm.sh, not asserted here.

mod tls_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tls_support::client::{Negotiation, PgTls};
use tls_support::{builder, ini, pg_with_ssl, Certs, DB_BY_IP};
use tokio::sync::Semaphore;

const LOGINS: usize = 120;
const AT_ONCE: usize = 30;

/// Names of the threads of process `pid`.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let comm = t.unwrap().path().join("comm");
        if let Ok(n) = std::fs::read_to_string(comm) {
            names.push(n.trim().to_string());
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_login_burst_beside_running_queries() {
    pg_with_ssl();
    let s = builder(&ini(
        "auth_type = trust\nclient_tls_sslmode = require\nserver_tls_sslmode = require\n\
         pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 10\n",
        DB_BY_IP,
    ))
    .start();
    let ca = Certs::get().ca.pem.cert.clone();
    assert!(
        !thread_names(s.pid()).iter().any(|n| n == "sluice-auth"),
        "the authentication threads start on first use"
    );

    let mut steady = PgTls::connect(s.port, &ca, Negotiation::SslRequest)
        .await
        .unwrap();
    steady.startup("trust_user", "app").await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let queries = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut done = 0u64;
            let mut failed = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match steady.query("SELECT 1").await {
                    Ok(Some(v)) if v == "1" => done += 1,
                    other => failed.push(format!("{other:?}")),
                }
            }
            (done, failed)
        }
    });

    let slots = Arc::new(Semaphore::new(AT_ONCE));
    let mut logins = tokio::task::JoinSet::new();
    for i in 0..LOGINS {
        let (slots, ca, port) = (slots.clone(), ca.clone(), s.port);
        logins.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            // Half by SSLRequest, half by direct TLS (PostgreSQL 17's sslnegotiation=direct).
            let how = if i % 2 == 0 {
                Negotiation::SslRequest
            } else {
                Negotiation::Direct { alpn: true }
            };
            let mut c = PgTls::connect(port, &ca, how)
                .await
                .map_err(|e| format!("login {i}: {e}"))?;
            c.startup("trust_user", "app")
                .await
                .map_err(|e| format!("login {i}: {e:?}"))?;
            match c.query("SELECT 2").await {
                Ok(Some(v)) if v == "2" => Ok(()),
                other => Err(format!("login {i}: query: {other:?}")),
            }
        });
    }
    let mut failures = Vec::new();
    while let Some(r) = logins.join_next().await {
        if let Err(e) = r.unwrap() {
            failures.push(e);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (done, failed) = queries.await.unwrap();
    assert!(failures.is_empty(), "{failures:?}\n{}", s.log());
    assert!(failed.is_empty(), "{failed:?}\n{}", s.log());
    assert!(
        done > 0,
        "the established client ran no query during the burst"
    );
    assert!(
        thread_names(s.pid()).iter().any(|n| n == "sluice-auth"),
        "TLS handshakes ran on the authentication threads: {:?}",
        thread_names(s.pid())
    );
    let log = s.log();
    assert!(!log.contains("TLS handshake failed"), "{log}");
}
