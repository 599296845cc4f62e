#include "moetrace/plan/pro_prophet.h"

#include <algorithm>
#include <numeric>

namespace moetrace::plan {

bool ExpertPlacement::holds(int device, int expert, int home) const {
  if (device == home) return true;
  const auto& r = replicas[static_cast<std::size_t>(expert)];
  return std::find(r.begin(), r.end(), device) != r.end();
}

ExpertPlacement ExpertPlacement::none(int experts) {
  ExpertPlacement p;
  p.replicas.assign(static_cast<std::size_t>(experts), {});
  return p;
}

PlacementLoad placement_load(const LayerRouting& routing, const ExpertPlacement& placement) {
  PlacementLoad l;
  l.computed.assign(static_cast<std::size_t>(routing.devices), 0.0);
  l.received.assign(static_cast<std::size_t>(routing.devices), 0.0);
  for (int e = 0; e < routing.experts; ++e) {
    const int home = routing.home(e);
    for (int src = 0; src < routing.devices; ++src) {
      const auto c = static_cast<double>(routing.count(src, e));
      // Alg. 1 Replace_Inputs: a device holding the expert keeps its inputs.
      const int at = placement.holds(src, e, home) ? src : home;
      l.computed[static_cast<std::size_t>(at)] += c;
      if (at != src) l.received[static_cast<std::size_t>(at)] += c;
    }
  }
  return l;
}

PlannerSizes planner_sizes(const ModelShape& m) {
  PlannerSizes s;
  s.input_bytes = static_cast<double>(m.model_dim) * m.elem_bytes;
  s.expert_bytes = 2.0 * static_cast<double>(m.model_dim) * static_cast<double>(m.expert_hidden) *
                   m.elem_bytes;
  return s;
}

LayerTimeEstimate estimate_layer_time(const PlacementLoad& load, int devices, int selected, int n,
                                      const ProProphetModel& model, const PlannerSizes& sizes) {
  LayerTimeEstimate t;
  const double max_r = *std::max_element(load.received.begin(), load.received.end());
  const double max_h = *std::max_element(load.computed.begin(), load.computed.end());
  t.a2a = max_r * sizes.input_bytes / model.bandwidth_bytes_per_s;  // Eq. 1
  t.fec = max_h / model.expert_tokens_per_s;                         // Eq. 2
  t.bec = 2.0 * t.fec;                                               // Eq. 3
  const double moved = static_cast<double>(selected) * (devices - n) * sizes.expert_bytes /
                       (static_cast<double>(devices) * model.bandwidth_bytes_per_s);
  t.trans = moved;  // Eq. 4
  t.agg = moved;    // Eq. 5 (gradients are as large as parameters)
  if (model.hide_under_computation) {
    // Eq. 8: only what FEC+FNEC (forward) and BEC+BNEC (backward) cannot hide.
    t.trans = std::max(0.0, t.trans - t.fec - model.fnec_seconds);
    t.agg = std::max(0.0, t.agg - t.bec - model.bnec_seconds);
  }
  t.total = 4.0 * t.a2a + 3.0 * t.fec + t.trans + t.agg;  // Eq. 6 / Eq. 8
  return t;
}

ExpertPlacement pro_prophet_greedy(const LayerRouting& routing, int n, double alpha,
                                   const ProProphetModel& model, const PlannerSizes& sizes) {
  const int devices = routing.devices;
  ExpertPlacement current = ExpertPlacement::none(routing.experts);
  PlacementLoad load = placement_load(routing, current);
  double best = estimate_layer_time(load, devices, 0, n, model, sizes).total;  // line 4
  const double inputs = static_cast<double>(
      std::accumulate(routing.counts.begin(), routing.counts.end(), std::int64_t{0}));
  auto balanced = [&] {  // Eq. 7
    const auto [lo, hi] = std::minmax_element(load.computed.begin(), load.computed.end());
    return *hi - *lo < alpha * inputs / routing.experts;
  };
  std::size_t cnt = 0;
  while (!balanced()) {
    // Line 16: the heaviest device (first one on ties).
    const int device = static_cast<int>(
        std::max_element(load.computed.begin(), load.computed.end()) - load.computed.begin());
    // Its heaviest unchosen expert, by the inputs it computes there.
    int expert = -1;
    double heaviest = -1;
    for (int e = 0; e < routing.experts; ++e) {
      if (routing.home(e) != device) continue;
      if (std::find(current.selected.begin(), current.selected.end(), e) != current.selected.end())
        continue;
      double here = 0;
      for (int src = 0; src < devices; ++src)
        if (!current.holds(src, e, device)) here += static_cast<double>(routing.count(src, e));
      here += static_cast<double>(routing.count(device, e));
      if (here > heaviest) {
        heaviest = here;
        expert = e;
      }
    }
    if (expert < 0) break;  // lines 18-20
    // Line 24: the n devices (not the home) with the fewest inputs for it.
    std::vector<int> others;
    for (int d = 0; d < devices; ++d)
      if (d != device) others.push_back(d);
    std::stable_sort(others.begin(), others.end(), [&](int a, int b) {
      return routing.count(a, expert) < routing.count(b, expert);
    });
    std::vector<int> replicas(others.begin() + std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(others.size())),
                              others.end());
    std::sort(replicas.begin(), replicas.end());
    current.selected.push_back(expert);
    current.replicas[static_cast<std::size_t>(expert)] = std::move(replicas);
    load = placement_load(routing, current);  // line 30
    const int s = static_cast<int>(current.selected.size());
    const double changed = estimate_layer_time(load, devices, s, n, model, sizes).total;
    if (changed < best) {  // lines 33-36
      best = changed;
      cnt = current.selected.size();
    }
  }
  ExpertPlacement result = ExpertPlacement::none(routing.experts);
  for (std::size_t i = 0; i < cnt; ++i) {
    const int e = current.selected[i];
    result.selected.push_back(e);
    result.replicas[static_cast<std::size_t>(e)] = current.replicas[static_cast<std::size_t>(e)];
  }
  return result;
}

ExpertPlacement fastermoe_shadowing(const LayerRouting& routing, const ProProphetModel& model,
                                    const PlannerSizes& sizes) {
  ProProphetModel no_hiding = model;
  no_hiding.hide_under_computation = false;
  std::vector<std::int64_t> totals(static_cast<std::size_t>(routing.experts), 0);
  for (int src = 0; src < routing.devices; ++src)
    for (int e = 0; e < routing.experts; ++e)
      totals[static_cast<std::size_t>(e)] += routing.count(src, e);
  std::vector<int> order(static_cast<std::size_t>(routing.experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return totals[static_cast<std::size_t>(a)] > totals[static_cast<std::size_t>(b)]; });
  ExpertPlacement current = ExpertPlacement::none(routing.experts);
  double best =
      estimate_layer_time(placement_load(routing, current), routing.devices, 0, 0, no_hiding, sizes).total;
  for (int e : order) {
    ExpertPlacement next = current;
    std::vector<int> everyone;
    for (int d = 0; d < routing.devices; ++d)
      if (d != routing.home(e)) everyone.push_back(d);
    if (everyone.empty()) break;
    next.selected.push_back(e);
    next.replicas[static_cast<std::size_t>(e)] = everyone;
    const double t = estimate_layer_time(placement_load(routing, next), routing.devices,
                                         static_cast<int>(next.selected.size()), 0, no_hiding, sizes)
                         .total;
    if (t >= best) break;
    best = t;
    current = std::move(next);
  }
  return current;
}

}  // namespace moetrace::plan
