#!/usr/bin/env python3
"""The seed's Kubernetes latency experiment (seed 004, "PgBouncer on Kubernetes and how to achieve
minimal latency"): pgbench with the query `;`, 1,000 clients on 8 threads, across a veth pair
delayed by 1 ms +- 0.1 ms (normal), through one PgBouncer, two PgBouncers on one port
(so_reuseport), Sluice, and directly. Started by bench/netem/run.sh (as root); see
bench/README.md ("Latency across a delayed link") for the knobs and docs/performance.md for figures.

Layouts (BENCH_LAYOUT):
  seed   (default) as in the seed: PostgreSQL and the poolers in the namespace, pgbench in the root
         namespace; the delay is between the clients and the pooler.
  split  PostgreSQL alone in the namespace, the poolers beside pgbench; the delay is between the
         pooler and PostgreSQL (a pooler Deployment away from the database).
The direct row crosses the link in both.

Delay (BENCH_DELAY): `netem` (tc qdisc on the root end of the pair, packets into the namespace, as
in the seed; BENCH_DELAY_BOTH=1 adds the namespace end), `relay` (bench/netem/relay in the
namespace in front of every port the clients reach across the link: bytes towards the namespace
are delayed by a normal draw, kept in order; replies too with BENCH_DELAY_BOTH=1), or `auto`
(default: netem when the kernel has sch_netem, else the relay). The output says which one ran.
"""

import datetime
import glob
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from bench import CLK_TCK, free_port, parse_pgbench, pg_bindir, proc_cpu_ticks  # noqa: E402
from topology import PG_PORT, Cluster, Net, Proc, as_postgres, chown_pg, log, sh  # noqa: E402

USER, PASSWORD, DB = "bench_md5", "bench_md5_pass", "bench"
TARGETS = ["direct", "pgbouncer", "pgbouncer_x2", "sluice"]
SEED_PORTS = {"pgbouncer": 6432, "pgbouncer_x2": 6433, "sluice": 6434}

POOLER_INI = """[databases]
{db} = host={pg_host} port={pg_port} dbname={db}

[pgbouncer]
listen_addr = {listen}
listen_port = {port}
unix_socket_dir = {dir}
pidfile = {dir}/pooler.pid
auth_type = md5
auth_file = {dir}/userlist.txt
pool_mode = transaction
default_pool_size = {pool}
max_client_conn = {max_client_conn}
log_connections = 0
log_disconnections = 0
ignore_startup_parameters = extra_float_digits
"""


def env_int(name, default):
    return int(os.environ.get(name, str(default)))


class Target:
    """One row: its processes (none for direct), where pgbench connects, and their CPU."""

    def __init__(self, name, host, port, procs):
        self.name, self.host, self.port, self.procs = name, host, port, procs

    def cpu_ticks(self):
        return sum(proc_cpu_ticks(p.pid) for p in self.procs)

    def dead(self):
        return [p for p in self.procs if not p.alive()]


def make_poolers(name, base, cfg, secret, in_ns_prefix):
    """The processes of one pooler target (two for pgbouncer_x2), not started."""
    n = 2 if name == "pgbouncer_x2" else 1
    port = SEED_PORTS[name] if cfg["layout"] == "seed" else free_port()
    procs = []
    for i in range(n):
        d = os.path.join(base, f"{name}{'_' + str(i) if n > 1 else ''}")
        os.mkdir(d)
        os.chmod(d, 0o755)
        chown_pg(d)
        ini = os.path.join(d, "pgbouncer.ini")
        with open(ini, "w") as f:
            f.write(POOLER_INI.format(db=DB, pg_host=cfg["pg_host"], pg_port=PG_PORT, listen=cfg["pooler_listen"],
                                      port=port, dir=d, pool=cfg["pool"], max_client_conn=cfg["clients"] + 100))
            if n > 1:
                f.write("so_reuseport = 1\n")
        with open(os.path.join(d, "userlist.txt"), "w") as f:
            f.write(f'"{USER}" "{secret}"\n')
        nofile = cfg["nofile"]
        raise_nofile = f'ulimit -n {nofile} 2>/dev/null || ulimit -n 4096; exec "$0" "$1"'
        if name.startswith("pgbouncer"):
            # PgBouncer refuses root: as postgres (runuser resets the soft fd limit: raise it).
            cmd = in_ns_prefix + as_postgres(["sh", "-c", raise_nofile, cfg["pgbouncer_bin"], ini])
        else:
            cmd = in_ns_prefix + ["sh", "-c", raise_nofile, cfg["sluice_bin"], ini]
        procs.append(Proc(f"{name}[{i}]" if n > 1 else name, cmd, os.path.join(d, "pooler.log"), cwd=d,
                          pidfile=os.path.join(d, "pooler.pid")))
    return procs, port


def wait_ready(target, cfg, timeout=20.0):
    """Each process wrote its pidfile and its Unix socket, and a query goes through the target
    across the link. Returns None or why not."""
    for p in target.procs:
        if p.find_pid(timeout) is None:
            return f"{p.name} did not start:\n{p.log_tail()}"
        sock = os.path.join(os.path.dirname(p.pidfile), f".s.PGSQL.{target.port}")
        deadline = time.time() + timeout
        while not os.path.exists(sock) and time.time() < deadline and p.alive():
            time.sleep(0.05)
    deadline = time.time() + timeout
    err = ""
    while time.time() < deadline:
        q = sh(["psql", "-X", "-A", "-t", "-h", target.host, "-p", str(target.port), "-U", USER, "-d", DB, "-c",
                "SELECT 1"], check=False, env=cfg["pg_env"])
        if q.returncode == 0 and q.stdout.strip() == "1":
            return None
        err = q.stderr.strip()
        time.sleep(0.2)
    return f"{target.name}: no answer through {target.host}:{target.port}: {err}"


def latency_stats(prefix):
    """Mean, standard deviation, p50, p99 and max in ms over every transaction in pgbench's
    per-transaction logs <prefix>.<pid>[.<thread>] (deleted afterwards; field 3 is the latency in
    microseconds)."""
    lat = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as f:
            for line in f:
                fields = line.split(maxsplit=3)
                if len(fields) >= 3 and fields[2].isdigit():
                    lat.append(int(fields[2]))
        os.unlink(path)
    if not lat:
        return {"logged_tx": 0}
    lat.sort()
    n = len(lat)
    mean = sum(lat) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in lat) / n)

    def rank(q):  # nearest rank
        return lat[min(n - 1, max(0, -(-n * q // 100) - 1))] / 1000

    return {"logged_tx": n, "mean_ms": round(mean / 1000, 3), "sd_ms": round(sd / 1000, 3),
            "p50_ms": rank(50), "p99_ms": rank(99), "max_ms": lat[-1] / 1000}


def results_dir():
    """Where the raw outputs go: BENCH_OUT (run.sh sets it), else bench/results/<date>-netem."""
    d = os.environ.get("BENCH_OUT") or os.path.join(
        ROOT, "bench", "results", datetime.date.today().isoformat() + "-netem")
    os.makedirs(d, exist_ok=True)
    return d


def run_one(target, rep, cfg, relay, base):
    prefix = os.path.join(base, "logs", f"{target.name}-{rep}")
    cmd = ["pgbench", "-n", "-h", target.host, "-p", str(target.port), "-U", USER, "-c", str(cfg["clients"]),
           "-j", str(cfg["threads"]), "-T", str(cfg["duration"]), "-f", cfg["script"], "--log",
           f"--log-prefix={prefix}", DB]
    cpu0 = target.cpu_ticks() if target.procs else 0
    relay0 = proc_cpu_ticks(relay.pid) if relay else 0
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=cfg["pg_env"], timeout=cfg["duration"] * 4 + 120)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or "", "pgbench timed out", -1
    r = {"target": target.name, "rep": rep, "exit_code": rc, "wall_s": round(time.time() - t0, 2)}
    out = out if isinstance(out, str) else out.decode()
    raw = os.path.join(results_dir(), "pgbench")
    os.makedirs(raw, exist_ok=True)
    with open(os.path.join(raw, f"{target.name}-r{rep}.txt"), "w") as f:
        f.write("$ " + " ".join(cmd) + f"\n# exit code {rc}\n{out}\n# stderr\n{err}\n")
    r.update(parse_pgbench(out if isinstance(out, str) else out.decode(), err))
    r.update(latency_stats(prefix))
    tx = r.get("transactions") or 0
    r["pooler_cpu_us_per_tx"] = None
    if target.procs and not target.dead() and tx:
        r["pooler_cpu_us_per_tx"] = round((target.cpu_ticks() - cpu0) / CLK_TCK * 1e6 / tx, 2)
    r["relay_cpu_us_per_tx"] = (round((proc_cpu_ticks(relay.pid) - relay0) / CLK_TCK * 1e6 / tx, 2)
                                if relay and relay.alive() and tx else None)
    ok = rc == 0 and r["tps"] is not None and not r["aborted_clients"] and not target.dead()
    r["status"] = "ok" if ok else "FAILED"
    if not ok:
        lines = [x for x in err.splitlines() if x.strip()][:3] or [f"pgbench exit code {rc}"]
        for proc in target.dead():
            lines.append(f"{proc.name} died:\n{proc.log_tail()}")
        r["error"] = "\n".join(lines)
    return r


def fmt(v, nd=2):
    return "-" if v is None else (f"{v:,.0f}" if nd == 0 else f"{v:.{nd}f}")


COLUMNS = [("tps", 0), ("mean_ms", 3), ("p50_ms", 3), ("p99_ms", 3), ("sd_ms", 3), ("pooler_cpu_us_per_tx", 1),
           ("relay_cpu_us_per_tx", 1)]
HEADER = "target          rep        tps  mean ms   p50 ms   p99 ms    sd ms  pooler us/tx  relay us/tx  status"


def row(name, rep, r):
    vals = [fmt(r.get(k), nd) for k, nd in COLUMNS]
    return (f"{name:<14} {rep:>4} {vals[0]:>10} {vals[1]:>8} {vals[2]:>8} {vals[3]:>8} {vals[4]:>8} "
            f"{vals[5]:>13} {vals[6]:>12}  {r.get('status', '')}")


def machine():
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({model}), kernel {os.uname().release}"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    if os.geteuid() != 0:
        sys.exit("bench/netem needs root (ip netns, veth, tc); run it with sudo")
    cfg = {
        "duration": env_int("BENCH_DURATION", 15), "repeats": env_int("BENCH_REPEATS", 2),
        "clients": env_int("BENCH_CLIENTS", 1000), "threads": env_int("BENCH_THREADS", 8),
        "pool": env_int("BENCH_POOL_SIZE", 20), "layout": os.environ.get("BENCH_LAYOUT", "seed"),
        "delay_us": env_int("BENCH_DELAY_US", 1000), "jitter_us": env_int("BENCH_JITTER_US", 100),
        "both": os.environ.get("BENCH_DELAY_BOTH", "0") not in ("", "0"),
        "sluice_bin": os.environ.get("SLUICE_BIN", ""), "relay_bin": os.environ.get("RELAY_BIN", ""),
        "pgbouncer_bin": os.environ.get("PGBOUNCER_BIN") or os.path.join(
            os.path.dirname(ROOT), "shared", "anchors", "pgbouncer-1.25.2"),
        "pg_env": dict(os.environ, PGPASSWORD=PASSWORD, PGSSLMODE="disable", PGCONNECT_TIMEOUT="30"),
    }
    method = os.environ.get("BENCH_DELAY", "auto")
    if cfg["layout"] not in ("seed", "split") or method not in ("auto", "netem", "relay"):
        sys.exit("BENCH_LAYOUT is seed or split; BENCH_DELAY is auto, netem or relay")
    targets = [t for t in os.environ.get("BENCH_TARGETS", ",".join(TARGETS)).split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        sys.exit(f"unknown BENCH_TARGETS {unknown}; known: {','.join(TARGETS)}")
    for t, key in (("sluice", "sluice_bin"), ("pgbouncer", "pgbouncer_bin"), ("pgbouncer_x2", "pgbouncer_bin")):
        if t in targets and not os.access(cfg[key], os.X_OK):
            log(f"SKIP {t}: {key} '{cfg[key]}' is not an executable")
            targets.remove(t)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    cfg["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    net = Net(os.environ.get("BENCH_SUBNET", "10.251.72"))
    base = tempfile.mkdtemp(prefix="sluice-netem-")
    os.chmod(base, 0o755)
    os.mkdir(os.path.join(base, "logs"))
    cluster, relay, all_procs, results = None, None, [], []
    try:
        net.up()
        why_not = None
        if method in ("auto", "netem"):
            why_not = net.add_netem(cfg["delay_us"], cfg["jitter_us"], cfg["both"])
            if why_not and method == "netem":
                sys.exit(f"tc netem failed: {why_not}")
        use_relay = method == "relay" or bool(why_not)
        if use_relay and not (cfg["relay_bin"] and os.access(cfg["relay_bin"], os.X_OK)):
            sys.exit(f"no tc netem ({why_not}) and RELAY_BIN '{cfg['relay_bin']}' is not an executable")
        dirs = "both directions" if cfg["both"] else "packets into the namespace (clients -> servers)"
        if use_relay:
            delay_line = (f"user-space relay (bench/netem/relay) on {net.addr_ns}, normal({cfg['delay_us']} us, "
                          f"{cfg['jitter_us']} us) on bytes towards the namespace"
                          + (" and back" if cfg["both"] else "")
                          + (f"; tc netem: {why_not}" if why_not else "; BENCH_DELAY=relay"))
        else:
            delay_line = (f"tc netem delay {cfg['delay_us']}us {cfg['jitter_us']}us distribution normal on "
                          f"{net.veth_root}" + (f" and {net.veth_ns}" if cfg["both"] else "") + f" ({dirs})")
        log(f"delay: {delay_line}")

        bindir = pg_bindir()
        cfg["pg_host"] = "127.0.0.1" if cfg["layout"] == "seed" else net.addr_ns
        cfg["pooler_listen"] = net.addr_ns if cfg["layout"] == "seed" and not use_relay else "127.0.0.1"
        cluster = Cluster(base, net, bindir, listen_veth=not use_relay,
                          max_connections=(cfg["clients"] if "direct" in targets else 0) + 200)
        log(f"starting PostgreSQL in namespace {net.ns} ({net.addr_ns}:{PG_PORT}), layout {cfg['layout']}")
        cluster.start(USER, PASSWORD, DB)
        secret = cluster.psql("postgres", f"SELECT rolpassword FROM pg_authid WHERE rolname = '{USER}'")
        cfg["script"] = os.path.join(base, "semicolon.sql")
        with open(cfg["script"], "w") as f:
            f.write(";\n")
        for key in ("sluice_bin", "relay_bin"):  # private copies: target/ may be rebuilt meanwhile
            if cfg[key]:
                dst = os.path.join(base, os.path.basename(cfg[key]) + "-bin")
                shutil.copy2(cfg[key], dst)
                cfg[key] = dst

        ns_prefix = net.exec_prefix() if cfg["layout"] == "seed" else []
        tlist = []
        for name in targets:
            if name == "direct":
                tlist.append(Target(name, net.addr_ns, PG_PORT, []))
                continue
            procs, port = make_poolers(name, base, cfg, secret, ns_prefix)
            all_procs += procs
            host = net.addr_ns if cfg["layout"] == "seed" else "127.0.0.1"
            tlist.append(Target(name, host, port, procs))

        if use_relay:
            across = [PG_PORT] + ([t.port for t in tlist if t.procs] if cfg["layout"] == "seed" else [])
            maps = sum((["--map", f"{net.addr_ns}:{p}=127.0.0.1:{p}"] for p in sorted(set(across))), [])
            relay = Proc("relay", net.exec_prefix() + [cfg["relay_bin"], "--delay-us", str(cfg["delay_us"]),
                                                       "--jitter-us", str(cfg["jitter_us"])]
                         + (["--both"] if cfg["both"] else []) + maps, os.path.join(base, "relay.log"))
            relay.start(stdout_pipe=True)
            for _ in range(len(maps) // 2):
                line = relay.proc.stdout.readline()
                if not line:
                    sys.exit(f"the relay did not start:\n{relay.log_tail()}")
                log(line.strip())

        ready = []
        for t in tlist:
            for p in t.procs:
                p.start()
                if t.name == "pgbouncer_x2":
                    p.find_pid()  # one after the other: each binds the shared port itself
            why = wait_ready(t, cfg)
            if why:
                log(f"SKIP {t.name}: {why}")
                for p in t.procs:
                    p.stop()
                continue
            ready.append(t)

        versions = {"postgresql": cluster.psql("postgres", "SHOW server_version")}
        if any(t.name.startswith("pgbouncer") for t in ready):
            versions["pgbouncer"] = sh([cfg["pgbouncer_bin"], "--version"], check=False).stdout.split("\n")[0]
        rev = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
        header = (f"netem bench {datetime.datetime.now():%Y-%m-%d %H:%M}: {machine()}, load {loadavg()}; "
                  f"layout {cfg['layout']}; pgbench -f ';' -c {cfg['clients']} -j {cfg['threads']} "
                  f"-T {cfg['duration']} x {cfg['repeats']}; pool {cfg['pool']} per process; "
                  + ", ".join(f"{k} {v}" for k, v in versions.items()) + f"; git {rev}")
        print(header)
        print(f"delay: {delay_line}", flush=True)
        order = list(ready)
        for rep in range(cfg["repeats"]):
            for t in (order if rep % 2 == 0 else order[::-1]):
                log(f"repeat {rep + 1}/{cfg['repeats']}: {t.name}")
                r = run_one(t, rep + 1, cfg, relay, base)
                results.append(r)
                if r["status"] != "ok":
                    log(f"FAILED {t.name}: {r.get('error')}")
                time.sleep(1)
        print(f"\n{HEADER}")
        for t in ready:
            for r in (r for r in results if r["target"] == t.name):
                print(row(t.name, r["rep"], r))
        if cfg["repeats"] > 1:
            print(f"\nmedian over repeats (failed runs left out)\n{HEADER}")
            for t in ready:
                ok = [r for r in results if r["target"] == t.name and r["status"] == "ok"]
                med = {k: statistics.median([r[k] for r in ok if r.get(k) is not None] or [0]) if ok else None
                       for k, _ in COLUMNS}
                for k, _ in COLUMNS:
                    if all(r.get(k) is None for r in ok):
                        med[k] = None
                print(row(t.name, f"{len(ok)}/{cfg['repeats']}", dict(med, status="")))
        print(f"\nload at the end: {loadavg()}")
        path = os.path.join(results_dir(), "results.json")
        with open(path, "w") as f:
            json.dump({"meta": dict({k: v for k, v in cfg.items() if k != "pg_env"}, header=header,
                                    delay=delay_line, versions=versions), "runs": results}, f, indent=1)
        print(f"results: {path}")
    finally:
        for p in all_procs:
            p.stop()
        if relay:
            relay.stop()
        if cluster:
            cluster.stop()
        net.down()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
