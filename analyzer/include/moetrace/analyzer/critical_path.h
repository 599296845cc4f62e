// The critical path of one rank as Holistic Trace Analysis (HTA,
// facebookresearch/HolisticTraceAnalysis) defines it in
// hta/analyzers/critical_path_analysis.py (CPGraph, its summary() and
// get_critical_path_breakdown()); where moetrace departs from HTA it says so.
//
// Graph. One directed acyclic graph per rank. Its nodes are the start and the
// end of every event of the rank: host events (NVTX ranges, e.g. PyTorch CPU
// ops, and runtime API calls: HTA's operators and CUDA runtime events) and GPU
// events (kernels, memcpy, memset). Edge weights are times in ns: an edge
// u -> v that spans time weighs ts(v) - ts(u) (negative weights, clock noise,
// count 0; HTA sets -1 to 0 and rejects a graph with a lower one).
//
//   CPU call stack (HTA _construct_graph_from_call_stack). On each thread the
//     host events nest by containment (sorted by start, longer first; an
//     event that does not fit inside the open one closes it). Walking the
//     stack depth-first, one edge joins each visited node to the next:
//     op start -> first child start, child end -> next sibling start, last
//     child end -> op end, a leaf's start -> its end. Each edge is attributed
//     to an event, as HTA does: start -> x to the source's event, end -> end
//     to the destination's, end -> start to the enclosing op. Consecutive
//     top-level events are joined end -> start with weight 0 (HTA's
//     DEPENDENCY edge): time between top-level ops is not on the path. The
//     edge into the end of a blocking call (HTA's BLOCKING_SYNC_CALLS:
//     cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventQuery,
//     cudaEventSynchronize, cudaMemcpy, cudaMemcpyAsync) weighs 0: waiting is
//     charged to what was waited for.
//   GPU event: start -> end, its duration, attributed to itself.
//   Kernel launch (HTA KERNEL_LAUNCH_DELAY): launching call start -> GPU
//     start, weight GPU start - call start, when the stream had nothing
//     queued at the call: no earlier event on the stream, or the previous
//     one ended before the call started. Otherwise the kernel-kernel delay
//     (HTA KERNEL_KERNEL_DELAY): previous event's end -> this start, the gap,
//     attributed (as HTA) to the previous event. Departure: HTA also requires
//     the queue to be empty when the kernel starts (its queue-length series);
//     moetrace does not.
//   Synchronisation (HTA SYNC_DEPENDENCY, weight 0): GPU event end -> the end
//     of the call that waited for it. Departure: HTA reads the GPU-side sync
//     records of Kineto ("Context Sync", "Stream Sync", "Event Sync"), which
//     name the stream; moetrace has the runtime calls only. The events a call
//     waited for are those launched before the call started (launching call
//     start < call start; without a launching call: GPU start < call start)
//     and ended by the call's end: for cudaDeviceSynchronize the last such
//     event of every stream; for cudaStreamSynchronize and
//     cudaEventSynchronize the one of them that ended last (the stream or
//     event waited on is not recorded).
//
// Critical path: the longest weighted path of the graph (HTA: networkx
// dag_longest_path); length_ns = the sum of its weights. Of equally long
// paths, the first found in Kahn's topological order. Each edge on the path counts in
// one category (HTA's bound_by, with memcpy/memset apart):
//   cpu_op               host events (HTA cpu_bound)
//   kernel_compute       kernels not communication (gpu_compute_bound)
//   kernel_communication kernels classify_activity calls communication
//                        (NCCL; HTA: is_comm_kernel, gpu_communication_bound)
//   memcpy_memset        copies and memsets (HTA counts them compute)
//   launch_delay         kernel-launch edges (gpu_kernel_launch_overhead)
//   kernel_gap           kernel-kernel delays (gpu_kernel_kernel_overhead)
// Dependency and synchronisation edges weigh 0 and count nowhere.
// Window: the whole trace as loaded (HTA: one annotation instance, e.g. a
// ProfilerStep). Several ranks: each rank's path on its own; the path does
// not cross collectives to other ranks (not done).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

enum class PathCategory : std::uint8_t {
  kCpuOp,
  kKernelCompute,
  kKernelCommunication,
  kMemcpyMemset,
  kLaunchDelay,
  kKernelGap,
};
inline constexpr int kNumPathCategories = 6;
// "cpu_op", "kernel_compute", "kernel_communication", "memcpy_memset",
// "launch_delay", "kernel_gap".
std::string_view path_category_name(PathCategory c);

struct CriticalPathOptions {
  std::optional<std::int32_t> rank;  // only this rank; default every rank
  std::size_t top_events = 20;       // path events kept per rank, most time first; 0: all
};

// An event with time on the path, in one category: the sum of the weights of
// the path's edges attributed to it in that category.
struct PathEvent {
  enum class Kind : std::uint8_t { kNvtx, kApi, kKernel, kMemcpy, kMemset };
  Kind kind = Kind::kNvtx;
  std::string name;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int32_t stream = -1;    // GPU events: StreamId; -1 on the host
  std::int64_t thread = -1;    // host events: thread id; -1 on the GPU
  std::int64_t correlation_id = 0;
  PathCategory category = PathCategory::kCpuOp;
  std::int64_t path_ns = 0;
};
std::string_view path_event_kind_name(PathEvent::Kind k);  // "nvtx", "api", "kernel", "memcpy", "memset"

struct RankCriticalPath {
  std::int32_t rank = 0;
  std::int64_t length_ns = 0;
  std::int64_t start_ns = 0, end_ns = 0;  // times of the path's first and last nodes
  std::int64_t nodes = 0, edges = 0;      // of the graph
  std::int64_t path_edges = 0;            // edges on the path
  std::int64_t path_event_count = 0;      // (event, category) rows before the bound
  std::array<std::int64_t, kNumPathCategories> category_ns{};
  std::vector<PathEvent> events;          // most path time first, at most top_events
  std::int64_t at(PathCategory c) const { return category_ns[static_cast<std::size_t>(c)]; }
  double share(PathCategory c) const {
    return length_ns > 0 ? static_cast<double>(at(c)) / static_cast<double>(length_ns) : 0.0;
  }
};

// One entry per rank with host or GPU events (or the one rank asked for, if
// it has any), sorted by rank.
std::vector<RankCriticalPath> critical_paths(const Trace& trace, const CriticalPathOptions& options = {});

}  // namespace moetrace::analyzer
