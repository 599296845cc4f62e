// The critical path of one rank as Holistic Trace Analysis (HTA,
// facebookresearch/HolisticTraceAnalysis) defines it in
// hta/analyzers/critical_path_analysis.py (CPGraph, its summary() and
// get_critical_path_breakdown()); where moetrace departs from HTA it says so.
//
// Window (HTA critical_path_analysis(rank, annotation, instance_id)): the
// whole trace, or the instances [first, last] of an annotation: the host
// ranges whose name contains it (ProfilerStep matches ProfilerStep#N), on
// each rank in order of start; the window runs from the first instance's
// start to the last one's end. Host events with time (end > start) that start
// in the window take part, and the GPU events whose launching call does. HTA
// loads whole traces with include_last_profiler_step=True keeping every CPU
// row (its filter compares the last step's end before the ranks' times are
// aligned), which is what the whole-trace window here keeps too.
//
// Nodes. One directed acyclic graph per rank. Its nodes are the start and the
// end of every operator (NVTX ranges; of a PyTorch-profiler import the cpu_op
// ranges only: user_annotation and python_function ranges, ProfilerStep#N
// among them, are in the call stacks but not in the graph, as in HTA, whose
// graph has cpu_op, cuda_runtime and cuda_driver rows), every runtime API
// call, and every GPU event (kernels, memcpy, memset). Edge weights are times
// in ns: an edge u -> v that spans time weighs ts(v) - ts(u).
//
// Threads. HTA merges the backward thread into the forward one: on a rank
// where exactly one thread has cpu_op or user_annotation ranges whose name
// contains "autograd" and exactly one other has ranges containing "forward",
// the first's events are placed on the second's call stack.
//
//   Runtime lock (HTA _construct_graph_from_cuda_runtime_events). The calls
//     that take the CUDA runtime's lock (cudaHostAlloc, cudaLaunchKernel,
//     cudaMemcpyAsync), on every thread of the rank, in order of time: each
//     end closes every such call started since the previous end (its own
//     start -> end: its span; another's start -> this end: a dependency) and
//     follows the previous end when two ends come in a row (calls on
//     different threads overlapping).
//   CPU call stack (HTA _construct_graph_from_call_stack). Each thread's
//     stack is HTA's: its events' start and end points in time order (at one
//     time ends first, longer events start first), a start pushed, an end
//     popping the top. Walking it depth first, one edge joins each visited
//     node to the next: op start -> first child start, child end -> next
//     sibling start, last child end -> op end, a leaf's start -> its end; an
//     annotation is walked through without a node. Edges between two nodes
//     of lock-taking calls are the lock's (above), not added here. Each edge
//     is attributed as HTA does: start -> x to the source's event, x -> end
//     to the destination's, end -> start to the enclosing event of the stack.
//     Consecutive top-level operators are joined end -> start with weight 0
//     (HTA's DEPENDENCY edge): time between them is not on the path. The edge
//     into the end of a blocking call (HTA's BLOCKING_SYNC_CALLS:
//     cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventQuery,
//     cudaEventSynchronize, cudaMemcpy, cudaMemcpyAsync) weighs 0: waiting is
//     charged to what was waited for.
//   GPU event: start -> end, its duration, attributed to itself.
//   Kernel launch (HTA KERNEL_LAUNCH_DELAY): launching call start -> GPU
//     start, when HTA's queue length (launch_queue.h, 2.) of the stream was
//     1 just after the call and 0 just after the GPU event started, and the
//     stream's previous GPU event in the window ended before the call
//     started. Otherwise the kernel-kernel delay (HTA KERNEL_KERNEL_DELAY):
//     previous event's end -> this start, attributed to the previous event,
//     where the previous event had not ended when the call started (the
//     event waited behind it). Where it had, neither edge: HTA's published
//     results on its test traces (sampled ranks, whole trace and ProfilerStep
//     0) are reproduced to the microsecond only so, although the code of HTA
//     we read adds the kernel-kernel edge there too
//     (tests/analyzer/hta_critical_path_reference.py).
//   Synchronisation (HTA SYNC_DEPENDENCY, weight 0), from the GPU-side
//     records (SyncEvent: Kineto's cuda_sync, CUPTI's synchronization
//     activity): a "Stream Sync" record joins its stream's last GPU event
//     (in the order above, a record placed at its end) to the end of the call
//     that waited (same correlation id); a "Context Sync" every stream's.
//     A "Stream Wait Event" record with its event's record
//     (wait_on_cuda_event_record_corr_id, kept as
//     SyncEvent::event_record_correlation_id) joins the producer's end to
//     the consumer's start (stream_waits.h, HTA's pairing; weight 0), and
//     the consumer's launch or stream edge is added only where it ended
//     after the producer, as HTA does. Departure: an "Event Sync" record
//     adds no edge here (HTA joins its producer to the cudaEventSynchronize);
//     moetrace infers that call's wait from the call itself (below). A rank
//     without records: departure, HTA adds no synchronisation edges there (and warns
//     that its path may be wrong); moetrace reads them from the runtime calls
//     (CriticalPathOptions::infer_sync, on by default): the events a call
//     waited for are those launched before it started and ended by its end:
//     for cudaDeviceSynchronize the last of every stream, for
//     cudaStreamSynchronize and cudaEventSynchronize the one of them that
//     ended last. On HTA's test traces this changes no path (they are within
//     1 % of HTA with it; BENCHMARKS.md, "HTA parity").
//
// Critical path: the longest weighted path of the graph (HTA: networkx
// dag_longest_path); length_ns = the sum of its weights. Each edge on the
// path counts in one category (HTA's bound_by, with memcpy/memset apart):
//   cpu_op               host events (HTA cpu_bound)
//   kernel_compute       kernels not communication (gpu_compute_bound)
//   kernel_communication kernels classify_activity calls communication
//                        (NCCL; HTA: is_comm_kernel, gpu_communication_bound)
//   memcpy_memset        copies and memsets (HTA counts them compute)
//   launch_delay         kernel-launch edges (gpu_kernel_launch_overhead)
//   kernel_gap           kernel-kernel delays (gpu_kernel_kernel_overhead)
// Dependency and synchronisation edges weigh 0 and count nowhere.
//
// Remaining departures from HTA, each with its reason:
//   - Times: HTA rounds timestamps with a fraction of a microsecond (start up,
//     end down; trace_parser.py) and drops the events that become empty;
//     moetrace keeps the nanoseconds. On HTA's nccl_data trace the path is
//     0.6 % longer than with HTA's rounding; with it off
//     (HTA_DISABLE_NS_ROUNDING=1) the two agree (BENCHMARKS.md, "HTA parity").
//   - Negative edge weights (a child that ends after its parent, clock noise)
//     count 0 in the path and in its length; HTA zeroes them for the search
//     but sums the edges' own weights in its breakdown.
//   - Of equally long paths, the first found in Kahn's topological order
//     (networkx: its own order), so a tie may split into other categories.
//   - GPU events without a launching call: HTA leaves them out; so does
//     moetrace, except on a rank that recorded no API calls at all (traces
//     HTA does not read: moetrace's simulated runs), where they take part
//     with kernel-kernel edges only.
//   - Event Sync / Stream Wait Event records: see above.
// Several ranks: critical_paths gives each rank's path on its own (its graph
// has that rank's events only).
//
// Across ranks (critical_path_across_ranks; HTA has no such path: its graph
// is one rank's). One graph: the union of every rank's graph as above (call
// stacks per (rank, thread); the runtime lock per rank, one process each;
// a synchronisation waits for its own rank's streams only, and is read from
// the runtime calls on the ranks without GPU-side records), joined at
// collectives. The collective instances are those
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
// records no cudaEventRecord activity; the Kineto importer keeps a
// "cuda_sync" record's wait_on_stream and wait_on_cuda_event_record_corr_id
// (SyncEvent), which join the pair (above). Without them, guessing the pair
// from timing is not done, so work after a cross-stream wait depends only
// on its own stream (and its launch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/analyzer/clock_align.h"
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
  // The window (see "Window"): "" the whole trace; else the instances
  // [instance_first, instance_last] of the ranges named like `annotation`
  // (HTA's annotation="ProfilerStep", instance_id=N). Ranks without them have
  // no path; where no rank has them, critical_paths throws moetrace::Error.
  std::string annotation;
  std::int32_t instance_first = 0, instance_last = 0;
  // Synchronisation edges read from the runtime calls where the trace has no
  // GPU-side sync records (HTA adds none there; see "Synchronisation").
  bool infer_sync = true;
};

// An event with time on the path, in one category: the sum of the weights of
// the path's edges attributed to it in that category.
struct PathEvent {
  enum class Kind : std::uint8_t { kNvtx, kApi, kKernel, kMemcpy, kMemset };
  Kind kind = Kind::kNvtx;
  std::string name;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int32_t stream = -1;    // GPU events: StreamId; -1 on the host
  std::int64_t native_stream = -1;  // GPU events: the CUDA stream as recorded; -1 on the host or unknown
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
  std::int64_t window_start_ns = 0, window_end_ns = 0;  // the window's (the whole trace: its events')
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
// The same with the trace's collective_calls() given (computed once where
// several analyses read them).
CrossRankCriticalPath critical_path_across_ranks(const Trace& trace, const std::vector<CollectiveCall>& calls,
                                                 std::size_t top_events = 20);

// Both at once, from the one graph across ranks: critical_paths(trace) with
// default options (each rank's graph, the whole trace) and
// critical_path_across_ranks(trace, calls). Each rank's path is the one its
// own graph gives (that graph is the rank's part of the graph across ranks,
// without the collective edges), ties resolved alike; the graph is built
// once instead of twice. `threads`: the ranks' paths are read from the
// graph's search on up to that many (0: the machine's cores); the results
// are the same on any number. `calls_read`, where given, is called once the
// graph has read `calls` (copied what it needs of them, before it is
// built): the caller may free them from then on.
struct CriticalPaths {
  std::vector<RankCriticalPath> ranks;  // as critical_paths(trace)
  CrossRankCriticalPath across;
};
CriticalPaths critical_paths_and_across(const Trace& trace, const std::vector<CollectiveCall>& calls,
                                        std::size_t top_events = 20, int threads = 1,
                                        const std::function<void()>& calls_read = {});

}  // namespace moetrace::analyzer
