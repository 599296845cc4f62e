// The execution graph of a trace and its replay with the measured durations,
// in the manner of Lumos (MLSys 2025) and dPRO: the trace itself, as a graph
// of time points joined by the dependencies the trace records or implies,
// evaluated again from the first point on. A replay that reproduces the
// measured timeline shows the graph holds what set each start; a what-if
// (whatif_graph.h) then changes the graph and evaluates it again.
//
// Nodes are time points (ns):
//   host points  the start and the end of every host event (NVTX ranges,
//                i.e. PyTorch CPU ops and annotations, and runtime/driver API
//                calls), per (rank, thread) in the order of the thread's call
//                stack (a range's start, its children, its end);
//   GPU points   the start and the end of every kernel, copy and memset.
// A point's replayed time is the latest of (predecessor's replayed time +
// the edge's latency) over its incoming edges; a point without incoming
// edges keeps its measured time (the first point of each thread, GPU work
// without a launching call that nothing else explains).
//
// Edges and their latencies (ns):
//   kHostOrder    consecutive points of one thread: the measured time between
//                 them (CPU time, gaps included), except into the end of a
//                 blocking call that waited for the GPU (below): 0.
//   kDuration     a GPU activity's start -> its end: its measured duration
//                 (a collective joined across ranks: its transfer part only,
//                 see kCollective).
//   kLaunch       the launching call (correlation id) -> the activity's
//                 start, two edges: from the call's start and from its end,
//                 each with the median of (start - call start) or (start -
//                 call end) over the launches on an idle stream of the same
//                 call (cudaLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync,
//                 ...) and kind of work (kernel, copy, memset) on the rank
//                 where the trace has 3 such or more, else of that kind of
//                 work. The end bounds a call that took long before it
//                 submitted the work (the first launch of a kernel loads its
//                 module: 160 ms on the dpmoe fixture's rank 0); the start
//                 bounds a call that returns long after its work started (a
//                 graph launch). A call that returns after its own copy
//                 (kSync, a synchronous copy) has one edge, from its start,
//                 with the measured time to the copy's start: the call's own
//                 CPU work (staging pageable memory); these are no samples.
//   kStreamOrder  an activity's end -> the next activity's start on the same
//                 stream: the queue gap, the median of (start - previous end)
//                 over the activities launched before their stream's
//                 previous one ended: of the same kernel (name) on the rank
//                 where the trace has 3 such or more, else of every activity
//                 of the rank. (A kernel's own setup sets it: 1-1.5 us for a
//                 plain kernel, 2-3 us for cuBLAS's GEMMs on the H200
//                 fixtures; one median for all drifted 0.5-1 us a kernel.)
//   kCrossStream  recorded cross-stream dependencies: the ops' dependencies
//                 of a moetrace trace (op_deps between ops on different
//                 streams: the dependency's last activity -> the dependent
//                 op's first activity), and the event waits the profiler
//                 recorded (SyncEvent with its event's record: the last
//                 activity launched on the recording stream before that
//                 cudaEventRecord -> the first activity launched on the
//                 waiting stream after the cudaStreamWaitEvent; HTA pairs
//                 them so): the queue gap.
//   kInferredCrossStream  where the trace records no stream-wait pairs (the
//                 PyTorch profiler records cudaStreamWaitEvent and
//                 cudaEventRecord without their event or stream unless its
//                 CUDA sync events are on): an activity that started later
//                 than its launch and its stream allowed (by more than
//                 ExecGraphOptions::unexplained_ns) waited for the activity
//                 of another stream of its device (emulated ranks share one)
//                 that ended last before it started, if that one ended
//                 after the allowed start: its end -> this start, the queue
//                 gap. Marked inferred.
//   kSync         a GPU activity's end -> the end of a host call that waited
//                 for it (HTA's blocking calls: cudaDeviceSynchronize: the
//                 last activity of every stream of the rank launched before
//                 the call and ended by its end; cudaStreamSynchronize,
//                 cudaEventSynchronize and their HIP and driver twins: the
//                 one of those that ended last; a synchronous copy: its own
//                 copy): the call's measured time after that activity's end.
//   kCollective   a collective instance recorded on 2+ ranks (paired as
//                 clock_align.h pairs them): every other participant's start
//                 -> a participant's end, with the participant's transfer time
//                 (its end - the last participant's start): a rank's
//                 collective ends a transfer after the last rank joined. With
//                 one rank recorded a collective keeps its measured duration.
// The latencies of kLaunch, kStreamOrder, kCrossStream and
// kInferredCrossStream are typical values (medians of the trace), each
// bounded by the time the trace shows between the edge's ends: no edge
// demands more than was measured, so a replay never runs later than the
// trace by an edge's spread around its median (with the median alone, edges
// that did not set a start became binding where their median exceeded their
// own gap, and the excess added up along the ranks joined by collectives:
// +5-11 % on the pro_prophet fixture).
// Activities the graph cannot explain (they started later than every edge
// into them allows, by more than unexplained_ns) are counted: the replay
// starts them early, and that shows as replay error; except the first
// activity of a stream and an activity without a launching call, which keep
// their measured start (anchored): what held them lies outside the trace
// (work before the trace began, another process). The launch latencies are
// measured without the first activity of each stream for the same reason.
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

enum class ExecEdgeKind : std::uint8_t {
  kHostOrder,
  kDuration,
  kLaunch,
  kStreamOrder,
  kCrossStream,
  kInferredCrossStream,
  kSync,
  kCollective,
  kWhatIf,  // added by a what-if (whatif_graph.h)
};
inline constexpr int kNumExecEdgeKinds = 9;
// "host_order", "duration", "launch", "stream_order", "cross_stream",
// "inferred_cross_stream", "sync", "collective", "what_if".
std::string_view exec_edge_kind_name(ExecEdgeKind k);

struct ExecEdge {
  std::uint32_t from = 0, to = 0;
  std::int64_t latency_ns = 0;
  ExecEdgeKind kind = ExecEdgeKind::kHostOrder;
};

// What a point is. Host points name an NVTX range or an API call; GPU points
// an activity (index into Trace::activities), or a task a what-if added
// (index into ExecGraph::added).
struct ExecNode {
  enum class Kind : std::uint8_t { kNvtx, kApi, kActivity, kAdded };
  std::int64_t measured_ns = 0;
  std::uint32_t ref = 0;
  Kind kind = Kind::kActivity;
  bool end = false;  // the end point of its event
};

// A GPU task a what-if added (a chunk of a split kernel, an offload copy):
// it runs on `stream` (index into Trace::streams) of `rank`.
struct AddedTask {
  std::string name;
  std::int32_t stream = -1, rank = 0;
  std::int32_t op = -1;  // index into Trace::ops whose coordinates it takes; -1: none
  // Where set: the task is an op of its own, of this kind, in `op`'s
  // coordinates (layer, iteration, micro-batch, chunk, phase) and named
  // `name` (an offload a what-if added is not the dispatch it follows).
  std::optional<OpKind> own_kind;
  std::optional<Phase> own_phase;
  ActivityType type = ActivityType::kKernel;
  std::int64_t duration_ns = 0;
  std::uint32_t start = 0, end = 0;  // its points
};

// The latencies the graph uses on one rank (measured from the trace, see
// above), with how many activities each was measured over. Launch latency
// by kind of work: a kernel, a copy, a memset (a synchronous copy from
// pageable memory stages it before the DMA starts: 200 us and more where a
// kernel takes 10-20 us on the GPU fixtures).
struct RankLatencies {
  std::int32_t rank = 0;
  std::array<std::int64_t, 3> launch_ns{}, launch_samples{};  // by ActivityType, from the call's start
  std::array<std::int64_t, 3> launch_after_call_ns{};          // from the call's end (may be negative)
  std::int64_t queue_gap_ns = 0, queue_gap_samples = 0;
};

struct ExecGraphOptions {
  // Slack beyond which a start is unexplained by its launch and its stream,
  // so that a cross-stream wait is looked for. 10 us: above the spread of
  // launch latency and queue gap of consecutive kernels on the traces of
  // BENCHMARKS.md ("Replay"), where those medians are 2-8 us and their
  // interquartile ranges under 4 us.
  std::int64_t unexplained_ns = 10'000;
  // Join collectives across ranks (kCollective); off: every collective
  // keeps its measured duration.
  bool collectives = true;
};

class ExecGraph {
 public:
  std::vector<ExecNode> nodes;
  std::vector<ExecEdge> edges;
  // Points of each activity (index into Trace::activities); ~0u: not in the graph.
  std::vector<std::uint32_t> activity_start, activity_end;
  // Points of each NVTX range and API call.
  std::vector<std::uint32_t> nvtx_start, nvtx_end, api_start, api_end;
  std::vector<AddedTask> added;
  // Streams a what-if added (a copy stream for offloads): AddedTask::stream
  // trace.streams.size() + k is added_streams[k].
  std::vector<Stream> added_streams;
  // Points that keep at least their measured time whatever precedes them:
  // GPU work that nothing in the trace explains and that has no launching
  // call (by node, empty where none).
  std::vector<std::uint8_t> anchored;
  std::vector<RankLatencies> latencies;  // by rank

  // What the graph holds, for the report.
  std::array<std::int64_t, kNumExecEdgeKinds> edge_counts{};
  std::int64_t unexplained = 0;          // activities no edge explains (see above)
  std::int64_t unexplained_ns = 0;       // their slack, summed
  std::int64_t unlaunched = 0;           // activities without a launching call in the trace
  std::int64_t stream_wait_calls = 0;    // cudaStreamWaitEvent-like calls recorded (without their event)
  std::int64_t recorded_waits = 0;       // event waits recorded with their event's stream and record call
  std::int64_t collective_instances = 0; // instances joined across ranks
  // The edge kinds the trace lacks and what the graph does instead, one line each.
  std::vector<std::string> missing;

  static constexpr std::uint32_t kNone = ~0u;
  // The latency of an edge a what-if took out: it orders nothing.
  static constexpr std::int64_t kRemoved = INT64_MIN;
  std::uint32_t add_node(std::int64_t measured_ns, ExecNode::Kind kind, std::uint32_t ref, bool end);
  void add_edge(std::uint32_t from, std::uint32_t to, std::int64_t latency_ns, ExecEdgeKind kind);
  void remove_edge(std::size_t edge) {
    if (edges[edge].latency_ns == kRemoved) return;
    edges[edge].latency_ns = kRemoved;
    --edge_counts[static_cast<std::size_t>(edges[edge].kind)];
  }
};

ExecGraph build_exec_graph(const Trace& trace, const ExecGraphOptions& options = {});

// The replayed time of every node: longest path from the sources (Kahn's
// order). A node on a cycle, or after one, keeps its measured time and is
// counted in `unresolved` (a graph the builder made has none; a test checks
// it on every fixture).
std::vector<std::int64_t> evaluate_exec_graph(const ExecGraph& graph, std::size_t* unresolved = nullptr);

// A copy of `trace` with every activity, NVTX range, API call and op range
// at its replayed time (`times` from evaluate_exec_graph); what-ifs' added
// tasks become activities of their op's coordinates. Every analysis runs on
// it as on the measured trace.
Trace replayed_trace(const Trace& trace, const ExecGraph& graph, const std::vector<std::int64_t>& times);

}  // namespace moetrace::analyzer
