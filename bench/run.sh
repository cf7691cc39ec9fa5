#!/usr/bin/env bash
# Benchmark: direct PostgreSQL vs PgBouncer vs Sluice (1 and all worker threads): pgbench in
# transaction pooling (tps, p50/p99, CPU per transaction and per login) and RSS per idle client;
# for two scenarios also bench/floor's bare forwarder (epoll, io_uring) as the floor of pooler CPU.
#   bench/run.sh                                     # 3 interleaved repeats of 10 s, ~30 min
#   BENCH_DURATION=3 BENCH_REPEATS=1 BENCH_IDLE_CLIENTS=2000 bench/run.sh   # quick check
# Knobs (BENCH_TARGETS, BENCH_SCENARIOS, BENCH_IDLE_CLIENTS, SLUICE_BIN, ...): bench/README.md.
# Results: per-run table and summary on stdout; the raw outputs (stdout.txt, stderr.txt,
# results.json, every pgbench output, machine.txt) in bench/results/<YYYY-MM-DD>-bench/ (BENCH_OUT).
# PgBouncer: PGBOUNCER_BIN, else ../shared/anchors/pgbouncer-1.25.2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/bench/lib/results.sh"

for tool in pgbench psql python3 openssl; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install postgresql python3 openssl)" >&2; exit 1; }
done
if [[ ",${BENCH_TARGETS:-pgbouncer}," == *,pgbouncer,* ]]; then bench_pgbouncer || exit 1; fi

if [ -z "${SLUICE_BIN:-}" ]; then
    if [[ ",${BENCH_TARGETS:-sluice}," == *,sluice* ]] && [ -z "${BENCH_NO_BUILD:-}" ]; then
        echo "==> scripts/build-release.sh (the run command's build)" >&2
        if built=$("$root/scripts/build-release.sh"); then
            SLUICE_BIN=$(echo "$built" | tail -n1)
        else
            echo "==> WARNING: building sluice failed; benchmarking without it" >&2
        fi
    elif [ -x "$root/target/release/sluice" ]; then
        SLUICE_BIN="$root/target/release/sluice"
    fi
fi
export SLUICE_BIN="${SLUICE_BIN:-}"

# The floor forwarder (bench/floor: the least CPU any pooler can spend per transaction here).
floor_manifest="$root/bench/floor/Cargo.toml"
floor_built="$root/bench/floor/target/release/floor"
if [ -z "${FLOOR_BIN:-}" ] && [[ ",${BENCH_TARGETS:-floor}," == *,floor* ]]; then
    if [ -z "${BENCH_NO_BUILD:-}" ]; then
        echo "==> cargo build --release --manifest-path bench/floor/Cargo.toml" >&2
        cargo build --release --manifest-path "$floor_manifest" >&2 \
            || echo "==> WARNING: building bench/floor failed; benchmarking without it" >&2
    fi
    [ -x "$floor_built" ] && FLOOR_BIN="$floor_built"
fi
export FLOOR_BIN="${FLOOR_BIN:-}"
BENCH_COMMAND="bench/run.sh $* ($(env | grep -E '^(BENCH_|SLUICE_BIN|PGBOUNCER_BIN|FLOOR_BIN)' | sort | tr '\n' ' '))"
bench_results_init bench
python3 "$root/bench/bench.py" "$@" 2> >(tee "$BENCH_OUT/stderr.txt" >&2) | tee "$BENCH_OUT/stdout.txt"
