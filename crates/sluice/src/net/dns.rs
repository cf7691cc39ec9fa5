//! Server host names resolved once and kept, as PgBouncer does: a successful lookup for
//! dns_max_ttl, a failed one (NXDOMAIN, no address) for dns_nxdomain_ttl; 0 = not kept. Without
//! it every server connect asked the system resolver again (a thread hop for getaddrinfo, a DNS
//! query where /etc/hosts does not answer). An address written as an IP is used as it is.
//! SHOW DNS_HOSTS lists what is kept and SHOW LISTS counts it (`dns_names`) and the lookups under
//! way (`dns_queries`).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How long lookups are kept (dns_max_ttl, dns_nxdomain_ttl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DnsTtl {
    pub found: Duration,
    pub failed: Duration,
}

/// One kept lookup: its addresses, or the error's text.
struct Kept {
    result: Result<Vec<IpAddr>, String>,
    until: Instant,
}

/// The lookups of one process (the connector's), by host name.
#[derive(Default)]
pub struct DnsCache {
    kept: Mutex<HashMap<String, Kept>>,
    /// Lookups under way (SHOW LISTS dns_queries).
    in_flight: AtomicUsize,
}

/// One kept host as SHOW DNS_HOSTS shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptHost {
    pub hostname: String,
    /// Whole seconds until it is looked up again (0 once due).
    pub ttl: u64,
    /// The addresses as PgBouncer prints them (`127.0.0.1:0`, comma-separated; empty for a failed
    /// lookup).
    pub addrs: String,
}

/// Counts a lookup as under way until it ends, however it ends.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for DnsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsCache")
            .field("hosts", &self.kept.lock().len())
            .finish()
    }
}

impl DnsCache {
    /// The kept hosts by name (expired ones too, until their next lookup replaces them).
    pub fn hosts(&self) -> Vec<KeptHost> {
        let now = Instant::now();
        let mut out: Vec<KeptHost> = self
            .kept
            .lock()
            .iter()
            .map(|(name, k)| KeptHost {
                hostname: name.clone(),
                ttl: k.until.saturating_duration_since(now).as_secs(),
                addrs: k
                    .result
                    .as_ref()
                    .map(|ips| {
                        ips.iter()
                            .map(|ip| SocketAddr::new(*ip, 0).to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default(),
            })
            .collect();
        out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        out
    }

    /// How many host names are kept (SHOW LISTS dns_names).
    pub fn names(&self) -> usize {
        self.kept.lock().len()
    }

    /// Lookups under way (SHOW LISTS dns_queries).
    pub fn queries(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The addresses of `host`: kept ones while their time lasts, else the system resolver's.
    pub async fn resolve(&self, host: &str, ttl: DnsTtl) -> io::Result<Vec<IpAddr>> {
        self.resolve_with(host, ttl, |h| async move {
            Ok(tokio::net::lookup_host((h.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
        .await
    }

    async fn resolve_with<F, Fut>(
        &self,
        host: &str,
        ttl: DnsTtl,
        lookup: F,
    ) -> io::Result<Vec<IpAddr>>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = io::Result<Vec<IpAddr>>>,
    {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let now = Instant::now();
        if let Some(k) = self.kept.lock().get(host).filter(|k| k.until > now) {
            return k.result.clone().map_err(io::Error::other);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let counted = InFlight(&self.in_flight);
        let looked_up = lookup(host.to_string()).await;
        drop(counted);
        let result = match looked_up {
            Ok(ips) if ips.is_empty() => Err(format!("no address for {host}")),
            Ok(ips) => Ok(ips),
            Err(e) => Err(e.to_string()),
        };
        let keep = if result.is_ok() {
            ttl.found
        } else {
            ttl.failed
        };
        let mut kept = self.kept.lock();
        if keep.is_zero() {
            kept.remove(host);
        } else {
            kept.insert(
                host.to_string(),
                Kept {
                    result: result.clone(),
                    until: Instant::now() + keep,
                },
            );
        }
        result.map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const TTL: DnsTtl = DnsTtl {
        found: Duration::from_secs(15),
        failed: Duration::from_secs(5),
    };

    async fn ask(
        cache: &DnsCache,
        host: &str,
        ttl: DnsTtl,
        calls: &AtomicUsize,
        ok: bool,
    ) -> io::Result<Vec<IpAddr>> {
        cache
            .resolve_with(host, ttl, |_| async move {
                calls.fetch_add(1, Ordering::Relaxed);
                if ok {
                    Ok(vec!["10.0.0.7".parse().unwrap()])
                } else {
                    Err(io::Error::other("failed to lookup address information"))
                }
            })
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn lookups_are_kept_for_their_ttl() {
        let (cache, calls) = (DnsCache::default(), AtomicUsize::new(0));
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(
            ask(&cache, "db.example", TTL, &calls, true).await.unwrap(),
            vec![ip]
        );
        tokio::time::advance(Duration::from_secs(14)).await;
        assert_eq!(
            ask(&cache, "db.example", TTL, &calls, true).await.unwrap(),
            vec![ip]
        );
        assert_eq!(calls.load(Ordering::Relaxed), 1, "kept for dns_max_ttl");
        tokio::time::advance(Duration::from_secs(2)).await;
        ask(&cache, "db.example", TTL, &calls, true).await.unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 2, "asked again after it");
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_kept_for_the_nxdomain_ttl_and_zero_keeps_nothing() {
        let (cache, calls) = (DnsCache::default(), AtomicUsize::new(0));
        assert!(ask(&cache, "gone.example", TTL, &calls, false)
            .await
            .is_err());
        tokio::time::advance(Duration::from_secs(4)).await;
        let e = ask(&cache, "gone.example", TTL, &calls, true)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("lookup"), "{e}");
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(ask(&cache, "gone.example", TTL, &calls, true).await.is_ok());
        let none = DnsTtl::default();
        let calls = AtomicUsize::new(0);
        ask(&cache, "fresh.example", none, &calls, true)
            .await
            .unwrap();
        ask(&cache, "fresh.example", none, &calls, true)
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 2, "0 = not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn hosts_lists_what_is_kept_as_show_dns_hosts_shows_it() {
        let (cache, calls) = (DnsCache::default(), AtomicUsize::new(0));
        assert_eq!(cache.hosts(), vec![]);
        ask(&cache, "db.example", TTL, &calls, true).await.unwrap();
        ask(&cache, "gone.example", TTL, &calls, false)
            .await
            .unwrap_err();
        ask(&cache, "10.0.0.9", TTL, &calls, true).await.unwrap();
        tokio::time::advance(Duration::from_secs(3)).await;
        let hosts = cache.hosts();
        assert_eq!(
            hosts,
            vec![
                KeptHost {
                    hostname: "db.example".into(),
                    ttl: 12,
                    addrs: "10.0.0.7:0".into()
                },
                KeptHost {
                    hostname: "gone.example".into(),
                    ttl: 2,
                    addrs: String::new()
                },
            ]
        );
        assert_eq!(cache.names(), 2, "an IP is not kept");
        assert_eq!(cache.queries(), 0);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(
            cache.hosts()[0].ttl,
            0,
            "due, still listed until asked again"
        );
    }

    #[tokio::test]
    async fn a_lookup_under_way_is_counted() {
        let cache = DnsCache::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let lookup = cache.resolve_with("slow.example", TTL, |_| async move {
            let _ = rx.await;
            Ok(vec!["10.0.0.8".parse().unwrap()])
        });
        tokio::pin!(lookup);
        assert!(futures_poll_once(lookup.as_mut()).await.is_none());
        assert_eq!(cache.queries(), 1);
        tx.send(()).unwrap();
        lookup.await.unwrap();
        assert_eq!(cache.queries(), 0);
    }

    /// Polls a future once: its output if it was ready.
    async fn futures_poll_once<F: Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }

    #[tokio::test]
    async fn the_system_resolver_answers_for_localhost() {
        let ips = DnsCache::default()
            .resolve("localhost", TTL)
            .await
            .expect("localhost resolves");
        assert!(ips.iter().any(|ip| ip.is_loopback()), "{ips:?}");
    }

    #[tokio::test]
    async fn an_ip_is_used_as_it_is() {
        let (cache, calls) = (DnsCache::default(), AtomicUsize::new(0));
        let got = ask(&cache, "127.0.0.1", TTL, &calls, false).await.unwrap();
        assert_eq!(got, vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(calls.load(Ordering::Relaxed), 0);
    }
}
