//! docs/sluice.1: groff renders it without a warning, it has the sections an operator looks for,
//! and it describes exactly the long options the built binary's `--help` lists (an option added
//! to the clap definition fails this test until the page describes it). Needs groff (Debian
//! package groff-base, installed by scripts/test.sh): without it the tests fail
//! (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line, nothing asserted).

use std::collections::BTreeSet;
use std::process::Command;

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/sluice.1");

/// `groff -man -Tutf8 -ww` of the page: (stdout as plain text, stderr). Without groff the test
/// fails (`missing_tool`); None only under the opt-out.
fn render() -> Option<(String, String)> {
    let out = match Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-P-cbou", PAGE])
        .env("LC_ALL", "C.UTF-8")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            sluice_e2e::missing_tool(&format!(
                "groff is not runnable ({e}); Debian package groff-base"
            ));
            return None;
        }
    };
    assert!(out.status.success(), "groff failed: {:?}", out);
    // groff's utf8 device may print \- as U+2212 and hyphens as U+2010; compare as ASCII.
    let text = String::from_utf8_lossy(&out.stdout).replace(['\u{2212}', '\u{2010}'], "-");
    Some((text, String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// Every `--long` option in a text.
fn long_options(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-') {
            continue;
        }
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
            found.insert(format!("--{name}"));
        }
    }
    found
}

/// The lines of one `NAME` section of the rendered page (up to the next unindented heading).
fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != name);
    assert!(lines.next().is_some(), "no {name} section in\n{text}");
    lines
        .take_while(|l| l.is_empty() || l.starts_with(char::is_whitespace))
        .collect()
}

#[test]
fn the_man_page_renders_without_a_warning() {
    let Some((text, warnings)) = render() else {
        return;
    };
    assert!(
        warnings.trim().is_empty(),
        "groff -ww warnings:\n{warnings}"
    );
    for heading in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "SIGNALS",
        "ADMIN CONSOLE",
        "FILES",
        "ENVIRONMENT",
        "EXIT STATUS",
        "SEE ALSO",
    ] {
        assert!(!section(&text, heading).is_empty(), "empty {heading}");
    }
    let signals = section(&text, "SIGNALS").join("\n");
    for sig in [
        "SIGHUP", "SIGINT", "SIGTERM", "SIGQUIT", "SIGUSR1", "SIGUSR2",
    ] {
        assert!(signals.contains(sig), "{sig} missing from SIGNALS");
    }
}

#[test]
fn the_man_page_describes_every_option_the_binary_knows() {
    let Some((text, _)) = render() else {
        return;
    };
    let bin = sluice_e2e::sluice_bin();
    let out = Command::new(&bin).arg("--help").output().unwrap();
    assert!(out.status.success(), "{} --help: {out:?}", bin.display());
    let help = String::from_utf8_lossy(&out.stdout);
    let known = long_options(&help);
    assert!(
        known.contains("--daemon") && known.contains("--help"),
        "options not read from --help:\n{help}"
    );
    let described = long_options(&section(&text, "OPTIONS").join("\n"));
    assert_eq!(
        described, known,
        "docs/sluice.1 OPTIONS and `sluice --help` disagree (page left, binary right)"
    );
    // Each short option clap lists (`-d, --daemon`) is named in the page's OPTIONS as well.
    let options = section(&text, "OPTIONS").join("\n");
    for line in help.lines().map(str::trim) {
        if let Some((short, long)) = line.split_once(", --") {
            let long = long
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches("...");
            assert!(
                options.contains(&format!("{short}, --{long}")),
                "`{short}, --{long}` not in the page's OPTIONS"
            );
        }
    }
}
