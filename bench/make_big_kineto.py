#!/usr/bin/env python3
"""Writes a large Kineto (PyTorch profiler) trace for the import benchmark.

Repeats the traceEvents of a real trace (default: the HTA NCCL test trace in
../shared/data) shifted in time, with fresh correlation and flow ids, until the
JSON reaches --mb megabytes. See BENCHMARKS.md ("Importing Kineto traces of 113 MB
and 1 GB").
"""
import argparse
import gzip
import json

p = argparse.ArgumentParser()
p.add_argument("--source", default="../shared/data/external/kineto/hta-nccl_data.json.gz")
p.add_argument("--mb", type=int, default=100)
p.add_argument("output")
a = p.parse_args()

with gzip.open(a.source, "rt") as f:
    d = json.load(f)
events = d["traceEvents"]
span = 800000.0  # us: longer than the source trace, so copies never overlap
body, size, rep = [], 0, 0
while size < a.mb * 1024 * 1024:
    for e in events:
        e2 = dict(e)
        if isinstance(e2.get("ts"), (int, float)):
            e2["ts"] = round(e2["ts"] + span * rep, 3)
        if "correlation" in e2.get("args", {}):
            e2["args"] = dict(e2["args"], correlation=e2["args"]["correlation"] + 10_000_000 * rep)
        if e2.get("ph") in ("s", "f") and "id" in e2:
            e2["id"] += 10_000_000 * rep
        s = json.dumps(e2)
        body.append(s)
        size += len(s) + 2
    rep += 1
header = json.dumps({k: v for k, v in d.items() if k != "traceEvents"})
with open(a.output, "w") as f:
    f.write(header[:-1] + ', "traceEvents": [\n' + ",\n".join(body) + "\n]}")
print(f"{a.output}: {len(body)} events ({rep} copies)")
