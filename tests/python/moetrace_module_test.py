"""The Python module `moetrace` (python/moetrace, python/moetrace_bindings.cc)
against the CLI on the same traces: every number it returns is the one
`moetrace report --format json` (or `recommend`) gives for the same quantity
and window, and on a hand-made Kineto trace the HTA analyses equal values
derived by hand from launch_queue.h's definitions.

Run by ctest (python_module_tests) with PYTHONPATH=build/<preset>/python and
MOETRACE_CLI=the moetrace executable; the fixtures are made with the CLI in a
temporary folder.
"""

import glob
import gzip
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

import numpy as np
import pandas as pd

import moetrace

CLI = os.environ.get("MOETRACE_CLI", "moetrace")


def cli(*args):
    """Runs the CLI; returns (stdout, stderr lines without the 'moetrace: ' prefix)."""
    p = subprocess.run([CLI, *args], capture_output=True, text=True)
    lines = [l[len("moetrace: "):] if l.startswith("moetrace: ") else l for l in p.stderr.splitlines()]
    return p.returncode, p.stdout, lines


def cli_json(*args):
    rc, out, err = cli(*args)
    assert rc == 0, err
    return json.loads(out)


def split_row(j):
    """The report's TimeSplit JSON flattened to the module's column names."""
    row = {k: v for k, v in j.items() if k not in ("category_ns", "exclusive_ns")}
    for c, v in j["category_ns"].items():
        row[c + "_ns"] = v
    for c, v in j["exclusive_ns"].items():
        row["exclusive_" + c + "_ns"] = v
    return row


class Fixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="moetrace-py-")
        d = cls.tmp.name
        cls.sim = os.path.join(d, "sim.db")
        rc, _, err = cli("run", "--backend", "sim", "--preset", "pipemoe-solver-example", "-q", "-o", cls.sim)
        assert rc == 0, err
        cls.split_dir = os.path.join(d, "split")
        os.mkdir(cls.split_dir)
        rc, _, err = cli("run", "--backend", "sim", "-v", "pipemoe", "--ranks", "4", "--layers", "2",
                         "--iterations", "2", "--experts", "4", "--tokens", "256", "--split-ranks", "-q",
                         "-o", os.path.join(cls.split_dir, "s.db"))
        assert rc == 0, err
        cls.synth = os.path.join(d, "synth.db")
        rc, _, err = cli("synth", "--ranks", "2", "--layers", "2", "--iterations", "2", cls.synth)
        assert rc == 0, err

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class Columns(Fixtures):
    def test_every_table_has_exactly_its_documented_columns(self):
        run = moetrace.open(self.sim)
        syn = moetrace.open(self.synth)
        from moetrace import (_BREAKDOWN, _CRITICAL_PATH, _CRITICAL_PATH_EVENTS, _EXPERT_LOAD, _IDLE, _KERNELS,
                              _LAUNCHES, _LAUNCH_SUMMARY, _LAYERS, _MEMORY, _QUEUE_SERIES, _QUEUE_SUMMARY,
                              _RECOMMEND, _EFFICIENCY_BY, _COLLECTIVES)
        names = lambda cols: [c for c, _ in cols]
        cases = [
            (run.breakdown(by="rank"), _BREAKDOWN["rank"]),
            (run.breakdown(by="iteration"), _BREAKDOWN["iteration"]),
            (run.breakdown(by="layer"), _BREAKDOWN["layer"]),
            (run.layers(), _LAYERS),
            (run.kernels(), _KERNELS),
            (syn.idle_breakdown(), _IDLE),
            (syn.queue_length(), _QUEUE_SERIES),
            (syn.queue_length(summary=True), _QUEUE_SUMMARY),
            (syn.launch_stats(), _LAUNCHES),
            (syn.launch_stats(summary=True), _LAUNCH_SUMMARY),
            (syn.critical_path(), _CRITICAL_PATH),
            (syn.critical_path(events=True), _CRITICAL_PATH_EVENTS),
            (run.memory_timeline(), _MEMORY),
            (run.expert_load(), _EXPERT_LOAD),
            (run.recommend(simulate=False), _RECOMMEND),
            (run.efficiency(by="layer"), _EFFICIENCY_BY["layer"]),
            (run.efficiency(by="rank"), _EFFICIENCY_BY["rank"]),
            (syn.collectives(), _COLLECTIVES),
        ]
        for frame, cols in cases:
            self.assertIsInstance(frame, pd.DataFrame)
            self.assertGreater(len(frame), 0, names(cols)[:3])
            self.assertEqual(list(frame.columns), names(cols))
        # Documented in the docstrings too.
        self.assertIn("hidden_fraction", moetrace.Run.breakdown.__doc__)
        self.assertIn("host_wait", moetrace.Run.idle_breakdown.__doc__)
        self.assertIn("launch_delay_ns", moetrace.Run.launch_stats.__doc__)
        self.assertIn("kernel_gap", moetrace.Run.critical_path.__doc__)
        self.assertIn("correlation_id", moetrace.Run.critical_path.__doc__)
        # A table without rows keeps its columns: a simulated run records no launches.
        empty = run.launch_stats()
        self.assertEqual(len(empty), 0)
        self.assertEqual(list(empty.columns), names(_LAUNCHES))


class AgainstTheReport(Fixtures):
    """The same numbers as `moetrace report --format json` of the same trace."""

    def check_rows(self, frame, rows, keys):
        self.assertEqual(len(frame), len(rows))
        by_key = {tuple(r[k] for k in keys): r for r in rows}
        compared = set()
        for rec in frame.to_dict("records"):
            want = by_key[tuple(rec[k] for k in keys)]
            for col, v in want.items():
                if col not in rec:
                    continue
                compared.add(col)
                if isinstance(v, float):
                    self.assertAlmostEqual(rec[col], v, places=12, msg=col)
                elif isinstance(v, list):
                    self.assertEqual(list(rec[col]), v, col)
                else:
                    self.assertEqual(rec[col], v, col)
        return compared

    def test_breakdown_by_rank_iteration_and_layer(self):
        j = cli_json("report", self.sim, "--format", "json", "--per-rank", "--per-iteration",
                     "--no-recommendations")["breakdown"]
        run = moetrace.open(self.sim)
        ranks = run.breakdown()
        self.assertEqual(list(ranks["rank"]), list(range(16)))  # pipemoe-solver-example: 16 GPUs
        self.check_rows(ranks, [dict(split_row(r), rank=r["rank"]) for r in j["ranks"]], ["rank"])
        self.assertTrue((ranks["busy_ns"] + ranks["outside_ns"] + ranks["idle_ns"] == ranks["window_ns"]).all())
        its = run.breakdown(by="iteration")
        self.assertEqual(len(its), 16 * 2)  # 2 iterations
        self.check_rows(its, [dict(split_row(r), rank=r["rank"], iteration=r["iteration"]) for r in j["iterations"]],
                        ["rank", "iteration"])
        rows = run.breakdown(by="layer")
        self.assertEqual(set(rows["phase"]), {"fwd", "bwd"})
        self.check_rows(rows, [dict(split_row(r), rank=r["rank"], layer=r["layer"], iteration=r["iteration"],
                                    phase=r["phase"]) for r in j["rows"]],
                        ["rank", "layer", "iteration", "phase"])
        layers = run.layers()
        self.assertEqual(list(layers["layer"]), [0])
        self.check_rows(layers, [dict(split_row(l["total"]), **{k: l[k] for k in
                                  ("layer", "ranks", "iterations", "mean_window_ns", "max_window_ns", "slowest_rank")})
                                 for l in j["layers"]], ["layer"])
        self.assertEqual(layers["forward_window_ns"][0], j["layers"][0]["forward"]["window_ns"])

    def test_breakdown_window_is_the_reports(self):
        for window in ("steps", "steps-but-last"):
            j = cli_json("report", self.synth, "--format", "json", "--window", window, "--no-recommendations")
            frame = moetrace.open(self.synth).breakdown(window=window)
            self.check_rows(frame, [dict(split_row(r), rank=r["rank"]) for r in j["breakdown"]["ranks"]], ["rank"])
        span = moetrace.open(self.synth).breakdown(window="span")
        # No ProfilerStep ranges: HTA's window (the default) is the whole span.
        pd.testing.assert_frame_equal(moetrace.open(self.synth).breakdown(), span)
        last = moetrace.open(self.synth).breakdown(window="steps-but-last")
        self.assertTrue((last["window_ns"] < span["window_ns"]).all())

    def test_several_files_a_folder_and_a_glob_are_one_run(self):
        files = sorted(glob.glob(os.path.join(self.split_dir, "s.rank*.db")))
        self.assertEqual(len(files), 4)
        pattern = os.path.join(self.split_dir, "s.rank*.db")
        j = cli_json("report", pattern, "--format", "json", "--no-recommendations")["breakdown"]["ranks"]
        want = [dict(split_row(r), rank=r["rank"]) for r in j]
        for arg in (self.split_dir, pattern, files):
            run = moetrace.open(arg)
            self.assertEqual(run.info["ranks"], [0, 1, 2, 3])
            self.assertEqual(run.info["files"], files)
            self.check_rows(run.breakdown(), want, ["rank"])

    def test_memory_expert_load_and_kernels(self):
        j = cli_json("report", self.sim, "--format", "json", "--per-iteration", "--no-recommendations")
        run = moetrace.open(self.sim)
        mem = run.memory_timeline()
        for r in j["memory"]["ranks"]:
            rows = mem[mem["rank"] == r["rank"]]
            self.assertEqual(rows["bytes"].max(), r["peak_bytes"])
            self.assertEqual(rows["ts_ns"][rows["bytes"].idxmax()], r["peak_ns"])
        self.assertEqual(mem["bytes"].max(), j["memory"]["peak_bytes"])
        load = run.expert_load()
        self.assertEqual(len(load), 2)  # one layer, two iterations
        self.check_rows(load, j["expert_load"]["rows"], ["layer", "iteration"])
        kernels = run.kernels()
        tables = dict(l.split() for l in cli("info", self.sim)[1].split("tables:")[1].split("config:")[0]
                      .strip().splitlines())
        self.assertEqual(len(kernels), int(tables["kernels"]))
        self.assertTrue((kernels["duration_ns"] == kernels["end_ns"] - kernels["start_ns"]).all())
        self.assertTrue(set(kernels["category"]) <= set(moetrace.CATEGORIES))
        # Each rank's categories add up to the report's: kernels of all-to-all ops are the all-to-all time.
        a2a = kernels[(kernels["rank"] == 0) & (kernels["category"] == "all_to_all")]
        self.assertGreater(len(a2a), 0)

    def test_recommend_is_the_commands(self):
        j = cli_json("recommend", self.sim, "--format", "json")
        frame = moetrace.open(self.sim).recommend()
        self.assertEqual(len(frame), len(j["items"]))
        for rec, item in zip(frame.to_dict("records"), j["items"]):
            for k in ("layer", "subject", "action", "change", "evidence"):
                self.assertEqual(rec[k], item[k], k)
            if "predicted_gain" in item:
                self.assertAlmostEqual(rec["predicted_gain"], item["predicted_gain"], places=12)
            else:
                self.assertTrue(math.isnan(rec["predicted_gain"]))
        self.assertIn("pipeline degree", set(frame["subject"]))
        # --cost-model and --no-simulate as keywords.
        j = cli_json("recommend", self.sim, "--format", "json", "--no-simulate", "--cost-model", "h100-nvlink-ib")
        frame = moetrace.open(self.sim).recommend(cost_model="h100-nvlink-ib", simulate=False)
        self.assertEqual(list(frame["action"]), [i["action"] for i in j["items"]])

    def test_launch_queue_is_the_reports(self):
        # The module's analyses default to HTA's window; the CLI's to the span.
        j = cli_json("report", self.synth, "--format", "json", "--window", "hta",
                     "--no-recommendations")["launch_queue"]
        run = moetrace.open(self.synth)
        idle = run.idle_breakdown()
        self.check_rows(idle, j["idle_time"]["rows"], ["rank", "stream_id", "category"])
        # A synthetic trace has no CUDA stream ids (stream -1): rows are keyed by
        # moetrace's stream_id.
        streams = [{"rank": r["rank"], "stream": r["stream"], "stream_id": r["stream_id"],
                    "stream_window_ns": r["window_ns"], "stream_idle_ns": r["idle_ns"], "events": r["events"]}
                   for r in j["idle_time"]["streams"]]
        self.check_rows(idle[idle["category"] == "other"], streams, ["rank", "stream_id"])
        summary = run.queue_length(summary=True)
        self.check_rows(summary, [{k: v for k, v in q.items() if k != "series"} for q in j["queue_length"]["streams"]],
                        ["rank", "stream_id"])
        series = run.queue_length()
        for q in j["queue_length"]["streams"]:
            pts = series[(series["rank"] == q["rank"]) & (series["stream_id"] == q["stream_id"])]
            self.assertEqual(len(pts), q["count"])
            self.assertEqual(pts["length"].max(), q["max"])
        launches = run.launch_stats(summary=True)
        want = []
        for r in j["kernel_launches"]["ranks"]:
            row = {k: v for k, v in r.items() if not isinstance(v, (dict, list))}
            for q in ("cpu_duration", "gpu_duration", "launch_delay"):
                for s, v in r[q + "_ns"].items():
                    row["%s_%s_ns" % (q, s)] = v
            want.append(row)
        self.check_rows(launches, want, ["rank"])
        per_launch = run.launch_stats()
        self.assertEqual(len(per_launch), launches["launches"].sum())
        worst = j["kernel_launches"]["ranks"][0]["worst"][0]
        row = per_launch[per_launch["correlation_id"] == worst["correlation_id"]].iloc[0]
        for k in ("cpu_duration_ns", "gpu_duration_ns", "launch_delay_ns", "start_delay_ns", "gpu_start_ns", "name"):
            self.assertEqual(row[k], worst[k], k)

    def test_efficiency_is_the_reports(self):
        for path in (self.sim, self.synth):
            j = cli_json("report", path, "--format", "json", "--no-recommendations")["efficiency"]
            run = moetrace.open(path)

            def flat(r):
                row = {k: r[k] for k in ("rank", "layer") if k in r}
                row.update({("expert_" + k if k in ("ops", "ops_with_flops", "flops", "time_ns") else k): v
                            for k, v in r["expert"].items()})
                for kind in ("all_to_all", "all_reduce"):
                    row.update({kind + "_" + k: v for k, v in r[kind].items()})
                return row

            for by, rows, keys in (("layer", j["layers"], ["rank", "layer"]), ("rank", j["ranks"], ["rank"])):
                frame = run.efficiency(by=by)
                self.assertEqual(len(frame), len(rows))
                self.assertGreater(len(rows), 0)
                got = {tuple(rec[k] for k in keys): rec for rec in frame.to_dict("records")}
                for r in map(flat, rows):
                    rec = got[tuple(r[k] for k in keys)]
                    for col, v in r.items():
                        if v is None:
                            self.assertTrue(math.isnan(rec[col]), (by, col, rec[col]))
                        else:
                            self.assertAlmostEqual(rec[col], v, places=9, msg=(by, col))
                devices = {d["rank"]: d for d in j["devices"]}
                for rec in frame.to_dict("records"):
                    self.assertEqual(rec["device"], devices[rec["rank"]]["device"])
                    self.assertEqual(rec["gpu"], devices[rec["rank"]]["gpu"] or "")
                self.assertEqual(frame.attrs["dtype"], j["dtype"])
                self.assertEqual(frame.attrs["dtype_source"], j["dtype_source"])
                self.assertEqual(list(frame.attrs["unmatched_devices"]), j["unmatched_devices"])
            frame = run.collectives()
            buckets = j["collectives"]["buckets"]
            self.assertEqual(len(frame), len(buckets))
            for rec, b in zip(frame.to_dict("records"), buckets):
                for col, v in b.items():
                    if v is None:
                        self.assertTrue(math.isnan(rec[col]), col)
                    elif isinstance(v, str):
                        self.assertEqual(rec[col], v)
                    else:
                        self.assertAlmostEqual(rec[col], v, places=9, msg=col)
        with self.assertRaises(ValueError):
            moetrace.open(self.synth).efficiency(by="iteration")

    def test_critical_path_is_the_reports(self):
        j = cli_json("report", self.synth, "--format", "json", "--no-recommendations")["critical_path"]["ranks"]
        self.assertGreater(len(j), 0)
        run = moetrace.open(self.synth)
        want = [dict(c, rank=r["rank"], length_ns=r["length_ns"]) for r in j for c in r["categories"]]
        frame = run.critical_path()
        self.assertEqual(self.check_rows(frame, want, ["rank", "category"]),
                         {"rank", "category", "ns", "share", "length_ns"})
        self.assertGreater(frame["length_ns"].max(), 0)
        # The report keeps 20 events per rank, as the method by default.
        events = run.critical_path(events=True)
        want = [dict(e, rank=r["rank"]) for r in j for e in r["events"]]
        self.assertEqual(len(events), len(want))
        for rec, w in zip(events.to_dict("records"), want):
            for k, v in w.items():
                self.assertEqual(rec[k], v, k)
        # One rank on request; every event with top_events=0.
        r0 = j[0]["rank"]
        one = run.critical_path(rank=r0)
        self.assertEqual(set(one["rank"]), {r0})
        self.assertEqual(len(one), 6)
        every = run.critical_path(rank=r0, events=True, top_events=0)
        self.assertEqual(len(every), j[0]["path_events"])
        self.assertEqual(len(run.critical_path(rank=10_000)), 0)

    def test_critical_path_across_ranks_is_the_reports(self):
        x = cli_json("report", self.synth, "--format", "json", "--no-recommendations")["critical_path"]["across_ranks"]
        self.assertEqual(len(x["ranks"]), 2)
        run = moetrace.open(self.synth)
        frame = run.critical_path(across_ranks=True)
        want = [dict(c, rank=-1, length_ns=x["length_ns"]) for c in x["categories"]]
        self.check_rows(frame, want, ["rank", "category"])
        events = run.critical_path(events=True, across_ranks=True)
        self.assertEqual(len(events), len(x["events"]))
        for rec, w in zip(events.to_dict("records"), x["events"]):
            for k, v in w.items():
                self.assertEqual(rec[k], v, k)
        self.assertEqual(set(events["rank"]) - set(x["ranks"]), set())
        with self.assertRaises(ValueError):
            run.critical_path(rank=0, across_ranks=True)


# A hand-made PyTorch-profiler trace: three kernels on stream 7, each launched
# by a cudaLaunchKernel (times in us):
#   call 1 [5, 6]   -> k1 [10, 20]
#   call 2 [12, 13] -> k2 [21, 30]   gap 1 us; call 2 started before k1 ended
#   call 3 [40, 41] -> k3 [50, 60]   gap 20 us; call 3 started after k2 ended
KINETO = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "Test GPU", "totalGlobalMem": 1000, "computeMajor": 9,
                          "computeMinor": 0, "numSms": 132}],
    "traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": s, "dur": 1,
         "args": {"correlation": c}} for c, s in ((1, 5), (2, 12), (3, 40))
    ] + [
        {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": s, "dur": d,
         "args": {"device": 0, "stream": 7, "correlation": c}}
        for c, n, s, d in ((1, "gemm_a", 10, 10), (2, "gemm_b", 21, 9), (3, "gemm_c", 50, 10))
    ],
}


def write_json(folder, name, doc):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


class HandDerived(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="moetrace-py-")
        cls.json = write_json(cls.tmp.name, "prof.json", KINETO)
        cls.db = os.path.join(cls.tmp.name, "prof.db")
        cls.summary = moetrace.import_trace(cls.json, cls.db)
        cls.trace = moetrace.open(cls.db)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_import(self):
        s = self.summary
        self.assertEqual((s["format"], s["ranks"], s["output"]), ("kineto", 1, self.db))
        self.assertEqual(s["rows"]["kernels"], 3)
        self.assertEqual(s["rows"]["api_calls"], 3)
        self.assertEqual(s["warnings"], [])
        self.assertEqual(self.trace.info["ranks"], [0])
        k = self.trace.kernels()
        self.assertEqual(list(k["name"]), ["gemm_a", "gemm_b", "gemm_c"])
        self.assertEqual(list(k["duration_ns"]), [10_000, 9_000, 10_000])
        self.assertEqual(list(k["correlation_id"]), [1, 2, 3])

    def test_pandas_is_imported_with_the_first_table(self):
        # In a fresh interpreter: import and open without pandas, which the
        # first DataFrame then brings in.
        code = ("import sys, moetrace; r = moetrace.open(sys.argv[1]); r.info; "
                "print('pandas' in sys.modules); r.kernels(); print('pandas' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code, self.db], capture_output=True, text=True,
                             env=dict(os.environ), check=True).stdout.split()
        self.assertEqual(out, ["False", "True"])

    def test_open_a_profilers_folder_of_json(self):
        # moetrace.open("prof/") on what torch.profiler writes: JSON files,
        # read straight into memory, with no file left behind.
        prof = os.path.join(self.tmp.name, "prof")
        os.makedirs(prof, exist_ok=True)
        with open(os.path.join(prof, "worker0.pt.trace.json"), "w") as f:
            json.dump(KINETO, f)
        tmp = os.path.join(self.tmp.name, "tmp")  # where temporary files would go (TMPDIR)
        os.makedirs(tmp, exist_ok=True)
        saved = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = tmp
        try:
            run = moetrace.open(prof + "/")
        finally:
            if saved is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = saved
        self.assertEqual(os.listdir(tmp), [])
        self.assertEqual(run.info["path"], os.path.join(prof, "worker0.pt.trace.json"))
        pd.testing.assert_frame_equal(run.kernels(), self.trace.kernels())
        pd.testing.assert_frame_equal(run.idle_breakdown(), self.trace.idle_breakdown())

    def test_launch_queue_windows(self):
        # Three profiler steps, [0, 15), [15, 35) and [35, 70) us: calls 1 and
        # 2 start before the last step's start (35), call 3 (40) in it. HTA's
        # default window (steps-but-last) keeps k1 and k2: 2 launches, one
        # gap of 1 us (kernel_wait), no host wait; the span keeps all 3.
        steps = dict(KINETO, traceEvents=KINETO["traceEvents"] + [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % n, "pid": 10, "tid": 11, "ts": s,
             "dur": d} for n, s, d in ((1, 0, 15), (2, 15, 20), (3, 35, 35))])
        path = os.path.join(self.tmp.name, "steps.json")
        with open(path, "w") as f:
            json.dump(steps, f)
        run = moetrace.open(path)
        self.assertEqual(list(run.launch_stats(summary=True, window="span")["launches"]), [3])
        self.assertEqual(list(run.launch_stats(summary=True, window="steps-but-last")["launches"]), [2])
        self.assertEqual(list(run.launch_stats(summary=True)["launches"]), [2])  # the default: HTA's window
        idle = run.idle_breakdown(window="steps-but-last").set_index("category")
        self.assertEqual(idle.loc["kernel_wait", "idle_ns"], 1_000)
        self.assertEqual(idle.loc["host_wait", "idle_ns"], 0)
        self.assertEqual(run.queue_length(summary=True, window="steps-but-last")["count"].iloc[0], 4)
        with self.assertRaises(moetrace.Error):
            run.launch_stats(window="last")

    def test_idle_breakdown(self):
        idle = self.trace.idle_breakdown().set_index("category")
        self.assertEqual(len(idle), 3)
        # k2: 1 us gap, call 2 in time, < 30 us: kernel_wait. k3: call 3 after k2's end: host_wait.
        self.assertEqual(idle.loc["host_wait", "idle_ns"], 20_000)
        self.assertEqual(idle.loc["kernel_wait", "idle_ns"], 1_000)
        self.assertEqual(idle.loc["other", "idle_ns"], 0)
        self.assertAlmostEqual(idle.loc["host_wait", "ratio"], 20 / 21)
        self.assertEqual(idle.loc["host_wait", "stream_window_ns"], 50_000)
        self.assertEqual(idle.loc["host_wait", "stream"], 7)  # the CUDA stream, as HTA names it
        # With a 500 ns threshold the 1 us gap is other.
        idle = self.trace.idle_breakdown(consecutive_kernel_delay_ns=500).set_index("category")
        self.assertEqual(idle.loc["kernel_wait", "idle_ns"], 0)
        self.assertEqual(idle.loc["other", "idle_ns"], 1_000)

    def test_queue_length(self):
        q = self.trace.queue_length()
        t = q["ts_ns"] - q["ts_ns"].iloc[0]
        # +1 at each call's start, -1 at its kernel's start.
        self.assertEqual(list(t), [0, 5_000, 7_000, 16_000, 35_000, 45_000])
        self.assertEqual(list(q["length"]), [1, 0, 1, 0, 1, 0])
        s = self.trace.queue_length(summary=True).iloc[0]
        self.assertEqual((s["count"], s["min"], s["max"]), (6, 0, 1))
        self.assertAlmostEqual(s["mean"], 0.5)
        self.assertAlmostEqual(s["std"], np.std([1, 0, 1, 0, 1, 0], ddof=1))
        self.assertEqual(s["at_max_ns"], 5_000 + 9_000 + 10_000)

    def test_critical_path(self):
        # Host: three top-level calls (1 us each) joined by 0-weight edges.
        # k1: stream empty -> launch edge call 1 start (5) -> k1 start (10): 5 us.
        # k2: k1 ends (20) after call 2 starts (12) -> kernel gap 20 -> 21: 1 us.
        # k3: k2 ends (30) before call 3 starts (40) -> launch edge 40 -> 50: 10 us.
        # Longest: call1.s -5-> k1 -10-> -1-> k2 -9-> = 25 us (the other way to
        # k3: 1 + 1 + 10 + 10 = 22 us).
        cp = self.trace.critical_path().set_index("category")
        self.assertEqual(cp.loc["launch_delay", "ns"], 5_000)
        self.assertEqual(cp.loc["kernel_compute", "ns"], 19_000)
        self.assertEqual(cp.loc["kernel_gap", "ns"], 1_000)
        self.assertEqual(cp.loc["cpu_op", "ns"], 0)
        self.assertEqual(cp.loc["cpu_op", "length_ns"], 25_000)
        self.assertAlmostEqual(cp.loc["kernel_compute", "share"], 19 / 25)
        ev = self.trace.critical_path(events=True)
        self.assertEqual(list(ev["name"]), ["gemm_a", "gemm_b", "gemm_a", "gemm_a"])
        self.assertEqual(list(ev["category"]), ["kernel_compute", "kernel_compute", "launch_delay", "kernel_gap"])
        self.assertEqual(list(ev["path_ns"]), [10_000, 9_000, 5_000, 1_000])
        self.assertEqual(set(ev["stream"]), {7})  # the CUDA stream
        self.assertEqual(set(ev["stream_id"]), set(self.trace.kernels()["stream_id"]))

    def test_launch_stats(self):
        l = self.trace.launch_stats()
        self.assertEqual(list(l["launch_call"]), ["cudaLaunchKernel"] * 3)
        self.assertEqual(list(l["cpu_duration_ns"]), [1_000] * 3)
        self.assertEqual(list(l["launch_delay_ns"]), [4_000, 8_000, 9_000])  # GPU start - call end
        self.assertEqual(list(l["start_delay_ns"]), [5_000, 9_000, 10_000])
        self.assertFalse(l["short_kernel"].any() or l["runtime_outlier"].any() or l["launch_delay_outlier"].any())
        # Cutoffs below the values: every launch an outlier.
        l = self.trace.launch_stats(runtime_cutoff_ns=500, launch_delay_cutoff_ns=3_000)
        self.assertTrue(l["runtime_outlier"].all() and l["launch_delay_outlier"].all())
        s = self.trace.launch_stats(summary=True).iloc[0]
        self.assertEqual((s["launches"], s["launch_delay_max_ns"]), (3, 9_000))
        self.assertAlmostEqual(s["launch_delay_mean_ns"], 7_000)


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >"


def kineto_sequences():
    """Two profiler steps, o = 0 and 100 us, on thread 11: aten::linear at
    [o+10, o+40) launches a memset [o+50, o+51), a GEMM [o+51, o+61) and an
    add [o+61, o+63); aten::linear at [o+45, o+48) one GEMM [o+70, o+80)."""
    events, corr = [], 0

    def launch(call, cat, name, at, start, dur):
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 10, "tid": 11, "ts": at, "dur": 1,
                       "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": start, "dur": dur,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})

    for step, o in ((1, 0), (2, 100)):
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % step, "pid": 10, "tid": 11,
                       "ts": o, "dur": 100})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 10, "tid": 11, "ts": o + 10,
                       "dur": 30})
        launch("cudaMemsetAsync", "gpu_memset", "Memset (Device)", o + 12, o + 50, 1)
        launch("cudaLaunchKernel", "kernel", GEMM, o + 15, o + 51, 10)
        launch("cudaLaunchKernel", "kernel", ADD, o + 20, o + 61, 2)
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 10, "tid": 11, "ts": o + 45,
                       "dur": 3})
        launch("cudaLaunchKernel", "kernel", GEMM, o + 46, o + 70, 10)
    return dict(KINETO, traceEvents=events)


class KernelSequences(unittest.TestCase):
    """HTA's frequent CUDA kernel sequences (kernel_sequences.h), derived by hand."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="moetrace-py-")
        cls.json = write_json(cls.tmp.name, "sequences.json", kineto_sequences())
        cls.trace = moetrace.open(cls.json)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_hand_derived(self):
        # The whole trace: both steps' first linear (13 us of GPU events, 30 us
        # of CPU each); the second linears launch one kernel: short.
        df = self.trace.kernel_sequences(window="span")
        self.assertEqual(list(df.columns), [c for c, _ in moetrace._KERNEL_SEQUENCES])
        self.assertIn("GPU kernel duration (us)", moetrace.Run.kernel_sequences.__doc__)
        self.assertEqual(list(df["pattern"]), ["|".join(["aten::linear", "Memset (Device)", GEMM, ADD])])
        self.assertEqual(list(df["count"]), [2])
        self.assertEqual(list(df["GPU kernel duration (us)"]), [26.0])
        self.assertEqual(list(df["CPU op duration (us)"]), [60.0])
        self.assertEqual(list(df["kernels"]), [3])
        self.assertEqual(dict(df.attrs), {"rank": 0, "candidates": 4, "depth": 1, "roots": 4, "short_roots": 2,
                                          "patterns": 1, "backward_linked": False})
        # HTA's window (the default) leaves out what step 2 launched.
        df = self.trace.kernel_sequences()
        self.assertEqual((list(df["count"]), list(df["GPU kernel duration (us)"])), ([1], [13.0]))
        self.assertEqual(df.attrs["short_roots"], 3)
        # Every pattern of one event or more: tied at 2, by pattern ("M" < "s").
        df = self.trace.kernel_sequences(min_pattern_len=1, top_k=None, window="span")
        self.assertEqual([p.split("|")[1] for p in df["pattern"]], ["Memset (Device)", GEMM])
        self.assertEqual(list(df["count"]), [2, 2])
        self.assertEqual(len(self.trace.kernel_sequences(operator="aten::Linear")), 0)  # case-sensitive

    def test_is_the_reports(self):
        j = cli_json("report", self.json, "--format", "json", "--no-recommendations", "--kernel-sequences-min-len",
                     "1", "--kernel-sequences-top-k", "0")["kernel_sequences"]
        df = self.trace.kernel_sequences(min_pattern_len=1, top_k=0, window="span")
        self.assertEqual(list(df["pattern"]), [s["pattern"] for s in j["sequences"]])
        self.assertEqual(list(df["count"]), [s["count"] for s in j["sequences"]])
        self.assertEqual(list(df["gpu_kernel_duration_ns"]), [s["gpu_kernel_duration_ns"] for s in j["sequences"]])
        self.assertEqual(list(df["cpu_op_duration_ns"]), [s["cpu_op_duration_ns"] for s in j["sequences"]])
        self.assertEqual(df.attrs["roots"], j["roots"])

    def test_bad_options_are_the_clis_one_line(self):
        for kwargs, flags in (({"operator": ""}, ["--kernel-sequences-op", ""]),
                              ({"rank": 4}, ["--kernel-sequences-rank", "4"])):
            with self.assertRaises(moetrace.Error) as e:
                self.trace.kernel_sequences(**kwargs)
            rc, _, err = cli("report", self.json, "--no-recommendations", *flags)
            self.assertEqual(rc, 2)
            self.assertEqual(err, ["invalid configuration: " + str(e.exception)])  # exit 2, as --r-max's


class ErrorsAndWarnings(Fixtures):
    def test_errors_carry_the_clis_message(self):
        missing = os.path.join(self.tmp.name, "nope.db")
        rc, _, err = cli("report", missing)
        self.assertNotEqual(rc, 0)
        with self.assertRaises(moetrace.Error) as e:
            moetrace.open(missing)
        self.assertIsInstance(e.exception, RuntimeError)
        self.assertEqual(str(e.exception), err[-1])
        not_a_trace = os.path.join(self.tmp.name, "x.json")
        with open(not_a_trace, "w") as f:
            f.write('{"lr": 0.1}')
        rc, _, err = cli("import", not_a_trace, "-o", os.path.join(self.tmp.name, "x.db"))
        with self.assertRaises(moetrace.Error) as e:
            moetrace.import_trace(not_a_trace, os.path.join(self.tmp.name, "x.db"))
        self.assertEqual(str(e.exception), err[-1])
        # A file that is neither JSON nor SQLite, whatever its name; a folder
        # without traces: what it is, and what the folder holds.
        garbage = os.path.join(self.tmp.name, "garbage.json")
        with open(garbage, "w") as f:
            f.write("step,loss\n1,0.5\n")
        with self.assertRaises(moetrace.Error) as e:
            moetrace.open(garbage)
        self.assertEqual(str(e.exception), garbage + ": not JSON, not SQLite, not a trace moetrace reads (moetrace "
                         "traces, Nsight Systems SQLite exports, PyTorch-profiler JSON, gzipped or not)")
        folder = os.path.join(self.tmp.name, "no-traces")
        os.makedirs(folder, exist_ok=True)
        with self.assertRaises(moetrace.Error) as e:
            moetrace.open(folder)
        self.assertEqual(str(e.exception), folder + ": an empty folder, so no trace to read")
        with open(os.path.join(folder, "train.log"), "w") as f:
            f.write("epoch 1\n")
        with self.assertRaises(moetrace.Error) as e:
            moetrace.open(folder)
        self.assertEqual(str(e.exception), folder + ": a folder of 1 file (train.log), with no trace file among "
                         "them (*.db; else *.json, *.json.gz, *.sqlite)")
        _, _, err = cli("report", folder)
        self.assertEqual(str(e.exception), err[-1])
        with self.assertRaises(moetrace.Error):
            moetrace.open(self.sim).breakdown(window="everything")
        with self.assertRaises(moetrace.Error):
            moetrace.open(self.sim).recommend(cost_model="no-such-preset")
        with self.assertRaises(ValueError):
            moetrace.open(self.sim).breakdown(by="expert")

    def test_warnings_are_the_clis(self):
        files = sorted(glob.glob(os.path.join(self.split_dir, "s.rank*.db")))
        some = [files[0], files[1], files[3]]
        _, _, err = cli("info", *some)
        want = [l[len("warning: "):] for l in err if l.startswith("warning: ")]
        self.assertTrue(any("rank 2 of 4 missing" in w for w in want), want)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = moetrace.open(some)
        got = [str(w.message) for w in caught if issubclass(w.category, moetrace.TraceWarning)]
        self.assertEqual(got, want)
        self.assertEqual(run.warnings, want)
        self.assertEqual(run.info["ranks"], [0, 1, 3])

    def test_each_files_warnings_name_the_file(self):
        # Two rank files of one run: one as written, one without an integrity
        # record, with events of devices not read and a damaged reference.
        files = sorted(glob.glob(os.path.join(self.split_dir, "s.rank*.db")))
        d = os.path.join(self.tmp.name, "warned")
        os.makedirs(d, exist_ok=True)
        clean, bad = os.path.join(d, "s.rank0.db"), os.path.join(d, "s.rank1.db")
        shutil.copyfile(files[0], clean)
        shutil.copyfile(files[1], bad)
        db = sqlite3.connect(bad)
        db.execute("DELETE FROM meta WHERE key = 'integrity'")
        db.execute("INSERT INTO run_config VALUES ('import.skipped.xpu_runtime', '5')")
        db.execute("UPDATE kernels SET op_id = 99999999 WHERE rowid = (SELECT min(rowid) FROM kernels)")
        db.commit()
        db.close()
        _, _, err = cli("info", clean, bad)
        want = [l[len("warning: "):] for l in err if l.startswith("warning: ")]
        for line in (bad + ": damaged trace: 1 kernels", bad + ": the trace has no integrity record",
                     bad + ": 5 events of Intel XPU devices were not imported"):
            self.assertTrue(any(w.startswith(line) for w in want), (line, want))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = moetrace.open([clean, bad])
        got = [str(w.message) for w in caught if issubclass(w.category, moetrace.TraceWarning)]
        self.assertEqual(got, want)
        self.assertEqual(run.warnings, want)
        self.assertEqual(run.info["integrity"], "mixed")


class Replay(Fixtures):
    """Run.replay() gives the rows of `moetrace replay --format json`."""

    def test_rows_are_the_cli_json(self):
        run = moetrace.open(self.split_dir)
        columns = {"iteration": ("rank", "iteration", "measured_ns", "replayed_ns", "error", "predicted_ns"),
                   "layer": ("layer", "windows", "measured_ns", "replayed_ns", "error", "predicted_ns")}
        for by, key in (("iteration", "iterations"), ("layer", "layers")):
            frame = run.replay(by=by)
            self.assertEqual(tuple(frame.columns), columns[by])
            rc, out, err = cli("replay", self.split_dir, "--format", "json")
            self.assertEqual(rc, 0, err)
            rows = json.loads(out)[key]
            self.assertEqual(len(frame), len(rows))
            for rec, want in zip(frame.to_dict("records"), rows):
                self.assertEqual(rec["measured_ns"], want["measured_ns"])
                self.assertEqual(rec["replayed_ns"], want["replayed_ns"])
                self.assertTrue(math.isnan(rec["predicted_ns"]))

    def test_what_if_as_dict_or_strings(self):
        run = moetrace.open(self.sim)
        a = run.replay(what_if={"pipeline_degree": 2}, cost_model="pipemoe-2080ti-ib100", by="layer")
        b = run.replay(what_if=["pipeline_degree=2"], cost_model="pipemoe-2080ti-ib100", by="layer")
        pd.testing.assert_frame_equal(a, b)
        rc, out, err = cli("replay", self.sim, "--what-if", "pipeline_degree=2", "--cost-model",
                           "pipemoe-2080ti-ib100", "--format", "json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(list(a["predicted_ns"]), [r["predicted_ns"] for r in json.loads(out)["layers"]])

    def test_a_bad_what_if_is_one_line(self):
        run = moetrace.open(self.sim)
        with self.assertRaisesRegex(moetrace.Error, "pipeline_degree=x: a whole number"):
            run.replay(what_if="pipeline_degree=x")
        with self.assertRaisesRegex(moetrace.Error, "by=\"rank\" is not one of"):
            run.replay(by="rank")
        with self.assertRaisesRegex(ValueError, "tokens=0: a positive whole number"):
            run.replay(tokens=0)

    def test_model_gives_the_sizes_the_trace_lacks(self):
        # An H200 trace of DPMoE (tests/data/gpu) with its M and H taken out,
        # and the model's arguments as Megatron-Core names them: the
        # placement what-if then predicts what it predicts on the whole trace.
        gpu = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gpu")
        fitted = os.path.join(gpu, "pipemoe_sweep", "fitted_p1.json")
        whole = os.path.join(self.tmp.name, "dpmoe.db")
        with gzip.open(os.path.join(gpu, "dpmoe.db.gz")) as f, open(whole, "wb") as out:
            shutil.copyfileobj(f, out)
        bare = os.path.join(self.tmp.name, "dpmoe_no_sizes.db")
        shutil.copyfile(whole, bare)
        with sqlite3.connect(bare) as db:
            db.executescript("DELETE FROM meta WHERE key = 'integrity'; "
                             "UPDATE layers SET model_dim = NULL, hidden_dim = NULL; "
                             "DELETE FROM run_config WHERE key IN ('model.model_dim', 'model.expert_hidden');")
        db.close()
        args = os.path.join(self.tmp.name, "megatron_args.txt")
        with open(args, "w") as f:
            f.write("--num-layers 2 --hidden-size 1024 --moe-ffn-hidden-size 4096 --num-experts 8 "
                    "--moe-router-topk 2 --bf16\n")
        what = {"placement": "pro-prophet"}
        want = moetrace.open(whole).replay(what_if=what, cost_model=fitted, by="layer")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", moetrace.TraceWarning)  # (no integrity record: taken out above)
            run = moetrace.open(bare)
        unchanged = run.replay(what_if=what, cost_model=fitted, by="layer")
        self.assertEqual(list(unchanged["predicted_ns"]), list(unchanged["replayed_ns"]))
        self.assertNotEqual(list(want["predicted_ns"]), list(want["replayed_ns"]))
        got = run.replay(what_if=what, cost_model=fitted, by="layer", model=args)
        self.assertEqual(list(got["predicted_ns"]), list(want["predicted_ns"]))
        rc, out, err = cli("replay", bare, "--what-if", "placement=pro-prophet", "--cost-model", fitted,
                           "--model", args, "--format", "json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(list(got["predicted_ns"]), [r["predicted_ns"] for r in json.loads(out)["layers"]])


class Threads(Fixtures):
    def test_threads_share_a_run(self):
        run = moetrace.open(self.synth)
        results = {}

        def work(i):
            results[i] = (run.breakdown(by="iteration"), run.idle_breakdown(), run.expert_load())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(1, 4):
            for a, b in zip(results[0], results[i]):
                pd.testing.assert_frame_equal(a, b)

    def test_loading_and_analysing_release_the_gil(self):
        # While another thread loads and analyses a larger trace, this one
        # keeps running: its longest pause is a small part of that work.
        big = os.path.join(self.tmp.name, "big.db")
        rc, _, err = cli("synth", "--ranks", "4", "--events", "300000", big)
        self.assertEqual(rc, 0, err)
        done = threading.Event()
        took = {}

        def work():
            t0 = time.perf_counter()
            run = moetrace.open(big)
            run.breakdown(by="iteration")
            run.idle_breakdown()
            took["s"] = time.perf_counter() - t0
            done.set()

        worker = threading.Thread(target=work)
        longest, last = 0.0, time.perf_counter()
        worker.start()
        while not done.is_set():
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        worker.join()
        self.assertLess(longest, took["s"] / 4, took)


if __name__ == "__main__":
    unittest.main()
