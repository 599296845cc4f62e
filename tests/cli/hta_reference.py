#!/usr/bin/env python3
"""HTA's temporal breakdown (idle %) and communication/computation overlap (%)
of PyTorch-profiler (Kineto) JSON traces, re-stated from HTA's definitions
without HTA or moetrace: the reference numbers of cli_test.cc's
Cli.WindowLikeHtaGivesHtasIdleAndOverlap (idle 53.558 / 54.717 %, overlap
11.810 / 20.051 % on ../shared/data/external/kineto/hta-sampled_rank-{0,1}).

HTA (facebookresearch/HolisticTraceAnalysis) as this re-states it:
- hta/common/trace.py, _filter_irrelevant_gpu_kernels: the GPU events
  (kernels, memcpy, memset: events with a stream) kept are those whose
  correlation id is that of a CPU event starting before the last
  ProfilerStep's start (the last, partial step left out);
- hta/utils/utils.py, get_kernel_type: "ncclKernel" in the name is
  communication, "Memcpy" or "Memset" memory, anything else computation;
- hta/analyzers/breakdown_analysis.py, _get_idle_time_for_kernels: idle =
  (end of the last GPU event - start of the first) - the length of their
  union;
- hta/analyzers/communication_analysis.py, get_comm_comp_overlap: the time
  where the union of the communication kernels meets the union of the
  computation kernels, over the length of the communication union.

  python3 tests/cli/hta_reference.py FILE.json[.gz]...     one line per file
  python3 tests/cli/hta_reference.py --check               the goldens above, on the shared data
With --check it exits 0 where the numbers match to the 3 decimals the test
states, 1 where not, and 77 (skipped) where ../shared/data is absent, or 1
there too if MOETRACE_REQUIRE_SHARED_DATA=1.
"""
import gzip
import json
import os
import sys

GOLDEN = {"hta-sampled_rank-0.json.gz": (53.558, 11.810), "hta-sampled_rank-1.json.gz": (54.717, 20.051)}


def union(intervals):
    """Sorted, merged [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(intervals):
    return sum(e - s for s, e in intervals)


def meet(a, b):
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def hta_numbers(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    args = lambda e: e.get("args") or {}
    gpu = [e for e in events if "stream" in args(e)]
    cpu = [e for e in events if "stream" not in args(e)]
    last_step = max(e["ts"] for e in cpu if "ProfilerStep" in e["name"])
    launched = {args(e)["correlation"] for e in cpu if e["ts"] < last_step and "correlation" in args(e)}
    kept = [e for e in gpu if args(e).get("correlation") in launched]
    span = lambda es: [(e["ts"], e["ts"] + e["dur"]) for e in es]
    everything = union(span(kept))
    idle = (everything[-1][1] - everything[0][0]) - length(everything)
    comm = union(span(e for e in kept if "ncclKernel" in e["name"]))
    comp = union(span(e for e in kept if "ncclKernel" not in e["name"] and "Memcpy" not in e["name"]
                      and "Memset" not in e["name"]))
    return 100 * idle / (everything[-1][1] - everything[0][0]), 100 * meet(comm, comp) / length(comm)


def main(argv):
    if argv[1:] != ["--check"]:
        for path in argv[1:]:
            idle, overlap = hta_numbers(path)
            print(f"{path}: idle {idle:.3f} %, overlap {overlap:.3f} %")
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.environ.get("MOETRACE_SHARED_DATA", os.path.join(here, "..", "..", "..", "shared", "data"))
    bad = 0
    for name, want in GOLDEN.items():
        path = os.path.join(data, "external", "kineto", name)
        if not os.path.exists(path):
            required = os.environ.get("MOETRACE_REQUIRE_SHARED_DATA", "") not in ("", "0")
            print(f"shared data absent: {path}" + (" (MOETRACE_REQUIRE_SHARED_DATA is set)" if required else ""))
            return 1 if required else 77
        got = tuple(round(v, 3) for v in hta_numbers(path))
        print(f"{name}: idle {got[0]:.3f} %, overlap {got[1]:.3f} % (test: {want[0]:.3f} %, {want[1]:.3f} %)")
        bad += got != want
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
