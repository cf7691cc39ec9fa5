#!/usr/bin/env bash
# Benchmark: direct PostgreSQL vs PgBouncer vs Sluice (pgbench, transaction pooling).
#   BENCH_DURATION=10 BENCH_REPEATS=1 bench/run.sh
# See bench/bench.py for the other knobs (BENCH_TARGETS, BENCH_SCENARIOS, BENCH_SCALE, SLUICE_BIN).
# Results: a table on stdout and bench/results/<timestamp>.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

for tool in pgbench psql python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install postgresql python3)" >&2; exit 1; }
done
[ -x "${PGBOUNCER_BIN:-/usr/sbin/pgbouncer}" ] || echo "==> pgbouncer not installed (apt-get install pgbouncer): skipped" >&2

if [ -z "${SLUICE_BIN:-}" ]; then
    if [[ ",${BENCH_TARGETS:-sluice}," == *,sluice* ]] && [ -z "${BENCH_NO_BUILD:-}" ]; then
        echo "==> cargo build --release -p sluice" >&2
        if cargo build --release -p sluice >&2; then
            SLUICE_BIN="$root/target/release/sluice"
        else
            echo "==> WARNING: building sluice failed; benchmarking without it" >&2
        fi
    elif [ -x "$root/target/release/sluice" ]; then
        SLUICE_BIN="$root/target/release/sluice"
    fi
fi
export SLUICE_BIN="${SLUICE_BIN:-}"
exec python3 "$root/bench/bench.py" "$@"
