#!/usr/bin/env python3
"""summary.md of a bench/evidence.sh run (stdlib only): for every figure, the median and the range
(min-max) over all runs, with n, read from the raw outputs the run left in its folder:
bench/results.json (bench/run.sh), takeover/*/summary.txt (bench/takeover.sh) and
netem/results.json (bench/netem/run.sh). Usage: evidence_summary.py <evidence folder>."""

import glob
import json
import os
import re
import statistics
import sys


def rng(vals, nd=0):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    f = (lambda v: f"{v:,.0f}") if nd == 0 else (lambda v: f"{v:.{nd}f}")
    return f"{f(statistics.median(vals))} ({f(min(vals))}-{f(max(vals))}, n={len(vals)})"


def stat(s, nd=0):
    if not s:
        return "-"
    f = (lambda v: f"{v:,.0f}") if nd == 0 else (lambda v: f"{v:.{nd}f}")
    return f"{f(s['median'])} ({f(s['min'])}-{f(s['max'])}, n={s['n']})"


def machine(folder):
    path = os.path.join(folder, "machine.txt")
    return open(path).read().strip() if os.path.exists(path) else "(no machine.txt)"


def bench_part(folder):
    path = os.path.join(folder, "bench", "results.json")
    if not os.path.exists(path):
        return ["## pgbench scenarios (bench/run.sh)", "", "no bench/results.json: see bench.log", ""]
    data = json.load(open(path))
    meta = data["meta"]
    lines = ["## pgbench scenarios (bench/run.sh)", "",
             f"{meta['repeats']} repeat(s) of {meta['duration_s']} s, scale {meta['scale']}, {meta['cpus']} CPUs; "
             f"PostgreSQL {meta['postgres']}; {meta['pgbouncer']}. Median (min-max, n) over the runs that "
             "succeeded; S/P = the median over PgBouncer's. Raw: `bench/results.json`, `bench/pgbench/`, "
             "`bench/stdout.txt`.", "",
             "| scenario | target | ok/runs | tps | p99 ms | CPU µs/tx | CPU µs/login | KiB/client | CPU S/P | tps S/P |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["summary"]:
        lines.append("| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["scenario"], r["target"], r["ok_runs"], r["runs"], stat(r.get("tps")), stat(r.get("p99_ms"), 3),
            stat(r.get("cpu_us_per_tx"), 1), stat(r.get("cpu_us_per_login"), 1), stat(r.get("kib_per_client"), 2),
            r.get("cpu_ratio_vs_pgbouncer") or "-", r.get("tps_ratio_vs_pgbouncer") or "-"))
    failed = [r for r in data["runs"] if r.get("status") != "ok"]
    if failed:
        lines += ["", f"{len(failed)} failed run(s): " + "; ".join(
            f"{r['scenario']} via {r['target']} r{r.get('repeat', 0) + 1}: {(r.get('error') or '').splitlines()[0] if r.get('error') else 'FAILED'}"
            for r in failed)]
    return lines + [""]


def takeover_part(folder):
    lines = ["## An upgrade under load (bench/takeover.sh)", ""]
    rows = {}
    for path in sorted(glob.glob(os.path.join(folder, "takeover", "*", "summary.txt"))):
        kind = os.path.basename(os.path.dirname(path)).rsplit("-r", 1)[0]
        text = open(path).read()
        num = lambda pat: (float(m.group(1)) if (m := re.search(pat, text)) else None)
        rows.setdefault(kind, []).append({
            "tps": num(r"^tps = ([\d.]+)"), "failed": num(r"number of failed transactions: (\d+)"),
            "aborted": num(r"aborted clients: (\d+)"), "exit": num(r"pgbench exit status: (\d+)"),
            "before": num(r"before the takeover (\d+)"), "during": num(r"in its second (\d+)"),
            "after": num(r", after (\d+)")})
    if not rows:
        return lines + ["no takeover runs: see takeover-*.log", ""]
    lines += ["Median (min-max, n). `during` is the tps of the second in which `sluice -R` took over (for the "
              "baseline: the middle second). Raw: `takeover/<kind>-r<i>/` (pgbench output, -P 1 progress, both "
              "processes' logs).", "",
              "| run | tps (whole run) | before | during | after | failed tx | aborted clients | pgbench exit |",
              "|---|---|---|---|---|---|---|---|"]
    for kind, rs in rows.items():
        lines.append(f"| {kind} | " + " | ".join(rng([r[k] for r in rs]) for k in
                                                  ("tps", "before", "during", "after", "failed", "aborted", "exit")) + " |")
    return lines + [""]


def netem_part(folder):
    path = os.path.join(folder, "netem", "results.json")
    lines = ["## 1,000 clients across a delayed link (bench/netem/run.sh)", ""]
    if not os.path.exists(path):
        return lines + ["not run (needs root) or failed: see netem.log", ""]
    data = json.load(open(path))
    meta = data["meta"]
    lines += [f"{meta.get('header', '')}", "", f"delay: {meta.get('delay', '')}", "",
              "Median (min-max, n) over the runs that succeeded. Raw: `netem/results.json`, `netem/pgbench/`.", "",
              "| target | ok/runs | tps | mean ms | p99 ms | pooler CPU µs/tx |", "|---|---|---|---|---|---|"]
    targets = []
    for r in data["runs"]:
        if r["target"] not in targets:
            targets.append(r["target"])
    for t in targets:
        rs = [r for r in data["runs"] if r["target"] == t]
        ok = [r for r in rs if r.get("status") == "ok"]
        lines.append(f"| {t} | {len(ok)}/{len(rs)} | {rng([r.get('tps') for r in ok])} | "
                     f"{rng([r.get('mean_ms') for r in ok], 3)} | {rng([r.get('p99_ms') for r in ok], 3)} | "
                     f"{rng([r.get('pooler_cpu_us_per_tx') for r in ok], 1)} |")
    return lines + [""]


def main():
    folder = sys.argv[1]
    out = ["# Evidence run", "", "```", machine(folder), "```", ""]
    out += bench_part(folder) + takeover_part(folder) + netem_part(folder)
    print("\n".join(out))


if __name__ == "__main__":
    main()
