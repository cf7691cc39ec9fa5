#!/usr/bin/env bash
# bench/login_storm.py with its raw outputs kept: bench/results/<YYYY-MM-DD>-login-storm/ gets
# machine.txt (CPU, kernel, commit, versions), stdout.txt (the table and the progress lines) and
# login-storm.json (every run's figures). PgBouncer 1.25.2 from ../shared/anchors unless
# PGBOUNCER_BIN is set; SLUICE_BIN defaults to what scripts/build-release.sh (the run command's
# build) builds.
#
#   STORM_REPEATS=3 bench/login_storm.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/bench/lib/results.sh"
bench_pgbouncer || exit 1
[ -n "${SLUICE_BIN:-}" ] || SLUICE_BIN=$("$root/scripts/build-release.sh" | tail -n1)
SLUICE_BIN=$(readlink -f "$SLUICE_BIN")
[ -x "$SLUICE_BIN" ] || { echo "==> no sluice at $SLUICE_BIN" >&2; exit 1; }
export SLUICE_BIN
BENCH_COMMAND="bench/login_storm.sh (STORM_REPEATS=${STORM_REPEATS:-1} STORM_DURATION=${STORM_DURATION:-20} STORM_SELECT_DURATION=${STORM_SELECT_DURATION:-default} STORM_LOGINS=${STORM_LOGINS:-2000} STORM_CONCURRENCY=${STORM_CONCURRENCY:-50} STORM_SETTLE=${STORM_SETTLE:-5})"
export BENCH_COMMAND
bench_results_init login-storm
python3 bench/login_storm.py 2>&1 | tee "$BENCH_OUT/stdout.txt"
