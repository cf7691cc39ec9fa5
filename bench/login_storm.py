#!/usr/bin/env python3
"""Login storms beside running queries, Sluice vs PgBouncer (stdlib only; issue 36).

For each pooler (the same pgbouncer.ini as bench/bench.py: transaction pooling, auth_type = md5
with bench_user's SCRAM secret, so clients log in with SCRAM and the pooler passes the keys on):

  1. `pgbench -S -c 50` alone for STORM_DURATION seconds: latency p50/p99 (pgbench --log);
  2. the same while a storm of STORM_LOGINS SCRAM logins runs (`pgbench -C -f select1.sql`,
     STORM_CONCURRENCY at a time, each login a full SCRAM exchange and one SELECT 1), started one
     second in: p50/p99 of the -S transactions that ended inside the storm's window;
  3. the same with the storm over TLS (PGSSLMODE=require: a TLS handshake and SCRAM per login);
     every other connection of this script (the -S load, the plain storm, the CPU runs) sets
     PGSSLMODE=disable: both poolers offer TLS (client_tls_sslmode = allow), and libpq's default
     (prefer) would otherwise make every run a TLS run;
  4. pooler CPU per login: `pgbench -C -c 20 -f select1.sql` for STORM_DURATION seconds, as
     bench_user (SCRAM) and bench_md5 (md5): the pooler's CPU time (/proc/<pid>/stat) over the run
     divided by the logins made.

Environment: SLUICE_BIN (required), PGBOUNCER_BIN (default /work/shared/anchors/pgbouncer-1.25.2,
then /usr/sbin/pgbouncer), STORM_DURATION (default 20), STORM_LOGINS (2000), STORM_CONCURRENCY
(50), STORM_REPEATS (1), STORM_SETTLE (5: quiet seconds before the CPU runs), STORM_TARGETS (pgbouncer,sluice; also sluice_w1: Sluice with `workers = 1`),
BENCH_SLUICE_EXTRA (pgbouncer.ini text appended to the `sluice` target's file), STORM_SELECT_DURATION (the -S run's
length while a storm runs, default STORM_DURATION + 40: long enough that the storm ends inside it,
so every storm login is measured against the load; a storm that still outlasts it is noted). Results: a table on stdout and
bench/results/login-storm-<timestamp>.json. Run it on a quiet machine: the figures are CPU-bound.
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (the cluster, poolers and /proc helpers of bench/bench.py)


def env_int(name, default):
    return int(os.environ.get(name, str(default)))


DURATION = env_int("STORM_DURATION", 20)
LOGINS = env_int("STORM_LOGINS", 2000)
CONCURRENCY = env_int("STORM_CONCURRENCY", 50)
REPEATS = env_int("STORM_REPEATS", 1)
SELECT_DURATION = env_int("STORM_SELECT_DURATION", DURATION + 40)
# Quiet seconds before the CPU runs, as bench/many-core/storm.sh waits (STORM_SETTLE there too):
# Sluice's worker packing gathers clients onto fewer workers after 3 calm seconds, so a CPU run
# started straight after the storms would measure that transient, not the steady state.
SETTLE = env_int("STORM_SETTLE", 5)


def pgbench(port, user, args, env_extra=None, log_prefix=None):
    cmd = ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", user] + args
    if log_prefix:
        cmd += ["--log", f"--log-prefix={log_prefix}"]
    cmd.append(b.DB)
    # Plaintext unless the caller asks for TLS: the poolers offer TLS, libpq prefers it.
    env = dict(os.environ, PGPASSWORD=b.PASSWORDS[user], PGSSLMODE="disable")
    env.update(env_extra or {})
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def latencies(prefix, window=None):
    """Sorted latencies (µs) from pgbench --log files, only transactions that ended inside
    `window` (epoch seconds) when given; the files are deleted."""
    import glob
    lat = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as f:
            for line in f:
                # client_id transaction_no time script_no time_epoch time_us
                fields = line.split()
                if len(fields) < 6 or not fields[2].isdigit():
                    continue
                end = int(fields[4]) + int(fields[5]) / 1e6
                if window is None or window[0] <= end <= window[1]:
                    lat.append(int(fields[2]))
        os.unlink(path)
    lat.sort()
    return lat


def pct(lat, q):
    if not lat:
        return None
    return round(lat[min(len(lat) - 1, max(0, -(-len(lat) * q // 100) - 1))] / 1000, 3)


def select_run(pooler, tmp, tag, storm_env=None):
    """pgbench -S -c 50 for DURATION s; with `storm_env`, for SELECT_DURATION s with a login storm
    from second 1 (only the -S transactions that end while the storm runs are counted)."""
    prefix = os.path.join(tmp, f"{pooler.name}-{tag}")
    duration = DURATION if storm_env is None else SELECT_DURATION
    load = pgbench(pooler.port, b.USER, ["-S", "-c", "50", "-j", "4", "-T", str(duration)], log_prefix=prefix)
    window, storm_out = None, {}
    if storm_env is not None:
        time.sleep(1)
        per_client = max(1, LOGINS // CONCURRENCY)
        started = time.time()
        storm = pgbench(pooler.port, b.USER, ["-C", "-c", str(CONCURRENCY), "-j", "2", "-t", str(per_client),
                                              "-f", os.path.join(tmp, "select1.sql")], env_extra=storm_env)
        out, err = storm.communicate(timeout=SELECT_DURATION * 20 + 60)
        window = (started, time.time())
        parsed = b.parse_pgbench(out, err)
        storm_out = {"storm_logins": parsed["transactions"], "storm_seconds": round(window[1] - window[0], 2),
                     "storm_aborted_clients": parsed["aborted_clients"]}
        if window[1] - window[0] > SELECT_DURATION - 1:
            storm_out["note"] = "the storm outlasted the -S run: raise STORM_SELECT_DURATION"
    out, err = load.communicate(timeout=duration + 120)
    lat = latencies(prefix, window)
    return dict(storm_out, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), transactions=len(lat),
                aborted_clients=b.parse_pgbench(out, err)["aborted_clients"])


def cpu_per_login(pooler, tmp, user, env_extra=None):
    before = b.proc_cpu_ticks(pooler.pid)
    p = pgbench(pooler.port, user, ["-C", "-c", "20", "-j", "2", "-T", str(DURATION),
                                    "-f", os.path.join(tmp, "select1.sql")], env_extra=env_extra)
    out, err = p.communicate(timeout=DURATION + 120)
    ticks = b.proc_cpu_ticks(pooler.pid) - before
    logins = b.parse_pgbench(out, err)["transactions"] or 0
    us = round(ticks / b.CLK_TCK * 1e6 / logins, 1) if logins else None
    return {"logins": logins, "cpu_us_per_login": us}


def main():
    sluice_bin = os.path.abspath(os.environ.get("SLUICE_BIN", "")) if os.environ.get("SLUICE_BIN") else ""
    if not (sluice_bin and os.access(sluice_bin, os.X_OK)):
        sys.exit("SLUICE_BIN must name a sluice binary (cargo build --release -p sluice)")
    pgb = os.environ.get("PGBOUNCER_BIN") or next(
        (p for p in ("/work/shared/anchors/pgbouncer-1.25.2", "/usr/sbin/pgbouncer") if os.access(p, os.X_OK)), "")
    targets = [t for t in os.environ.get("STORM_TARGETS", "pgbouncer,sluice").split(",") if t]
    base = tempfile.mkdtemp(prefix="sluice-storm-")
    os.chmod(base, 0o755)
    cluster = b.Cluster(base)
    poolers, results = {}, {}
    try:
        b.log(f"starting PostgreSQL (port {cluster.port}) in {base}")
        cluster.start()
        run_env = dict(os.environ, PGPASSWORD=b.PASSWORD)
        b.run(["pgbench", "-i", "-q", "-s", "10", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", b.USER, b.DB],
              env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        secrets = {u: cluster.secret(u) for u in (b.USER, b.MD5_USER)}
        with open(os.path.join(base, "select1.sql"), "w") as f:
            f.write("SELECT 1;\n")
        os.chmod(os.path.join(base, "select1.sql"), 0o644)
        b.make_tls_cert(os.path.join(base, "tls"))
        nofile = 8192
        # More clients at once than the -S run and the storm together.
        max_conn = 50 + CONCURRENCY + 200
        specs = {"pgbouncer": (b.AS_PG, pgb, True, ""),
                 "sluice": ([], sluice_bin, False, os.environ.get("BENCH_SLUICE_EXTRA", "")),
                 "sluice_w1": ([], sluice_bin, False, "\n[sluice]\nworkers = 1\n")}
        for name in targets:
            prefix, binary, owner_pg, extra = specs[name]
            if not binary:
                b.log(f"SKIPPING {name}: no binary")
                continue
            p = b.Pooler(name, prefix, binary, base, cluster, secrets, owner_pg, nofile, max_conn, extra_ini=extra)
            if not p.start():
                b.log(f"SKIPPING {name}: failed to start\n{p.log_tail()}")
                continue
            poolers[name] = p
        for rep in range(REPEATS):
            order = list(poolers) if rep % 2 == 0 else list(poolers)[::-1]
            for name in order:
                p = poolers[name]
                r = results.setdefault(name, [])
                row = {}
                for tag, storm in (("alone", None), ("scram_storm", {}), ("tls_scram_storm", {"PGSSLMODE": "require"})):
                    b.log(f"repeat {rep + 1}: {name}: pgbench -S -c 50, {tag}")
                    row[tag] = select_run(p, base, f"{tag}-{rep}", storm)
                time.sleep(SETTLE)
                for tag, user in (("scram_login", b.USER), ("md5_login", b.MD5_USER)):
                    b.log(f"repeat {rep + 1}: {name}: CPU per {tag}")
                    row[tag] = cpu_per_login(p, base, user)
                r.append(row)
        print()
        print(f"{'target':<10} {'run':<16} {'p50 ms':>8} {'p99 ms':>8} {'tx':>8} {'storm s':>8} {'logins':>7} {'µs/login':>9}")
        for name, rows in results.items():
            for i, row in enumerate(rows):
                for tag, v in row.items():
                    print(f"{name:<10} {tag:<16} {v.get('p50_ms') or '':>8} {v.get('p99_ms') or '':>8} "
                          f"{v.get('transactions') or '':>8} {v.get('storm_seconds') or '':>8} "
                          f"{v.get('storm_logins') or v.get('logins') or '':>7} {v.get('cpu_us_per_login') or '':>9}"
                          + (f"  ({v['note']})" if v.get("note") else ""))
        # BENCH_OUT (bench/login_storm.sh sets it, beside machine.txt and the stdout): the folder
        # the raw outputs go to; else the old name under bench/results.
        if os.environ.get("BENCH_OUT"):
            out = os.path.join(os.environ["BENCH_OUT"], "login-storm.json")
        else:
            out = os.path.join(b.ROOT, "bench", "results",
                               f"login-storm-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump({"meta": {"duration": DURATION, "select_duration": SELECT_DURATION, "logins": LOGINS, "concurrency": CONCURRENCY,
                                "repeats": REPEATS, "sluice_bin": sluice_bin, "pgbouncer_bin": pgb,
                                "cpus": os.cpu_count(), "git_rev": b.git_rev()},
                       "results": results}, f, indent=1)
        b.log(f"results: {out}")
    finally:
        for p in poolers.values():
            p.stop()
        cluster.stop()
        subprocess.run(["rm", "-rf", base])


if __name__ == "__main__":
    main()
