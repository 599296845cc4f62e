// The overlap=off what-if on a trace's execution graph (graph_whatif.h):
// MoE layer instances that ran side by side on a rank, run one after the
// other.
#include "graph_overlap.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace moetrace::analyzer::detail {
namespace {

struct Instance {
  std::vector<std::size_t> acts;  // its activities
  std::int64_t start = INT64_MAX, end = INT64_MIN;
};

// (rank, layer, iteration, micro-batch, forward or backward): a weight
// gradient part belongs to its backward instance (moe_recognition.h).
using PartKey = std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t, bool>;

}  // namespace

void apply_serialise(const Trace& t, ExecGraph& g, GraphWhatIfResult& out) {
  GraphEditor ed(t, g);
  std::map<PartKey, Instance> instances;
  for (std::size_t o = 0; o < t.ops.size(); ++o) {
    const auto& op = t.ops[o];
    if (op.layer < 0 || !op_kind_info(op.kind).moe_layer || op.phase == Phase::kOther) continue;
    auto& in = instances[{op.rank.value, op.layer, op.iteration, op.micro_batch, is_backward(op.phase)}];
    for (auto a : ed.op_activities(o)) {
      in.acts.push_back(a);
      in.start = std::min(in.start, t.activities[a].start_ns);
      in.end = std::max(in.end, t.activities[a].end_ns);
    }
  }
  // Per rank, instances by start; groups of instances whose windows overlap.
  std::map<std::int32_t, std::vector<Instance*>> by_rank;
  for (auto& [key, in] : instances)
    if (!in.acts.empty()) by_rank[std::get<0>(key)].push_back(&in);
  int serialised = 0, groups = 0;
  for (auto& [rank, list] : by_rank) {
    std::sort(list.begin(), list.end(), [](const Instance* a, const Instance* b) { return a->start < b->start; });
    for (std::size_t i = 0; i < list.size();) {
      std::size_t j = i + 1;
      std::int64_t end = list[i]->end;
      while (j < list.size() && list[j]->start < end) end = std::max(end, list[j++]->end);
      if (j - i >= 2) {
        ++groups;
        // The group's activities per stream in their order; each instance's
        // run before the next instance's on that stream.
        std::map<std::size_t, std::size_t> place;  // activity -> instance in the group
        for (std::size_t k = i; k < j; ++k)
          for (auto a : list[k]->acts) place[a] = k - i;
        std::map<std::int32_t, std::vector<std::size_t>> streams;
        for (const auto& [a, k] : place) streams[t.activities[a].stream].push_back(a);
        for (auto& [s, acts] : streams) {
          std::sort(acts.begin(), acts.end(),
                    [&](std::size_t x, std::size_t y) { return t.activities[x].start_ns < t.activities[y].start_ns; });
          auto order = acts;
          std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return place[x] < place[y]; });
          if (order == acts) continue;
          // Take the group's activities out of the stream's chain, then put
          // them back in the new order between the same neighbours.
          std::set<std::uint32_t> mine;
          for (auto a : acts) mine.insert(g.activity_start[a]);
          std::uint32_t into = ExecGraph::kNone, out_to = ExecGraph::kNone;
          std::int64_t into_gap = 0, out_gap = 0;
          std::map<std::size_t, std::int64_t> gap;
          for (auto a : acts) {
            for (auto k : ed.edges_into(g.activity_start[a], ExecEdgeKind::kStreamOrder)) {
              const auto e = g.edges[k];
              gap[a] = e.latency_ns;
              const auto& from = g.nodes[e.from];
              const bool inside = from.kind == ExecNode::Kind::kActivity && mine.contains(g.activity_start[from.ref]);
              if (!inside) {
                into = e.from;
                into_gap = e.latency_ns;
              }
              ed.remove_edge(k);
            }
            for (auto k : ed.edges_out(g.activity_end[a], ExecEdgeKind::kStreamOrder)) {
              const auto e = g.edges[k];
              const auto& to = g.nodes[e.to];
              if (to.kind != ExecNode::Kind::kActivity || !mine.contains(g.activity_start[to.ref])) {
                out_to = e.to;
                out_gap = e.latency_ns;
              }
              ed.remove_edge(k);
            }
          }
          if (into != ExecGraph::kNone) ed.add_edge(into, g.activity_start[order.front()], into_gap, ExecEdgeKind::kStreamOrder);
          for (std::size_t k = 1; k < order.size(); ++k)
            ed.add_edge(g.activity_end[order[k - 1]], g.activity_start[order[k]], gap[order[k]],
                        ExecEdgeKind::kStreamOrder);
          if (out_to != ExecGraph::kNone) ed.add_edge(g.activity_end[order.back()], out_to, out_gap, ExecEdgeKind::kStreamOrder);
        }
        // Each instance's work waits for the end of the one before it.
        for (std::size_t k = i + 1; k < j; ++k) {
          const auto& prev = *list[k - 1];
          auto last = *std::max_element(prev.acts.begin(), prev.acts.end(), [&](std::size_t x, std::size_t y) {
            return t.activities[x].end_ns < t.activities[y].end_ns;
          });
          std::map<std::int32_t, std::size_t> first;  // stream -> its first activity of this instance
          for (auto a : list[k]->acts) {
            auto [it, fresh] = first.try_emplace(t.activities[a].stream, a);
            if (!fresh && t.activities[a].start_ns < t.activities[it->second].start_ns) it->second = a;
          }
          for (const auto& [s, a] : first) ed.add_edge(g.activity_end[last], g.activity_start[a], 0, ExecEdgeKind::kWhatIf);
          ++serialised;
        }
      }
      i = j;
    }
  }
  out.instances_changed += serialised;
  out.applied.push_back(fmt::format(
      "overlap=off: {} MoE layer instance{} that ran beside another ({} group{} on their ranks) now wait for the one "
      "before them; each stream runs one instance's work before the next's",
      serialised, serialised == 1 ? "" : "s", groups, groups == 1 ? "" : "s"));
  if (serialised == 0) out.notes.push_back("overlap=off: no MoE layer instances ran side by side in the trace");
}

}  // namespace moetrace::analyzer::detail
