#include "graph_edit.h"

#include <algorithm>

namespace moetrace::analyzer::detail {

bool is_gemm_kernel_name(std::string_view name) {
  std::string n(name);
  for (auto& ch : n) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  for (const char* k : {"gemm", "nvjet", "xmma", "cutlass", "matmul", "cublas"})
    if (n.find(k) != std::string::npos) return true;
  return false;
}

GraphEditor::GraphEditor(const Trace& t, ExecGraph& g) : t_(t), g_(g) {
  const auto n = g.nodes.size();
  chain_of_.assign(n, -1);
  pos_of_.assign(n, -1);
  in_.reserve(n, g.edges.size());
  out_.reserve(n, g.edges.size());
  std::vector<std::int64_t> next(n, -1);
  std::vector<std::uint8_t> has_into(n, 0);
  for (std::size_t k = 0; k < g.edges.size(); ++k) {
    const auto& e = g.edges[k];
    in_.add(e.to, static_cast<std::uint32_t>(k));
    out_.add(e.from, static_cast<std::uint32_t>(k));
    if (e.kind != ExecEdgeKind::kHostOrder || e.latency_ns == ExecGraph::kRemoved) continue;
    next[e.from] = e.to;
    has_into[e.to] = 1;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto kind = g.nodes[i].kind;
    if ((kind != ExecNode::Kind::kApi && kind != ExecNode::Kind::kNvtx) || has_into[i]) continue;
    std::vector<std::uint32_t> c;
    for (std::int64_t u = static_cast<std::int64_t>(i); u >= 0; u = next[static_cast<std::size_t>(u)]) {
      chain_of_[static_cast<std::size_t>(u)] = static_cast<std::int32_t>(chains_.size());
      pos_of_[static_cast<std::size_t>(u)] = static_cast<std::int32_t>(c.size());
      c.push_back(static_cast<std::uint32_t>(u));
    }
    chains_.push_back(std::move(c));
  }
  op_acts_.resize(t.ops.size());
  for (std::size_t i = 0; i < t.activities.size(); ++i) {
    const auto o = t.activities[i].op;
    if (o >= 0 && static_cast<std::size_t>(o) < t.ops.size()) op_acts_[static_cast<std::size_t>(o)].push_back(i);
  }
  for (auto& v : op_acts_)
    std::sort(v.begin(), v.end(), [&](std::size_t a, std::size_t b) { return t.activities[a].start_ns < t.activities[b].start_ns; });
}

HostSpan GraphEditor::host_span(std::size_t o, std::int32_t chain_hint) const {
  HostSpan s;
  const auto& op = t_.ops[o];
  auto take = [&](std::uint32_t node) {
    if (node == ExecGraph::kNone || node >= chain_of_.size()) return;
    const auto c = chain_of_[node];
    if (c < 0 || (s.chain >= 0 && s.chain != c)) return;
    s.chain = c;
    const auto p = pos_of_[node];
    s.first = s.first < 0 ? p : std::min(s.first, p);
    s.last = std::max(s.last, p);
  };
  for (auto a : op_acts_[o]) {
    const auto* call = t_.launching_call(t_.activities[a]);
    if (call == nullptr) continue;
    const auto c = static_cast<std::size_t>(call - t_.api_calls.data());
    take(g_.api_start[c]);
    take(g_.api_end[c]);
  }
  if (op.launch_start_ns >= 0 && op.launch_end_ns >= op.launch_start_ns) {
    const auto chain = s.chain >= 0 ? s.chain : chain_hint;
    if (chain >= 0) {
      const auto& c = chains_[static_cast<std::size_t>(chain)];
      auto lo = std::lower_bound(c.begin(), c.end(), op.launch_start_ns,
                                 [&](std::uint32_t n, std::int64_t v) { return g_.nodes[n].measured_ns < v; });
      for (auto it = lo; it != c.end() && g_.nodes[*it].measured_ns <= op.launch_end_ns; ++it) take(*it);
    }
  }
  return s;
}

std::vector<std::uint32_t> GraphEditor::live_edges(const EdgeLists& by_node, std::uint32_t node,
                                                   std::optional<ExecEdgeKind> kind) const {
  std::vector<std::uint32_t> out;
  by_node.each(node, [&](std::uint32_t k) {
    if ((!kind || g_.edges[k].kind == *kind) && g_.edges[k].latency_ns != ExecGraph::kRemoved) out.push_back(k);
  });
  return out;
}

std::vector<std::uint32_t> GraphEditor::all_edges_into(std::uint32_t node) const {
  return live_edges(in_, node, std::nullopt);
}

std::vector<std::uint32_t> GraphEditor::all_edges_out(std::uint32_t node) const {
  return live_edges(out_, node, std::nullopt);
}

std::vector<std::uint32_t> GraphEditor::edges_into(std::uint32_t node, ExecEdgeKind kind) const {
  return live_edges(in_, node, kind);
}

std::vector<std::uint32_t> GraphEditor::edges_out(std::uint32_t node, ExecEdgeKind kind) const {
  return live_edges(out_, node, kind);
}

std::int64_t GraphEditor::host_edge_into(std::uint32_t node) const {
  const auto e = edges_into(node, ExecEdgeKind::kHostOrder);
  return e.empty() ? -1 : static_cast<std::int64_t>(e.front());
}

std::int64_t GraphEditor::host_edge_out(std::uint32_t node) const {
  const auto e = edges_out(node, ExecEdgeKind::kHostOrder);
  return e.empty() ? -1 : static_cast<std::int64_t>(e.front());
}

std::uint32_t GraphEditor::add_edge(std::uint32_t from, std::uint32_t to, std::int64_t latency, ExecEdgeKind kind) {
  const auto k = static_cast<std::uint32_t>(g_.edges.size());
  g_.add_edge(from, to, latency, kind);
  in_.add(to, k);
  out_.add(from, k);
  return k;
}

TaskPoints GraphEditor::new_host_points(std::uint32_t at, std::int64_t duration) {
  const auto t0 = g_.nodes[at].measured_ns;
  return {g_.add_node(t0, ExecNode::Kind::kAdded, ExecGraph::kNone, false),
          g_.add_node(t0 + duration, ExecNode::Kind::kAdded, ExecGraph::kNone, true)};
}

TaskPoints GraphEditor::insert_host_after(std::uint32_t after, std::int64_t duration) {
  const TaskPoints p = new_host_points(after, duration);
  const auto out = host_edge_out(after);
  add_edge(after, p.start, 0, ExecEdgeKind::kHostOrder);
  add_edge(p.start, p.end, duration, ExecEdgeKind::kHostOrder);
  if (out >= 0) {
    const auto e = g_.edges[static_cast<std::size_t>(out)];
    remove_edge(static_cast<std::uint32_t>(out));
    add_edge(p.end, e.to, e.latency_ns, ExecEdgeKind::kHostOrder);
  }
  return p;
}

TaskPoints GraphEditor::insert_host_before(std::uint32_t before, std::int64_t duration) {
  const TaskPoints p = new_host_points(before, duration);
  const auto in = host_edge_into(before);
  if (in >= 0) {
    const auto e = g_.edges[static_cast<std::size_t>(in)];
    remove_edge(static_cast<std::uint32_t>(in));
    add_edge(e.from, p.start, e.latency_ns, ExecEdgeKind::kHostOrder);
  }
  add_edge(p.start, p.end, duration, ExecEdgeKind::kHostOrder);
  add_edge(p.end, before, 0, ExecEdgeKind::kHostOrder);
  return p;
}

TaskPoints GraphEditor::add_task(std::string name, std::int32_t stream, std::int32_t rank, std::int32_t op,
                                 ActivityType type, std::int64_t duration, std::uint32_t launch,
                                 std::int64_t launch_latency, std::int64_t at_ns) {
  AddedTask task;
  task.name = std::move(name);
  task.stream = stream;
  task.rank = rank;
  task.op = op;
  task.type = type;
  task.duration_ns = duration;
  const auto t0 = launch != ExecGraph::kNone ? g_.nodes[launch].measured_ns : at_ns;
  const auto ref = static_cast<std::uint32_t>(g_.added.size());
  task.start = g_.add_node(t0, ExecNode::Kind::kAdded, ref, false);
  task.end = g_.add_node(t0 + duration, ExecNode::Kind::kAdded, ref, true);
  add_edge(task.start, task.end, duration, ExecEdgeKind::kDuration);
  if (launch != ExecGraph::kNone) add_edge(launch, task.start, launch_latency, ExecEdgeKind::kLaunch);
  TaskPoints p{task.start, task.end};
  g_.added.push_back(std::move(task));
  return p;
}

TaskPoints GraphEditor::add_op_task(std::string name, std::int32_t stream, std::int32_t rank, std::int32_t op,
                                    OpKind kind, Phase phase, ActivityType type, std::int64_t duration,
                                    std::uint32_t launch, std::int64_t launch_latency, std::int64_t at_ns) {
  const auto p = add_task(std::move(name), stream, rank, op, type, duration, launch, launch_latency, at_ns);
  g_.added.back().own_kind = kind;
  g_.added.back().own_phase = phase;
  return p;
}

void GraphEditor::insert_on_stream_before(TaskPoints task, std::uint32_t before, std::int64_t gap) {
  for (auto k : edges_into(before, ExecEdgeKind::kStreamOrder)) {
    const auto e = g_.edges[k];
    remove_edge(k);
    add_edge(e.from, task.start, e.latency_ns, ExecEdgeKind::kStreamOrder);
  }
  add_edge(task.end, before, gap, ExecEdgeKind::kStreamOrder);
}

void GraphEditor::insert_on_stream_after(TaskPoints task, std::uint32_t after, std::int64_t gap) {
  for (auto k : edges_out(after, ExecEdgeKind::kStreamOrder)) {
    const auto e = g_.edges[k];
    remove_edge(k);
    add_edge(task.end, e.to, e.latency_ns, ExecEdgeKind::kStreamOrder);
  }
  add_edge(after, task.start, gap, ExecEdgeKind::kStreamOrder);
}

void GraphEditor::queue_on_stream(std::int32_t stream, TaskPoints task, std::int64_t issue_ns) {
  queued_[stream].push_back({issue_ns, task});
}

void GraphEditor::order_stream_queues(std::int64_t gap) {
  for (auto& [stream, tasks] : queued_) {
    std::stable_sort(tasks.begin(), tasks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t k = 1; k < tasks.size(); ++k)
      add_edge(tasks[k - 1].second.end, tasks[k].second.start, gap, ExecEdgeKind::kStreamOrder);
  }
  queued_.clear();
}

std::int32_t GraphEditor::stream_with_role(std::int32_t rank, const std::string& role) {
  for (std::size_t s = 0; s < t_.streams.size(); ++s)
    if (t_.streams[s].rank.value == rank && t_.streams[s].role == role) return static_cast<std::int32_t>(s);
  for (std::size_t k = 0; k < g_.added_streams.size(); ++k)
    if (g_.added_streams[k].rank.value == rank && g_.added_streams[k].role == role)
      return static_cast<std::int32_t>(t_.streams.size() + k);
  Stream s;
  std::int32_t id = 0;
  for (const auto& x : t_.streams) id = std::max(id, x.id.value + 1);
  for (const auto& x : g_.added_streams) id = std::max(id, x.id.value + 1);
  s.id = StreamId(id);
  s.rank = RankId(rank);
  for (const auto& x : t_.streams)
    if (x.rank.value == rank) s.device = x.device;
  s.role = role;
  s.name = "rank" + std::to_string(rank) + "." + role + " (what-if)";
  g_.added_streams.push_back(std::move(s));
  return static_cast<std::int32_t>(t_.streams.size() + g_.added_streams.size() - 1);
}

}  // namespace moetrace::analyzer::detail
