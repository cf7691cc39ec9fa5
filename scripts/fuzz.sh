#!/usr/bin/env bash
# Short fuzzing pass over every cargo-fuzz target in fuzz/, from the committed seed corpus.
# Called by scripts/test.sh; runnable alone. A crash (or a fuzz build failure) fails the script.
# Without a nightly toolchain or cargo-fuzz, and no network to install them, it fails loudly
# (exit 1), unless SLUICE_ALLOW_MISSING_TOOLS=1 (then a loud NOT RUN and exit 0).
#
#   FUZZ_SECONDS   total fuzzing time, split evenly across targets (default 60)
#   FUZZ_TARGETS   space-separated subset of targets (default: all, from `cargo fuzz list`)
#   FUZZ_RUNS      per-target iteration cap, a safety bound next to the time (default 5000000)
#
# `scripts/fuzz.sh build` stops after the toolchain and the build (scripts/test.sh runs it in the
# background, at the lowest CPU priority, while the tests run; the fuzzing pass then finds it built).
#
# Longer runs: see fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> fuzz: %s\n' "$*" >&2; }
# A missing toolchain fails the pass (CI must not go green without fuzzing); a developer may opt
# out locally with SLUICE_ALLOW_MISSING_TOOLS=1, as for the other tools scripts/test.sh provides.
skip() {
    printf '\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
    if [ "${SLUICE_ALLOW_MISSING_TOOLS:-0}" = 1 ]; then
        printf '!!! NOT RUN (SLUICE_ALLOW_MISSING_TOOLS=1): fuzzing: %s\n' "$*" >&2
        printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n' >&2
        exit 0
    fi
    printf '!!! FAILED: fuzzing cannot run: %s (SLUICE_ALLOW_MISSING_TOOLS=1 to opt out locally)\n' "$*" >&2
    printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n' >&2
    exit 1
}

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_RUNS=${FUZZ_RUNS:-5000000}

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    . "$HOME/.cargo/env"
fi
command -v rustup >/dev/null 2>&1 || skip "rustup not found (needed for the nightly toolchain)"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal >&2 ||
        skip "cannot install the nightly toolchain (no network?)"
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked >&2 || skip "cannot install cargo-fuzz (no network?)"
fi
cargo +nightly fetch --manifest-path fuzz/Cargo.toml >&2 ||
    skip "cannot fetch the fuzz crate's dependencies (no network?)"

cd fuzz
log "building the fuzz targets (nightly, ASan, debug assertions)"
cargo +nightly fuzz build >&2
if [ "${1:-}" = build ]; then
    log "built"
    exit 0
fi

targets=${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}
read -r -a targets <<<"$(echo $targets)"
per=$((FUZZ_SECONDS / ${#targets[@]}))
[ "$per" -ge 1 ] || per=1
log "${#targets[@]} targets, ${per}s each"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
    # Run from a copy: libFuzzer adds what it finds to the corpus dir, the tree stays clean.
    mkdir -p "$work/$t"
    if [ -d "corpus/$t" ]; then cp -R "corpus/$t/." "$work/$t/"; fi
    mkdir -p "$work/$t.artifacts"
    if cargo +nightly fuzz run "$t" "$work/$t" -- \
        -max_total_time="$per" -runs="$FUZZ_RUNS" -timeout=10 -rss_limit_mb=2048 \
        -max_len=16384 -artifact_prefix="$work/$t.artifacts/" -print_final_stats=1 \
        >"$work/$t.log" 2>&1; then
        log "$t: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$' || echo '?') runs)"
    else
        failed+=("$t")
        log "$t: FAILED"
        tail -n 60 "$work/$t.log" >&2
        mkdir -p "artifacts/$t"
        for a in "$work/$t.artifacts"/*; do
            [ -f "$a" ] || continue
            cp "$a" "artifacts/$t/"
            a="artifacts/$t/$(basename "$a")"
            log "crash input fuzz/$a (base64): $(base64 -w0 "$a")"
            log "reproduce: cd fuzz && cargo +nightly fuzz run $t $a"
        done
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    log "FAILED targets: ${failed[*]}"
    exit 1
fi
log "all ${#targets[@]} targets ran ${per}s without a crash"
