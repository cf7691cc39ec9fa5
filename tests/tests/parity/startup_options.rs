//! The `options` startup parameter side by side: `-c name=value` and `--name=value`, several in
//! one value, backslash-escaped spaces, tracked parameters (applied to the server) against others
//! (refused unless ignore_startup_parameters names them or `options`).

use std::time::Duration;

use sluice_e2e::{error_fields, RawConn};

use super::{bad_input_common::read_until_ready, pair, report};

/// Log in with `options` (none: no such parameter) and other startup parameters, then read the
/// settings in `show` from the server: their values, or the login's error.
async fn with_options(
    port: u16,
    options: Option<&str>,
    more: &[(&str, &str)],
    show: &[&str],
) -> String {
    let mut params = vec![("user", "trust_user"), ("database", "app")];
    if let Some(o) = options {
        params.push(("options", o));
    }
    params.extend_from_slice(more);
    let mut c = RawConn::connect(port).await;
    c.send(&RawConn::startup_packet(&params)).await;
    loop {
        match c.read_message(Duration::from_secs(5)).await {
            Some((b'E', body)) => {
                let f = error_fields(&body);
                return format!("{} {}", f[&b'C'], f[&b'M']);
            }
            Some((b'Z', _)) => break,
            Some(_) => {}
            None => return "closed".into(),
        }
    }
    let mut out = Vec::new();
    for name in show {
        c.send(&RawConn::message(b'Q', format!("SHOW {name}\0").as_bytes()))
            .await;
        let msgs = read_until_ready(&mut c).await;
        let value = msgs
            .iter()
            .find_map(|(t, body)| match t {
                b'D' => {
                    // One column: count (2), length (4), bytes.
                    let len = i32::from_be_bytes(body[2..6].try_into().unwrap());
                    let v = String::from_utf8_lossy(&body[6..6 + len as usize]).into_owned();
                    // Long values by their length (application_name of hundreds of bytes).
                    Some(if v.len() > 40 {
                        format!("<{} bytes>", v.len())
                    } else {
                        v
                    })
                }
                b'E' => Some(format!("error {}", error_fields(body)[&b'M'])),
                _ => None,
            })
            .unwrap_or_default();
        out.push(format!("{name}={value}"));
    }
    out.join(", ")
}

/// The cases of one configuration: (case name, options, other parameters, settings to show).
type Case<'a> = (
    &'a str,
    Option<&'a str>,
    &'a [(&'a str, &'a str)],
    &'a [&'a str],
);

async fn run(
    results: &mut Vec<(String, String, String)>,
    extra: &str,
    label: &str,
    cases: &[Case<'_>],
) {
    let Some(p) = pair(&format!("auth_type = trust\n{extra}")) else {
        return;
    };
    for (name, options, more, show) in cases {
        results.push((
            format!("{label}{name}"),
            with_options(p.pgb.port, *options, more, show).await,
            with_options(p.sl.port, *options, more, show).await,
        ));
    }
}

/// `-c application_name=aaa...` with `n` bytes of name.
fn long_app(n: usize) -> String {
    format!("-c application_name={}", "a".repeat(n))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_options_startup_parameter_matches_pgbouncer() {
    if !sluice_e2e::Anchor::available() {
        return;
    }
    const DS: &[&str] = &["DateStyle"];
    const TZ_DS: &[&str] = &["DateStyle", "TimeZone"];
    const EFD: &[&str] = &["extra_float_digits"];
    const APP: &[&str] = &["application_name"];
    const NONE: &[(&str, &str)] = &[];
    let mut results = Vec::new();
    run(
        &mut results,
        "",
        "",
        &[
            ("-c DateStyle=YMD", Some("-c DateStyle=YMD"), NONE, DS),
            ("-cDateStyle=YMD", Some("-cDateStyle=YMD"), NONE, DS),
            ("--DateStyle=YMD", Some("--DateStyle=YMD"), NONE, DS),
            ("lower-case name", Some("-c datestyle=YMD"), NONE, DS),
            (
                "two in one value",
                Some("-c DateStyle=YMD -c TimeZone=Europe/Berlin"),
                NONE,
                TZ_DS,
            ),
            (
                "mixed spellings",
                Some("--TimeZone=UTC  -c DateStyle=DMY"),
                NONE,
                TZ_DS,
            ),
            (
                "backslash-escaped space",
                Some("-c application_name=my\\ app"),
                NONE,
                APP,
            ),
            (
                "escaped backslash",
                Some("-c application_name=a\\\\b"),
                NONE,
                APP,
            ),
            (
                "options over a parameter",
                Some("-c DateStyle=YMD"),
                &[("DateStyle", "DMY")],
                DS,
            ),
            (
                "-c extra_float_digits=2",
                Some("-c extra_float_digits=2"),
                NONE,
                EFD,
            ),
            (
                "--extra_float_digits=2",
                Some("--extra_float_digits=2"),
                NONE,
                EFD,
            ),
            ("not a setting", Some("-x"), NONE, DS),
            ("no value", Some("-c DateStyle"), NONE, DS),
            ("empty", Some(""), NONE, DS),
            ("only spaces", Some("   "), NONE, DS),
            ("leading space", Some("  -c DateStyle=YMD"), NONE, DS),
            ("trailing space", Some("-c DateStyle=YMD "), NONE, DS),
            ("= in the value", Some("-c application_name=a=b"), NONE, APP),
            ("value of 63 bytes", Some(&long_app(63)), NONE, APP),
            ("value of 64 bytes", Some(&long_app(64)), NONE, APP),
            // PgBouncer drops a tracked value longer than its cache keeps (Sluice: deliberate).
            (
                "application_name of 200 bytes in options",
                Some(&long_app(200)),
                NONE,
                APP,
            ),
            (
                "application_name of 200 bytes",
                None,
                &[("application_name", &"a".repeat(200))],
                APP,
            ),
            (
                "25 settings",
                Some("-c DateStyle=YMD ".repeat(25).trim_end()),
                NONE,
                DS,
            ),
            (
                "IntervalStyle (track_extra_parameters)",
                Some("-c IntervalStyle=iso_8601"),
                NONE,
                &["IntervalStyle"],
            ),
        ],
    )
    .await;
    run(
        &mut results,
        "ignore_startup_parameters = extra_float_digits",
        "ignored extra_float_digits: ",
        &[
            (
                "-c extra_float_digits=2",
                Some("-c extra_float_digits=2"),
                NONE,
                EFD,
            ),
            (
                "with DateStyle",
                Some("-c extra_float_digits=2 -c DateStyle=YMD"),
                NONE,
                DS,
            ),
            (
                "-c work_mem=1MB",
                Some("-c work_mem=1MB"),
                NONE,
                &["work_mem"],
            ),
        ],
    )
    .await;
    run(
        &mut results,
        "ignore_startup_parameters = options",
        "ignored options: ",
        &[
            (
                "-c work_mem=1MB",
                Some("-c work_mem=1MB -c DateStyle=YMD"),
                NONE,
                &["work_mem", "DateStyle"],
            ),
            ("not a setting", Some("-x"), NONE, DS),
        ],
    )
    .await;
    // The three configurations' cases.
    report(&results, 24 + 3 + 2);
}

/// Two clients with different `options` take turns on the one server of a transaction-mode pool:
/// each sees its own DateStyle (set on the server when it changes hands).
async fn take_turns(port: u16) -> String {
    async fn login(port: u16, options: &str) -> RawConn {
        let mut c = RawConn::connect(port).await;
        c.send(&RawConn::startup_packet(&[
            ("user", "trust_user"),
            ("database", "app"),
            ("options", options),
        ]))
        .await;
        read_until_ready(&mut c).await;
        c
    }
    async fn show(c: &mut RawConn) -> String {
        c.send(&RawConn::message(b'Q', b"SHOW DateStyle\0")).await;
        let msgs = read_until_ready(c).await;
        msgs.iter()
            .find(|(t, _)| *t == b'D')
            .map(|(_, body)| String::from_utf8_lossy(&body[6..]).into_owned())
            .unwrap_or_default()
    }
    let mut a = login(port, "-c DateStyle=YMD").await;
    let mut b = login(port, "--DateStyle=DMY").await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(show(&mut a).await);
        seen.push(show(&mut b).await);
    }
    seen.join(" / ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_follow_the_client_from_server_to_server() {
    let Some(p) = pair("auth_type = trust\npool_mode = transaction\ndefault_pool_size = 1") else {
        return;
    };
    report(
        &[(
            "options in transaction mode, two clients on one server".to_string(),
            take_turns(p.pgb.port).await,
            take_turns(p.sl.port).await,
        )],
        1,
    );
}
