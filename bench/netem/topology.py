"""The network of bench/netem: a namespace for PostgreSQL behind a veth pair, the delay on the
link (tc netem where the kernel has it, else bench/netem/relay in user space), and the processes
started in it (PostgreSQL, the poolers, the relay). Everything made here is undone by close().

Addresses: <subnet>.1/30 on the root end of the veth pair, <subnet>.2/30 in the namespace; no
route beyond them is added, so the bench's traffic stays on those two addresses.
"""

import os
import shutil
import signal
import subprocess
import time

PG_PORT = 5432


def log(msg):
    print(f"==> {msg}", flush=True, file=__import__("sys").stderr)


def sh(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


class Net:
    """The namespace and the veth pair, named after this process so that runs side by side (or a
    leftover of a killed run) never collide."""

    def __init__(self, subnet):
        tag = os.environ.get("BENCH_NETNS") or f"slb{os.getpid()}"
        self.ns = tag
        self.veth_root, self.veth_ns = f"{tag[:11]}r", f"{tag[:11]}n"
        self.addr_root, self.addr_ns = f"{subnet}.1", f"{subnet}.2"
        self.subnet = f"{subnet}.0/30"
        self.made = False

    def up(self):
        self.made = True
        sh(["ip", "netns", "add", self.ns])
        sh(["ip", "link", "add", self.veth_root, "type", "veth", "peer", "name", self.veth_ns])
        sh(["ip", "link", "set", self.veth_ns, "netns", self.ns])
        sh(["ip", "addr", "add", f"{self.addr_root}/30", "dev", self.veth_root])
        sh(["ip", "link", "set", self.veth_root, "up"])
        sh(["ip", "-n", self.ns, "addr", "add", f"{self.addr_ns}/30", "dev", self.veth_ns])
        sh(["ip", "-n", self.ns, "link", "set", self.veth_ns, "up"])
        sh(["ip", "-n", self.ns, "link", "set", "lo", "up"])

    def exec_prefix(self):
        return ["ip", "netns", "exec", self.ns]

    def add_netem(self, delay_us, jitter_us, both):
        """tc netem on the root end (packets into the namespace), as in the seed, and with `both`
        on the namespace end too. Returns None, or tc's error when the kernel lacks sch_netem."""
        qdisc = ["root", "netem", "delay", f"{delay_us}us", f"{jitter_us}us", "distribution", "normal"]
        cmds = [["tc", "qdisc", "add", "dev", self.veth_root] + qdisc]
        if both:
            cmds.append(["ip", "netns", "exec", self.ns, "tc", "qdisc", "add", "dev", self.veth_ns] + qdisc)
        for cmd in cmds:
            p = sh(cmd, check=False)
            if p.returncode != 0:
                sh(["tc", "qdisc", "del", "dev", self.veth_root, "root"], check=False)
                return (p.stderr or p.stdout).strip() or f"exit code {p.returncode}"
        return None

    def down(self):
        if not self.made:
            return
        # Whatever still runs in the namespace is ours (started by this bench): stop it first.
        pids = sh(["ip", "netns", "pids", self.ns], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        sh(["ip", "netns", "del", self.ns], check=False)  # takes the veth pair with it
        sh(["ip", "link", "del", self.veth_root], check=False)
        self.made = False


class Proc:
    """A long-running process of the bench (pooler, relay), output to `log_path`. `pid` is the
    process itself, found from `pidfile` or as runuser's child when it runs under runuser."""

    def __init__(self, name, cmd, log_path, cwd=None, pidfile=None, under_runuser=False):
        self.name, self.cmd, self.log_path, self.cwd = name, cmd, log_path, cwd
        self.pidfile, self.under_runuser = pidfile, under_runuser
        self.proc, self.pid = None, None

    def start(self, stdout_pipe=False):
        logf = open(self.log_path, "a")
        os.chmod(self.log_path, 0o666)
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE if stdout_pipe else logf,
                                     stderr=logf, stdin=subprocess.DEVNULL, cwd=self.cwd,
                                     text=True)
        logf.close()
        self.pid = self.proc.pid

    def find_pid(self, timeout=10.0):
        """The real process's pid once it is up (its pidfile), or None if it exited first."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return None
            if self.pidfile and os.path.exists(self.pidfile):
                try:
                    with open(self.pidfile) as f:
                        self.pid = int(f.read().split()[0])
                    return self.pid
                except (OSError, ValueError, IndexError):
                    pass
            elif not self.pidfile:
                return self.pid
            time.sleep(0.05)
        return None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=10):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
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


def as_postgres(cmd):
    return ["runuser", "-u", "postgres", "--"] + cmd


def chown_pg(path):
    shutil.chown(path, "postgres", "postgres")


class Cluster:
    """PostgreSQL inside the namespace, as the postgres user: port 5432 on 127.0.0.1 (and on the
    namespace's veth address when netem delays the link; the relay takes that address
    otherwise), md5 from the namespace's loopback and from the veth subnet."""

    def __init__(self, base, net, bindir, listen_veth, max_connections):
        self.base, self.net, self.bindir = base, net, bindir
        self.data, self.sock = os.path.join(base, "pgdata"), os.path.join(base, "pgsock")
        for d in (self.data, self.sock):
            os.mkdir(d)
            chown_pg(d)
        self.listen = "127.0.0.1" + (f",{net.addr_ns}" if listen_veth else "")
        self.max_connections = max_connections
        self.started = False

    def start(self, user, password, db):
        sh(as_postgres([f"{self.bindir}/initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                        "--locale=C", "--no-sync"]))
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write(f"""
port = {PG_PORT}
listen_addresses = '{self.listen}'
unix_socket_directories = '{self.sock}'
max_connections = {self.max_connections}
superuser_reserved_connections = 0
shared_buffers = 128MB
fsync = off
synchronous_commit = off
""")
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
            f.write(f"local all all trust\nhost all all 127.0.0.1/32 md5\nhost all all {self.net.subnet} md5\n")
        sh(self.net.exec_prefix() + as_postgres(
            [f"{self.bindir}/pg_ctl", "-D", self.data, "-l", os.path.join(self.data, "postgres.log"), "-w", "start"]),
            stdin=subprocess.DEVNULL)
        self.started = True
        self.psql("postgres", f"SET password_encryption = 'md5'; CREATE ROLE {user} LOGIN PASSWORD '{password}'")
        self.psql("postgres", f"CREATE DATABASE {db} OWNER {user}")

    def psql(self, db, sql):
        # Through the Unix socket (a file: reachable from the root namespace).
        return sh([f"{self.bindir}/psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.sock, "-p",
                   str(PG_PORT), "-U", "postgres", "-d", db, "-c", sql]).stdout.strip()

    def stop(self):
        if self.started:
            sh(as_postgres([f"{self.bindir}/pg_ctl", "-D", self.data, "stop", "-m", "immediate"]), check=False)
            self.started = False
