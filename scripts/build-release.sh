#!/usr/bin/env bash
# The release build that the run command (scripts/run.sh) and the benches use: `cargo build
# --release -p sluice`, laid out by the committed profile crates/sluice/pgo/sluice.profdata when
# it was made by this very rustc, else plain. Prints the binary's path as the last line of
# stdout; cargo's output goes to stderr.
#
#   scripts/build-release.sh              # target/profiled/release/sluice, or target/release/sluice
#   SLUICE_PGO=0 scripts/build-release.sh # the plain build, whatever the profile
#   scripts/build-release.sh --which      # builds nothing: prints "profiled" or "plain: <why>"
#
# Why a profile: a pooler's work per query or login is short and spread over many functions (the
# event loop, the relay, the pool), and a profile lets the compiler lay the hot paths out together
# and inline by use: 14 - 17 % fewer instructions per login and per transaction, and a quarter to a
# half (per transaction) to three fifths (per login) of the instruction-cache misses (docs/performance.md,
# "The run command's build is profile-guided"). scripts/build-pgo.sh --commit makes the profile;
# functions changed since then are compiled as without one.
#
# Why "this very rustc": a profile finds functions by their symbol names, and those carry a hash
# of the compiler's version (cargo's -C metadata). With another rustc nothing would match, so the
# build is the plain one, after a note that says how to make a profile for that toolchain.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pgo="$root/crates/sluice/pgo"

which=""
case "${1:-}" in
    --which) which=1 ;;
    "") ;;
    *) echo "usage: scripts/build-release.sh [--which]" >&2; exit 2 ;;
esac

# "profiled", or "plain: <why>".
choose() {
    if [ "${SLUICE_PGO:-1}" = "0" ]; then
        echo "plain: SLUICE_PGO=0"
    elif [ ! -f "$pgo/sluice.profdata" ] || [ ! -f "$pgo/made.txt" ]; then
        echo "plain: no crates/sluice/pgo/sluice.profdata and made.txt"
    else
        local made here
        made=$(sed -n 's/^rustc: //p' "$pgo/made.txt")
        here=$(rustc -vV)
        if [ "$made" != "$here" ]; then
            echo "plain: crates/sluice/pgo/sluice.profdata was made by $(echo "$made" | head -n1), this is" \
                "$(echo "$here" | head -n1) (scripts/build-pgo.sh --commit makes a profile for this toolchain)"
        else
            echo "profiled"
        fi
    fi
}

plain() {
    cargo build --release -p sluice >&2
    echo "${CARGO_TARGET_DIR:-$root/target}/release/sluice"
}

choice=$(choose)
if [ -n "$which" ]; then
    echo "$choice"
    exit 0
fi
if [ "$choice" != "profiled" ]; then
    [ "$choice" = "plain: SLUICE_PGO=0" ] || echo "==> building without a profile: ${choice#plain: }" >&2
    plain
    exit 0
fi

# How old the profile is, for whoever changes the hot code: commits to the code since it was made.
source=$(sed -n 's/^source: \([0-9a-f]*\).*/\1/p' "$pgo/made.txt")
since=$(git rev-list --count "$source..HEAD" -- crates ':!crates/sluice/pgo' Cargo.toml Cargo.lock 2>/dev/null || echo "?")
echo "==> building with crates/sluice/pgo/sluice.profdata (made at ${source:0:10}; commits to the code since: $since)" >&2

# Its own target directory, so that a developer's plain `cargo build --release` and this one do
# not rebuild each other (RUSTFLAGS are part of cargo's fingerprint).
if RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$pgo/sluice.profdata" CARGO_TARGET_DIR="$root/target/profiled" \
        cargo build --release -p sluice >&2; then
    echo "$root/target/profiled/release/sluice"
else
    echo "==> the build with the profile failed; building without it" >&2
    plain
fi
