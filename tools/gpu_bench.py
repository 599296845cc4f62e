#!/usr/bin/env python3
"""The GPU measurements of BENCHMARKS.md ("The GPU path"), in one run.

Runs on a machine with a GPU, `moetrace` built with the CUDA backend, and
PyTorch (for the ceilings and the peer layer; without it those parts are
skipped and said so). Each part writes its numbers to OUT/bench.json and a
line to the table printed last:

  ceilings   one large cuBLAS bf16 GEMM (torch.matmul, 8192^3 and the expert
             shape) and a device-to-device copy (bytes read + written), the
             yardsticks of the next two parts
  experts    a DPMoE layer on one rank at a chip-filling shape, traced; expert
             GEMM TFLOP/s = the expert ops' FLOPs over the time of their GEMM
             kernels (the op's other kernels, GeLU and pointer set-up, apart),
             and over the whole ops; once with one grouped cuBLAS call an op
             and once with a GEMM an expert (MOETRACE_CUDA_EXPERT_GEMM)
  permute    the same trace: permute / unpermute GB/s (bytes read + written,
             counted from the op's rows) over their kernels' time
  overhead   PipeMoE on the emulated communicator, alternately with the
             collector on and off (`--no-trace`), each run after --warmup;
             median per-iteration wall time of each
  pipemoe    `run --calibrate` -> `fit` on this GPU, then PipeMoE r = 1, 2, 4, 8
             on the GPU and in the simulator with the fitted model: the
             analyzer's layer window of each, and `recommend`'s r beside the
             measured best
  pipemoe1   the same on one rank (no emulated ranks time-sharing the GPU)
  peer       a plain PyTorch MoE layer of the experts part's shape (top-2
             softmax gate, experts as nn.Linear, tokens permuted by index),
             fwd + bwd + SGD, median of timed iterations; profiled with
             torch.profiler (record_shapes, with_stack, with_modules), imported with `moetrace import`,
             reported (OUT/peer_report.txt)

    tools/gpu_bench.py --moetrace build/gpu/bin/moetrace --out OUT [--parts a,b]

`--backend sim` runs the trace-reading parts against the simulator (no GPU,
no torch): a check of this script's plumbing, never a measurement.
"""
import argparse
import gzip
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

PARTS = ["ceilings", "experts", "permute", "overhead", "pipemoe", "pipemoe1", "peer"]

# The chip-filling DPMoE layer of `experts`, `permute` and `peer`: 16384
# tokens, top-2 of 8 experts (4096 rows an expert when balanced), M = 4096,
# H = 14336 (Mixtral 8x7B's expert width): each expert GEMM is 4096 x 4096 x
# 14336, ~0.48 TFLOP, far past one wave of 132 SMs.
EXPERT_SHAPE = dict(tokens=16384, experts=8, top_k=2, model_dim=4096, expert_hidden=14336)
# One expert's GEMM of that layer when balanced: rows x M x H.
EXPERT_GEMM = (EXPERT_SHAPE["tokens"] * EXPERT_SHAPE["top_k"] // EXPERT_SHAPE["experts"],
               EXPERT_SHAPE["model_dim"], EXPERT_SHAPE["expert_hidden"])
# `overhead` and `pipemoe`: the pipemoe default model size on 8 emulated ranks.
SWEEP_SHAPE = dict(ranks=8, tokens=4096, experts=8, top_k=2, model_dim=1024, expert_hidden=4096)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.work = os.path.join(args.out, "work")
        os.makedirs(self.work, exist_ok=True)
        self.results = {}
        self.table = []  # (part, what, value, goal)

    # -- moetrace ----------------------------------------------------------
    def moetrace(self, *argv, timeout=300, check=True, env=None):
        cmd = [self.args.moetrace, *map(str, argv)]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **env} if env else None)
        with open(os.path.join(self.out, "commands.log"), "a") as f:
            f.write(f"$ {' '.join(f'{k}={v}' for k, v in (env or {}).items())} {' '.join(cmd)}  # rc {p.returncode}, {time.time() - t0:.1f} s\n{p.stderr}\n")
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
        return p

    def config(self, name, variant, shape, ranks, layers, iterations, attention, extra=None):
        """A run configuration file (kernels/sim run_spec JSON)."""
        c = {
            "variant": variant,
            "ranks": ranks,
            "iterations": iterations,
            "model": {"num_layers": layers, "num_experts": shape["experts"], "top_k": shape["top_k"],
                      "model_dim": shape["model_dim"], "expert_hidden": shape["expert_hidden"],
                      "dense_hidden": 0, "attention": attention},
            "routing": {"pattern": "balanced", "tokens_per_source": shape["tokens"], "seed": 1},
        }
        for k, v in (extra or {}).items():
            c[k] = {**c.get(k, {}), **v} if isinstance(v, dict) else v
        path = os.path.join(self.work, name + ".json")
        with open(path, "w") as f:
            json.dump(c, f, indent=1)
        return path

    def run(self, config, db, warmup=1, trace=True, extra=(), env=None):
        argv = ["run", "--backend", self.args.backend, "-c", config, "-o", db, "-q", *extra]
        if self.args.backend == "cuda":
            argv += ["--warmup", warmup]
            if not trace:
                argv.append("--no-trace")
        self.moetrace(*argv, env=env)
        return db

    @staticmethod
    def run_config(db, key):
        with sqlite3.connect(db) as c:
            row = c.execute("SELECT value FROM run_config WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def wall_ms_per_iteration(self, db):
        iters = int(self.run_config(db, "iterations"))
        if self.args.backend == "cuda":
            return float(self.run_config(db, "cuda.wall_ms")) / iters
        return float(self.run_config(db, "sim.makespan_s")) * 1e3 / iters

    def report(self, db, *extra):
        return json.loads(self.moetrace("report", db, "-f", "json", *extra).stdout)

    # -- parts -------------------------------------------------------------
    def ceilings(self):
        torch = need_torch()
        dev = torch.device("cuda")
        r = {"gpu": torch.cuda.get_device_name(0)}
        # Device-to-device copy: 2 GiB each way, bytes read + written.
        n = 1 << 30
        src = torch.randn(n, device=dev, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        ms = cuda_median_ms(torch, lambda: dst.copy_(src), reps=20, warm_s=1.0)
        r["d2d_copy_gb_s"] = 2 * n * 2 / ms / 1e6
        del src, dst
        for name, shape in {"gemm_8192": (8192, 8192, 8192), "gemm_expert": EXPERT_GEMM}.items():
            r[name + "_tflops"] = gemm_tflops(torch, *shape)
            r[name + "_shape"] = list(shape)
        torch.cuda.empty_cache()  # the GPU's memory back for the moetrace runs that follow
        self.results["ceilings"] = r
        self.table += [("ceilings", "cuBLAS bf16 GEMM 8192^3", f"{r['gemm_8192_tflops']:.0f} TFLOP/s", ""),
                       ("ceilings", "cuBLAS bf16 GEMM %dx%dx%d" % tuple(r["gemm_expert_shape"]),
                        f"{r['gemm_expert_tflops']:.0f} TFLOP/s", ""),
                       ("ceilings", "device-to-device copy", f"{r['d2d_copy_gb_s']:.0f} GB/s", "")]

    def expert_trace(self, expert_gemm="grouped"):
        """MOETRACE_CUDA_EXPERT_GEMM: one grouped cuBLAS call an FFN op, or a GEMM an expert."""
        db = os.path.join(self.work, f"dpmoe_experts_{expert_gemm}.db")
        if not os.path.exists(db):
            cfg = self.config("dpmoe_experts", "dpmoe", EXPERT_SHAPE, 1, 1, 3, False)
            self.run(cfg, db, warmup=1, env={"MOETRACE_CUDA_EXPERT_GEMM": expert_gemm})
        return db

    def experts(self):
        for mode in self.args.expert_modes:
            self.experts_of(mode)

    def experts_of(self, mode):
        db = self.expert_trace(mode)
        if mode == "grouped":
            # Kept beside the results (gzip, small: one rank, one layer): the
            # analyzer's reading of it is checked where it ran.
            with open(db, "rb") as src, gzip.open(os.path.join(self.out, "dpmoe_experts.db.gz"), "wb") as dst:
                shutil.copyfileobj(src, dst)
        with sqlite3.connect(db) as c:
            rows = c.execute(
                """SELECT o.id, o.flops, o.end_ns - o.start_ns, s.value, k.end_ns - k.start_ns
                   FROM op_ranges o JOIN op_kinds ok ON ok.id = o.kind
                   LEFT JOIN kernels k ON k.op_id = o.id LEFT JOIN strings s ON s.id = k.name_id
                   WHERE ok.name = 'expert_ffn'""").fetchall()
        ops, gemm_ns, other_ns = {}, 0, 0
        for op, flops, dur, name, kns in rows:
            ops[op] = (flops or 0, dur)
            if name is None:
                continue
            if is_own_kernel(name):
                other_ns += kns
            else:
                gemm_ns += kns
        # The layer's compute kernels an iteration (gate, permute, experts,
        # unpermute, optimizer): what a single-GPU layer without
        # communication runs, beside the peer's step.
        with sqlite3.connect(db) as c:
            (compute_ns,) = c.execute(
                """SELECT COALESCE(SUM(k.end_ns - k.start_ns), 0) FROM kernels k
                   JOIN op_ranges o ON o.id = k.op_id JOIN op_kinds ok ON ok.id = o.kind
                   WHERE ok.category NOT IN ('all_to_all', 'all_reduce', 'other_comm')""").fetchone()
        flops = sum(f for f, _ in ops.values())
        op_ns = sum(d for _, d in ops.values())
        r = {"expert_ops": len(ops), "flops": flops, "gemm_kernel_ns": gemm_ns, "other_kernel_ns": other_ns,
             "op_ns": op_ns,
             "gemm_tflops": flops / gemm_ns / 1e3 if gemm_ns else None,
             "op_tflops": flops / op_ns / 1e3 if op_ns else None,
             "layer_window_ms": self.report(db)["breakdown"]["layers"][0]["mean_window_ns"] / 1e6,
             "wall_ms_per_iteration": self.wall_ms_per_iteration(db),
             "compute_kernels_ms_per_iteration": compute_ns / 1e6 / int(self.run_config(db, "iterations"))}
        # The yardstick: the larger of the ceilings part's cuBLAS GEMM of this
        # shape and one timed right after this run, with the GPU in the same
        # state (its clocks moved the ceiling between 637 and 781 TFLOP/s
        # from one run to the next on an H200).
        ceils = [self.results.get("ceilings", {}).get("gemm_expert_tflops")]
        if self.args.backend == "cuda":
            try:
                ceils.append(expert_gemm_tflops(need_torch()))
            except RuntimeError as e:  # no PyTorch: the ceilings part's value alone (if any)
                log(f"   no cuBLAS yardstick after the run: {e}")
        ceils = [c for c in ceils if c]
        r["cublas_tflops"] = ceils
        if ceils and r["gemm_tflops"]:
            r["of_cublas"] = r["gemm_tflops"] / max(ceils)
        self.results.setdefault("experts", {})[mode] = r
        share = f" ({r['of_cublas']:.0%} of cuBLAS)" if "of_cublas" in r else ""
        self.table += [("experts", f"expert GEMM kernels, {mode}", f"{fmt(r['gemm_tflops'])} TFLOP/s{share}",
                        ">= 80 %"),
                       ("experts", f"expert ops (GEMM + GeLU + set-up), {mode}", f"{fmt(r['op_tflops'])} TFLOP/s", "")]

    def permute(self):
        db = self.expert_trace()
        k = EXPERT_SHAPE["top_k"]
        r = {}
        with sqlite3.connect(db) as c:
            for kind in ("permute", "unpermute"):
                rows = c.execute(
                    """SELECT o.id, o.bytes, o.end_ns - o.start_ns, s.value, k.end_ns - k.start_ns
                       FROM op_ranges o JOIN op_kinds ok ON ok.id = o.kind
                       LEFT JOIN kernels k ON k.op_id = o.id LEFT JOIN strings s ON s.id = k.name_id
                       WHERE ok.name = ? AND o.phase = 0""", (kind,)).fetchall()
                ops, kernel_ns, move_ns = {}, 0, 0
                for op, nbytes, dur, name, kns in rows:
                    ops[op] = (nbytes or 0, dur)
                    if name is None:
                        continue
                    kernel_ns += kns
                    if ("permute_rows" in name) or ("unpermute_kernel" in name):
                        move_ns += kns
                # The op's bytes are its routed rows x M: permute reads a
                # token row for each and writes it; unpermute reads them and
                # writes one row per token (rows / k).
                routed = sum(b for b, _ in ops.values())
                traffic = 2 * routed if kind == "permute" else routed + routed // k
                r[kind] = {"ops": len(ops), "traffic_bytes": traffic, "kernel_ns": kernel_ns, "move_kernel_ns": move_ns,
                           "gb_s_kernels": traffic / kernel_ns if kernel_ns else None,
                           "gb_s_move_kernel": traffic / move_ns if move_ns else None}
        ceil = self.results.get("ceilings", {}).get("d2d_copy_gb_s")
        self.results["permute"] = r
        for kind in ("permute", "unpermute"):
            for what, key in (("all its kernels", "gb_s_kernels"), ("the row-moving kernel", "gb_s_move_kernel")):
                v = r[kind][key]
                share = f" ({v / ceil:.0%} of the copy)" if ceil and v else ""
                self.table.append(("permute", f"{kind} ({what})", f"{fmt(v)} GB/s{share}", ">= 70 %"))

    def overhead(self):
        cfg = self.config("overhead", "pipemoe", SWEEP_SHAPE, SWEEP_SHAPE["ranks"], 2, 3, True,
                          {"pipemoe": {"pipeline_degree": 4}})
        on, off = [], []
        for i in range(self.args.overhead_runs):
            for trace, acc in ((True, on), (False, off)) if i % 2 == 0 else ((False, off), (True, on)):
                db = os.path.join(self.work, f"overhead_{'on' if trace else 'off'}.db")
                self.run(cfg, db, warmup=2, trace=trace)
                acc.append(self.wall_ms_per_iteration(db))
        r = {"runs": self.args.overhead_runs, "iterations_per_run": 3, "on_ms": on, "off_ms": off,
             "median_on_ms": statistics.median(on), "median_off_ms": statistics.median(off)}
        r["overhead"] = r["median_on_ms"] / r["median_off_ms"] - 1
        self.results["overhead"] = r
        self.table.append(("overhead", f"collector on vs off (median of {len(on)} runs)",
                           f"{r['median_on_ms']:.3f} vs {r['median_off_ms']:.3f} ms/it: {r['overhead']:+.1%}",
                           "<= 2 %"))

    def pipemoe(self):
        self.pipemoe_sweep(SWEEP_SHAPE["ranks"], "pipemoe")

    def pipemoe1(self):
        """The same sweep on one rank: no ranks time-share the GPU (on the
        emulated communicator P ranks run on this one GPU, which the
        simulator, one GPU a rank, does not model)."""
        self.pipemoe_sweep(1, "pipemoe1")

    def pipemoe_sweep(self, ranks, part):
        tag = f"p{ranks}"
        base = self.config(f"pipemoe_sweep_{tag}", "pipemoe", SWEEP_SHAPE, ranks, 1, 3, False)
        fitted = os.path.join(self.work, f"fitted_{tag}.json")
        cal = os.path.join(self.work, f"calibration_{tag}.db")
        # After a warm-up run: without one, the sweep's first GEMMs carried
        # cuBLAS's start-up (a 1 GFLOP expert op timed 12.7 ms on an H200).
        warm = ["--warmup", "1"] if self.args.backend == "cuda" else []
        self.moetrace("run", "--backend", self.args.backend, "--calibrate", "-c", base, "-o", cal, "-q", *warm,
                      timeout=180)
        self.moetrace("fit", cal, "-o", fitted)
        self.moetrace("fit", cal, "-f", "text", "-o", os.path.join(self.out, f"fit_{tag}.txt"))
        rows, traces = [], []
        for r_ in (1, 2, 4, 8):
            cfg = self.config(f"pipemoe_{tag}_r{r_}", "pipemoe", SWEEP_SHAPE, ranks, 1, 3, False,
                              {"pipemoe": {"pipeline_degree": r_}})
            meas = self.run(cfg, os.path.join(self.work, f"pipemoe_{tag}_r{r_}.db"), warmup=1)
            traces.append(meas)
            sim_db = os.path.join(self.work, f"pipemoe_{tag}_r{r_}_sim.db")
            self.moetrace("run", "--backend", "sim", "-c", cfg, "-o", sim_db, "-q", "--cost-model", fitted)
            m = self.report(meas)["breakdown"]["layers"][0]["mean_window_ns"] / 1e6
            s = self.report(sim_db)["breakdown"]["layers"][0]["mean_window_ns"] / 1e6
            row = {"r": r_, "measured_ms": m, "simulated_ms": s, "error": s / m - 1,
                   "traced_wall_ms_per_iteration": self.wall_ms_per_iteration(meas)}
            if self.args.backend == "cuda":
                # The same run without the collector: where the host's issue
                # time bounds the layer (r >= 2 here), CUPTI's cost per launch
                # is in the measured time; this says how much.
                plain = self.run(cfg, os.path.join(self.work, f"pipemoe_{tag}_r{r_}_untraced.db"), warmup=1,
                                 trace=False)
                row["untraced_wall_ms_per_iteration"] = self.wall_ms_per_iteration(plain)
                # The executor's own timing of each op's issue (steady clock),
                # medians by op kind and phase, with and without the collector.
                for key, db in (("traced", meas), ("untraced", plain)):
                    v = self.run_config(db, "cuda.host_issue_us")
                    row[f"host_issue_us_{key}"] = json.loads(v) if v else {}
                # And traced with the query calls' records kept (the
                # collector leaves them out by default): what leaving them
                # out saves.
                queries = self.run(cfg, os.path.join(self.work, f"pipemoe_{tag}_r{r_}_queries.db"), warmup=1,
                                   env={"MOETRACE_CUPTI_QUERY_API": "1"})
                row["traced_with_queries_wall_ms_per_iteration"] = self.wall_ms_per_iteration(queries)
            rows.append(row)
        rec = json.loads(self.moetrace("recommend", traces[0], "-f", "json", "--r-candidates", "1,2,4,8",
                                       "--cost-model", fitted).stdout)
        best = min(rows, key=lambda x: x["measured_ms"])["r"]
        r = {"ranks": ranks, "rows": rows, "measured_best_r": best, "recommendation": rec,
             "recommended_r": find_key(rec, "recommended_r")}
        self.results[part] = r
        for x in rows:
            self.table.append((part, f"P = {ranks}, r = {x['r']}: measured vs simulated layer",
                               f"{x['measured_ms']:.3f} vs {x['simulated_ms']:.3f} ms ({x['error']:+.1%})",
                               "<= 10 %"))
            if "untraced_wall_ms_per_iteration" in x:
                on, off = x["traced_wall_ms_per_iteration"], x["untraced_wall_ms_per_iteration"]
                self.table.append((part, f"P = {ranks}, r = {x['r']}: iteration with vs without the collector",
                                   f"{on:.3f} vs {off:.3f} ms ({on / off - 1:+.1%})", ""))
                on_us, off_us = x.get("host_issue_us_traced", {}), x.get("host_issue_us_untraced", {})
                ffn = [(ph, on_us.get(f"expert_ffn.{ph}"), off_us.get(f"expert_ffn.{ph}")) for ph in ("fwd", "bwd")]
                if all(a is not None and b is not None for _, a, b in ffn):
                    self.table.append((part, f"P = {ranks}, r = {x['r']}: expert FFN op's host issue, traced vs untraced",
                                       ", ".join(f"{ph} {a:.1f} vs {b:.1f} us" for ph, a, b in ffn), ""))
                q = x["traced_with_queries_wall_ms_per_iteration"]
                self.table.append((part, f"P = {ranks}, r = {x['r']}: the same with the query calls recorded",
                                   f"{q:.3f} ms ({q / off - 1:+.1%} over untraced)", ""))
        self.table.append((part, f"P = {ranks}: recommended r vs measured best", f"{r['recommended_r']} vs {best}",
                           "same"))

    def peer(self):
        torch = need_torch()
        s = EXPERT_SHAPE
        layer = TorchMoE(torch, s["model_dim"], s["expert_hidden"], s["experts"], s["top_k"])
        # Fresh inputs and output gradients every step (as training data
        # would be), and the routing balance recorded: ours is exactly
        # balanced, and a collapsed gate (two experts of eight taking all
        # 32768 rows, seen on an H200) runs a few large GEMMs instead of
        # eight 4096-row ones, which is no comparison.
        steps = 3 + self.args.peer_iterations + 3
        data = [(torch.randn(s["tokens"], s["model_dim"], device="cuda", dtype=torch.bfloat16, requires_grad=True),
                 torch.randn(s["tokens"], s["model_dim"], device="cuda", dtype=torch.bfloat16)) for _ in range(steps)]
        # A small learning rate: the step costs the same, and the layer keeps
        # its routing. At lr = 0.01 every token went to the same two experts
        # (0 to 4x the mean rows an expert, on fresh inputs too: seen on an
        # H200); by estimate one step of this un-normalised objective (dy
        # random) moves the gate's weights about 80x their initial size.
        opt = torch.optim.SGD(layer.parameters(), lr=1e-6)
        taken = iter(data)

        def step():
            x, dy = next(taken)
            opt.zero_grad(set_to_none=True)
            layer(x).backward(dy)
            opt.step()

        ms = cuda_median_ms(torch, step, reps=self.args.peer_iterations, warmup=3)
        trace_json = os.path.join(self.work, "torch_moe_peer.json")
        from torch.profiler import ProfilerActivity, profile
        # with_stack: the Python tracer that records the modules ("nn.Module: MoE_0").
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_stack=True,
                     with_modules=True) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(trace_json)
        # Kept (compressed) beside the results: a real profiler trace of a MoE layer for the importer's tests.
        with open(trace_json, "rb") as src, gzip.open(os.path.join(self.out, "torch_moe_peer.json.gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        db = os.path.join(self.work, "torch_moe_peer.db")
        self.moetrace("import", trace_json, "-o", db)
        text = self.moetrace("report", db).stdout
        with open(os.path.join(self.out, "peer_report.txt"), "w") as f:
            f.write(text)
        rep = self.report(db)
        ours = self.results.get("experts", {}).get("grouped", {})
        # How evenly the peer's gate routed (ours: exactly tokens x k / E rows an expert).
        counts = layer.routed_rows
        mean_rows = s["tokens"] * s["top_k"] / s["experts"]
        r = {"torch": torch.__version__, "step_ms": ms,
             "peer_rows_per_expert_max_over_mean": max(max(c) for c in counts) / mean_rows,
             "peer_rows_per_expert_min_over_mean": min(min(c) for c in counts) / mean_rows,
             "moetrace_dpmoe_wall_ms_per_iteration":
             ours.get("wall_ms_per_iteration"), "moetrace_dpmoe_layer_window_ms": ours.get("layer_window_ms"),
             "moetrace_dpmoe_compute_kernels_ms": ours.get("compute_kernels_ms_per_iteration"),
             "breakdown_ranks": rep["breakdown"].get("ranks"), "recognition": rep.get("recognition")}
        self.results["peer"] = r
        self.table.append(("peer", "PyTorch MoE layer fwd+bwd+SGD vs moetrace DPMoE: iteration wall "
                           "(layer window; compute kernels without the all-to-alls)",
                           f"{ms:.3f} vs {fmt(ours.get('wall_ms_per_iteration'))} ms "
                           f"({fmt(ours.get('layer_window_ms'))}; {fmt(ours.get('compute_kernels_ms_per_iteration'))}); "
                           f"peer's rows an expert {r['peer_rows_per_expert_min_over_mean']:.2f}-"
                           f"{r['peer_rows_per_expert_max_over_mean']:.2f} x the mean"
                           + ("" if r["peer_rows_per_expert_max_over_mean"] <= 1.25 else
                              " (routing far from balanced: not a comparison of the same layer)"),
                           "ours not slower"))

    # -- driver ------------------------------------------------------------
    def save(self):
        self.results["backend"] = self.args.backend
        with open(os.path.join(self.out, "bench.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        lines = ["| part | what | measured | goal |", "|---|---|---|---|"]
        lines += [f"| {p} | {w} | {v} | {g} |" for p, w, v, g in self.table]
        text = "\n".join(lines)
        with open(os.path.join(self.out, "bench.md"), "w") as f:
            f.write(text + "\n")
        return text

    def main(self):
        status = 0
        for part in self.args.parts:
            log(f"== {part}")
            t0 = time.time()
            try:
                getattr(self, part)()
            except Exception as e:  # one part's failure must not lose the others
                status = 1
                self.results.setdefault("errors", {})[part] = f"{type(e).__name__}: {e}"
                self.table.append((part, "FAILED", f"{type(e).__name__}: {str(e)[:160]}", ""))
            log(f"   {time.time() - t0:.1f} s")
            self.save()  # after every part: a run cut short keeps what it measured
        print(self.save())
        if self.args.backend == "sim":
            # The plumbing check: every number the parts read off the traces is there.
            missing = [k for k in none_keys(self.results) if k not in GPU_ONLY]
            if missing:
                log(f"gpu_bench: no value for {', '.join(missing)}")
                status = 1
        if not self.args.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)
        return status


# The executor's own kernels inside an expert op (kernels/cuda/src/kernels.cu);
# every other kernel there is cuBLAS's.
OWN_KERNELS = ("gelu_", "fill_pointers", "fill_normal", "paced_", "sgd_")


# Values only real GPU traces have (the simulator's kernels carry no CUDA names).
GPU_ONLY = {"gb_s_move_kernel", "of_cublas"}


def none_keys(obj, key=None):
    """The keys whose value is None anywhere in a JSON tree."""
    if obj is None:
        return [key]
    if isinstance(obj, dict):  # (recommend's own JSON, kept whole, may hold nulls)
        return [k for kk, v in obj.items() if kk != "recommendation" for k in none_keys(v, kk)]
    if isinstance(obj, list):
        return [k for v in obj for k in none_keys(v, key)]
    return []


def is_own_kernel(name):
    return any(k in name for k in OWN_KERNELS)


def fmt(v):
    return "n/a" if v is None else f"{v:.3g}" if v < 10 else f"{v:.1f}"


def find_key(obj, key):
    """The first value of `key` anywhere in a JSON tree (the recommendation's r)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            f = find_key(v, key)
            if f is not None:
                return f
    return None


def need_torch():
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("PyTorch is not installed here") from e
    if not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device")
    return torch


def gemm_tflops(torch, m, k, n):
    """One cuBLAS bf16 GEMM (torch.matmul) of m x k x n on random data: the
    median of 30 after a warm-up of 0.5 s (the clocks ramp up under load)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ms = cuda_median_ms(torch, lambda: a @ b, reps=30, warm_s=0.5)
    del a, b
    torch.cuda.empty_cache()
    return 2 * m * k * n / ms / 1e9


def expert_gemm_tflops(torch):
    return gemm_tflops(torch, *EXPERT_GEMM)


def cuda_median_ms(torch, fn, reps, warmup=3, warm_s=0.0):
    """Median of `reps` timed calls, after `warmup` calls and at least
    `warm_s` seconds of calls (the clocks ramp up under load)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.time()
    while time.time() - t0 < warm_s:
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def TorchMoE(torch, m, h, experts, top_k):
    """A plain MoE layer: softmax gate, top-k, tokens sorted by expert with an
    index, each expert Linear(M, H) -> GeLU -> Linear(H, M), outputs scattered
    back weighted by the gate's probabilities. bf16 on the GPU. Its module
    classes carry the names DeepSpeed-MoE and torchtitan give theirs (MoE,
    TopKGate, Experts), which is all moetrace's recognition reads of it."""
    nn = torch.nn

    class TopKGate(nn.Module):
        def __init__(self):
            super().__init__()
            self.wg = nn.Linear(m, experts, bias=False)

        def forward(self, x):
            probs = torch.softmax(self.wg(x).float(), dim=-1)
            return probs.topk(top_k, dim=-1)

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.ModuleList(nn.Linear(m, h, bias=False) for _ in range(experts))
            self.w2 = nn.ModuleList(nn.Linear(h, m, bias=False) for _ in range(experts))

        def forward(self, permuted, counts):
            outs = [self.w2[e](nn.functional.gelu(self.w1[e](rows)))
                    for e, rows in enumerate(permuted.split(counts))]
            return torch.cat(outs)

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = TopKGate()
            self.experts = Experts()
            self.routed_rows = []  # rows per expert, a list a forward

        def forward(self, x):
            weights, ids = self.gate(x)
            flat = ids.reshape(-1)
            order = flat.argsort(stable=True)
            token_of_row = order // top_k
            permuted = x.index_select(0, token_of_row)
            counts = torch.bincount(flat, minlength=experts).tolist()
            self.routed_rows.append(counts)
            combined = self.experts(permuted, counts) * weights.reshape(-1)[order].unsqueeze(1).to(x.dtype)
            return torch.zeros_like(x).index_add(0, token_of_row, combined)

    return MoE().to(device="cuda", dtype=torch.bfloat16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moetrace", required=True, help="the moetrace binary (built with the CUDA backend)")
    ap.add_argument("--out", required=True, help="folder for bench.json, bench.md and logs")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    ap.add_argument("--backend", default="cuda", choices=["cuda", "sim"],
                    help="sim: check the plumbing against the simulator (no measurement)")
    ap.add_argument("--overhead-runs", type=int, default=10, help="runs each with the collector on and off")
    ap.add_argument("--peer-iterations", type=int, default=20)
    ap.add_argument("--keep-work", action="store_true", help="keep the traces under OUT/work")
    ap.add_argument("--expert-modes", default="grouped,per_expert",
                    help="the experts part's expert GEMM modes (MOETRACE_CUDA_EXPERT_GEMM), comma-separated")
    args = ap.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    args.expert_modes = [m for m in args.expert_modes.split(",") if m]
    for m in args.expert_modes:
        if m not in ("grouped", "per_expert"):
            ap.error(f"unknown expert mode {m!r} (grouped, per_expert)")
    for p in args.parts:
        if p not in PARTS:
            ap.error(f"unknown part {p!r} (parts: {', '.join(PARTS)})")
    if not os.access(args.moetrace, os.X_OK):
        ap.error(f"{args.moetrace} is not an executable")
    os.makedirs(args.out, exist_ok=True)
    return Bench(args).main()


if __name__ == "__main__":
    sys.exit(main())
