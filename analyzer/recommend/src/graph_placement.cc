// The placement=pro-prophet what-if (graph_placement.h).
#include "graph_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "moetrace/analyzer/placement.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/whatif.h"

namespace moetrace::analyzer::detail {

void apply_placement(const Trace& t, ExecGraph& g, const sim::CostModel& m, const WorkloadSources& sources,
                     GraphWhatIfResult& out) {
  GraphEditor ed(t, g);
  // (the notes of how the layers were read go after the placement's own, so
  // that the first note says what became of the layers)
  std::vector<std::string> read_notes;
  const auto workloads = moe_layer_workloads(t, &read_notes, sources);
  int layers = 0, selected = 0;
  for (const auto& w : workloads) {
    if (w.ranks < 2) {
      out.notes.push_back(fmt::format("placement: layer {} runs on one rank: nothing to place", w.layer));
      out.layer_notes[w.layer] = out.notes.back();
      continue;
    }
    const auto advice = recommend_placement(placement_inputs(w, m, 0, 0, true));
    if (advice.placement.selected.empty()) {
      out.notes.push_back(fmt::format("placement: layer {}: the planner keeps the home placement", w.layer));
      out.layer_notes[w.layer] = out.notes.back();
      continue;
    }
    ++layers;
    selected += static_cast<int>(advice.placement.selected.size());
    const double beta_e = m.compute_cost(OpKind::kExpertFfn).seconds_per_flop;
    const double beta_a = m.collective(plan::CollectiveKind::kAllToAllV).at(w.ranks).beta_s;
    auto ratio = [](const std::vector<double>& before, const std::vector<double>& after, std::size_t r) {
      return r < before.size() && r < after.size() && before[r] > 0 ? after[r] / before[r] : 1.0;
    };
    // Per rank: the layer's first forward and last backward all-to-all.
    std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> ends;  // rank -> (first fwd a2a, last bwd a2a)
    for (std::size_t o = 0; o < t.ops.size(); ++o) {
      const auto& op = t.ops[o];
      if (op.layer != w.layer) continue;
      const auto r = static_cast<std::size_t>(op.rank.value);
      const bool expert = op.kind == OpKind::kExpertFfn;
      const bool a2a = op.kind == OpKind::kDispatchAllToAll || op.kind == OpKind::kCombineAllToAll;
      if (!expert && !a2a) continue;
      const double f = expert ? ratio(advice.computed_before, advice.computed_after, r)
                              : ratio(advice.received_before, advice.received_after, r);
      std::int64_t d = 0;
      for (auto a : ed.op_activities(o)) d += t.activities[a].duration();
      const double work = expert ? beta_e * std::max(0.0, op.flops) : beta_a * static_cast<double>(std::max<std::int64_t>(0, op.bytes));
      // The op's time after: its measured time less the work it no longer
      // does (or more, where the placement sends it more).
      const double after_ns = work > 0 ? static_cast<double>(d) - work * 1e9 * (1 - f) : static_cast<double>(d) * f;
      const double scale = d > 0 ? std::max(0.0, after_ns) / static_cast<double>(d) : 1.0;
      for (auto a : ed.op_activities(o))
        for (auto k : ed.edges_out(g.activity_start[a], ExecEdgeKind::kDuration))
          g.edges[k].latency_ns = static_cast<std::int64_t>(static_cast<double>(g.edges[k].latency_ns) * scale);
      if (a2a && !ed.op_activities(o).empty()) {
        auto& e = ends.try_emplace(op.rank.value, -1, -1).first->second;
        if (op.phase == Phase::kForward && (e.first < 0 || op.start_ns < t.ops[static_cast<std::size_t>(e.first)].start_ns))
          e.first = static_cast<std::int64_t>(o);
        if (is_backward(op.phase) && (e.second < 0 || op.end_ns > t.ops[static_cast<std::size_t>(e.second)].end_ns))
          e.second = static_cast<std::int64_t>(o);
      }
    }
    // Trans before the first forward all-to-all, Agg after the last backward one.
    const auto trans_ns = static_cast<std::int64_t>(advice.after_unhidden.trans * 1e9);
    const auto agg_ns = static_cast<std::int64_t>(advice.after_unhidden.agg * 1e9);
    for (const auto& [rank, e] : ends) {
      if (e.first >= 0 && trans_ns > 0) {
        const auto& acts = ed.op_activities(static_cast<std::size_t>(e.first));
        const auto a = acts.front();
        auto task = ed.add_op_task(fmt::format("L{}.trans (what-if)", w.layer), t.activities[a].stream, rank,
                                   static_cast<std::int32_t>(e.first), OpKind::kTrans, Phase::kForward,
                                   ActivityType::kKernel, trans_ns, ExecGraph::kNone, 0,
                                   t.activities[a].start_ns - trans_ns);
        ed.insert_on_stream_before(task, g.activity_start[a], 0);
      }
      if (e.second >= 0 && agg_ns > 0) {
        const auto& acts = ed.op_activities(static_cast<std::size_t>(e.second));
        const auto a = acts.back();
        auto task = ed.add_op_task(fmt::format("L{}.agg (what-if)", w.layer), t.activities[a].stream, rank,
                                   static_cast<std::int32_t>(e.second), OpKind::kAgg, Phase::kBackward,
                                   ActivityType::kKernel, agg_ns, ExecGraph::kNone, 0, t.activities[a].end_ns);
        ed.insert_on_stream_after(task, g.activity_end[a], 0);
      }
    }
    ++out.instances_changed;
  }
  for (auto& n : read_notes) out.notes.push_back(std::move(n));
  out.applied.push_back(fmt::format(
      "placement=pro-prophet: {} MoE layer{} re-placed ({} expert{} replicated by pro-prophet Algorithm 1 on the "
      "load of one iteration); expert and all-to-all kernels scaled by the tokens each rank computes and receives "
      "after, Trans and Agg added",
      layers, layers == 1 ? "" : "s", selected, selected == 1 ? "" : "s"));
}

}  // namespace moetrace::analyzer::detail
