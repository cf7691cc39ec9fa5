#!/usr/bin/env python3
"""Sluice benchmark driver (stdlib only): direct PostgreSQL vs PgBouncer vs Sluice with pgbench.

Started by bench/run.sh. Environment:
  SLUICE_BIN        sluice binary (empty or failing to start: Sluice is skipped)
  BENCH_DURATION    seconds per pgbench run (default 10)
  BENCH_REPEATS     repetitions of the whole scenario list (default 1)
  BENCH_SCALE       pgbench -i scale (default 10)
  BENCH_TARGETS     comma list out of direct,pgbouncer,sluice (default all)
  BENCH_SCENARIOS   comma list of scenario names (default all)
  PGBOUNCER_BIN     default /usr/sbin/pgbouncer
"""

import datetime
import glob
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IS_ROOT = os.geteuid() == 0
AS_PG = ["runuser", "-u", "postgres", "--"] if IS_ROOT else []
CLK_TCK = os.sysconf("SC_CLK_TCK")
USER, PASSWORD, DB = "bench_user", "bench_pass", "bench"

SCENARIOS = [
    # name, pgbench args (besides connection/duration), clients
    ("select_c10", ["-S"], 10),
    ("select_c100", ["-S"], 100),
    ("select_c1000", ["-S"], 1000),
    ("connect_select1_c20", ["-C", "-f", "{select1}"], 20),
    ("tpcb_c50", [], 50),
    ("select_extended_c50", ["-S", "-M", "extended"], 50),
    # Named prepared statements through transaction pooling (PgBouncer >= 1.21 remaps them;
    # the Debian PgBouncer 1.18 does not, so its row shows the failures operators used to get).
    ("select_prepared_c50", ["-S", "-M", "prepared"], 50),
]


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


def proc_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
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
            f.write("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        run(AS_PG + [f"{self.bindir}/pg_ctl", "-D", self.data, "-l", os.path.join(self.data, "postgres.log"),
                     "-w", "start"], stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.started = True
        self.psql("postgres", f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self.psql("postgres", f"CREATE DATABASE {DB} OWNER {USER}")

    def psql(self, db, sql):
        out = run([f"{self.bindir}/psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.sock,
                   "-p", str(self.port), "-U", "postgres", "-d", db, "-c", sql],
                  capture_output=True, text=True)
        return out.stdout.strip()

    def terminate_user_backends(self):
        self.psql("postgres", f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{USER}'")
        time.sleep(0.2)

    def version(self):
        return self.psql("postgres", "SHOW server_version")

    def stop(self):
        if self.started:
            subprocess.run(AS_PG + [f"{self.bindir}/pg_ctl", "-D", self.data, "stop", "-m", "immediate"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started = False


POOLER_INI = """[databases]
{db} = host=127.0.0.1 port={pg_port} dbname={db}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {dir}
auth_type = scram-sha-256
auth_file = {dir}/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 2000
log_connections = 0
log_disconnections = 0
ignore_startup_parameters = extra_float_digits
"""


class Pooler:
    """PgBouncer or Sluice with an identical pgbouncer.ini (only port and dir differ)."""

    def __init__(self, name, cmd_prefix, binary, base, cluster, secret, owner_pg):
        self.name, self.binary = name, binary
        self.dir = os.path.join(base, name)
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o755)
        if owner_pg:
            chown_pg(self.dir)
        self.port = free_port()
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(ini, "w") as f:
            f.write(POOLER_INI.format(db=DB, pg_port=cluster.port, port=self.port, dir=self.dir))
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            f.write(f'"{USER}" "{secret}"\n')
        self.log_path = os.path.join(self.dir, "pooler.log")
        # runuser's PAM session resets RLIMIT_NOFILE to 1024; raise it again for 2000 clients.
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if cmd_prefix:
            self.cmd = cmd_prefix + ["sh", "-c", f'ulimit -n {nofile} 2>/dev/null || ulimit -n 4096; exec "$0" "$1"',
                                     binary, ini]
        else:
            self.cmd = [binary, ini]
        self.runner_pid_is_child = bool(cmd_prefix)
        self.proc = None
        self.pid = None

    def start(self):
        logf = open(self.log_path, "w")
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


def run_scenario(scenario, target_name, port, pooler, duration, select1):
    name, extra, clients = scenario
    args = [a.replace("{select1}", select1) for a in extra]
    cmd = ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", USER,
           "-c", str(clients), "-j", "2", "-T", str(duration)] + args + [DB]
    env = dict(os.environ, PGPASSWORD=PASSWORD, PGCONNECT_TIMEOUT="15")
    pid = pooler.pid if pooler else None
    if pid:
        reset_hwm(pid)
        cpu0 = proc_cpu_ticks(pid)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration * 4 + 120)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode(errors="replace"), "pgbench timed out", -1
    wall = time.time() - t0
    r = {"scenario": name, "target": target_name, "clients": clients, "exit_code": rc,
         "wall_s": round(wall, 2)}
    r.update(parse_pgbench(out, err))
    r["cpu_us_per_tx"] = None
    r["peak_rss_kb"] = None
    if pid and pooler.alive():
        cpu = (proc_cpu_ticks(pid) - cpu0) / CLK_TCK * 1e6
        r["cpu_s"] = round(cpu / 1e6, 3)
        if r["transactions"]:
            r["cpu_us_per_tx"] = round(cpu / r["transactions"], 2)
        r["peak_rss_kb"] = proc_hwm_kb(pid)
    ok = rc == 0 and r["tps"] is not None and not r["aborted_clients"]
    r["status"] = "ok" if ok else "FAILED"
    if not ok:
        lines = [line for line in err.splitlines() if line.strip()]
        if not lines:
            lines = [f"pgbench exit code {rc}"] + out.splitlines()[-3:]
        r["error"] = "\n".join(lines[:3] + (["..."] if len(lines) > 3 else []))
    if pooler and not pooler.alive():
        r["status"] = "FAILED"
        r["error"] = (r.get("error", "") + f"\n{pooler.name} died; log:\n" + pooler.log_tail()).strip()
    return r


def fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def print_table(results):
    hdr = ["scenario", "target", "tps", "lat ms", "failed", "aborted", "cpu us/tx", "peak RSS MB", "status"]
    rows = []
    for r in results:
        rss = r["peak_rss_kb"] / 1024 if r["peak_rss_kb"] else None
        rows.append([r["scenario"], r["target"], fmt(r["tps"]), fmt(r["latency_ms"], 3), fmt(r["failed"]),
                     fmt(r["aborted_clients"]), fmt(r["cpu_us_per_tx"], 1), fmt(rss, 1), r["status"]])
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    line = "  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(hdr, widths)))
    print(line)
    print("-" * len(line))
    prev = None
    for row in rows:
        if prev is not None and row[0] != prev:
            print()
        prev = row[0]
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))


def main():
    duration = int(os.environ.get("BENCH_DURATION", "10"))
    repeats = int(os.environ.get("BENCH_REPEATS", "1"))
    scale = int(os.environ.get("BENCH_SCALE", "10"))
    targets = [t for t in os.environ.get("BENCH_TARGETS", "direct,pgbouncer,sluice").split(",") if t]
    wanted = [s for s in os.environ.get("BENCH_SCENARIOS", "").split(",") if s]
    scenarios = [s for s in SCENARIOS if not wanted or s[0] in wanted]
    sluice_bin = os.environ.get("SLUICE_BIN", "")
    pgbouncer_bin = os.environ.get("PGBOUNCER_BIN", "/usr/sbin/pgbouncer")

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    base = tempfile.mkdtemp(prefix="sluice-bench-")
    os.chmod(base, 0o755)
    cluster = Cluster(base)
    poolers = {}
    results = []
    skipped = {}
    try:
        log(f"starting PostgreSQL (port {cluster.port}) in {base}")
        cluster.start()
        log(f"pgbench -i -s {scale}")
        env = dict(os.environ, PGPASSWORD=PASSWORD)
        run(["pgbench", "-i", "-q", "-s", str(scale), "-h", "127.0.0.1", "-p", str(cluster.port), "-U", USER, DB],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        secret = cluster.psql("postgres", f"SELECT rolpassword FROM pg_authid WHERE rolname = '{USER}'")
        select1 = os.path.join(base, "select1.sql")
        with open(select1, "w") as f:
            f.write("SELECT 1;\n")
        os.chmod(select1, 0o644)

        if "pgbouncer" in targets:
            if os.access(pgbouncer_bin, os.X_OK):
                p = Pooler("pgbouncer", AS_PG, pgbouncer_bin, base, cluster, secret, owner_pg=True)
                if p.start():
                    poolers["pgbouncer"] = p
                else:
                    skipped["pgbouncer"] = "failed to start:\n" + p.log_tail()
            else:
                skipped["pgbouncer"] = f"{pgbouncer_bin} not found"
        if "sluice" in targets:
            if sluice_bin and os.access(sluice_bin, os.X_OK):
                p = Pooler("sluice", [], sluice_bin, base, cluster, secret, owner_pg=False)
                if p.start():
                    poolers["sluice"] = p
                else:
                    skipped["sluice"] = "failed to start:\n" + p.log_tail()
            else:
                skipped["sluice"] = "binary not available (build failed?)"
        for name, why in skipped.items():
            log(f"SKIPPING {name}: {why}")

        order = [t for t in ("direct", "pgbouncer", "sluice") if t in targets and t not in skipped]
        total = repeats * len(scenarios) * len(order)
        i = 0
        for rep in range(repeats):
            for sc in scenarios:
                for t in order:
                    i += 1
                    log(f"[{i}/{total}] {sc[0]} via {t} ({duration}s)")
                    if t == "direct":
                        # Free the slots held by the poolers' idle server connections (max_connections=100).
                        cluster.terminate_user_backends()
                        r = run_scenario(sc, t, cluster.port, None, duration, select1)
                    else:
                        p = poolers[t]
                        if not p.alive():
                            log(f"{t} is not running; restarting")
                            if not p.start():
                                results.append({"scenario": sc[0], "target": t, "status": "FAILED",
                                                "error": "restart failed"})
                                continue
                        r = run_scenario(sc, t, p.port, p, duration, select1)
                    r["repeat"] = rep
                    results.append(r)
                    if r["status"] != "ok":
                        log(f"  failed: {r.get('error', '')}")
                    time.sleep(1)
        pgb_ver = ""
        if os.access(pgbouncer_bin, os.X_OK):
            pgb_ver = subprocess.run([pgbouncer_bin, "--version"], capture_output=True, text=True).stdout
            pgb_ver = pgb_ver.splitlines()[0] if pgb_ver else ""
        meta = {
            "timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
            "duration_s": duration, "repeats": repeats, "scale": scale,
            "cpus": os.cpu_count(), "postgres": cluster.version(), "pgbouncer": pgb_ver,
            "sluice_bin": sluice_bin, "git_rev": git_rev(), "skipped": skipped,
            "pool_mode": "transaction", "default_pool_size": 20, "max_connections": 100,
        }
    finally:
        for p in poolers.values():
            p.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)

    full = [dict({k: None for k in ("tps", "latency_ms", "failed", "aborted_clients", "cpu_us_per_tx",
                                    "peak_rss_kb")}, **r) for r in results]
    print()
    print(f"pgbench {duration}s per run, {repeats} repeat(s), scale {scale}, {os.cpu_count()} CPUs; "
          f"PostgreSQL {meta['postgres']}, {meta['pgbouncer']}")
    print_table(full)
    if repeats > 1:
        print(f"\nmedian tps over {repeats} repeats (failed runs excluded):")
        for sc in scenarios:
            cells = []
            for t in ("direct", "pgbouncer", "sluice"):
                v = [r["tps"] for r in full if r["scenario"] == sc[0] and r["target"] == t
                     and r["status"] == "ok" and r["tps"] is not None]
                if any(r["scenario"] == sc[0] and r["target"] == t for r in full):
                    cells.append(f"{t} {fmt(statistics.median(v)) if v else 'FAILED'}")
            print(f"  {sc[0]:<22} " + "   ".join(cells))
    for name, why in skipped.items():
        print(f"\n{name} skipped: {why.splitlines()[0]}")
    outdir = os.path.join(ROOT, "bench", "results")
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".json")
    with open(path, "w") as f:
        json.dump({"meta": meta, "runs": full}, f, indent=2)
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
