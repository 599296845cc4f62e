#!/usr/bin/env python3
"""Paired timing of moetrace's Python module against HTA's Python on the same traces.

HTA (HolisticTraceAnalysis) is NOT part of this repository: give the folder
that holds its `hta` package with --hta-path, and the Python that has HTA's
dependencies (pandas, numpy, plotly, psutil, PyYAML) with --hta-python.

Each side is a fresh process, timed from its start to its exit (the import of
the module, reading the traces and the analyses, nothing left out), the two
alternating, N runs each after one unmeasured run of each; the order within
a pair alternates too. Prints per trace folder the median wall time, its
range, the peak resident memory (ru_maxrss from wait4, the largest process
of the tree: HTA parses ranks in worker processes) and the ratio of the
medians. The timing and the table are bench/hta_compare.py's.

  HTA:      TraceAnalysis(trace_dir=DIR), then get_temporal_breakdown,
            get_comm_comp_overlap, get_idle_time_breakdown,
            get_queue_length_time_series, get_queue_length_summary,
            get_time_spent_blocked_on_full_queue and
            get_cuda_kernel_launch_stats, every rank of DIR (HTA's defaults
            take rank 0 alone; moetrace's DataFrames hold every rank),
            visualize=False.
  moetrace: import moetrace; run = moetrace.open(DIR); run.breakdown(),
            run.idle_breakdown(), run.queue_length(),
            run.queue_length(summary=True), run.launch_stats()
            (each in HTA's window, the module's default).

--check runs each side once more and compares the numbers both give: idle
and overlap percentages per rank, idle time per rank, stream and category,
queue-length points, mean and maximum per stream, launches per rank.
--phases then times moetrace's side in phases (the module's import, open,
numpy and pandas, the analyses), N runs, and an empty interpreter's run.
--warm times both sides as in a notebook whose kernel has imported numpy and
pandas already: each side in a fresh process imports them first, untimed,
then times itself from its own import (`import moetrace`; HTA's
`from hta.trace_analysis import TraceAnalysis`, with what that imports)
through the analyses above, N runs each, alternating.

  bench/hta_python_compare.py --hta-path /path/to/HolisticTraceAnalysis \\
      [--hta-python /usr/bin/python3] [--python /usr/bin/python3] \\
      [--module build/ci/python] [-n 7] [--check] [--phases] [--warm] DIR...
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hta_compare import paired_row, print_header, run_once  # noqa: E402

# argv: HTA_PATH DIR [JSON_OUT]. HTA logs to stdout, which the timing discards.
HTA_SIDE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[2])
ranks = ta.t.get_ranks()
temporal = ta.get_temporal_breakdown(visualize=False)
overlap = ta.get_comm_comp_overlap(visualize=False)
idle, _ = ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
series = ta.get_queue_length_time_series(ranks=ranks)
summary = ta.get_queue_length_summary(ranks=ranks)
full = ta.get_time_spent_blocked_on_full_queue(series)
launches = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
if len(sys.argv) > 3:
    import json
    q = summary.reset_index()
    q.columns = ["_".join(str(x) for x in c if x != "") for c in q.columns]
    out = {
        "idle_pct": {str(r): float(v) for r, v in zip(temporal["rank"], temporal["idle_time_pctg"])},
        "overlap_pct": {str(r): float(v) for r, v in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"])},
        "idle_us": {"%d/%d/%s" % (r, s, c): float(v) for r, s, c, v in
                    zip(idle["rank"], idle["stream"], idle["idle_category"], idle["idle_time"])},
        "queue": {"%d/%d" % (r, s): [int(n), round(float(m), 3), int(x)] for r, s, n, m, x in
                  zip(q["rank"], q["stream"], q["queue_length_count"], q["queue_length_mean"],
                      q["queue_length_max"])},
        "launches": {str(r): len(df) for r, df in launches.items()},
    }
    with open(sys.argv[3], "w") as f:
        json.dump(out, f)
"""

# argv: DIR [JSON_OUT]
MOETRACE_SIDE = r"""
import sys
import moetrace
run = moetrace.open(sys.argv[1])
b = run.breakdown()
idle = run.idle_breakdown()
series = run.queue_length()
summary = run.queue_length(summary=True)
launches = run.launch_stats()
if len(sys.argv) > 2:
    import json
    out = {
        "idle_pct": {str(r): round(100.0 * i / w, 2) for r, i, w in zip(b["rank"], b["idle_ns"], b["window_ns"])},
        "overlap_pct": {str(r): round(100.0 * h, 2) for r, h in zip(b["rank"], b["hidden_fraction"])},
        "idle_us": {"%d/%d/%s" % (r, s, c): v / 1000.0 for r, s, c, v in
                    zip(idle["rank"], idle["stream"], idle["category"], idle["idle_ns"])},
        "queue": {"%d/%d" % (r, s): [int(n), round(float(m), 3), int(x)] for r, s, n, m, x in
                  zip(summary["rank"], summary["stream"], summary["count"], summary["mean"], summary["max"])},
        "launches": {str(r): int(n) for r, n in launches.groupby("rank").size().items()},
    }
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
"""


# argv: DIR JSON_OUT. moetrace's side in phases: the module's import, open,
# numpy and pandas (imported by the first DataFrame otherwise), the analyses
# with their DataFrames.
MOETRACE_PHASES = r"""
import sys, time
t0 = time.perf_counter()
import moetrace
t1 = time.perf_counter()
run = moetrace.open(sys.argv[1])
t2 = time.perf_counter()
import numpy, pandas
t3 = time.perf_counter()
run.breakdown(); run.idle_breakdown(); run.queue_length(); run.queue_length(summary=True); run.launch_stats()
t4 = time.perf_counter()
import json
with open(sys.argv[2], "w") as f:
    json.dump([t1 - t0, t2 - t1, t3 - t2, t4 - t3], f)
"""


def timed_within(side):
    """`side` (HTA_SIDE or MOETRACE_SIDE) timed within its process, after
    numpy and pandas are imported: the seconds go to the file named by the
    last argument, taken off argv before `side` runs."""
    return ("import sys, time, json\nimport numpy, pandas\n_out = sys.argv.pop()\n_t0 = time.perf_counter()\n"
            + side + "\nwith open(_out, 'w') as _f:\n    json.dump(time.perf_counter() - _t0, _f)\n")


def warm(a, d):
    """Both sides timed within their process, numpy and pandas imported before."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)

    def measure(cmd):
        _, rss = run_once(cmd + [out])
        with open(out) as f:
            return json.load(f), rss

    paired_row(os.path.basename(os.path.normpath(d)), {
        "hta": [a.hta_python, "-c", timed_within(HTA_SIDE), os.path.abspath(a.hta_path), d],
        "moetrace": [a.python, "-c", timed_within(MOETRACE_SIDE), d],
    }, a.n, measure)
    os.unlink(out)


def phases(a, d):
    """Medians of moetrace's side in phases, and of an empty interpreter's run."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    empty, parts = [], []
    for _ in range(a.n):
        empty.append(run_once([a.python, "-c", "pass"])[0])
        run_once([a.python, "-c", MOETRACE_PHASES, d, out])
        parts.append(json.load(open(out)))
    os.unlink(out)
    med = [statistics.median(p[i] for p in parts) * 1e3 for i in range(4)]
    print(f"{os.path.basename(os.path.normpath(d))}: moetrace in phases (medians of {a.n}): interpreter start "
          f"and exit {statistics.median(empty) * 1e3:.0f} ms, import moetrace {med[0]:.0f} ms, open {med[1]:.0f} ms, "
          f"import numpy + pandas {med[2]:.0f} ms, the analyses and their DataFrames {med[3]:.0f} ms", flush=True)


def compare(name, hta, ours):
    """Prints where the two sides' numbers differ; returns the count of differences."""
    bad = 0
    for key in ("idle_pct", "overlap_pct", "idle_us", "queue", "launches"):
        h, m = hta[key], ours[key]
        # HTA's idle table has no row for a category without gaps (its
        # groupby); moetrace's has three rows per stream, 0 there.
        missing = 0.0 if key == "idle_us" else None
        for k in sorted(set(h) | set(m)):
            if h.get(k, missing) != m.get(k):
                bad += 1
                print(f"  {name} {key}[{k}]: HTA {h.get(k)}, moetrace {m.get(k)}")
    print(f"{name}: {'same numbers' if bad == 0 else '%d differences' % bad} "
          f"({len(hta['idle_us'])} idle rows, {len(hta['queue'])} streams' queue length, "
          f"launches {hta['launches']})", flush=True)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-path", required=True,
                    help="folder holding HTA's `hta` package (third-party, not in this repository)")
    ap.add_argument("--hta-python", default="/usr/bin/python3", help="Python with HTA's dependencies")
    ap.add_argument("--python", default="/usr/bin/python3", help="Python the moetrace module was built for")
    ap.add_argument("--module", default="build/ci/python", help="folder holding the built moetrace package")
    ap.add_argument("-n", type=int, default=7, help="runs of each side per trace (default 7)")
    ap.add_argument("--check", action="store_true", help="also compare the numbers both sides give")
    ap.add_argument("--phases", action="store_true",
                    help="also time moetrace's side in phases (import, open, numpy + pandas, analyses)")
    ap.add_argument("--warm", action="store_true",
                    help="also time both sides with numpy and pandas imported before (as in a notebook)")
    ap.add_argument("dirs", nargs="+", help="trace folders (one Kineto JSON per rank)")
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.hta_path, "hta")):
        sys.exit(f"hta_python_compare: {a.hta_path}: no hta package there")
    for d in a.dirs:
        if not os.path.isdir(d):
            sys.exit(f"hta_python_compare: {d}: not a folder")
    os.environ["PYTHONPATH"] = os.path.abspath(a.module)
    # Both sides with their bytecode caches, as installed code runs: a shell
    # that sets PYTHONDONTWRITEBYTECODE would have HTA's sources compiled anew
    # in every run.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    cmds = lambda d: {  # noqa: E731
        "hta": [a.hta_python, "-c", HTA_SIDE, os.path.abspath(a.hta_path), d],
        "moetrace": [a.python, "-c", MOETRACE_SIDE, d],
    }
    if a.check:
        bad = 0
        with tempfile.TemporaryDirectory() as tmp:
            for d in a.dirs:
                out = {k: os.path.join(tmp, k + ".json") for k in ("hta", "moetrace")}
                for k, c in cmds(d).items():
                    run_once(c + [out[k]])
                got = {k: json.load(open(p)) for k, p in out.items()}
                bad += compare(os.path.basename(os.path.normpath(d)), got["hta"], got["moetrace"])
        print()
    print_header()
    for d in a.dirs:
        paired_row(os.path.basename(os.path.normpath(d)), cmds(d), a.n)
    if a.phases:
        print()
        for d in a.dirs:
            phases(a, d)
    if a.warm:
        print("\nnumpy and pandas imported before, each side timed within its process:\n")
        print_header()
        for d in a.dirs:
            warm(a, d)


if __name__ == "__main__":
    main()
