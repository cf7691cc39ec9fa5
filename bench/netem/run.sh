#!/usr/bin/env bash
# The seed's Kubernetes latency experiment (seed 004): pgbench `;` with 1000 clients on 8 threads
# across a veth pair delayed by 1 ms +- 0.1 ms (tc netem, or bench/netem/relay where the kernel has
# no sch_netem), through one PgBouncer, two PgBouncers with so_reuseport, Sluice, and directly.
# Needs root (network namespace, veth, tc); PostgreSQL and PgBouncer run as postgres.
#   sudo bench/netem/run.sh                               # 2 interleaved repeats of 15 s, ~3 min
#   sudo BENCH_LAYOUT=split bench/netem/run.sh            # poolers beside pgbench, delay before PostgreSQL
#   sudo BENCH_DURATION=5 BENCH_REPEATS=1 bench/netem/run.sh   # quick check
# Knobs and output: bench/README.md ("Latency across a delayed link"). Not run by scripts/test.sh.
# Raw outputs (stdout, results.json, every pgbench output, machine.txt): bench/results/<date>-netem/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. "$root/bench/lib/results.sh"
[ "$(id -u)" = 0 ] || { echo "bench/netem needs root (ip netns, veth, tc): run it with sudo" >&2; exit 1; }
for tool in ip tc pgbench psql runuser python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install iproute2 postgresql python3)" >&2; exit 1; }
done
target_dir=${CARGO_TARGET_DIR:-$root/target}
if [ -z "${BENCH_NO_BUILD:-}" ]; then
    if [ -z "${SLUICE_BIN:-}" ]; then
        echo "==> cargo build --release -p sluice" >&2
        cargo build --release -p sluice >&2
    fi
    if [ -z "${RELAY_BIN:-}" ]; then
        echo "==> cargo build --release -p delay-relay" >&2
        cargo build --release -p delay-relay >&2
    fi
fi
export SLUICE_BIN="${SLUICE_BIN:-$target_dir/release/sluice}"
export RELAY_BIN="${RELAY_BIN:-$target_dir/release/delay-relay}"
export SLUICE_ALLOW_ROOT=1   # Sluice runs as root here, in the bench's scheduling group
# The driver removes what it made; this is the backstop if it is killed outright.
export BENCH_NETNS="slb$$"
cleanup() {
    for pid in $(ip netns pids "$BENCH_NETNS" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$BENCH_NETNS" 2>/dev/null || true
    ip link del "${BENCH_NETNS:0:11}r" 2>/dev/null || true
}
trap cleanup EXIT
if [[ ",${BENCH_TARGETS:-pgbouncer}," == *,pgbouncer* ]]; then bench_pgbouncer || exit 1; fi
BENCH_COMMAND="bench/netem/run.sh $* ($(env | grep -E '^(BENCH_|SLUICE_BIN|PGBOUNCER_BIN|RELAY_BIN)' | grep -v BENCH_NETNS | sort | tr '\n' ' '))"
bench_results_init netem
python3 "$root/bench/netem/netem.py" "$@" 2> >(tee "$BENCH_OUT/stderr.txt" >&2) | tee "$BENCH_OUT/stdout.txt"
