// Frequent CUDA kernel sequences as Holistic Trace Analysis (HTA,
// facebookresearch/HolisticTraceAnalysis) defines them:
// TraceAnalysis.get_frequent_cuda_kernel_sequences(operator_name,
// output_dir, min_pattern_len=3, rank=0, top_k=5), computed in
// hta/analyzers/cuda_kernel_analysis.py over the call graph of
// hta/common/trace_call_graph.py. HTA finds the kernel sequences that an
// operator launches again and again: candidates for fusion.
//
// On one rank:
// 1. Call stacks. Each thread's CPU events (framework ops, annotations,
//    Python functions and the runtime calls) nest by time: an event's
//    parent is the innermost event of its thread that encloses it (one that
//    ends when another starts does not enclose it; the longer first where
//    two start together). Depth 0 is a thread's outermost level. Where the
//    rank has one thread with ProfilerStep#N ranges (the main thread) and
//    one other with autograd:: ranges (the backward thread), the backward
//    thread's outermost events are hung under the main thread's
//    "## backward ##" range that encloses them in time, else under its
//    ProfilerStep#N range (HTA's CallGraph._link_main_and_bwd_stacks), so
//    their depths count from there.
// 2. Roots. The candidates are the CPU ranges whose name contains
//    operator_name (a case-sensitive substring, as Python's `in`); the roots
//    are the candidates at the shallowest depth among them all, so that an
//    op nested in another match is not counted twice (HTA: "only start the
//    search from the shallowest CPU operators").
// 3. A root's sequence: the GPU events (kernels, memcpy, memset) launched by
//    the runtime calls of its subtree, ordered by their GPU start. A root
//    with fewer than min_pattern_len of them is left out.
// 4. A pattern is the root's name followed by its sequence's names, HTA's
//    "op|kernel|kernel|..." (memcpy and memset named as the PyTorch profiler
//    names them: "Memcpy HtoD (Pageable -> Device)", "Memset (Device)").
//    Per pattern: count (roots that gave it), GPU kernel duration (the sum of
//    its GPU events' durations over those roots) and CPU op duration (the sum
//    of the roots' durations). Sorted by count, most first, then by pattern.
//
// Departures from HTA, and why:
// - top_k bounds the patterns returned. HTA returns every pattern and uses
//   top_k for the trace it writes with the top patterns overlaid and for its
//   plot; moetrace writes no overlaid trace (its GUI shows the patterns), so
//   0 returns every pattern as HTA's DataFrame has them.
// - Times are the trace's nanoseconds. HTA reads Kineto's microseconds and
//   rounds each event inward to whole microseconds (start up, end down).
// - Candidates are CPU ranges only. HTA's newer call graph also takes
//   runtime calls and GPU kernels whose names contain operator_name as
//   candidates (at their depth in the graph), which its documentation does
//   not describe and which would give a root of one kernel.
// - A memset is named "Memset (Device)": the trace does not keep a memset's
//   memory kind, and device memory is what PyTorch sets.
// - Which GPU events count follows KernelSequenceOptions::window; HTA drops
//   the work launched from the last ProfilerStep on when it loads a trace
//   (window kHta, as launch_queue.h's analyses take it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct KernelSequenceOptions {
  // HTA's operator_name. It has no default there; its documentation's
  // example, the linear layers' op, is ours.
  std::string operator_name = "aten::linear";
  int min_pattern_len = 3;           // HTA's default
  std::optional<std::int32_t> rank;  // nullopt: rank 0 (HTA's default), else the trace's lowest
  std::size_t top_k = 5;             // HTA's default; 0: every pattern
  RankWindow window = RankWindow::kSpan;
  bool operator==(const KernelSequenceOptions&) const = default;
};

struct KernelSequence {
  std::string op;                    // the roots' name
  std::vector<std::string> kernels;  // their GPU events' names, by start
  std::int64_t count = 0;
  std::int64_t gpu_kernel_duration_ns = 0;  // HTA's "GPU kernel duration"
  std::int64_t cpu_op_duration_ns = 0;      // HTA's "CPU op duration"
  std::string pattern() const;              // HTA's "op|kernel|kernel|..."
};

struct KernelSequenceAnalysis {
  KernelSequenceOptions options;  // as asked
  std::int32_t rank = -1;         // the rank analysed; -1: the trace has no rank
  std::int64_t candidates = 0;    // CPU ranges whose name contains operator_name
  std::int32_t depth = -1;        // the shallowest depth among them (the roots')
  std::int64_t roots = 0;         // candidates at that depth
  std::int64_t short_roots = 0;   // of them, with fewer than min_pattern_len GPU events
  std::int64_t patterns = 0;      // distinct patterns, before top_k
  bool backward_linked = false;   // the backward thread was hung under the main thread (1.)
  std::vector<KernelSequence> sequences;  // at most top_k (0: all), most frequent first
};

// Throws ConfigError for an empty operator_name, a negative
// min_pattern_len or a rank the trace does not have.
KernelSequenceAnalysis frequent_kernel_sequences(const Trace& trace, const KernelSequenceOptions& options = {});

// The rank the sequences are found on: options.rank (ConfigError where the
// trace lacks it), else rank 0, else the trace's lowest; -1: no ranks.
std::int32_t kernel_sequence_rank(const Trace& trace, const KernelSequenceOptions& options);

// A GPU event's name in a pattern: the kernel's, or the PyTorch profiler's
// name of a memcpy or memset.
std::string gpu_event_pattern_name(const Trace& trace, const Activity& a);

}  // namespace moetrace::analyzer
