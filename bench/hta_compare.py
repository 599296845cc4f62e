#!/usr/bin/env python3
"""Paired timing of moetrace against HTA (HolisticTraceAnalysis) on the same traces.

For each trace folder, the two commands run alternately, N times each, every
run a fresh process from start to exit; the order within a pair alternates
too. Prints, per trace, the median wall time and its range and the peak
resident memory of each tool (ru_maxrss from wait4: the largest process of
the command's process tree, so for HTA, which parses ranks in worker
processes, the largest of them or of the main process), and the ratio of the
medians.

  HTA:      HTA_RUNNER TRACE_DIR     (a script that loads the folder with
            hta.trace_analysis.TraceAnalysis and runs get_temporal_breakdown
            and get_comm_comp_overlap, visualize=False)
  moetrace: MOETRACE report TRACE_DIR --window steps-but-last -f json
            (import of every rank file + the report, which holds the same
            temporal breakdown and overlap; HTA's default window leaves the
            last profiler step out, as --window steps-but-last does)

  --import-then-report: moetrace's side is instead `MOETRACE import DIR -o
            T.db` and then `MOETRACE report T.db --window steps-but-last -f
            json`, one shell command timed whole (the trace written to a
            file in a temporary folder and read back, as a user who keeps
            the imported trace does).

HTA is not part of this repository: give its runner with --hta.

  bench/hta_compare.py --hta /path/run_hta.py --moetrace build/ci/bin/moetrace \\
      [--python /usr/bin/python3] [-n 7] [--import-then-report] DIR...
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(cmd):
    """Wall seconds and peak RSS (MiB, largest process of the tree) of one run."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"hta_compare: {' '.join(cmd)} exited {p.returncode}: {err.strip()[-400:]}")
    return wall, usage.ru_maxrss / 1024.0


def print_header():
    print("| trace | runs | HTA median (range) | HTA peak RSS | moetrace median (range) | moetrace peak RSS | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")


def paired_row(name, cmds, n, measure=run_once):
    """Times cmds["hta"] and cmds["moetrace"], n runs each alternating after
    one unmeasured run of each, and prints their row of the table.
    `measure(cmd)`: seconds and peak RSS (MiB) of one run (run_once's wall
    time from spawn to exit, unless given)."""
    # One unmeasured run each: page cache and Python bytecode caches warm.
    for c in cmds.values():
        measure(c)
    times = {k: [] for k in cmds}
    rss = {k: [] for k in cmds}
    for i in range(n):
        order = ["hta", "moetrace"] if i % 2 == 0 else ["moetrace", "hta"]
        for k in order:
            w, m = measure(cmds[k])
            times[k].append(w)
            rss[k].append(m)
    med = {k: statistics.median(v) for k, v in times.items()}

    def cell(k):
        return (f"{med[k] * 1e3:.0f} ms ({min(times[k]) * 1e3:.0f}-{max(times[k]) * 1e3:.0f})",
                f"{max(rss[k]):.0f} MiB")

    h, m = cell("hta"), cell("moetrace")
    print(f"| {name} | {n} | {h[0]} | {h[1]} | {m[0]} | {m[1]} | {med['hta'] / med['moetrace']:.1f}x |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta", required=True, help="HTA runner script (TRACE_DIR as its argument)")
    ap.add_argument("--python", default="/usr/bin/python3", help="Python with HTA's dependencies")
    ap.add_argument("--moetrace", required=True, help="moetrace binary")
    ap.add_argument("-n", type=int, default=7, help="runs of each tool per trace (default 7)")
    ap.add_argument("--import-then-report", action="store_true",
                    help="moetrace side: import into a .db, then report of the .db")
    ap.add_argument("dirs", nargs="+", help="trace folders (one Kineto JSON per rank)")
    a = ap.parse_args()
    for d in a.dirs:
        if not os.path.isdir(d):
            sys.exit(f"hta_compare: {d}: not a folder")
    # HTA with its bytecode caches, as installed code runs: a shell that sets
    # PYTHONDONTWRITEBYTECODE would have its sources compiled anew every run.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    tmp = tempfile.TemporaryDirectory()
    print_header()
    for d in a.dirs:
        report = [a.moetrace, "report", d, "--window", "steps-but-last", "-f", "json"]
        if a.import_then_report:
            db = os.path.join(tmp.name, "run.db")
            report[2] = db
            sh = (shlex.join([a.moetrace, "import", d, "-o", db]) + " > /dev/null && " + shlex.join(report))
            report = ["/bin/sh", "-c", sh]
        cmds = {
            "hta": [a.python, a.hta, d],
            "moetrace": report,
        }
        paired_row(os.path.basename(os.path.normpath(d)), cmds, a.n)


if __name__ == "__main__":
    main()
