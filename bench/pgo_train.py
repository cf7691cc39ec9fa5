#!/usr/bin/env python3
"""The training run of a profile-guided build (scripts/build-pgo.sh): an instrumented sluice
(`-Cprofile-generate`) serves a mix of the loads a pooler sees, then stops cleanly so that the
LLVM profile runtime writes its counts (LLVM_PROFILE_FILE, set by the caller).

    bench/pgo_train.py INSTRUMENTED_SLUICE [SECONDS_PER_LOAD]

The mix, each for SECONDS_PER_LOAD (default 4) through bench/bench.py's pgbouncer.ini (transaction
pooling, pool 20, md5 with a SCRAM secret for bench_user and an md5 one for bench_md5, TLS offered):
pgbench -S at 10 and 100 clients, TPC-B at 10 clients (writes), -S over the extended and the
prepared protocol, -S through a session-pooled database, large results (5,000 rows of 1 kB a
query), logins with md5, with SCRAM and with TLS + SCRAM (-C), and SHOW commands on the admin
console. Code that no load reaches comes out of the profile with no counts, which the compiler
takes as cold (kept out of the hot code's way and not inlined into it), so the mix covers every
load the benches measure. A load that fails stops the run: a profile of errors would train the
wrong paths.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (the cluster, poolers and pgbench helpers of bench/bench.py)


def main():
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit("usage: bench/pgo_train.py INSTRUMENTED_SLUICE [SECONDS_PER_LOAD]")
    binary = os.path.abspath(sys.argv[1])
    secs = str(int(sys.argv[2]) if len(sys.argv) > 2 else 4)
    base = tempfile.mkdtemp(prefix="sluice-pgo-")
    os.chmod(base, 0o755)
    cluster = b.Cluster(base)
    pooler = None
    try:
        b.log(f"starting PostgreSQL (port {cluster.port}) in {base}")
        cluster.start()
        env = dict(os.environ, PGPASSWORD=b.PASSWORD, PGSSLMODE="disable")
        b.run(["pgbench", "-i", "-q", "-s", "2", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", b.USER, b.DB],
              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(base, "select1.sql"), "w") as f:
            f.write("SELECT 1;\n")
        b.make_tls_cert(os.path.join(base, "tls"))
        secrets = {u: cluster.secret(u) for u in (b.USER, b.MD5_USER)}
        # A second name for the same database, pooled per session (bench.py fills in {db} and {pg_port}).
        session_db = b.DB + "_session"
        pooler = b.Pooler("sluice", [], binary, base, cluster, secrets, False, 4096, 1000,
                          extra_dbs=session_db + " = host=127.0.0.1 port={pg_port} dbname={db} pool_mode=session\n")
        if not pooler.start():
            sys.exit(f"the instrumented sluice did not start:\n{pooler.log_tail()}")
        port = str(pooler.port)
        select1 = os.path.join(base, "select1.sql")
        big_rows = os.path.join(base, "big_rows.sql")
        with open(big_rows, "w") as f:
            f.write("SELECT repeat('x', 1000) FROM generate_series(1, 5000);\n")
        db = b.DB
        loads = [
            ("-S, 10 clients", b.USER, db, {}, ["-S", "-c", "10", "-j", "2"]),
            ("-S, 100 clients", b.USER, db, {}, ["-S", "-c", "100", "-j", "2"]),
            ("TPC-B, 10 clients", b.USER, db, {}, ["-c", "10", "-j", "2"]),
            ("-S extended", b.USER, db, {}, ["-S", "-M", "extended", "-c", "10", "-j", "2"]),
            ("-S prepared", b.USER, db, {}, ["-S", "-M", "prepared", "-c", "10", "-j", "2"]),
            ("-S session pooling", b.USER, session_db, {}, ["-S", "-c", "10", "-j", "2"]),
            ("large results", b.USER, db, {}, ["-f", big_rows, "-c", "4", "-j", "2"]),
            ("md5 logins", b.MD5_USER, db, {}, ["-C", "-f", select1, "-c", "20", "-j", "2"]),
            ("SCRAM logins", b.USER, db, {}, ["-C", "-f", select1, "-c", "8", "-j", "2"]),
            ("TLS + SCRAM logins", b.USER, db, {"PGSSLMODE": "require"}, ["-C", "-f", select1, "-c", "8", "-j", "2"]),
        ]
        for name, user, dbname, extra, args in loads:
            e = dict(env, PGPASSWORD=b.PASSWORDS[user], **extra)
            r = subprocess.run(["pgbench", "-n", "-h", "127.0.0.1", "-p", port, "-U", user, "-T", secs] + args + [dbname],
                               env=e, capture_output=True, text=True)
            done = b.num(r"number of transactions actually processed: (\d+)", r.stdout, int)
            b.log(f"{name}: {done} transactions")
            if r.returncode != 0 or not done:
                sys.exit(f"{name} failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
        e = dict(env, PGPASSWORD=b.MD5_PASSWORD)
        for cmd in ("SHOW POOLS", "SHOW STATS", "SHOW CLIENTS", "SHOW SERVERS"):
            subprocess.run(["psql", "-h", "127.0.0.1", "-p", port, "-U", b.MD5_USER, "-Atc", cmd, "pgbouncer"],
                           env=e, check=True, stdout=subprocess.DEVNULL)
        # A clean stop: the profile is written when the process exits normally.
        pooler.proc.send_signal(signal.SIGINT)
        rc = pooler.proc.wait(timeout=30)
        pooler = None
        if rc != 0:
            sys.exit(f"the instrumented sluice exited with {rc}")
        b.log("training done")
    finally:
        if pooler is not None:
            pooler.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
