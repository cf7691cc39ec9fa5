#!/usr/bin/env python3
"""Sluice benchmark driver (stdlib only): direct PostgreSQL vs PgBouncer vs Sluice with pgbench.

Started by bench/run.sh. Environment:
  SLUICE_BIN          sluice binary (empty or failing to start: Sluice is skipped)
  SLUICE_BEFORE_BIN   an earlier sluice binary, run as target `sluice_before` interleaved with the
                      others (a change's before/after on the same machine in the same run)
  BENCH_DURATION      seconds per pgbench run (default 10)
  BENCH_REPEATS       repetitions of the whole scenario list, interleaved (default 3)
  BENCH_SCALE         pgbench -i scale (default 10)
  BENCH_TARGETS       comma list out of direct,pgbouncer,sluice,sluice_w1,sluice_spread,floor_epoll,
                      floor_uring (default all); sluice_w1 is Sluice with `[sluice] workers = 1`,
                      sluice_spread with `[sluice] worker_spread_percent = 0` (every worker in use
                      from the first client), both run for the -S scenarios only; floor_epoll and
                      floor_uring are bench/floor's forwarder (one server connection per client,
                      bytes copied without a look: the least CPU any pooler can spend here), run
                      for select_c10 and select_extended_c50 only
  BENCH_SLUICE_EXTRA  pgbouncer.ini text appended to the `sluice` target's configuration, e.g.
                      $'\n[sluice]\nworkers = 16\n' (what the 16-core machine runs, on this one)
  FLOOR_BIN           bench/floor's binary (set by run.sh; empty: the floor targets are skipped)
  BENCH_SCENARIOS     comma list of scenario names (default all, see SCENARIOS)
  BENCH_IDLE_CLIENTS  idle logged-in clients held open by the idle_clients scenario (default 10000)
  BENCH_IDLE_BATCH    concurrent logins while opening them (default 500)
  BENCH_POOLER_NOFILE soft RLIMIT_NOFILE for both poolers (default: the bench process's, raised
                      to max(8192, BENCH_IDLE_CLIENTS + 1024) within the hard limit)
  PGBOUNCER_BIN       default ../shared/anchors/pgbouncer-1.25.2 beside the repository (run.sh
                      checks it and says what to set when it is missing)
  BENCH_OUT           where the raw outputs go (run.sh sets it: bench/results/<date>-bench, with
                      machine.txt); results.json and pgbench/<scenario>-<target>-r<repeat>.txt, the
                      pgbench command, its stdout and stderr and exit code, for every run

Per run: tps, latency p50/p95/p99 (from pgbench --log), pooler CPU per transaction (per login
for the -C scenarios), peak RSS; idle_clients: pooler RSS per idle client. Then a summary over the
repeats: median and min-max per scenario x target, and Sluice/PgBouncer ratios.
"""

import asyncio
import collections
import datetime
import glob
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = os.geteuid() == 0
# Sluice refuses root (as PgBouncer does) unless it switches user; the bench starts it directly,
# as root, so that it shares the bench's scheduling group (see bench/README.md).
os.environ.setdefault("SLUICE_ALLOW_ROOT", "1")
AS_PG = ["runuser", "-u", "postgres", "--"] if IS_ROOT else []
CLK_TCK = os.sysconf("SC_CLK_TCK")
USER, PASSWORD, DB = "bench_user", "bench_pass", "bench"  # SCRAM secret
MD5_USER, MD5_PASSWORD = "bench_md5", "bench_md5_pass"  # md5 secret
PASSWORDS = {USER: PASSWORD, MD5_USER: MD5_PASSWORD}
TARGETS = ["direct", "pgbouncer", "sluice", "sluice_before", "sluice_w1", "sluice_spread", "floor_epoll",
           "floor_uring"]
FLOORS = ("floor_epoll", "floor_uring")
POOLERS = TARGETS[1:]

def scenario(name, args, clients, user=USER, kind="pgbench", w1=False, floor=False, apps=None, tls=False,
             writes=False, storm=False, db=None):
    """kind: pgbench (cpu per transaction), login (-C: one login per transaction, cpu per login),
    idle (hold idle logged-in clients, RSS per client; poolers only). w1: also run on sluice_w1 and
    sluice_spread.
    floor: also run on the floor forwarders (one server connection per client: few clients only).
    apps: application_names; the clients are split over one pgbench per name, run at once.
    tls: clients connect with sslmode=require (poolers only; every other scenario runs with
    sslmode=disable). writes: the script updates pgbench's tables (TPC-B), so every run of it starts
    from the same state (Cluster.reset_tables), not from the dead rows of the runs before it.
    storm (idle kind): every login at once instead of BENCH_IDLE_BATCH at a time, and the memory
    figure is the peak (VmHWM) per client rather than what the held clients keep.
    db: the [databases] entry the clients name (default bench); set, the scenario runs on Sluice
    only (the read-routing entries of SLUICE_DBS are Sluice's)."""
    return {"name": name, "args": args, "clients": clients, "user": user, "kind": kind, "w1": w1,
            "floor": floor, "apps": apps, "tls": tls, "writes": writes, "storm": storm, "db": db}


SCENARIOS = [
    scenario("select_c10", ["-S"], 10, w1=True, floor=True),
    scenario("select_c100", ["-S"], 100, w1=True),
    scenario("select_c1000", ["-S"], 1000, w1=True),
    # New client login per transaction: SCRAM secret (pass-through to the server) and md5 secret.
    scenario("connect_select1_c20", ["-C", "-f", "{select1}"], 20, kind="login"),
    scenario("connect_md5_select1_c20", ["-C", "-f", "{select1}"], 20, user=MD5_USER, kind="login"),
    scenario("tpcb_c50", [], 50, writes=True),
    # The seed articles' load test (`pgbench -c 1000 -T ..`, the default script): a thousand
    # writers through the pool of 20 (direct fails on max_connections = 100).
    scenario("tpcb_c1000", [], 1000, writes=True),
    scenario("select_extended_c50", ["-S", "-M", "extended"], 50, floor=True),
    # Named prepared statements through transaction pooling (PgBouncer >= 1.21 remaps them;
    # the Debian PgBouncer 1.18 does not, so its row shows the failures operators used to get).
    scenario("select_prepared_c50", ["-S", "-M", "prepared"], 50),
    # Two client programs (application_name a / b) sharing one pool of 20 servers: a server that
    # changes hands between them needs a SET application_name first (PgBouncer: a round trip of
    # its own; Sluice: in the same write as the request).
    scenario("select_two_apps_c50", ["-S"], 50, apps=["bench_a", "bench_b"]),
    # TLS between the clients and the pooler (the same self-signed ECDSA P-256 certificate for
    # both; PgBouncer with OpenSSL, Sluice with rustls): per transaction and per login, where
    # every login is a full handshake.
    scenario("select_tls_c50", ["-S"], 50, tls=True),
    scenario("connect_tls_md5_select1_c20", ["-C", "-f", "{select1}"], 20, user=MD5_USER, kind="login",
             tls=True),
    # Large results: 5,000 rows of 1 kB per transaction (5 MB from the server through the pooler).
    scenario("big_rows_c4", ["-f", "{big_rows}"], 4),
    # Clients = BENCH_IDLE_CLIENTS, filled in by main().
    scenario("idle_clients", [], None, user=MD5_USER, kind="idle"),
    # A connection storm: 4,000 clients log in at once (md5), each runs SELECT 1 and stays; the
    # pooler's peak memory per client (the fault run compared it with PgBouncer's).
    scenario("storm_c4000", [], 4000, user=MD5_USER, kind="idle", storm=True),
    # What read routing's bookkeeping (issue 33) costs, on Sluice alone, interleaved: `-S` through
    # the plain entry; through an entry naming the primary alone with target_session_attrs (health
    # checks) and route_reads = off (what a client of a database that routes nothing pays); and
    # with route_reads = auto (each transaction classified, its freshness asked, then the primary:
    # no standby to route to), in simple and prepared protocol (a Bind takes its statement's kept
    # classification).
    scenario("route_none_c50", ["-S"], 50, db=DB),
    scenario("route_off_c50", ["-S"], 50, db="bench_route_off"),
    scenario("route_auto_c50", ["-S"], 50, db="bench_route_auto"),
    scenario("route_auto_prepared_c50", ["-S", "-M", "prepared"], 50, db="bench_route_auto"),
]


# Sluice's own entries for the route_* scenarios: the primary alone, with health checks.
SLUICE_DBS = """bench_route_off = host=127.0.0.1 port={pg_port} dbname={db} target_session_attrs=read-write route_reads=off
bench_route_auto = host=127.0.0.1 port={pg_port} dbname={db} target_session_attrs=read-write route_reads=auto
"""


SCRIPTS = {
    "select1": "SELECT 1;",
    "big_rows": "SELECT repeat('x', 1000) FROM generate_series(1, 5000);",
}


def applies(sc, target):
    if sc["db"]:
        return target == "sluice"
    if sc["tls"] and target not in ("pgbouncer", "sluice"):
        return False
    if target in ("sluice_w1", "sluice_spread"):
        return sc["w1"]
    if target in FLOORS:
        return sc["floor"]
    if sc["kind"] == "idle":
        return target != "direct"
    return True


def make_tls_cert(tls_dir):
    """A self-signed ECDSA P-256 certificate for the poolers' client side (readable by the
    postgres user, which runs PgBouncer: a throwaway key in the bench's temp dir)."""
    os.mkdir(tls_dir)
    os.chmod(tls_dir, 0o755)
    key, crt = os.path.join(tls_dir, "pooler.key"), os.path.join(tls_dir, "pooler.crt")
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "2", "-subj", "/CN=localhost", "-keyout", key, "-out", crt],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for f in (key, crt):
        os.chmod(f, 0o644)


def log(msg):
    print(f"==> {msg}", file=sys.stderr, flush=True)


def pg_bindir():
    try:
        d = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if d and os.access(os.path.join(d, "initdb"), os.X_OK):
            return d
    except OSError:
        pass
    dirs = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.access(d + "/initdb", os.X_OK)]
    if not dirs:
        sys.exit("PostgreSQL server binaries not found")
    return max(dirs, key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def chown_pg(path):
    if IS_ROOT:
        shutil.chown(path, "postgres", "postgres")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def proc_cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def proc_status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def proc_hwm_kb(pid):
    return proc_status_kb(pid, "VmHWM")


def proc_nofile(pid):
    """Soft RLIMIT_NOFILE of a running process."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    v = line.split()[3]
                    return int(v) if v.isdigit() else v
    except OSError:
        pass
    return None


def reset_hwm(pid):
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def child_pid(pid, timeout=5.0):
    """The (single) child of `pid` (runuser forks the real program)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            return None
        time.sleep(0.05)
    return None


class Cluster:
    def __init__(self, base):
        self.bindir = pg_bindir()
        self.data = os.path.join(base, "pgdata")
        self.sock = os.path.join(base, "pgsock")
        for d in (self.data, self.sock):
            os.mkdir(d)
            chown_pg(d)
        self.port = free_port()
        self.started = False

    def start(self):
        run(AS_PG + [f"{self.bindir}/initdb", "-D", self.data, "-U", "postgres", "-A", "trust",
                     "-E", "UTF8", "--locale=C", "--no-sync"], stdout=subprocess.DEVNULL)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"""
port = {self.port}
listen_addresses = '127.0.0.1'
unix_socket_directories = '{self.sock}'
max_connections = 100
superuser_reserved_connections = 0
password_encryption = 'scram-sha-256'
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
""")
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
            # md5: SCRAM for roles with a SCRAM secret, md5 for roles with an md5 secret.
            f.write("local all all trust\nhost all all 127.0.0.1/32 md5\n")
        run(AS_PG + [f"{self.bindir}/pg_ctl", "-D", self.data, "-l", os.path.join(self.data, "postgres.log"),
                     "-w", "start"], stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.started = True
        self.psql("postgres", f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self.psql("postgres", f"CREATE DATABASE {DB} OWNER {USER}")
        self.psql("postgres", f"SET password_encryption = 'md5'; "
                              f"CREATE ROLE {MD5_USER} LOGIN PASSWORD '{MD5_PASSWORD}'")

    def secret(self, user):
        return self.psql("postgres", f"SELECT rolpassword FROM pg_authid WHERE rolname = '{user}'")

    def psql(self, db, sql):
        out = run([f"{self.bindir}/psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.sock,
                   "-p", str(self.port), "-U", "postgres", "-d", db, "-c", sql],
                  capture_output=True, text=True)
        return out.stdout.strip()

    def terminate_user_backends(self):
        self.psql("postgres", "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              f"WHERE usename IN ('{USER}', '{MD5_USER}')")
        time.sleep(0.2)

    def reset_tables(self):
        """What `pgbench -v` does before a run (the bench runs pgbench with -n): history emptied,
        the four tables vacuumed; then a checkpoint, so no run inherits the previous one's."""
        self.psql(DB, "TRUNCATE pgbench_history")
        for table in ("pgbench_branches", "pgbench_tellers", "pgbench_accounts", "pgbench_history"):
            self.psql(DB, f"VACUUM {table}")
        self.psql(DB, "CHECKPOINT")

    def version(self):
        return self.psql("postgres", "SHOW server_version")

    def stop(self):
        if self.started:
            subprocess.run(AS_PG + [f"{self.bindir}/pg_ctl", "-D", self.data, "stop", "-m", "immediate"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started = False


POOLER_INI = """[databases]
{db} = host=127.0.0.1 port={pg_port} dbname={db}
{extra_dbs}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {dir}
auth_type = md5
auth_file = {dir}/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = {max_client_conn}
log_connections = 0
log_disconnections = 0
ignore_startup_parameters = extra_float_digits
client_tls_sslmode = allow
client_tls_key_file = {tls_dir}/pooler.key
client_tls_cert_file = {tls_dir}/pooler.crt
stats_users = bench_md5
"""


class Pooler:
    """PgBouncer or Sluice with an identical pgbouncer.ini (only port and dir differ)."""

    def __init__(self, name, cmd_prefix, binary, base, cluster, secrets, owner_pg, nofile, max_client_conn,
                 extra_ini="", forced_nofile=False, args=None, extra_dbs=""):
        self.name, self.binary = name, binary
        self.dir = os.path.join(base, name)
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o755)
        if owner_pg:
            chown_pg(self.dir)
        self.port = free_port()
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(ini, "w") as f:
            f.write(POOLER_INI.format(db=DB, pg_port=cluster.port, port=self.port, dir=self.dir,
                                      extra_dbs=extra_dbs.format(db=DB, pg_port=cluster.port),
                                      max_client_conn=max_client_conn,
                                      tls_dir=os.path.join(base, "tls")) + extra_ini)
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            for user, secret in secrets.items():
                f.write(f'"{user}" "{secret}"\n')
        self.log_path = os.path.join(self.dir, "pooler.log")
        # runuser's PAM session resets the soft RLIMIT_NOFILE to 1024; raise it again to the bench
        # process's own (sized for BENCH_IDLE_CLIENTS). Started directly, Sluice inherits it, unless
        # BENCH_POOLER_NOFILE sets both poolers' soft limit (`exec` keeps the pid).
        if cmd_prefix:
            self.cmd = cmd_prefix + ["sh", "-c", f'ulimit -n {nofile} 2>/dev/null || ulimit -n 4096; exec "$0" "$1"',
                                     binary, ini]
        elif forced_nofile:
            self.cmd = ["sh", "-c", f'ulimit -n {nofile} && exec "$0" "$1"', binary, ini]
        else:
            self.cmd = [binary, ini]
        if args is not None:
            # Not a pgbouncer.ini reader (the floor forwarder): its own arguments.
            self.cmd = [binary] + [a.format(port=self.port, pg_port=cluster.port) for a in args]
        self.runner_pid_is_child = bool(cmd_prefix)
        self.proc = None
        self.pid = None

    def start(self):
        logf = open(self.log_path, "a")
        if self.runner_pid_is_child:
            os.chmod(self.log_path, 0o666)
        self.proc = subprocess.Popen(self.cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.dir)
        logf.close()
        ok = wait_port(self.port, self.proc, 10)
        if ok:
            self.pid = child_pid(self.proc.pid) if self.runner_pid_is_child else self.proc.pid
            ok = self.pid is not None
        if not ok:
            rc = self.proc.poll()
            self.stop()
            with open(self.log_path, "a") as f:
                f.write(f"[bench] {self.name} did not come up on port {self.port} "
                        f"(exit code {rc if rc is not None else 'none: killed after 10 s'})\n")
        return ok

    def log_tail(self, n=15):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def restart(self):
        self.stop()
        return self.start()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            if self.pid and self.pid != self.proc.pid:
                try:
                    os.kill(self.pid, signal.SIGTERM)
                except OSError:
                    pass
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def num(pattern, text, conv=float):
    m = re.search(pattern, text, re.M)
    return conv(m.group(1)) if m else None


def parse_pgbench(out, err):
    r = {
        "tps": num(r"^tps = ([\d.]+) \(without initial connection time\)", out)
        or num(r"^tps = ([\d.]+)", out),
        "latency_ms": num(r"^latency average = ([\d.]+) ms", out),
        "transactions": num(r"^number of transactions actually processed: (\d+)", out, int),
        "failed": num(r"^number of failed transactions: (\d+)", out, int),
    }
    aborted = len(re.findall(r"client \d+ aborted|could not create connection for client", err))
    if "Run was aborted" in err and aborted == 0:
        aborted = 1
    r["aborted_clients"] = aborted
    return r


def percentiles_ms(prefix):
    """p50/p95/p99 in ms from pgbench --log files <prefix>.<pid>[.<thread>] (deleted afterwards).
    Field 3 of each line is the transaction's latency in microseconds ("failed"/"skipped" lines are
    left out)."""
    lat = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        try:
            with open(path) as f:
                for line in f:
                    fields = line.split(maxsplit=3)
                    if len(fields) >= 3 and fields[2].isdigit():
                        lat.append(int(fields[2]))
        finally:
            os.unlink(path)
    if not lat:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "logged_tx": 0}
    lat.sort()

    def rank(q):  # nearest-rank percentile
        return round(lat[min(len(lat) - 1, max(0, -(-len(lat) * q // 100) - 1))] / 1000, 3)

    return {"p50_ms": rank(50), "p95_ms": rank(95), "p99_ms": rank(99), "logged_tx": len(lat)}


def out_dir():
    """Where this run's raw outputs go (BENCH_OUT, else bench/results/<date>-bench)."""
    d = os.environ.get("BENCH_OUT") or os.path.join(
        ROOT, "bench", "results", datetime.date.today().isoformat() + "-bench")
    os.makedirs(d, exist_ok=True)
    return d


def keep_raw(name, cmds, runs):
    """pgbench's own output of one run, as it printed it, beside the JSON (pgbench/<name>.txt)."""
    d = os.path.join(out_dir(), "pgbench")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".txt"), "w") as f:
        for c, (out, err, rc) in zip(cmds, runs):
            f.write("$ " + " ".join(c) + f"\n# exit code {rc}\n{out}")
            if err:
                f.write("# stderr\n" + err)
            f.write("\n")


def run_pgbenches(cmds, envs, timeout):
    """Run pgbench commands at once; [(stdout, stderr, exit code)] in order."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
             for c, e in zip(cmds, envs)]
    deadline = time.time() + timeout
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.time()))
            results.append((out, err, p.returncode))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            results.append((out, "pgbench timed out", -1))
    return results


def merge_pgbench(parsed):
    """One pgbench result from the results of pgbench runs side by side (summed tps and counts,
    latency weighted by transactions)."""
    if len(parsed) == 1:
        return parsed[0]
    if any(p["tps"] is None for p in parsed):
        return next(p for p in parsed if p["tps"] is None)
    tx = sum(p["transactions"] or 0 for p in parsed)
    lat = [(p["latency_ms"], p["transactions"] or 0) for p in parsed if p["latency_ms"] is not None]
    return {
        "tps": round(sum(p["tps"] for p in parsed), 6),
        "latency_ms": round(sum(l * n for l, n in lat) / tx, 3) if tx and lat else None,
        "transactions": tx,
        "failed": sum(p["failed"] or 0 for p in parsed) if any(p["failed"] is not None for p in parsed) else None,
        "aborted_clients": sum(p["aborted_clients"] for p in parsed),
    }


def sluice_cross(port):
    """Sluice's cross-worker events so far (SHOW CROSS_WORKER on its console): {kind: count}, or
    None when the console does not answer."""
    try:
        p = subprocess.run(["psql", "-X", "-A", "-t", "-F", "|", "-h", "127.0.0.1", "-p", str(port),
                            "-U", MD5_USER, "-d", "pgbouncer", "-c", "SHOW CROSS_WORKER"],
                           env=dict(os.environ, PGPASSWORD=PASSWORDS[MD5_USER], PGSSLMODE="disable"),
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    out = {}
    for line in p.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def run_scenario(sc, target_name, port, pooler, duration, scripts, log_prefix):
    name, clients, user = sc["name"], sc["clients"], sc["user"]
    args = [a.format(**scripts) if a.startswith("{") else a for a in sc["args"]]
    apps = sc.get("apps") or [None]
    cmds, envs = [], []
    for i, app in enumerate(apps):
        # One log prefix per run, all matched by percentiles_ms(log_prefix).
        prefix = log_prefix if app is None else f"{log_prefix}.{i}"
        cmds.append(["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", user,
                     "-c", str(clients // len(apps)), "-j", str(2 // len(apps) or 1), "-T", str(duration),
                     "--log", f"--log-prefix={prefix}"] + args + [sc["db"] or DB])
        env = dict(os.environ, PGPASSWORD=PASSWORDS[user], PGCONNECT_TIMEOUT="15",
                   PGSSLMODE="require" if sc["tls"] else "disable")
        if app is not None:
            env["PGAPPNAME"] = app
        envs.append(env)
    pid = pooler.pid if pooler else None
    cross0 = sluice_cross(port) if target_name.startswith("sluice") else None
    if pid:
        reset_hwm(pid)
        cpu0 = proc_cpu_ticks(pid)
    t0 = time.time()
    runs = run_pgbenches(cmds, envs, duration * 4 + 120)
    wall = time.time() - t0
    keep_raw(os.path.basename(log_prefix), cmds, runs)
    rc = next((c for _, _, c in runs if c != 0), 0)
    err = "\n".join(e for _, e, _ in runs)
    out = runs[-1][0]
    r = {"scenario": name, "kind": sc["kind"], "target": target_name, "clients": clients, "user": user,
         "exit_code": rc, "wall_s": round(wall, 2)}
    r.update(merge_pgbench([parse_pgbench(o, e) for o, e, _ in runs]))
    r.update(percentiles_ms(log_prefix))
    # Work that crossed between Sluice's workers, per transaction, by kind (and in all).
    r["cross_per_tx"] = None
    cross1 = sluice_cross(port) if cross0 is not None else None
    if cross0 is not None and cross1 is not None and r.get("transactions"):
        per = {k: round((cross1.get(k, 0) - cross0.get(k, 0)) / r["transactions"], 5) for k in cross1}
        per["all"] = round(sum(per.values()), 5)
        r["cross_per_tx"] = per
    r["cpu_us_per_tx"] = None
    r["cpu_us_per_login"] = None
    r["peak_rss_kb"] = None
    if pid and pooler.alive():
        cpu = (proc_cpu_ticks(pid) - cpu0) / CLK_TCK * 1e6
        r["cpu_s"] = round(cpu / 1e6, 3)
        if r["transactions"]:
            r["cpu_us_per_tx"] = round(cpu / r["transactions"], 2)
            if sc["kind"] == "login":  # -C: every transaction is a new client login
                r["cpu_us_per_login"] = r["cpu_us_per_tx"]
        r["peak_rss_kb"] = proc_hwm_kb(pid)
    ok = rc == 0 and r["tps"] is not None and not r["aborted_clients"]
    r["status"] = "ok" if ok else "FAILED"
    if not ok:
        lines = [line for line in err.splitlines() if line.strip()]
        if not lines and rc == 0 and r["transactions"] == 0:
            lines = [f"no transaction completed within -T {duration} s (setting up {clients} connections "
                     "took longer); raise BENCH_DURATION"]
        if not lines:
            lines = [f"pgbench exit code {rc}"] + out.splitlines()[-3:]
        r["error"] = "\n".join(lines[:3] + (["..."] if len(lines) > 3 else []))
    if pooler and not pooler.alive():
        r["status"] = "FAILED"
        r["error"] = (r.get("error", "") + f"\n{pooler.name} died; log:\n" + pooler.log_tail()).strip()
    return r


# --- idle clients: a minimal asyncio frontend (StartupMessage, md5 password, until ReadyForQuery) ---

AUTH_NAMES = {0: "trust", 3: "cleartext", 5: "md5", 10: "SCRAM-SHA-256"}


def startup_message(user):
    params = f"user\0{user}\0database\0{DB}\0\0".encode()
    return struct.pack("!ii", 8 + len(params), 196608) + params


async def read_msg(reader):
    hdr = await reader.readexactly(5)
    (length,) = struct.unpack("!i", hdr[1:])
    return hdr[:1], await reader.readexactly(length - 4)


def error_text(body):
    fields = dict((f[:1], f[1:]) for f in body.split(b"\0") if f)
    return (fields.get(b"C", b"") + b" " + fields.get(b"M", b"")).decode(errors="replace").strip()


async def login(port, user, password):
    """Log in; returns (reader, writer) at ReadyForQuery. Raises on any error."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(startup_message(user))
        while True:
            typ, body = await read_msg(reader)
            if typ == b"R":
                (code,) = struct.unpack("!i", body[:4])
                if code == 5:
                    inner = hashlib.md5((password + user).encode()).hexdigest()
                    digest = "md5" + hashlib.md5(inner.encode() + body[4:8]).hexdigest()
                    pw = digest.encode() + b"\0"
                    writer.write(b"p" + struct.pack("!i", 4 + len(pw)) + pw)
                elif code != 0:
                    raise RuntimeError(f"unsupported authentication request {AUTH_NAMES.get(code, code)}")
            elif typ == b"E":
                raise RuntimeError(error_text(body))
            elif typ == b"Z":
                return reader, writer
    except BaseException:
        writer.close()
        raise


async def simple_query(reader, writer, sql):
    """Run one simple-protocol query; returns at ReadyForQuery. Raises on an ErrorResponse."""
    q = sql.encode() + b"\0"
    writer.write(b"Q" + struct.pack("!i", 4 + len(q)) + q)
    error = None
    while True:
        typ, body = await read_msg(reader)
        if typ == b"E":
            error = error_text(body)
        elif typ == b"Z":
            if error:
                raise RuntimeError(error)
            return


async def auth_method(port, user):
    """The authentication the server asks `user` for (first AuthenticationRequest), then hang up."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    except (OSError, asyncio.TimeoutError) as e:
        return f"error: {e}"
    try:
        writer.write(startup_message(user))
        typ, body = await asyncio.wait_for(read_msg(reader), 10)
        if typ == b"R":
            (code,) = struct.unpack("!i", body[:4])
            return AUTH_NAMES.get(code, f"code {code}")
        return f"error: {error_text(body)}" if typ == b"E" else f"message {typ!r}"
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
        return f"error: {e!r}"
    finally:
        writer.close()


def probe_auth(port):
    async def both():
        return {u: await auth_method(port, u) for u in (USER, MD5_USER)}
    return asyncio.run(both())


async def hold_idle(port, user, password, n, batch, on_held):
    """Open n logged-in connections, at most `batch` logins in flight; call on_held(connected,
    errors) while all are held, then close them."""
    sem = asyncio.Semaphore(batch)
    conns, errors = [], collections.Counter()

    async def one():
        async with sem:
            try:
                conn = await asyncio.wait_for(login(port, user, password), 30)
                conns.append(conn)
                # Idle after some work, as an application's pooled connections are: whatever a
                # query made the pooler allocate for the client counts too.
                await asyncio.wait_for(simple_query(*conn, "SELECT 1"), 30)
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                errors[(str(e) or type(e).__name__)[:120]] += 1

    t0 = time.time()
    await asyncio.gather(*(one() for _ in range(n)))
    open_s = time.time() - t0
    await asyncio.sleep(1.0)  # let the pooler settle
    # A held client that the pooler dropped meanwhile shows up as EOF.
    alive = sum(1 for r, _ in conns if not r.at_eof())
    result = on_held(alive, errors, open_s)
    for _, w in conns:
        try:
            w.write(b"X\0\0\0\4")
            w.close()
        except Exception:  # noqa: BLE001
            pass
    await asyncio.sleep(0.5)
    return result


def run_idle(sc, target_name, pooler, batch):
    n = sc["clients"]
    r = {"scenario": sc["name"], "kind": "idle", "target": target_name, "clients": n, "user": sc["user"]}
    pid = pooler.pid
    r["pooler_nofile"] = proc_nofile(pid)
    time.sleep(0.5)
    rss0 = proc_status_kb(pid, "VmRSS")
    cpu0 = proc_cpu_ticks(pid)
    t0 = time.time()

    def on_held(alive, errors, open_s):
        rss1 = proc_status_kb(pid, "VmRSS") if pooler.alive() else None
        cpu = (proc_cpu_ticks(pid) - cpu0) / CLK_TCK * 1e6 if pooler.alive() else None
        r["peak_rss_kb"] = proc_hwm_kb(pid) if pooler.alive() else None
        return alive, errors, open_s, rss1, cpu

    if sc["storm"]:
        batch = n
    alive, errors, open_s, rss1, cpu = asyncio.run(hold_idle(pooler.port, sc["user"], PASSWORDS[sc["user"]],
                                                             n, batch, on_held))
    r.update({"wall_s": round(time.time() - t0, 2), "open_s": round(open_s, 2), "connected": alive,
              "rss_before_kb": rss0, "rss_after_kb": rss1, "errors": dict(errors.most_common(5))})
    held = r["peak_rss_kb"] if sc["storm"] else rss1
    r["kib_per_client"] = round((held - rss0) / alive, 2) if alive and held is not None else None
    if cpu is not None:
        r["cpu_s"] = round(cpu / 1e6, 3)
    r["status"] = "ok" if alive == n and pooler.alive() else "FAILED"
    if r["status"] != "ok":
        msg = [f"only {alive}/{n} idle clients logged in and held (pooler soft NOFILE limit "
               f"{r['pooler_nofile']})"]
        msg += [f"{c} x {e}" for e, c in errors.most_common(3)]
        tail = [ln for ln in pooler.log_tail(200).splitlines()
                if re.search(r"too many|open files|EMFILE|max_client_conn|accept", ln, re.I)]
        msg += tail[-3:]
        if not pooler.alive():
            msg.append(f"{pooler.name} died; log:\n" + pooler.log_tail())
        r["error"] = "\n".join(msg)
    return r


def fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def print_rows(hdr, rows, left=2):
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    head = line(hdr)
    print(head)
    print("-" * len(head))
    prev = None
    for row in rows:
        if prev is not None and row[0] != prev:
            print()
        prev = row[0]
        print(line(row))


def print_table(results, scenario_order):
    hdr = ["scenario", "target", "rep", "clients", "tps", "p50 ms", "p99 ms", "failed", "aborted", "cpu us/tx",
           "cpu us/login", "KiB/client", "peak RSS MB", "cross/tx", "status"]
    rows = []
    for r in sorted(results, key=lambda r: (scenario_order.get(r["scenario"], 99), TARGETS.index(r["target"]),
                                            r.get("repeat", 0))):
        rss = r["peak_rss_kb"] / 1024 if r.get("peak_rss_kb") else None
        cpu_tx = r["cpu_us_per_tx"] if r.get("kind") == "pgbench" else None
        rows.append([r["scenario"], r["target"], r.get("repeat", 0) + 1, fmt(r.get("clients")), fmt(r["tps"]),
                     fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3), fmt(r["failed"]), fmt(r["aborted_clients"]),
                     fmt(cpu_tx), fmt(r["cpu_us_per_login"]), fmt(r["kib_per_client"], 2), fmt(rss),
                     fmt((r.get("cross_per_tx") or {}).get("all"), 4), r["status"]])
    print_rows(hdr, rows)


def summarize(results, scenarios):
    """Per scenario x target over the repeats (failed runs excluded): median, min, max; ratios of the
    medians Sluice (sluice_w1, sluice_spread, the floor forwarders) / PgBouncer."""
    out = []
    for sc in scenarios:
        med = {}
        for t in TARGETS:
            runs = [r for r in results if r["scenario"] == sc["name"] and r["target"] == t]
            if not runs:
                continue
            ok = [r for r in runs if r["status"] == "ok"]
            row = {"scenario": sc["name"], "kind": sc["kind"], "target": t, "runs": len(runs), "ok_runs": len(ok)}
            cpu_key = {"pgbench": "cpu_us_per_tx", "login": "cpu_us_per_login"}.get(sc["kind"])
            for key in ("tps", "p50_ms", "p95_ms", "p99_ms", "cpu_us_per_tx", "cpu_us_per_login",
                        "kib_per_client"):
                vals = [r[key] for r in ok if r.get(key) is not None]
                row[key] = ({"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}
                            if vals else None)
            row["_cpu"] = row[cpu_key] if cpu_key else None
            med[t] = row
            out.append(row)
        base = med.get("pgbouncer")
        for t in ("sluice", "sluice_before", "sluice_w1", "sluice_spread") + FLOORS:
            row = med.get(t)
            if not row:
                continue
            for key, name in (("_cpu", "cpu_ratio_vs_pgbouncer"), ("tps", "tps_ratio_vs_pgbouncer"),
                              ("kib_per_client", "kib_ratio_vs_pgbouncer")):
                a, b = row.get(key), base.get(key) if base else None
                row[name] = round(a["median"] / b["median"], 3) if a and b and b["median"] else None
    for row in out:
        row.pop("_cpu", None)
    return out


def print_summary(summary):
    hdr = ["scenario", "target", "ok/runs", "tps", "p99 ms", "cpu us/tx", "cpu us/login",
           "KiB/client", "cpu S/P", "tps S/P", "KiB S/P"]

    def _sp(v, nd):
        if not v:
            return "-"
        if v["n"] == 1:
            return fmt(float(v["median"]), nd)
        return f"{fmt(float(v['median']), nd)} ({fmt(float(v['min']), nd)}-{fmt(float(v['max']), nd)})"

    rows = []
    for row in summary:
        cpu_tx = row["cpu_us_per_tx"] if row["kind"] == "pgbench" else None
        rows.append([row["scenario"], row["target"], f"{row['ok_runs']}/{row['runs']}", _sp(row["tps"], 0),
                     _sp(row["p99_ms"], 2), _sp(cpu_tx, 1), _sp(row["cpu_us_per_login"], 1),
                     _sp(row["kib_per_client"], 2), fmt(row.get("cpu_ratio_vs_pgbouncer"), 2),
                     fmt(row.get("tps_ratio_vs_pgbouncer"), 2), fmt(row.get("kib_ratio_vs_pgbouncer"), 2)])
    print_rows(hdr, rows)


def main():
    duration = int(os.environ.get("BENCH_DURATION", "10"))
    repeats = int(os.environ.get("BENCH_REPEATS", "3"))
    scale = int(os.environ.get("BENCH_SCALE", "10"))
    idle_n = int(os.environ.get("BENCH_IDLE_CLIENTS", "10000"))
    idle_batch = int(os.environ.get("BENCH_IDLE_BATCH", "500"))
    targets = [t for t in os.environ.get("BENCH_TARGETS", ",".join(TARGETS)).split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        sys.exit(f"unknown BENCH_TARGETS {unknown}; known: {','.join(TARGETS)}")
    wanted = [s for s in os.environ.get("BENCH_SCENARIOS", "").split(",") if s]
    unknown = [s for s in wanted if s not in [sc["name"] for sc in SCENARIOS]]
    if unknown:
        sys.exit(f"unknown BENCH_SCENARIOS {unknown}; known: {','.join(sc['name'] for sc in SCENARIOS)}")
    scenarios = [dict(sc) for sc in SCENARIOS if not wanted or sc["name"] in wanted]
    for sc in scenarios:
        if sc["kind"] == "idle" and not sc["storm"]:
            sc["clients"] = idle_n
    # The most clients any idle-kind scenario holds at once (file descriptors, max_client_conn).
    held_n = max([sc["clients"] for sc in scenarios if sc["kind"] == "idle"], default=idle_n)
    scenario_order = {sc["name"]: i for i, sc in enumerate(scenarios)}
    sluice_bin = os.environ.get("SLUICE_BIN", "")
    pgbouncer_bin = os.environ.get("PGBOUNCER_BIN") or os.path.join(
        os.path.dirname(ROOT), "shared", "anchors", "pgbouncer-1.25.2")
    skipped = {}

    # File descriptors: this process holds the idle clients, the poolers hold them too (PgBouncer
    # gets this soft limit through `ulimit -n`, Sluice inherits it).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = held_n + 256 if any(sc["kind"] == "idle" for sc in scenarios) else 0
    want = max(8192, held_n + 1024 if need else 0)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft == resource.RLIM_INFINITY or soft >= want:
        want = soft
    else:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if need and nofile != resource.RLIM_INFINITY and nofile < need:
        why = (f"SKIP idle_clients: RLIMIT_NOFILE hard limit {hard} < {need} needed for {idle_n} idle clients "
               f"(lower BENCH_IDLE_CLIENTS or raise the hard limit)")
        log(why)
        skipped["idle_clients"] = why
        scenarios = [sc for sc in scenarios if sc["kind"] != "idle"]
    max_client_conn = max(2000, held_n + 100)
    pooler_nofile = int(os.environ.get("BENCH_POOLER_NOFILE", "0"))  # 0: the bench process's own

    base = tempfile.mkdtemp(prefix="sluice-bench-")
    os.chmod(base, 0o755)
    cluster = Cluster(base)
    poolers = {}
    results = []
    try:
        log(f"starting PostgreSQL (port {cluster.port}) in {base}")
        cluster.start()
        log(f"pgbench -i -s {scale}")
        env = dict(os.environ, PGPASSWORD=PASSWORD)
        run(["pgbench", "-i", "-q", "-s", str(scale), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", USER, DB],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        secrets = {u: cluster.secret(u) for u in (USER, MD5_USER)}
        if sluice_bin and os.access(sluice_bin, os.X_OK):
            # A private copy: target/release may be rebuilt while the bench runs, and the idle
            # scenario restarts the poolers; every Sluice run must use the same binary.
            st = os.stat(sluice_bin)
            sluice_src = {"path": sluice_bin, "size": st.st_size,
                          "mtime": datetime.datetime.fromtimestamp(st.st_mtime).isoformat(timespec="seconds")}
            sluice_bin = shutil.copy2(sluice_bin, os.path.join(base, "sluice-bin"))
        else:
            sluice_src = None
        before_bin = os.environ.get("SLUICE_BEFORE_BIN", "")
        if before_bin and os.access(before_bin, os.X_OK):
            before_bin = shutil.copy2(before_bin, os.path.join(base, "sluice-before-bin"))
        scripts = {}  # pgbench -f scripts, by the name the scenarios' args use ("{select1}")
        for key, sql in SCRIPTS.items():
            scripts[key] = os.path.join(base, f"{key}.sql")
            with open(scripts[key], "w") as f:
                f.write(sql + "\n")
            os.chmod(scripts[key], 0o644)
        make_tls_cert(os.path.join(base, "tls"))
        pglog_dir = os.path.join(base, "pgbench-log")
        os.mkdir(pglog_dir)

        specs = {
            "pgbouncer": (AS_PG, pgbouncer_bin, True, "", f"{pgbouncer_bin} not found"),
            "sluice": ([], sluice_bin, False, os.environ.get("BENCH_SLUICE_EXTRA", ""),
                       "binary not available (build failed?)"),
            "sluice_before": ([], before_bin, False, "", "SLUICE_BEFORE_BIN not set or not executable"),
            "sluice_w1": ([], sluice_bin, False, "\n[sluice]\nworkers = 1\n", "binary not available (build failed?)"),
            "sluice_spread": ([], sluice_bin, False, "\n[sluice]\nworker_spread_percent = 0\n",
                              "binary not available (build failed?)"),
        }
        floor_bin = os.environ.get("FLOOR_BIN", "")
        floor_args = {t: [t.split("_")[1], "{port}", "{pg_port}"] for t in FLOORS}
        for t in FLOORS:
            specs[t] = ([], floor_bin, False, "", "bench/floor not built (cargo build --release "
                        "--manifest-path bench/floor/Cargo.toml) or FLOOR_BIN not set")
        for name in POOLERS:
            if name not in targets:
                continue
            prefix, binary, owner_pg, extra, missing = specs[name]
            if not (binary and os.access(binary, os.X_OK)):
                skipped[name] = missing
                continue
            p = Pooler(name, prefix, binary, base, cluster, secrets, owner_pg, pooler_nofile or nofile,
                       max_client_conn, extra, forced_nofile=bool(pooler_nofile), args=floor_args.get(name),
                       extra_dbs=SLUICE_DBS if name == "sluice" else "")
            if p.start():
                poolers[name] = p
            else:
                skipped[name] = "failed to start:\n" + p.log_tail()
        for name, why in skipped.items():
            if name in TARGETS:
                log(f"SKIPPING {name}: {why}")

        order = [t for t in TARGETS if t in targets and t not in skipped]
        auth = {t: probe_auth(poolers[t].port if t in poolers else cluster.port) for t in order}
        for t, m in auth.items():
            log(f"authentication asked by {t}: " + ", ".join(f"{u} -> {v}" for u, v in m.items()))
        # Odd repeats run the targets in reverse, so neither pooler always runs right after the other
        # (anything that drifts over the bench, the host or the cluster, falls on both).
        plan = [(rep, sc, t) for rep in range(repeats) for sc in scenarios
                for t in (order if rep % 2 == 0 else order[::-1]) if applies(sc, t)]
        est = 20 + sum(duration + 2 if sc["kind"] != "idle" else 10 + sc["clients"] / 1000 for _, sc, _ in plan)
        log(f"{len(plan)} runs, roughly {est / 60:.0f} min")
        for i, (rep, sc, t) in enumerate(plan, 1):
            what = f"{sc['clients']} idle clients" if sc["kind"] == "idle" else f"{duration}s"
            log(f"[{i}/{len(plan)}] repeat {rep + 1}: {sc['name']} via {t} ({what})")
            # Every run starts with no server connections: direct needs the slots (max_connections=100)
            # and each pooler then pays for its own server logins in its own run.
            cluster.terminate_user_backends()
            if sc["writes"]:
                cluster.reset_tables()
            p = poolers.get(t)
            if p is not None and not p.alive():
                log(f"{t} is not running; restarting")
                if not p.start():
                    results.append({"scenario": sc["name"], "kind": sc["kind"], "target": t, "repeat": rep,
                                    "status": "FAILED", "error": "restart failed:\n" + p.log_tail()})
                    continue
            if sc["kind"] == "idle":
                # A fresh process: memory freed by earlier runs (1000 pgbench clients, the previous
                # repeat's idle clients) would otherwise be reused and hide the cost per client.
                if p.restart():
                    r = run_idle(sc, t, p, idle_batch)
                else:
                    r = {"scenario": sc["name"], "kind": "idle", "target": t, "clients": sc["clients"],
                         "status": "FAILED", "error": "restart failed:\n" + p.log_tail()}
                # ... and the next runs' peak RSS does not carry the idle clients' memory.
                p.restart()
            else:
                port = p.port if p is not None else cluster.port
                r = run_scenario(sc, t, port, p, duration, scripts,
                                 os.path.join(pglog_dir, f"{sc['name']}-{t}-r{rep + 1}"))
            r["repeat"] = rep
            results.append(r)
            if r["status"] != "ok":
                log(f"  failed: {r.get('error', '')}")
            elif sc["kind"] == "idle":
                log(f"  {r['connected']} clients in {r['open_s']} s, RSS {r['rss_before_kb']} -> "
                    f"{r['rss_after_kb']} KiB: {r['kib_per_client']} KiB/client")
            time.sleep(1)
        pgb_ver = ""
        if os.access(pgbouncer_bin, os.X_OK):
            pgb_ver = subprocess.run([pgbouncer_bin, "--version"], capture_output=True, text=True).stdout
            pgb_ver = pgb_ver.splitlines()[0] if pgb_ver else ""
        meta = {
            "timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
            "duration_s": duration, "repeats": repeats, "scale": scale,
            "cpus": os.cpu_count(), "postgres": cluster.version(), "pgbouncer": pgb_ver,
            "sluice_bin": sluice_src, "git_rev": git_rev(), "skipped": skipped,
            "targets": order, "scenarios": scenarios, "auth_methods": auth,
            "pool_mode": "transaction", "default_pool_size": 20, "max_connections": 100,
            "max_client_conn": max_client_conn, "bench_nofile": nofile, "pooler_nofile": pooler_nofile or nofile,
            "idle_clients": idle_n, "idle_batch": idle_batch,
        }
    finally:
        for p in poolers.values():
            p.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)

    keys = ("kind", "clients", "tps", "latency_ms", "p50_ms", "p95_ms", "p99_ms", "failed", "aborted_clients",
            "cpu_us_per_tx", "cpu_us_per_login", "kib_per_client", "peak_rss_kb")
    full = [dict({k: None for k in keys}, **r) for r in results]
    summary = summarize(full, scenarios)
    print()
    print(f"pgbench {duration}s per run, {repeats} repeat(s), scale {scale}, {os.cpu_count()} CPUs; "
          f"PostgreSQL {meta['postgres']}, {meta['pgbouncer']}; idle_clients: {idle_n}")
    print("auth: " + "; ".join(f"{t}: " + ", ".join(f"{u} {m}" for u, m in v.items()) for t, v in auth.items()))
    print()
    print_table(full, scenario_order)
    print()
    print(f"summary: median (min-max) over {repeats} repeat(s), failed runs excluded; "
          "S/P = target median / PgBouncer median")
    print_summary(summary)
    for name, why in skipped.items():
        print(f"\n{name} skipped: {why.splitlines()[0]}")
    path = os.path.join(out_dir(), "results.json")
    with open(path, "w") as f:
        json.dump({"meta": meta, "runs": full, "summary": summary}, f, indent=2)
    print(f"\nresults: {path}")


def git_rev():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
