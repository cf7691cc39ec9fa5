//! The dashboard on the metrics listener (`/`), loaded in a real headless Chromium while pgbench
//! runs: the page polls `/dashboard.json`, logs nothing to the console, and its charts hold
//! non-zero data for the loaded pool and for the connections against PostgreSQL's max_connections. Writes a screenshot to target/dashboard.png. Needs Debian's
//! chromium package (scripts/test.sh installs it): without it the test fails
//! (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line, nothing asserted).

mod bad_input_common;

use std::path::PathBuf;
use std::process::Command;

use sluice_e2e::{free_port, http_get, missing_tool, pgbench_script, Sluice};

use bad_input_common::{DB_LINE, USERLIST};

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|c| {
        Command::new(c)
            .args(["--headless", "--no-sandbox", "--version"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from(c))
    })
}

/// Headless Chromium on `url` for `budget_ms` of virtual time with `extra` arguments:
/// (stdout, stderr).
fn headless(bin: &PathBuf, url: &str, budget_ms: u32, extra: &[&str]) -> (String, String) {
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,1100",
            &format!("--virtual-time-budget={budget_ms}"),
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of `attr` on the element with id `id` in a dumped DOM.
fn attr(dom: &str, id: &str, attr: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let tag_start = dom[..at].rfind('<')?;
    let tag_end = at + dom[at..].find('>')?;
    let tag = &dom[tag_start..tag_end];
    let key = format!("{attr}=\"");
    let v = &tag[tag.find(&key)? + key.len()..];
    Some(v[..v.find('"')?].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_loaded_pool_in_a_real_browser() {
    let Some(bin) = chromium() else {
        return missing_tool("chromium is not installed (Debian package chromium)");
    };
    let mport = free_port();
    let ini = Sluice::basic_ini(
        "auth_type = trust\npool_mode = transaction\ndefault_pool_size = 4\nstats_period = 1",
        DB_LINE,
    ) + &format!("\n[sluice]\nmetrics_listen_addr = 127.0.0.1:{mport}\n");
    let s = Sluice::builder(&ini).userlist(USERLIST).start();
    let (code, page) = http_get(mport, "/").await;
    assert_eq!(code, 200);
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page loads something from elsewhere"
    );

    let bench = tokio::spawn(pgbench_script(
        s.socket_dir.clone(),
        "SELECT pg_sleep(0.002);",
        s.port,
        "trust_user",
        "app",
        8,
        6,
    ));
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;

    let url = format!("http://127.0.0.1:{mport}/");
    let b = bin.clone();
    let u = url.clone();
    let (dom, log) = tokio::task::spawn_blocking(move || headless(&b, &u, 5000, &["--dump-dom"]))
        .await
        .unwrap();
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(
        console.is_empty(),
        "console output:\n{}",
        console.join("\n")
    );
    let polls: u32 = dom
        .find("data-polls=\"")
        .map(|i| &dom[i + 12..])
        .and_then(|v| v[..v.find('"')?].parse().ok())
        .unwrap_or(0);
    assert!(polls >= 3, "the page polled {polls} times\n{dom}");
    for chart in ["clients", "servers", "rates", "latency"] {
        let id = format!("pool-app_trust_user-{chart}");
        let nonzero: u32 = attr(&dom, &id, "data-nonzero")
            .unwrap_or_else(|| panic!("no chart {id}\n{dom}"))
            .parse()
            .unwrap();
        assert!(nonzero >= 1, "chart {id} holds no data\n{dom}");
    }
    // The process panel: Sluice's server connections against PostgreSQL's max_connections (the
    // harness's cluster has 200, 3 of them reserved for superusers), learned from the server.
    let pg: u32 = attr(&dom, "pgconns", "data-nonzero")
        .unwrap_or_else(|| panic!("no chart pgconns\n{dom}"))
        .parse()
        .unwrap();
    assert!(pg >= 1, "chart pgconns holds no data\n{dom}");
    assert!(
        dom.contains("<span id=\"pgmax\">200, 197 for ordinary roles</span>"),
        "{dom}"
    );
    let status = &dom[dom.find("id=\"status\"").unwrap()..];
    assert!(!status.starts_with("id=\"status\">unreachable"), "{status}");

    // A screenshot for the docs (docs/dashboard.png is one of these).
    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard.png");
    let arg = format!("--screenshot={}", shot.display());
    tokio::task::spawn_blocking(move || headless(&bin, &url, 5000, &[&arg]))
        .await
        .unwrap();
    assert!(shot.exists(), "no screenshot");
    let (st, out, err) = bench.await.unwrap();
    assert!(st.success(), "{out}\n{err}");
}
