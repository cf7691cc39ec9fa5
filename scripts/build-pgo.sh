#!/usr/bin/env bash
# A profile-guided release build of sluice (PGO): build it instrumented, run it through
# bench/pgo_train.py's mix of loads against a throwaway PostgreSQL, merge the counts and build again
# with them. Why: the pooler's work per query is short and spread over many functions (tokio, the
# relay, the pool), and its code for one query does not stay in the first-level instruction cache
# (callgrind: 187 - 230 misses per -S transaction, PgBouncer 2); laid out by a profile, the hot
# paths take 18 % fewer instructions and a third of the misses (docs/performance.md, "Profile-guided
# build"). The output is `target/pgo/sluice`; `cargo build --release` is left as it is.
#
#   scripts/build-pgo.sh            # 17 minutes on 2 cores here (two release builds from scratch, ~1 min of training)
#   scripts/build-pgo.sh --commit   # the same, and the profile becomes crates/sluice/pgo/sluice.profdata,
#                                   # the one scripts/build-release.sh (the run command's build) uses
#
# A profile names functions by their symbols, which carry a hash of the compiler's version, so it
# serves the rustc that made it (crates/sluice/pgo/made.txt records which); run --commit again after
# changing the toolchain or much of the hot code.
#
# Needs what the tests need (PostgreSQL, pgbench, python3: scripts/test.sh installs them) and
# rustup's llvm-tools component for llvm-profdata (added here when missing). As root, PostgreSQL
# runs as the `postgres` user, as in the tests.
set -euo pipefail
commit=""
case "${1:-}" in
    --commit) commit=1 ;;
    "") ;;
    *) echo "usage: scripts/build-pgo.sh [--commit]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    echo "==> adding rustup's llvm-tools (llvm-profdata)"
    rustup component add llvm-tools
fi
out="$root/target/pgo"
# The code trained, as it is before the build (the profile this run writes into crates/ is not it).
source="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD -- crates Cargo.toml Cargo.lock ':!crates/sluice/pgo' 2>/dev/null || echo ' (with uncommitted changes)')"
rm -rf "$out/profiles"; mkdir -p "$out/profiles"
echo "==> 1/3: instrumented build (target/pgo/gen)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$out/profiles" CARGO_TARGET_DIR="$out/gen" \
    cargo build --release -p sluice
echo "==> 2/3: training run (bench/pgo_train.py)"
# RUSTFLAGS instrumented the build's own programs too (build scripts, and proc macros, which rustc
# runs while compiling): what they wrote while the build ran is not Sluice's and goes. (Their
# counts once doubled the profile, 43,290 functions against 14,903, syn's and proc_macro's among
# them, with the same symbols as the binary's for generic core and alloc code.)
rm -f "$out"/profiles/*.profraw
LLVM_PROFILE_FILE="$out/profiles/sluice-%p-%m.profraw" python3 bench/pgo_train.py "$out/gen/release/sluice"
ls "$out"/profiles/sluice-*.profraw > /dev/null 2>&1 || { echo "no profile was written" >&2; exit 1; }
"$profdata" merge -o "$out/sluice.profdata" "$out"/profiles/sluice-*.profraw
if [ -n "$commit" ]; then
    dest="$root/crates/sluice/pgo"
    mkdir -p "$dest"
    cp "$out/sluice.profdata" "$dest/sluice.profdata"
    {
        echo "# Made by scripts/build-pgo.sh --commit; scripts/build-release.sh uses the profile only with this rustc."
        echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
        echo "source: $source"
        echo "training: bench/pgo_train.py"
        rustc -vV | sed 's/^/rustc: /'
    } > "$dest/made.txt"
    echo "==> committed profile: $dest/sluice.profdata ($(du -k "$dest/sluice.profdata" | cut -f1) KiB), $dest/made.txt"
    # The build with it is the run command's own, so that it is not built twice.
    echo "==> 3/3: build with the profile (scripts/build-release.sh, target/profiled)"
    bin=$("$root/scripts/build-release.sh" | tail -n1)
    [ "$bin" = "$root/target/profiled/release/sluice" ] ||
        { echo "scripts/build-release.sh did not build with the new profile ($bin)" >&2; exit 1; }
    cp "$bin" "$out/sluice"
else
    echo "==> 3/3: build with the profile (target/pgo/use)"
    RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$out/sluice.profdata" CARGO_TARGET_DIR="$out/use" \
        cargo build --release -p sluice
    cp "$out/use/release/sluice" "$out/sluice"
fi
echo "==> profile-guided build: $out/sluice ($("$out/sluice" --version | head -n1))"
