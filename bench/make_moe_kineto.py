#!/usr/bin/env python3
"""Writes a Kineto (PyTorch profiler) trace of an MoE training job with an
overlapped, DualPipe-style schedule, for the recognition benchmark
(BENCHMARKS.md, "MoE recognition of traces from other tools").

Per iteration (ProfilerStep#N), --chunks chunk pairs; in each, --layers
functions run one forward and one backward MoE layer side by side, and name
the parts of each MoE block in plain words with a phase marker (attn(F),
dispatch(F), mlp(B), ...), as such schedules do. The Python tracer's
function ranges (with_stack=True) nest around them; every part launches one
kernel (NCCL all-to-all for dispatch and combine, a cuBLAS GEMM otherwise)
on its stream, forward and backward on streams of their own. Timings are
invented: the trace is for measuring the analyzer, not a workload.
"""
import argparse
import json

p = argparse.ArgumentParser()
p.add_argument("--iterations", type=int, default=20)
p.add_argument("--chunks", type=int, default=8)
p.add_argument("--layers", type=int, default=4)
p.add_argument("output")
a = p.parse_args()

A2A = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
PARTS = ["attn", "dispatch", "mlp", "combine"]
events = []
corr = [0]


def rng(name, ts, dur, cat, tid=1):
    events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur})


def kernel(name, stream, ts, dur, launch, extra=None):
    corr[0] += 1
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": launch, "dur": 1, "args": {"correlation": corr[0]}})
    args = {"correlation": corr[0], "stream": stream, "device": 0}
    args.update(extra or {})
    events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                   "args": args})


host, gpu = 0.0, 10000.0
for it in range(a.iterations):
    step_start = host
    rng("ProfilerStep#%d" % it, host, 0, "user_annotation")  # duration set below
    step = events[-1]
    host += 5
    for c in range(a.chunks):
        chunk_start = host
        chunk = {"ph": "X", "cat": "python_function", "name": "dualpipe/dualpipe.py(305): _forward_backward_chunk",
                 "pid": 1, "tid": 1, "ts": host, "dur": 0}
        events.append(chunk)
        host += 1
        for l in range(a.layers):
            pair = {"ph": "X", "cat": "python_function", "name": "model.py(88): overlapped_layer", "pid": 1,
                    "tid": 1, "ts": host, "dur": 0}
            events.append(pair)
            pair_start = host
            host += 1
            for i, part in enumerate(PARTS):
                for phase, streams in (("F", (7, 13)), ("B", (8, 14))):
                    comm = part in ("dispatch", "combine")
                    rng("%s(%s)" % (part, phase), host, 4, "user_annotation")
                    extra = {"Collective name": "all_to_allv", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                             "Group size": 8, "dtype": "BFloat16"} if comm else None
                    kernel(A2A if comm else GEMM, streams[1] if comm else streams[0], gpu + 30 * i, 25, host + 2,
                           extra)
                    host += 5
            pair["dur"] = host - pair_start
            gpu += 30 * len(PARTS)
            host += 1
        chunk["dur"] = host - chunk_start
        host += 2
    step["dur"] = host - step_start
    host += 10
    gpu += 200

doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 8, "backend": "nccl"},
       "traceEvents": events}
with open(a.output, "w") as f:
    json.dump(doc, f)
print(f"{a.output}: {len(events)} events")
