//! deploy/: the systemd unit is one systemd accepts as written (`systemd-analyze verify` prints
//! nothing: it exits 0 even for unknown keys or values, and only warns), with ExecStart pointed at
//! the binary under test. Needs systemd-analyze (Debian package systemd, installed by
//! scripts/test.sh): without it the test fails (`SLUICE_ALLOW_MISSING_TOOLS=1`: a loud line).

use std::path::Path;
use std::process::Command;

#[test]
fn the_systemd_unit_verifies_without_a_warning() {
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        return sluice_e2e::missing_tool(
            "systemd-analyze is not installed (Debian package systemd)",
        );
    };
    assert!(out.status.success());
    let unit_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/systemd/sluice.service"
    );
    let unit = std::fs::read_to_string(unit_path).unwrap();
    assert!(
        unit.contains("Type=notify"),
        "the unit must wait for READY=1"
    );
    assert!(unit.contains("ExecStart=/usr/local/bin/sluice "));
    let bin = sluice_e2e::sluice_bin();
    let dir = tempfile::Builder::new()
        .prefix("sluice-e2e-unit-")
        .tempdir()
        .unwrap();
    let here = dir.path().join("sluice.service");
    std::fs::write(
        &here,
        unit.replace("/usr/local/bin/sluice", &bin.display().to_string()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(Path::new(&here))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.trim().is_empty(), "systemd-analyze verify:\n{said}");
}
