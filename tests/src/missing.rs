//! What a test does when a tool or reference binary it needs is not here (the reference
//! PgBouncer, chromium, buildah, go, groff, systemd-analyze, kubernetes-validate, ...).
//! scripts/test.sh installs every one of them, so where the test command runs a missing one is a
//! defect: the test fails and says what is missing. A developer without them may set
//! `SLUICE_ALLOW_MISSING_TOOLS=1`; the test then prints a loud line and returns without
//! asserting anything.

use std::io::Write;

/// The opt-out: `SLUICE_ALLOW_MISSING_TOOLS=1` lets a test pass without the tool it needs.
pub const ALLOW_MISSING_TOOLS: &str = "SLUICE_ALLOW_MISSING_TOOLS";

/// A test cannot run because `what` is missing (say what and how to get it). Fails the test
/// unless `SLUICE_ALLOW_MISSING_TOOLS=1`; then prints a loud line to stderr and returns, and the
/// caller returns at once (`else { return missing_tool("...") }`).
#[track_caller]
pub fn missing_tool(what: &str) {
    if std::env::var(ALLOW_MISSING_TOOLS).as_deref() != Ok("1") {
        panic!(
            "{what}\nscripts/test.sh provides it (and fails loudly when it cannot); to let the tests that need it pass without \
             running them, set {ALLOW_MISSING_TOOLS}=1"
        );
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("(a test)")
        .to_string();
    // Straight to the process's stderr, not through eprintln!: libtest captures what the print
    // macros write (and shows it only for a failed test), and this line is meant to be seen.
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!! NOT RUN ({ALLOW_MISSING_TOOLS}=1): {test} did not check what needs it: {what}\n"
    );
}

/// The tool when it was found (`Ok`); otherwise (`Err` says what is missing) `missing_tool` and
/// None (reached only under the opt-out), for the caller to return on. Call it on the test's
/// own thread, so that the opt-out's line names the test.
#[track_caller]
pub fn require<T>(found: Result<T, String>) -> Option<T> {
    match found {
        Ok(t) => Some(t),
        Err(what) => {
            missing_tool(&what);
            None
        }
    }
}
