"""moetrace from Python: a run's analyses as pandas DataFrames.

    import moetrace
    run = moetrace.open("prof/")            # a file, several, a folder or a glob
    run.breakdown(by="rank")                # where each rank's GPU time went
    run.idle_breakdown()                    # HTA's idle-time breakdown per stream
    run.recommend()                         # per-layer advice

Every time is in nanoseconds on the trace's clock (an imported trace's is
the profiler's epoch time; a simulated one starts at 0). Each method's
docstring lists its columns; README.md ("Reading a report") defines the
breakdown's quantities and analyzer/analyses/include/moetrace/analyzer/launch_queue.h
the HTA analyses (idle time, queue length, kernel launches); critical_path.h
the critical path; efficiency.h the efficiency figures against datasheet peaks;
kernel_sequences.h the frequent CUDA kernel sequences.

Loading and the analyses run in C++ without the GIL, so other Python threads
go on meanwhile. Errors raise moetrace.Error (a RuntimeError) with the same
one-line message as the `moetrace` command; what a command would print as a
warning (files left out, ranks missing, clocks not aligned, damaged tables,
events of unread devices) is a moetrace.TraceWarning.
"""

import os
import warnings as _warnings

from . import _moetrace
from ._moetrace import Error

__all__ = ["open", "import_trace", "Run", "Error", "TraceWarning", "CATEGORIES"]

#: The breakdown's categories: per-category columns are "<category>_ns" (time
#: in which some op of that category ran) and "exclusive_<category>_ns" (time
#: in which it was the only category running).
CATEGORIES = tuple(_moetrace.categories())


class TraceWarning(UserWarning):
    """A warning about the trace read (the CLI's "moetrace: warning: ..." lines)."""


def _columns(*pairs):
    return tuple(pairs)


_SPLIT = _columns(
    ("window_ns", "length of the row's window"),
    ("busy_ns", "time in which some op counted in the row ran"),
    ("idle_ns", "window time in which nothing at all ran on the rank"),
    ("outside_ns", "window time in which other work ran but none of the row's ops (busy + outside + idle = window)"),
    ("comm_ns", "time of communication (all-to-all, all-reduce, other communication)"),
    ("comm_hidden_ns", "communication time overlapped by computation on the same rank"),
    ("comm_exposed_ns", "communication time not overlapped by computation"),
    ("overlap_ns", "MoE-layer rows: time the row's work ran beside other work of the rank (0 elsewhere)"),
    ("hidden_fraction", "comm_hidden_ns / comm_ns (0 without communication)"),
    ("all_to_all_share", "all_to_all_ns / window_ns"),
    ("all_reduce_share", "all_reduce_ns / window_ns"),
) + tuple((c + "_ns", "time in which some op of category %s ran" % c) for c in CATEGORIES) + tuple(
    ("exclusive_" + c + "_ns", "time in which %s was the only category running" % c) for c in CATEGORIES)

_BREAKDOWN = {
    "rank": _columns(("rank", "rank"), *_SPLIT,
                     ("unattributed_ns", "GPU activity no op range claims"),
                     ("events", "activities, and ops without any, that touch the window")),
    "iteration": _columns(("rank", "rank"), ("iteration", "iteration (profiler step)"), *_SPLIT,
                          ("moe_layer_ns", "time in which some MoE layer's window is open"),
                          ("moe_share", "moe_layer_ns / window_ns")),
    "layer": _columns(("rank", "rank"), ("layer", "MoE layer"), ("iteration", "iteration"),
                      ("phase", "fwd, bwd or wgrad"), *_SPLIT),
}

_LAYERS = _columns(
    ("layer", "MoE layer"),
    ("kind", "layer kind from the trace's layers table ('' where none)"),
    ("num_experts", "experts E (-1: unknown)"),
    ("top_k", "experts per token k (-1: unknown)"),
    ("model_dim", "model dimension M (-1: unknown)"),
    ("hidden_dim", "expert hidden dimension H (-1: unknown)"),
    ("ranks", "ranks with windows of the layer"),
    ("iterations", "iterations with windows of the layer"),
    ("mean_window_ns", "mean over rank-iterations of the union of the layer's windows"),
    ("max_window_ns", "the slowest rank-iteration's window"),
    ("slowest_rank", "the rank of that window"),
    ("forward_window_ns", "forward windows, summed over ranks and iterations"),
    ("backward_window_ns", "backward windows, summed over ranks and iterations (absent in a forward-only run)"),
    *_SPLIT,
)

_KERNELS = _columns(
    ("rank", "rank"),
    ("stream", "the CUDA stream as recorded (HTA's stream; -1: unknown)"),
    ("stream_id", "moetrace's stream id (the trace's streams table)"),
    ("stream_role", "compute, comm, copy or other"),
    ("type", "kernel, memcpy or memset"),
    ("name", "kernel name (memcpy / memset for copies)"),
    ("start_ns", "GPU start"),
    ("end_ns", "GPU end"),
    ("duration_ns", "end_ns - start_ns"),
    ("category", "breakdown category: its op's, else by kernel name (CATEGORIES)"),
    ("op", "kind of the op that launched it ('' where none)"),
    ("layer", "its op's MoE layer (-1: none)"),
    ("iteration", "its op's iteration (-1: none)"),
    ("micro_batch", "its op's micro-batch (-1: none)"),
    ("phase", "its op's phase ('' where none)"),
    ("correlation_id", "correlation id of its launching call (0: none)"),
    ("bytes", "bytes copied or set (0 for kernels)"),
)

_IDLE = _columns(
    ("rank", "rank"),
    ("stream", "the CUDA stream as recorded (HTA's stream; -1: unknown)"),
    ("stream_id", "moetrace's stream id (the trace's streams table)"),
    ("category", "host_wait, kernel_wait or other (HTA's idle_category)"),
    ("idle_ns", "idle time of the category (HTA's idle_time)"),
    ("ratio", "idle_ns / the stream's idle time (HTA's idle_time_ratio; 0 where never idle)"),
    ("intervals", "gaps in the category"),
    ("stream_window_ns", "the stream's first event's start to its last event's end"),
    ("stream_idle_ns", "the stream's idle time, all categories"),
    ("events", "kernels, copies and memsets on the stream"),
)

_QUEUE_SERIES = _columns(
    ("rank", "rank"),
    ("stream", "the CUDA stream as recorded (HTA's stream; -1: unknown)"),
    ("stream_id", "moetrace's stream id (the trace's streams table)"),
    ("ts_ns", "time of the change"),
    ("length", "operations outstanding on the stream from ts_ns to the next row"),
)

_QUEUE_SUMMARY = _columns(
    ("rank", "rank"),
    ("stream", "the CUDA stream as recorded (HTA's stream; -1: unknown)"),
    ("stream_id", "moetrace's stream id (the trace's streams table)"),
    ("count", "points of the series"),
    ("mean", "mean over the points (pandas describe, not time-weighted)"),
    ("std", "standard deviation over the points (n - 1; 0 for one point)"),
    ("min", "minimum"), ("p25", "25th percentile"), ("p50", "median"), ("p75", "75th percentile"),
    ("max", "maximum"),
    ("at_max_ns", "time spent at max"),
    ("full_ns", "time at >= max_queue_length (HTA's duration_at_max_queue_length)"),
    ("full_fraction", "full_ns / the rank's trace duration"),
)

_LAUNCHES = _columns(
    ("rank", "rank"),
    ("stream", "the CUDA stream of the GPU event as recorded (HTA's stream; -1: unknown)"),
    ("stream_id", "moetrace's stream id of the GPU event"),
    ("correlation_id", "correlation id of the launch"),
    ("name", "kernel name (memcpy / memset for copies)"),
    ("launch_call", "the runtime call that launched it"),
    ("cpu_start_ns", "the call's start"),
    ("gpu_start_ns", "the GPU event's start"),
    ("cpu_duration_ns", "the call's duration"),
    ("gpu_duration_ns", "the GPU event's duration"),
    ("launch_delay_ns", "max(0, GPU start - call end): HTA's launch delay"),
    ("start_delay_ns", "GPU start - call start"),
    ("short_kernel", "gpu_duration < cpu_duration and cpu_duration <= runtime_cutoff_ns"),
    ("runtime_outlier", "cpu_duration > runtime_cutoff_ns"),
    ("launch_delay_outlier", "launch_delay > launch_delay_cutoff_ns"),
)

_LAUNCH_SUMMARY = _columns(
    ("rank", "rank"),
    ("launches", "GPU events in the statistics"),
    ("short_kernels", "of them, short kernels"),
    ("runtime_outliers", "of them, runtime outliers"),
    ("launch_delay_outliers", "of them, launch-delay outliers"),
    ("other_launch_calls", "GPU events launched by calls outside HTA's set (cuLaunchKernel, graphs, NCCL)"),
    ("no_launch_call", "GPU events without a launching call in the trace"),
    *[("%s_%s_ns" % (q, s), "%s of the %s" % (s, q.replace("_", " ")))
      for q in ("cpu_duration", "gpu_duration", "launch_delay") for s in ("mean", "p50", "p95", "max")],
)

_CRITICAL_PATH = _columns(
    ("rank", "rank; -1: the path across ranks (across_ranks=True)"),
    ("category", "cpu_op, kernel_compute, kernel_communication, memcpy_memset, launch_delay or kernel_gap"),
    ("ns", "time of the rank's critical path in the category"),
    ("share", "ns / length_ns (0 for an empty path)"),
    ("length_ns", "the critical path's length (the sum of its edge weights)"),
    ("window_start_ns", "the window analysed: the first start of its events"),
    ("window_end_ns", "the window analysed: the last end of its events"),
)

_CRITICAL_PATH_EVENTS = _columns(
    ("rank", "rank"),
    ("name", "the event's name (a kernel's; 'memcpy', 'memset'; a host range's or runtime call's)"),
    ("kind", "nvtx (host range, e.g. a PyTorch CPU op), api (runtime call), kernel, memcpy or memset"),
    ("category", "the category of the path time below (an event can have rows in two: a kernel's own\n"
                 "%28s time and its launch delay or the gap after it)" % ""),
    ("path_ns", "time of the path attributed to the event in that category (HTA's edge attribution)"),
    ("start_ns", "the event's start"),
    ("end_ns", "the event's end"),
    ("stream", "GPU events: the CUDA stream as recorded (HTA's stream); -1 on the host or unknown"),
    ("stream_id", "GPU events: moetrace's stream id (the trace's streams table); -1 on the host"),
    ("thread", "host events: the thread id; -1 on the GPU"),
    ("correlation_id", "runtime calls and GPU events: the correlation id (0: none)"),
)

_MEMORY = _columns(
    ("rank", "rank"),
    ("ts_ns", "time of the change"),
    ("time_ns", "ts_ns from the run's start"),
    ("bytes", "device memory allocated from ts_ns to the rank's next row"),
)

_EXPERT_LOAD = _columns(
    ("layer", "MoE layer"),
    ("iteration", "iteration"),
    ("total_tokens", "tokens routed (top-k included)"),
    ("experts", "experts E (destination ranks where the load came from all-to-all splits)"),
    ("heaviest_expert", "the expert with the most tokens"),
    ("expert_max_over_mean", "the heaviest expert's tokens over the mean"),
    ("expert_cv", "coefficient of variation of the tokens per expert"),
    ("busiest_rank", "the rank computing the most tokens (actual placement)"),
    ("device_max_over_mean_home", "max over mean of the tokens per device, home placement"),
    ("device_max_over_mean", "the same, actual placement"),
    ("balance_degree_home", "std of the tokens per device, home placement (pro-prophet)"),
    ("balance_degree", "the same, actual placement"),
    ("rb", "balance_degree_home / balance_degree (inf: balanced after)"),
    ("has_placement", "the trace records a placement for the layer and iteration"),
    ("copies", "replica and shadow rows"),
    ("slowest_rank", "the rank with the longest layer window (-1: no breakdown rows)"),
    ("slowest_window_ns", "that window (-1: none)"),
    ("mean_window_ns", "the mean window over ranks (-1: none)"),
    ("imbalance_ns", "slowest_window_ns - mean_window_ns (-1: none)"),
    ("busiest_expert_compute_ns", "expert compute of the busiest rank (-1: none)"),
    ("mean_expert_compute_ns", "mean expert compute over ranks (-1: none)"),
    ("tokens_per_expert", "list: tokens per expert"),
)

_RECOMMEND = _columns(
    ("layer", "MoE layer"),
    ("subject", "pipeline degree, memory reuse, expert placement or layout"),
    ("action", "what to do ('r = 4', 'S4: ...', 'keep ...')"),
    ("change", "False: keep what the trace runs"),
    ("predicted_gain", "share of the layer's time per iteration saved (NaN: unknown; negative: costs time)"),
    ("gain_low", "low end of the gain where the hardware model was fitted (NaN elsewhere)"),
    ("gain_high", "high end of that range"),
    ("evidence", "the numbers behind it"),
)


_COMM_KINDS = (("all_to_all", "all-to-all"), ("all_reduce", "all-reduce"))
_EFFICIENCY = _columns(
    ("device", "the rank's device name as recorded (\"\": none)"),
    ("gpu", "its datasheet entry (docs/analyses.md; \"\": not in the table, no % of peak)"),
    ("expert_ops", "expert-compute ops (expert FFN, recompute)"),
    ("expert_ops_with_flops", "of them, with FLOPs recorded and GPU time"),
    ("expert_flops", "their FLOPs (NaN: none recorded)"),
    ("expert_time_ns", "union of their GPU time"),
    ("achieved_tflops", "expert_flops / expert_time_ns, TFLOP/s"),
    ("peak_tflops", "the GPU's dense peak for the dtype (efficiency_dtype())"),
    ("percent_of_peak", "100 x achieved_tflops / peak_tflops"),
) + tuple(c for k, text in _COMM_KINDS for c in (
    (k + "_ops", text + " ops"),
    (k + "_ops_with_bytes", "of them, with bytes recorded and GPU time"),
    (k + "_bytes", "their bytes (NaN: none recorded)"),
    (k + "_time_ns", "union of their GPU time"),
    (k + "_group_size", "n, the ranks of the collective"),
    (k + "_algbw_gbps", "bytes / time, GB/s (10^9 B/s)"),
    (k + "_busbw_gbps", "NCCL's bus bandwidth: algbw x " + ("2(n-1)/n" if k == "all_reduce" else "(n-1)/n")),
    (k + "_link_gbps", "the GPU's link per direction (NaN: not in the table, or ranks share a GPU)"),
    (k + "_percent_of_link", "100 x busbw / link"),
))
_EFFICIENCY_BY = {
    "layer": _columns(("rank", "rank"), ("layer", "MoE layer")) + _EFFICIENCY,
    "rank": _columns(("rank", "rank (every op of the rank, in MoE layers or not)")) + _EFFICIENCY,
}

_COLLECTIVES = _columns(
    ("kind", "all_to_all or all_reduce"),
    ("min_bytes", "size bucket [min_bytes, 2 min_bytes) of the instance's largest call (NaN: size unknown)"),
    ("instances", "collective instances"),
    ("calls", "participant calls"),
    ("unpaired_calls", "calls no other rank's call pairs with: wait not separated, all transfer"),
    ("bytes", "bytes of the calls with a known size"),
    ("wait_total_ns", "time from each call's start until the last participant was ready"),
    ("wait_median_ns", "median over calls"),
    ("transfer_total_ns", "the rest of each call"),
    ("transfer_median_ns", "median over calls"),
    ("skew_total_ns", "sum of (last ready - ready), waiting before a late call started included"),
    ("group_size", "n"),
    ("busbw_gbps", "bus bandwidth of the transfer part, GB/s"),
    ("percent_of_link", "100 x busbw / link, where every rank has its own GPU of one table entry"),
)

_KERNEL_SEQUENCES = _columns(
    ("pattern", "HTA's pattern: the op's name and its GPU events' names in start order, joined by |"),
    ("count", "ops that launched this sequence"),
    ("GPU kernel duration (us)", "HTA's: the sequence's GPU events' durations, summed over the instances"),
    ("CPU op duration (us)", "HTA's: the ops' durations, summed"),
    ("rank", "the rank searched"),
    ("operator", "the ops' name"),
    ("kernels", "GPU events in the sequence (kernels, memcpy, memset)"),
    ("gpu_kernel_duration_ns", "GPU kernel duration in ns"),
    ("cpu_op_duration_ns", "CPU op duration in ns"),
)

_REPLAY_ITERATIONS = _columns(
    ("rank", "rank"),
    ("iteration", "iteration (-1: the rank's span, a trace without iterations)"),
    ("measured_ns", "the iteration's window in the trace (the breakdown's)"),
    ("replayed_ns", "the same window in the replay of the trace's execution graph with the measured durations"),
    ("error", "replayed_ns / measured_ns - 1"),
    ("predicted_ns", "the same window after the what-ifs (NaN without what-ifs)"),
)

_REPLAY_LAYERS = _columns(
    ("layer", "MoE layer"),
    ("windows", "its (rank, iteration) windows averaged"),
    ("measured_ns", "mean layer window in the trace"),
    ("replayed_ns", "mean layer window in the replay"),
    ("error", "replayed_ns / measured_ns - 1"),
    ("predicted_ns", "mean layer window after the what-ifs (NaN without what-ifs)"),
)


def _doc_columns(columns):
    return "\n".join("        %-26s %s" % (name, text) for name, text in columns)


def _tokens_arg(tokens):
    """tokens= of recommend() and replay(): None (not given) or a positive
    whole number (-1 to the module)."""
    if tokens is None:
        return -1
    if isinstance(tokens, bool) or int(tokens) != tokens or tokens <= 0:
        raise ValueError("tokens=%r: a positive whole number of tokens a rank holds" % (tokens,))
    return int(tokens)


def _frame(data, columns):
    # pandas is imported at the first table asked for, not with the module
    # (it is most of `import moetrace`'s time: 0.35-0.85 s on a 2-core VM).
    import pandas as pd

    if not data:
        return pd.DataFrame(columns=[name for name, _ in columns])
    return pd.DataFrame(data)


def _documented(columns, intro):
    """Appends the column list to a method's docstring."""
    def wrap(f):
        f.__doc__ = "%s\n\n    Columns:\n%s\n" % (intro, _doc_columns(columns))
        f.columns = tuple(name for name, _ in columns)
        return f
    return wrap


def _paths(paths):
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    return [os.fsdecode(p) for p in paths]


def _warn(lines):
    for line in lines:
        _warnings.warn(line, TraceWarning, stacklevel=3)


def _critical_path_window(annotation, instance_id, across_ranks):
    """Run.critical_path's window as (annotation, first, last)."""
    if annotation is None and instance_id is None:
        return "", 0, 0
    if across_ranks:
        raise ValueError("critical_path: across_ranks=True covers the whole trace (no annotation or instance_id)")
    if annotation is None:
        annotation = "ProfilerStep"
    if not isinstance(annotation, str) or annotation == "":
        raise ValueError("critical_path: annotation must be a non-empty name, e.g. 'ProfilerStep'")
    if instance_id is None:
        first = last = 0
    elif isinstance(instance_id, tuple) and len(instance_id) == 2:
        first, last = int(instance_id[0]), int(instance_id[1])
    else:
        first = last = int(instance_id)
    if first < 0 or last < first:
        raise ValueError(f"critical_path: instance_id {instance_id!r}: instances count from 0, first <= last")
    return annotation, first, last


class Run:
    """One run read by moetrace.open(): its traces merged onto one clock.

    `info` describes it (paths, ranks, world size, ...); `warnings` holds
    what a command would warn about. The analyses are computed on first use
    and kept.
    """

    def __init__(self, run):
        self._run = run

    @property
    def info(self):
        """A dict: path, files, name, backend, variant, host, simulated,
        world_size, ranks, start_ns, end_ns, schema_version, integrity,
        aligned (clocks aligned from the collectives), events."""
        return self._run.info

    @property
    def warnings(self):
        """The run's warnings, one line each (also issued as TraceWarning by open())."""
        return self._run.warnings

    def __repr__(self):
        i = self.info
        return "<moetrace.Run %s: %d rank%s, %d events>" % (
            i["path"], len(i["ranks"]), "" if len(i["ranks"]) == 1 else "s", i["events"])

    def breakdown(self, by="rank", window="hta"):
        """Where the time goes, as `moetrace report` computes it (its JSON's
        breakdown section), one row per rank (by="rank"), per rank and
        iteration (by="iteration") or per rank, MoE layer, iteration and
        phase (by="layer"). `window` sets the per-rank rows' window: "hta"
        (the default, HTA's: without the last profiler step on ranks with two
        or more ProfilerStep ranges, else the whole span), "span" (each
        rank's whole GPU span, `moetrace report`'s default), "steps" (its
        profiler steps) or "steps-but-last"; `report --window`.

        Columns (by="rank"; "iteration" and "layer" have their keys instead
        of unattributed_ns and events, and "iteration" adds moe_layer_ns and
        moe_share):
%s
        """
        if by not in _BREAKDOWN:
            raise ValueError('by must be "rank", "iteration" or "layer", not %r' % (by,))
        return _frame(self._run.breakdown(by, window), _BREAKDOWN[by])

    breakdown.__doc__ %= _doc_columns(_BREAKDOWN["rank"])

    @_documented(_LAYERS, "Each MoE layer over all ranks, iterations and both phases (the report's layer table);\n"
                          "    the time columns are sums over ranks, iterations and phases.")
    def layers(self):
        return _frame(self._run.layers(), _LAYERS)

    @_documented(_KERNELS, "Every GPU activity (kernels, copies, memsets), with the op that launched it.")
    def kernels(self):
        return _frame(self._run.kernels(), _KERNELS)

    def idle_breakdown(self, consecutive_kernel_delay_ns=30_000, window="hta"):
        """HTA's idle-time breakdown (get_idle_time_breakdown): per rank and
        stream, the gaps between its GPU events as host_wait (the CPU had not
        launched the next one yet), kernel_wait (a gap shorter than
        consecutive_kernel_delay_ns behind a launch made in time; 30 us, the
        threshold HTA applies to PyTorch-profiler traces) and other.
        Three rows per stream. `window`: which work, as in breakdown(); the
        default "hta" is HTA's (include_last_profiler_step=False: without
        the last ProfilerStep where there are two or more), "span" all of it.

        Columns:
%s
        """
        return _frame(self._run.idle_breakdown(int(consecutive_kernel_delay_ns), str(window)), _IDLE)

    idle_breakdown.__doc__ %= _doc_columns(_IDLE)

    def queue_length(self, summary=False, max_queue_length=1024, window="hta"):
        """HTA's queue length per stream (get_queue_length_time_series):
        operations launched and not yet started, one row per change; with
        summary=True, one row per stream (get_queue_length_summary, and the
        time at or above max_queue_length). `window` as in idle_breakdown().

        Columns (series):
%s

        Columns (summary=True):
%s
        """
        columns = _QUEUE_SUMMARY if summary else _QUEUE_SERIES
        return _frame(self._run.queue_length(bool(summary), int(max_queue_length), str(window)), columns)

    queue_length.__doc__ %= (_doc_columns(_QUEUE_SERIES), _doc_columns(_QUEUE_SUMMARY))

    def launch_stats(self, summary=False, runtime_cutoff_ns=50_000, launch_delay_cutoff_ns=100_000, window="hta"):
        """HTA's CUDA kernel-launch statistics (get_cuda_kernel_launch_stats):
        one row per GPU event launched by cudaLaunchKernel(ExC),
        cudaMemcpyAsync or cudaMemsetAsync, with its outlier flags; with
        summary=True, one row per rank. `window` as in idle_breakdown().

        Columns:
%s

        Columns (summary=True):
%s
        """
        columns = _LAUNCH_SUMMARY if summary else _LAUNCHES
        return _frame(self._run.launch_stats(bool(summary), int(runtime_cutoff_ns), int(launch_delay_cutoff_ns),
                                             str(window)),
                      columns)

    launch_stats.__doc__ %= (_doc_columns(_LAUNCHES), _doc_columns(_LAUNCH_SUMMARY))

    def critical_path(self, rank=None, events=False, top_events=20, across_ranks=False, annotation=None,
                      instance_id=None):
        """HTA's critical path of each rank (critical_path_analysis), the
        report's critical_path section: the longest chain of dependent work
        through CPU ops nested on their threads, launch calls to their
        kernels, kernels in stream order and kernels to the synchronisations
        that waited for them (analyzer/analyses/include/moetrace/analyzer/critical_path.h
        gives the definition and where it departs from HTA). `rank`: that
        rank only (default: every rank, each on its own; a rank's path does
        not leave it). One row per rank and category (HTA's summary, in ns);
        with events=True, the events with time on each rank's path, most
        first, at most top_events per rank (0: all).

        across_ranks=True: the one path over every rank's graph, joined at
        the collectives matched across ranks (a collective's kernel cannot
        end before every participant has started it; its time before the
        last participant started is waiting and counts nowhere), the
        report's critical_path.across_ranks: summary rows with rank -1,
        event rows with each event's rank. `rank` must then be None.

        annotation, instance_id: HTA's window (critical_path_analysis):
        the instances of the host ranges whose name contains `annotation`,
        counted from 0 on each rank in order of start; instance_id an int or
        an inclusive (first, last) pair. critical_path(0,
        annotation="ProfilerStep", instance_id=1) is rank 0's second
        profiler step. instance_id alone takes annotation="ProfilerStep";
        neither: the whole trace. A rank without the instance has no rows;
        where no rank has it, moetrace.Error says so.

        Columns:
%s

        Columns (events=True):
%s
        """
        if across_ranks and rank is not None:
            raise ValueError("critical_path: across_ranks=True takes no rank (the path covers every rank)")
        r = None if rank is None else int(rank)
        columns = _CRITICAL_PATH_EVENTS if events else _CRITICAL_PATH
        annotation, first, last = _critical_path_window(annotation, instance_id, across_ranks)
        return _frame(self._run.critical_path(r, bool(events), int(top_events), bool(across_ranks), annotation,
                                              first, last), columns)

    critical_path.__doc__ %= (_doc_columns(_CRITICAL_PATH), _doc_columns(_CRITICAL_PATH_EVENTS))

    def efficiency(self, by="layer"):
        """Efficiency against the GPUs' datasheet peaks, the report's
        efficiency rows: per (rank, MoE layer) with by="layer", per rank
        with by="rank". Expert GEMMs' achieved TFLOP/s and %% of the dense
        peak; all-to-all and all-reduce algorithm and bus bandwidths
        (nccl-tests' definitions) and %% of the link. Unknown figures are
        NaN, never 0. The DataFrame's attrs hold the dtype the peak is for,
        where it comes from, and the device names not in the table.

        Columns (by="layer"; by="rank" has no layer):
%s
        """
        if by not in _EFFICIENCY_BY:
            raise ValueError(f"efficiency: by={by!r} is not one of 'layer', 'rank'")
        df = _frame(self._run.efficiency(str(by)), _EFFICIENCY_BY[by])
        df.attrs.update(self._run.efficiency_dtype())
        return df

    efficiency.__doc__ %= _doc_columns(_EFFICIENCY_BY["layer"])

    @_documented(_COLLECTIVES, "Collectives by kind and size bucket (powers of 2 of bytes): instances, the time\n"
                               "    waiting for the slowest participant apart from transferring, and the transfer's\n"
                               "    bus bandwidth (the report's efficiency.collectives).")
    def collectives(self):
        return _frame(self._run.collectives(), _COLLECTIVES)

    def kernel_sequences(self, operator="aten::linear", min_pattern_len=3, top_k=5, rank=None, window="hta"):
        """HTA's frequent CUDA kernel sequences (get_frequent_cuda_kernel_sequences;
        definition and departures in kernel_sequences.h, docs/hta.md): on one
        rank, the CPU ops whose names contain `operator` (case-sensitive), at
        the shallowest call-stack depth where any does, and the GPU events
        each launched, by start; a sequence of at least `min_pattern_len`
        events is a pattern. Most frequent first, then by pattern; at most
        `top_k` rows (None or 0: every pattern, as HTA's DataFrame has them).
        rank=None: rank 0, else the trace's lowest. `window` as breakdown's
        ("hta": HTA's, without what the last ProfilerStep launched). The
        DataFrame's attrs hold the rank and the counts behind it
        (candidates, depth, roots, short_roots, patterns, backward_linked).

        Columns:
%s
        """
        data, attrs = self._run.kernel_sequences(str(operator), int(min_pattern_len), int(top_k or 0),
                                                 None if rank is None else int(rank), str(window))
        df = _frame(data, _KERNEL_SEQUENCES)
        df.attrs.update(attrs)
        return df

    kernel_sequences.__doc__ %= _doc_columns(_KERNEL_SEQUENCES)

    @_documented(_MEMORY, "Device memory allocated per rank over time: a step function, one row per change.")
    def memory_timeline(self):
        return _frame(self._run.memory_timeline(), _MEMORY)

    @_documented(_EXPERT_LOAD, "Expert load and its imbalance per MoE layer and iteration (the report's\n"
                               "    expert_load rows; pro-prophet's balance degree and RB).")
    def expert_load(self):
        return _frame(self._run.expert_load(), _EXPERT_LOAD)

    def recommend(self, model=None, cost_model=None, simulate=True, tokens=None):
        """Per-layer advice, as `moetrace recommend` gives it: one row per item.
        `model`: a Hugging Face config.json or Megatron-Core argument file
        for shapes the trace lacks (--model); `cost_model`: a simulator
        preset, a cost-model JSON file or "fitted" (--cost-model);
        simulate=False: closed forms only (--no-simulate); `tokens`: the
        tokens a rank holds per MoE layer where the trace records no expert
        load and no dispatch (--tokens).

        Columns:
%s
        """
        return _frame(self._run.recommend(os.fsdecode(model) if model is not None else "",
                                          _tokens_arg(tokens),
                                          os.fsdecode(cost_model) if cost_model is not None else "",
                                          bool(simulate)), _RECOMMEND)

    recommend.__doc__ %= _doc_columns(_RECOMMEND)

    def replay(self, what_if=None, cost_model=None, by="iteration", model=None, tokens=None):
        """The trace replayed from its execution graph (CPU ops per thread,
        launches, stream order, cross-stream waits, host synchronisation,
        collectives across ranks) with the measured durations, as `moetrace
        replay` gives it; with `what_if` the graph is changed and evaluated
        again (predicted_ns). `what_if`: a dict {"pipeline_degree": 4} or a
        list of "KEY=VALUE" strings (--what-if); `cost_model`: where a
        what-if's new durations come from (--cost-model: a cost-model JSON
        file, a preset or "fitted"). by="iteration": one row per rank and
        iteration; by="layer": one row per MoE layer. `model` and `tokens`:
        the shapes and the tokens a rank holds where the trace lacks them,
        for the reuse and placement what-ifs (as in recommend()).

        Columns by iteration:
%s

        Columns by layer:
%s
        """
        if what_if is None:
            items = []
        elif isinstance(what_if, dict):
            items = ["%s=%s" % (k, v) for k, v in what_if.items()]
        elif isinstance(what_if, str):
            items = [what_if]
        else:
            items = [str(x) for x in what_if]
        data = self._run.replay(items, os.fsdecode(cost_model) if cost_model is not None else "", str(by),
                                os.fsdecode(model) if model is not None else "", _tokens_arg(tokens))
        return _frame(data, _REPLAY_ITERATIONS if by == "iteration" else _REPLAY_LAYERS)

    replay.__doc__ %= (_doc_columns(_REPLAY_ITERATIONS), _doc_columns(_REPLAY_LAYERS))


def open(paths, *, align=True, moe_rules=None, recognize=True):
    """Reads a run: one trace file, several (the ranks of one run), a folder
    of them or a glob ("prof/run.rank*.db"), as the `moetrace` commands read
    their trace arguments. align=False keeps each rank's clock (--no-align);
    moe_rules: a rules file for traces of other tools (--moe-rules);
    recognize=False: no MoE recognition (--no-moe-recognition). Returns a Run.
    Traces of other tools (Kineto .json/.json.gz, Nsight Systems .sqlite;
    a folder without .db files stands for its files of these) are read by
    their importers straight into memory, as import_trace() would import
    them, with no file written; the run names them as given."""
    run = Run(_moetrace.open(_paths(paths), bool(align), os.fsdecode(moe_rules) if moe_rules else "",
                             bool(recognize)))
    _warn(run.warnings)
    return run


def import_trace(inputs, output, format="auto"):
    """Converts Nsight Systems SQLite exports or PyTorch-profiler (Kineto)
    JSON traces (several files: the ranks of one run) into one moetrace trace
    at `output`, as `moetrace import` does. Returns a dict: output, format,
    ranks, world_size, rows (per table), skipped (source records not
    imported, by reason), warnings (also issued as TraceWarning)."""
    summary = _moetrace.import_trace(_paths(inputs), os.fsdecode(output), format)
    _warn(summary["warnings"])
    return summary
