// Editing an execution graph (exec_graph.h) for the what-ifs
// (graph_whatif.h; private to moetrace::recommend): the graph's host chains
// and edges by endpoint, kept current as edges are added and removed, and
// the few edits the what-ifs make: host work inserted into a thread's chain,
// a GPU task added and launched from a host point, a task put on a stream
// before an activity, a dependency.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer::detail {

// A GEMM kernel by its name: cuBLAS (gemm, nvjet, xmma), CUTLASS, Triton's
// and PyTorch's matmuls.
bool is_gemm_kernel_name(std::string_view name);

struct TaskPoints {
  std::uint32_t start = ExecGraph::kNone, end = ExecGraph::kNone;
};

// The chain positions of an op's host work; chain -1: none.
struct HostSpan {
  std::int32_t chain = -1, first = -1, last = -1;
};

// Edge indices by node, each node's in the order they were added: one list
// a node threaded through the edges, so that millions of nodes cost no
// allocation each.
class EdgeLists {
 public:
  void add(std::uint32_t node, std::uint32_t edge) {
    if (node >= first_.size()) {
      first_.resize(node + 1, kEnd);
      last_.resize(node + 1, kEnd);
    }
    if (edge >= next_.size()) next_.resize(edge + 1, kEnd);
    next_[edge] = kEnd;
    if (first_[node] == kEnd) first_[node] = edge; else next_[last_[node]] = edge;
    last_[node] = edge;
  }
  template <class F>
  void each(std::uint32_t node, F&& f) const {
    if (node >= first_.size()) return;
    for (auto e = first_[node]; e != kEnd; e = next_[e]) f(e);
  }
  void reserve(std::size_t nodes, std::size_t edges) {
    first_.reserve(nodes);
    last_.reserve(nodes);
    next_.reserve(edges);
  }

 private:
  static constexpr std::uint32_t kEnd = 0xffffffffu;
  std::vector<std::uint32_t> first_, last_, next_;
};

class GraphEditor {
 public:
  GraphEditor(const Trace& t, ExecGraph& g);

  // The host chains as built (positions in the measured order).
  const std::vector<std::vector<std::uint32_t>>& chains() const { return chains_; }
  std::int32_t chain_of(std::uint32_t node) const { return chain_of_[node]; }
  std::int32_t pos_of(std::uint32_t node) const { return pos_of_[node]; }
  // The live kHostOrder edge into / out of a host node; -1: none.
  std::int64_t host_edge_into(std::uint32_t node) const;
  std::int64_t host_edge_out(std::uint32_t node) const;
  // The activities of each op (index into Trace::activities), by start.
  const std::vector<std::size_t>& op_activities(std::size_t op) const { return op_acts_[op]; }
  // An op's host work: its launch interval where the trace has one, else
  // its activities' launching calls; `chain_hint`: the thread to look in
  // for an op that launched nothing.
  HostSpan host_span(std::size_t op, std::int32_t chain_hint = -1) const;
  std::uint32_t chain_node(std::int32_t chain, std::int32_t pos) const {
    return chains_[static_cast<std::size_t>(chain)][static_cast<std::size_t>(pos)];
  }

  // Every live edge into / out of a node, of any kind.
  std::vector<std::uint32_t> all_edges_into(std::uint32_t node) const;
  std::vector<std::uint32_t> all_edges_out(std::uint32_t node) const;
  // The live edges of a kind into / out of a node.
  std::vector<std::uint32_t> edges_into(std::uint32_t node, ExecEdgeKind kind) const;
  std::vector<std::uint32_t> edges_out(std::uint32_t node, ExecEdgeKind kind) const;

  std::uint32_t add_edge(std::uint32_t from, std::uint32_t to, std::int64_t latency, ExecEdgeKind kind);
  void remove_edge(std::uint32_t edge) { g_.remove_edge(edge); }

  // New host work of `duration` right after host node `after` on its
  // thread: the thread's next point now follows the new work's end with the
  // latency it followed `after` with.
  TaskPoints insert_host_after(std::uint32_t after, std::int64_t duration);
  // The same right before host node `before` (the gap into it kept before
  // the new work).
  TaskPoints insert_host_before(std::uint32_t before, std::int64_t duration);

  // A GPU task (ExecGraph::added) on `stream` of `rank`, in op `op`'s
  // coordinates, lasting `duration`, launched `launch_latency` after host
  // node `launch` (none: kNone; then `at_ns` is its measured time, what it
  // keeps where nothing precedes it). Not yet on any stream order.
  TaskPoints add_task(std::string name, std::int32_t stream, std::int32_t rank, std::int32_t op, ActivityType type,
                      std::int64_t duration, std::uint32_t launch, std::int64_t launch_latency,
                      std::int64_t at_ns = 0);
  // The same as an op of its own (AddedTask::own_kind) in `op`'s coordinates.
  TaskPoints add_op_task(std::string name, std::int32_t stream, std::int32_t rank, std::int32_t op, OpKind kind,
                         Phase phase, ActivityType type, std::int64_t duration, std::uint32_t launch,
                         std::int64_t launch_latency, std::int64_t at_ns = 0);
  // Puts `task` on its stream right before the activity whose start point is
  // `before` (the stream's edge into it now runs into the task; the task's
  // end -> `before` with `gap`).
  void insert_on_stream_before(TaskPoints task, std::uint32_t before, std::int64_t gap);
  // Puts `task` on its stream right after the activity whose end point is
  // `after` (the stream's edge out of it now runs out of the task).
  void insert_on_stream_after(TaskPoints task, std::uint32_t after, std::int64_t gap);
  // Queues `task` for a stream the editor orders alone (a stream a what-if
  // added): order_stream_queues() chains each such stream's tasks in the
  // order of `issue_ns` (when the host issued them), `gap` apart.
  void queue_on_stream(std::int32_t stream, TaskPoints task, std::int64_t issue_ns);
  void order_stream_queues(std::int64_t gap);

  // A stream of `rank` with `role` ("copy"): the trace's first such stream,
  // else one added to the graph (ExecGraph::added_streams).
  std::int32_t stream_with_role(std::int32_t rank, const std::string& role);

 private:
  // The two points of a host task added at `at`'s time, `duration` long
  // (no edges yet).
  TaskPoints new_host_points(std::uint32_t at, std::int64_t duration);
  // The live edges of `by_node` (in_ or out_) at `node`, of `kind` or of any.
  std::vector<std::uint32_t> live_edges(const EdgeLists& by_node, std::uint32_t node,
                                        std::optional<ExecEdgeKind> kind) const;

  const Trace& t_;
  ExecGraph& g_;
  std::vector<std::vector<std::uint32_t>> chains_;
  std::vector<std::int32_t> chain_of_, pos_of_;
  EdgeLists in_, out_;  // edge indices by node, grown as edges are added
  std::map<std::int32_t, std::vector<std::pair<std::int64_t, TaskPoints>>> queued_;  // queue_on_stream's, per stream
  std::vector<std::vector<std::size_t>> op_acts_;
};

}  // namespace moetrace::analyzer::detail
