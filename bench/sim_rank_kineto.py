#!/usr/bin/env python3
"""PyTorch-profiler (Kineto) JSON rank files of a simulated MoE run: one file
per rank of `moetrace run --backend sim --split-ranks` (run.rankN.db), as the
profiler of a real job of that many ranks would write them, for the
many-rank benchmark (bench/many_rank_moe.sh; BENCHMARKS.md, "1024 distinct
rank files").

What differs from rank to rank is what differs in a real job:
- kernel timings: the simulator's, which differ by rank with the skewed
  expert load (zipf routing), each compute kernel then shortened by a
  random 0-10 % (collectives keep their end: participants leave together);
- clocks: ranks 8 to a host share its clock; each host's is off by a random
  offset of up to +-3 ms (baseTimeNanoseconds differs per host);
- collectives: NCCL kernels with Kineto's collective args (Collective name,
  In/Out msg nelems, Group size, dtype, Process Group Name/Ranks) and a
  sequence number per process group ("Seq");
- MoE layers: the forward of each layer inside PyTorch's module ranges
  (with_modules) as Megatron-Core's classes name them (nn.Module: MoELayer_L,
  TopKRouter_L, TEGroupedMLP_L); iterations as ProfilerStep#N;
- a few ranks missing (their file never written) and a few cut short (their
  events after 60-80 % of the run dropped, as a profiler killed early).
Host side: one cudaLaunchKernel per kernel on the main thread, launched as
late as it can be before its kernel (launches in order, 1 us apart).

  bench/sim_rank_kineto.py SIM_DIR OUT_DIR [--missing 3] [--cut 3] [--seed 1]
"""
import argparse
import glob
import json
import os
import random
import re
import sqlite3

KIND = {0: "gate", 1: "permute", 2: "dispatch_all_to_all", 3: "expert_ffn", 4: "combine_all_to_all",
        5: "unpermute", 15: "attention", 18: "grad_all_reduce", 21: "optimizer"}
COLLECTIVE = {"dispatch_all_to_all": ("all_to_allv", "1"), "combine_all_to_all": ("all_to_allv", "1"),
              "grad_all_reduce": ("allreduce", "0")}
HOST_RANKS = 8


def rank_json(db_path, rank, world, rng, host_offset_ns, cut):
    db = sqlite3.connect(db_path)
    strings = dict(db.execute("SELECT id, value FROM strings"))
    ops = {}
    for oid, kind, layer, it, phase, chunk, start, end, nbytes in db.execute(
            "SELECT id, kind, layer, iteration, phase, chunk, start_ns, end_ns, bytes FROM op_ranges"):
        ops[oid] = (KIND.get(kind, "other"), layer, it, phase, chunk, start, end, nbytes or 0)
    kernels = sorted(db.execute("SELECT start_ns, end_ns, name_id, stream_id, op_id FROM kernels"))
    if not kernels:
        return None
    t_end = max(k[1] for k in kernels)
    t_begin = min(k[0] for k in kernels)
    if cut is not None:
        limit = t_begin + cut * (t_end - t_begin)
        kernels = [k for k in kernels if k[1] <= limit]
    # Launches: in kernel order, each as late as it can be, 1 us before its
    # kernel and 1 us before the next launch.
    launch = [0] * len(kernels)
    nxt = None
    for i in range(len(kernels) - 1, -1, -1):
        t = kernels[i][0] - 2000
        if nxt is not None:
            t = min(t, nxt - 1000)
        launch[i] = nxt = t
    us = lambda ns: round(ns / 1000.0, 3)
    events = []
    seq = {}
    group = "[" + ", ".join(str(r) for r in range(world)) + "]"
    spans = {}  # (iteration) and (layer, iteration): launch spans of forward MoE work
    for i, (start, end, name_id, stream, op_id) in enumerate(kernels):
        corr = i + 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": us(launch[i]), "dur": 0.8, "args": {"correlation": corr, "External id": corr}})
        args = {"correlation": corr, "stream": stream, "device": rank % HOST_RANKS, "External id": corr}
        kind, layer, it, phase, chunk, _, _, nbytes = ops.get(op_id, ("other", None, None, 0, None, 0, 0, 0))
        # Compute kernels run 0-10 % shorter than simulated; collectives end
        # as simulated (their participants leave together).
        dur = (end - start) * (1 if kind in COLLECTIVE else 1 - 0.1 * rng.random())
        if kind in COLLECTIVE:
            name, pg = COLLECTIVE[kind]
            seq[pg] = seq.get(pg, 0) + 1
            args.update({"Collective name": name, "In msg nelems": nbytes // 2, "Out msg nelems": nbytes // 2,
                         "Group size": world, "dtype": "BFloat16", "Process Group Name": pg,
                         "Process Group Description": "default_pg" if pg == "0" else "expert_parallel",
                         "Process Group Ranks": group, "Seq": seq[pg]})
        events.append({"ph": "X", "cat": "kernel", "name": strings[name_id], "pid": 0, "tid": stream,
                       "ts": us(start), "dur": round(dur / 1000.0, 3), "args": args})
        if it is not None:
            s = spans.setdefault(("step", it), [launch[i], launch[i]])
            s[0], s[1] = min(s[0], launch[i]), max(s[1], launch[i] + 800)
        if layer is not None and phase == 0 and kind not in ("attention", "grad_all_reduce", "optimizer"):
            for key in (("layer", layer, it), (kind, layer, it)):
                s = spans.setdefault(key, [launch[i], launch[i]])
                s[0], s[1] = min(s[0], launch[i]), max(s[1], launch[i] + 800)
    for key, (a, b) in spans.items():
        if key[0] == "step":
            name, cat, pad = "ProfilerStep#%d" % key[1], "user_annotation", 3000
        elif key[0] == "layer":
            name, cat, pad = "nn.Module: MoELayer_%d" % key[1], "python_function", 200
        elif key[0] == "gate":
            name, cat, pad = "nn.Module: TopKRouter_%d" % key[1], "python_function", 100
        elif key[0] == "expert_ffn":
            name, cat, pad = "nn.Module: TEGroupedMLP_%d" % key[1], "python_function", 100
        else:
            continue
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": us(a - pad),
                       "dur": round((b - a + 2 * pad) / 1000.0, 3)})
    return {"schemaVersion": 1, "deviceProperties": [{"id": rank % HOST_RANKS, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000 + host_offset_ns}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sim_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--missing", type=int, default=3, help="rank files not written")
    ap.add_argument("--cut", type=int, default=3, help="rank files cut short")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.sim_dir, "*.rank*.db")),
                   key=lambda p: int(re.search(r"\.rank(\d+)\.db$", p).group(1)))
    world = len(files)
    rng = random.Random(a.seed)
    others = list(range(1, world))
    rng.shuffle(others)
    missing = set(others[:a.missing])
    cut = {r: 0.6 + 0.2 * rng.random() for r in others[a.missing:a.missing + a.cut]}
    offsets = {h: rng.randint(-3_000_000, 3_000_000) for h in range(world // HOST_RANKS + 1)}
    os.makedirs(a.out_dir, exist_ok=True)
    for rank, path in enumerate(files):
        if rank in missing:
            continue
        j = rank_json(path, rank, world, random.Random(a.seed * 100003 + rank), offsets[rank // HOST_RANKS],
                      cut.get(rank))
        with open(os.path.join(a.out_dir, "rank%d.pt.trace.json" % rank), "w") as f:
            json.dump(j, f, separators=(",", ":"))
    print("%d rank files of %d ranks in %s; missing: %s; cut short: %s" % (
        world - len(missing), world, a.out_dir, sorted(missing),
        ", ".join("%d at %.0f %%" % (r, 100 * c) for r, c in sorted(cut.items()))))


if __name__ == "__main__":
    main()
