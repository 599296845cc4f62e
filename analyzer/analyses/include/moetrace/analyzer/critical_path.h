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
// ProfilerStep). Several ranks: critical_paths gives each rank's path on its
// own (its graph has that rank's events only).
//
// Across ranks (critical_path_across_ranks; HTA has no such path: its graph
// is one rank's). One graph: the union of every rank's graph as above (call
// stacks per (rank, thread); a synchronisation waits for its own rank's
// streams only), joined at collectives. The collective instances are those
// clock alignment and the collective waits pair across ranks
// (clock_align.h's collective_calls: all-to-all and all-reduce, by MoE
// coordinates, by process group and sequence number, else by name, size and
// order). Each participant is its NCCL kernel (paired by op range: the op's
// communication kernels, the first to start and the last to end). For an
// instance with participants on 2+ ranks, with last_start the latest
// participant start:
//   - a participant kernel's own edge (start -> end) weighs
//     end - max(start, last_start): its time before the last participant
//     started is waiting (waiting_ns), counted nowhere, as the wait in a
//     blocking call is (a rank that joins early does not put its wait on the
//     path; the work that made the last one late is);
//   - every participant's kernel start -> every other participant's kernel
//     end, weight end(other) - max(start(this), last_start), clamped at 0,
//     category kernel_communication, attributed to the other's kernel: the
//     other cannot end before this one has started. (With last_start in the
//     weight, the edge of an early participant never outweighs the last
//     one's; taking plain end(other) - start(this) would let the early
//     rank's wait count again and tie the early and the late rank's paths.)
// These n (n - 1) edges weigh end(other) - last_start whichever `this`, so
// the graph holds them as 2n - 1: every other participant's start -> the
// last participant's start (weight 0), and that start -> every
// participant's end (the weight above): the same longest paths, in memory
// linear in the participants (an all-to-all of 1024 ranks added a million
// edges per instance before). A path through the hub counts one crossing
// where it enters on one rank and leaves on another.
// So the path may run through rank 0's compute, then rank 0's start of the
// all-reduce, to rank 1's end of it. No new category: the collective edges
// are communication time after every participant joined. Times are the
// trace's: rank files loaded as one run should have their clocks aligned
// (clock_align.h), else the edges' weights carry the clock offsets.
// Not derived: cudaStreamWaitEvent dependencies between streams. A
// cudaStreamWaitEvent makes later work on the waiting stream depend on the
// work before the last cudaEventRecord of that event on the recording
// stream; the trace cannot name that pair: api_calls record a call's name,
// times, thread and correlation id, not its event or stream arguments;
// CUPTI's synchronisation records (table sync_events, kind 2 "stream wait
// event") give the waiting stream but the collector drops the event id and
// records no cudaEventRecord activity; the Kineto importer skips the
// "cuda_sync" events ("Stream Wait Event" with its wait_on_stream and
// wait_on_cuda_event_record_corr_id), and the analyzer does not load
// sync_events. Guessing the pair from timing is not done, so work after a
// cross-stream wait depends only on its own stream (and its launch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
  int threads = 1;                   // ranks' paths built at once; 0: the machine's cores
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
  std::int32_t rank = 0;       // the event's rank
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

// One path over every rank's graph, joined at collectives (see "Across
// ranks" above). path.rank is -1; each path event carries its rank.
struct CrossRankCriticalPath {
  std::vector<std::int32_t> ranks;       // ranks with host or GPU events, sorted
  std::int64_t collective_instances = 0; // instances that joined 2+ ranks' kernels
  std::int64_t collective_edges = 0;     // edges they added (2n - 1 for n participants)
  std::int64_t waiting_ns = 0;           // kernel time before the last participant started, taken off the graph
  std::int64_t crossings = 0;            // path edges from one rank to another
  std::vector<std::pair<std::int32_t, std::int64_t>> rank_ns;  // path time attributed to each rank's events, by rank
  RankCriticalPath path;
};
CrossRankCriticalPath critical_path_across_ranks(const Trace& trace, std::size_t top_events = 20);

}  // namespace moetrace::analyzer
