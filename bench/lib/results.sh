# Sourced by the bench scripts: where a run's raw outputs go, what machine and versions made them,
# and which PgBouncer is compared.
#
#   bench_results_init NAME   sets and creates BENCH_OUT (default bench/results/<YYYY-MM-DD>-NAME,
#                             -2, -3, ... when taken) and writes BENCH_OUT/machine.txt
#   bench_pgbouncer           sets PGBOUNCER_BIN: as given, else ../shared/anchors/pgbouncer-1.25.2
#                             beside the repository; stops when it is not there
#
# bench/results/ is committed: a figure in README or docs/performance.md points at the folder its
# raw outputs are in. Set BENCH_OUT to put a run elsewhere (a smoke run, say).

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

bench_pgbouncer() {
    if [ -z "${PGBOUNCER_BIN:-}" ]; then
        PGBOUNCER_BIN="$bench_root/../shared/anchors/pgbouncer-1.25.2"
        if [ ! -x "$PGBOUNCER_BIN" ]; then
            echo "==> no PgBouncer 1.25.2 at $PGBOUNCER_BIN: set PGBOUNCER_BIN to the PgBouncer to compare with" >&2
            return 1
        fi
    fi
    [ -x "$PGBOUNCER_BIN" ] || { echo "==> PGBOUNCER_BIN=$PGBOUNCER_BIN is not executable" >&2; return 1; }
    PGBOUNCER_BIN=$(readlink -f "$PGBOUNCER_BIN")
    export PGBOUNCER_BIN
}

bench_results_init() {
    local name=$1
    if [ -z "${BENCH_OUT:-}" ]; then
        local base
        base="$bench_root/bench/results/$(date -u +%Y-%m-%d)-$name"
        BENCH_OUT=$base
        local n=2
        while [ -e "$BENCH_OUT" ]; do BENCH_OUT="$base-$n"; n=$((n + 1)); done
    fi
    mkdir -p "$BENCH_OUT"
    BENCH_OUT=$(cd "$BENCH_OUT" && pwd)
    export BENCH_OUT
    bench_machine > "$BENCH_OUT/machine.txt"
    echo "==> raw outputs: $BENCH_OUT" >&2
}

# The machine and the software of a run, one `key: value` a line.
bench_machine() {
    local pg_bindir
    pg_bindir=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "command: ${BENCH_COMMAND:-$0 $*}"
    echo "nproc: $(nproc)"
    echo "cpu_model: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "memory: $(free -m | awk '/^Mem:/{print $2 " MiB total, " $7 " MiB available"}')"
    echo "kernel: $(uname -srvm)"
    echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    echo "loadavg_at_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "sched_autogroup_enabled: $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo n/a)"
    echo "cpufreq_governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"
    echo "git_commit: $(git -C "$bench_root" rev-parse HEAD 2>/dev/null)"
    echo "git_uncommitted_files: $(git -C "$bench_root" status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
    if [ -n "${SLUICE_BIN:-}" ] && [ -x "${SLUICE_BIN:-}" ]; then
        echo "sluice_bin: $SLUICE_BIN"
        echo "sluice_version: $("$SLUICE_BIN" --version 2>&1 | head -1)"
        echo "sluice_sha256: $(sha256sum "$SLUICE_BIN" | cut -d' ' -f1)"
    fi
    if [ -n "${PGBOUNCER_BIN:-}" ] && [ -x "${PGBOUNCER_BIN:-}" ]; then
        echo "pgbouncer_bin: $PGBOUNCER_BIN"
        echo "pgbouncer_version: $("$PGBOUNCER_BIN" --version 2>&1 | head -1)"
    fi
    if [ -n "${PG_DOORMAN_BIN:-}" ] && [ -x "${PG_DOORMAN_BIN:-}" ]; then
        echo "pg_doorman_bin: $PG_DOORMAN_BIN"
        echo "pg_doorman_version: $("$PG_DOORMAN_BIN" --version 2>&1 | head -1)"
    fi
    [ -n "$pg_bindir" ] && echo "postgresql_version: $("$pg_bindir/postgres" --version 2>&1 | head -1)"
    echo "pgbench_version: $(pgbench --version 2>&1 | head -1)"
    echo "python3_version: $(python3 --version 2>&1)"
}
