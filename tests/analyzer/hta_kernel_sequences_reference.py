#!/usr/bin/env python3
"""HTA's frequent CUDA kernel sequences of one rank's PyTorch-profiler trace,
re-stated in plain Python from HTA's definitions (no HTA, no moetrace, no
pandas), to derive the expected numbers of kernel_sequences_test.cc's check
on a real trace.

Holistic Trace Analysis (facebookresearch/HolisticTraceAnalysis, MIT)
defines the analysis in hta/analyzers/cuda_kernel_analysis.py
(get_frequent_cuda_kernel_sequences) over the call graph of
hta/common/trace_call_graph.py and trace_call_stack.py. As re-stated here:
- each thread's CPU events (cpu_op, user_annotation, python_function and the
  runtime calls) nest by time, the longer first where two start together;
  one that ends when another starts does not enclose it;
- where exactly one thread has ProfilerStep# ranges (main) and one other
  has autograd:: ranges (bwd), the bwd thread's outermost events are hung
  under the main thread's "## backward ##" range enclosing them, else its
  ProfilerStep# range (CallGraph._link_main_and_bwd_stacks);
- the roots: the CPU ranges whose name contains the operator, at the
  shallowest depth of them all; each root's GPU events (kernel, gpu_memcpy,
  gpu_memset) are those whose correlation id is a runtime call's below it,
  by start; a root with fewer than min_pattern_len is left out;
- pattern "op|event|event..."; count, summed GPU durations and summed root
  durations; sorted by count (most first), then pattern.
Times are kept in ns (HTA rounds events inward to whole us).

  tests/analyzer/hta_kernel_sequences_reference.py TRACE.json.gz OPERATOR [MIN_PATTERN_LEN]

Prints the summary (candidates, depth, roots, short roots, patterns,
whether the backward thread was linked) and one JSON line of
[pattern, count, gpu_ns, cpu_ns] rows.
"""
import collections
import gzip
import json
import sys

CPU_RANGES = {"cpu_op", "user_annotation", "python_function"}
CPU_CALLS = {"cuda_runtime", "cuda_driver"}
GPU_EVENTS = {"kernel", "gpu_memcpy", "gpu_memset"}


def ns(us):
    return round(us * 1000)


def main(path, operator, min_len):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    nodes = []
    for e in events:
        if e.get("cat") not in CPU_RANGES | CPU_CALLS:
            continue
        start = ns(e["ts"])
        nodes.append({"start": start, "end": max(start, ns(e["ts"] + e.get("dur", 0))), "tid": e["tid"],
                      "name": e["name"], "range": e["cat"] in CPU_RANGES,
                      "corr": (e.get("args") or {}).get("correlation"), "parent": -1, "depth": -1})
    # Call stacks per thread.
    order = sorted(range(len(nodes)), key=lambda k: (nodes[k]["tid"], nodes[k]["start"], -nodes[k]["end"],
                                                      not nodes[k]["range"], k))
    stack, previous = [], None
    for k in order:
        n = nodes[k]
        if previous is not None and nodes[previous]["tid"] != n["tid"]:
            stack = []
        while stack:
            top = nodes[stack[-1]]
            inside = top["end"] > n["start"] or (top["end"] == n["start"] == n["end"] and top["end"] > top["start"])
            if inside:
                break
            stack.pop()
        n["parent"] = stack[-1] if stack else -1
        stack.append(k)
        previous = k
    # The backward thread under the main thread.
    main_tids = {n["tid"] for n in nodes if n["range"] and n["name"].startswith("ProfilerStep#")}
    bwd_tids = {n["tid"] for n in nodes if n["range"] and n["tid"] not in main_tids and "autograd::" in n["name"]}
    linked = False
    if len(main_tids) == 1 and len(bwd_tids) == 1:
        main_tid, bwd_tid = next(iter(main_tids)), next(iter(bwd_tids))
        for prefix in ("## backward ##", "ProfilerStep#"):
            parents = [k for k, n in enumerate(nodes)
                       if n["tid"] == main_tid and n["range"] and n["name"].startswith(prefix)]
            if parents:
                break
        for p in sorted(parents, key=lambda k: nodes[k]["start"]):
            for n in nodes:
                if (n["tid"] == bwd_tid and n["parent"] < 0 and n["start"] >= nodes[p]["start"]
                        and n["end"] <= nodes[p]["end"]):
                    n["parent"] = p
                    linked = True
    for n in nodes:  # depths, parents first
        chain = []
        m = n
        while m["depth"] < 0 and m["parent"] >= 0:
            chain.append(m)
            m = nodes[m["parent"]]
        if m["depth"] < 0:
            m["depth"] = 0
        for c in reversed(chain):
            c["depth"] = nodes[c["parent"]]["depth"] + 1
    candidates = [k for k, n in enumerate(nodes) if n["range"] and operator in n["name"]]
    if not candidates:
        print("candidates=0")
        return
    depth = min(nodes[k]["depth"] for k in candidates)
    roots = {k: [] for k in candidates if nodes[k]["depth"] == depth}
    gpu_by_corr = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in GPU_EVENTS:
            gpu_by_corr[(e.get("args") or {}).get("correlation")].append(e)
    for k, n in enumerate(nodes):
        if n["range"] or n["corr"] is None:
            continue
        a = k
        while a >= 0 and nodes[a]["depth"] > depth:
            a = nodes[a]["parent"]
        if a in roots:
            roots[a].extend(gpu_by_corr.get(n["corr"], []))
    patterns = collections.defaultdict(lambda: [0, 0, 0])
    short = 0
    for k, gpu in roots.items():
        if len(gpu) < min_len:
            short += 1
            continue
        gpu.sort(key=lambda e: ns(e["ts"]))
        p = patterns["|".join([nodes[k]["name"]] + [e["name"] for e in gpu])]
        p[0] += 1
        p[1] += sum(ns(e["ts"] + e["dur"]) - ns(e["ts"]) for e in gpu)
        p[2] += nodes[k]["end"] - nodes[k]["start"]
    rows = sorted(([p, v[0], v[1], v[2]] for p, v in patterns.items()), key=lambda r: (-r[1], r[0]))
    print(f"candidates={len(candidates)} depth={depth} roots={len(roots)} short={short} patterns={len(rows)} "
          f"linked={linked}")
    print(json.dumps(rows))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else 3)
