//! scripts/build-release.sh, the run command's release build, chooses the committed profile
//! (crates/sluice/pgo/sluice.profdata) only for the rustc that made it: a profile finds functions
//! by symbol names that carry a hash of the compiler's version, so with any other rustc it would
//! match nothing. These tests ask the script's `--which` (it decides and builds nothing) in the
//! repository and in copies of it with another made.txt or no profile, and check that the
//! committed profile is an LLVM indexed profile with its provenance beside it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn which(root: &Path, pgo_env: Option<&str>) -> String {
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts/build-release.sh"))
        .arg("--which");
    cmd.env_remove("SLUICE_PGO");
    if let Some(v) = pgo_env {
        cmd.env("SLUICE_PGO", v);
    }
    let out = cmd.output().expect("bash runs scripts/build-release.sh");
    assert!(
        out.status.success(),
        "build-release.sh --which failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn rustc_vv() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn made_rustc(made: &str) -> String {
    made.lines()
        .filter_map(|l| l.strip_prefix("rustc: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A copy of the script in a scratch root, with `made` as made.txt (and a profile) if given.
fn scratch_root(made: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    fs::copy(
        repo().join("scripts/build-release.sh"),
        dir.path().join("scripts/build-release.sh"),
    )
    .unwrap();
    if let Some(made) = made {
        let pgo = dir.path().join("crates/sluice/pgo");
        fs::create_dir_all(&pgo).unwrap();
        fs::write(pgo.join("made.txt"), made).unwrap();
        fs::write(pgo.join("sluice.profdata"), b"not read by --which").unwrap();
    }
    dir
}

#[test]
fn the_repository_profile_is_chosen_exactly_when_this_rustc_made_it() {
    let made = fs::read_to_string(repo().join("crates/sluice/pgo/made.txt")).unwrap();
    let choice = which(&repo(), None);
    if made_rustc(&made) == rustc_vv() {
        assert_eq!(choice, "profiled");
    } else {
        assert!(
            choice.starts_with("plain: crates/sluice/pgo/sluice.profdata was made by rustc "),
            "{choice}"
        );
    }
    assert_eq!(which(&repo(), Some("0")), "plain: SLUICE_PGO=0");
}

#[test]
fn a_profile_from_another_rustc_is_not_used() {
    let made = "date: 2026-01-01T00:00Z\nsource: 0000000\ntraining: bench/pgo_train.py\n\
                rustc: rustc 1.0.0 (a28ccfc94 2015-05-13)\nrustc: release: 1.0.0\n";
    let root = scratch_root(Some(made));
    let choice = which(root.path(), None);
    assert!(
        choice.starts_with("plain: crates/sluice/pgo/sluice.profdata was made by rustc 1.0.0 (a28ccfc94 2015-05-13), this is rustc "),
        "{choice}"
    );
    assert!(choice.contains("scripts/build-pgo.sh --commit"), "{choice}");
}

#[test]
fn a_profile_from_this_rustc_is_used_and_none_means_plain() {
    let made = format!(
        "date: 2026-01-01T00:00Z\nsource: 0000000\n{}\n",
        rustc_vv()
            .lines()
            .map(|l| format!("rustc: {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let root = scratch_root(Some(&made));
    assert_eq!(which(root.path(), None), "profiled");
    let bare = scratch_root(None);
    assert_eq!(
        which(bare.path(), None),
        "plain: no crates/sluice/pgo/sluice.profdata and made.txt"
    );
}

#[test]
fn the_committed_profile_is_an_llvm_indexed_profile_with_its_provenance() {
    let pgo = repo().join("crates/sluice/pgo");
    let data = fs::read(pgo.join("sluice.profdata")).unwrap();
    // IndexedInstrProf's magic: 0xff 'lprofi' 0x81, as a little-endian u64.
    assert_eq!(&data[..8], b"\xfflprofi\x81", "not an indexed LLVM profile");
    let made = fs::read_to_string(pgo.join("made.txt")).unwrap();
    for key in [
        "date: ",
        "source: ",
        "training: bench/pgo_train.py",
        "rustc: release: ",
    ] {
        assert!(
            made.lines().any(|l| l.starts_with(key)),
            "made.txt lacks {key:?}:\n{made}"
        );
    }
}
