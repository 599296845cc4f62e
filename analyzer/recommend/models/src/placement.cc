#include "moetrace/analyzer/placement.h"

#include <limits>

#include "moetrace/plan/routing.h"

namespace moetrace::analyzer {

PlacementAdvice recommend_placement(const PlacementInputs& in) {
  PlacementAdvice a;
  const int D = in.routing.devices;
  const auto home = plan::ExpertPlacement::none(in.routing.experts);
  const auto load_before = plan::placement_load(in.routing, home);
  a.before = plan::estimate_layer_time(load_before, D, 0, 0, in.model, in.sizes);
  a.computed_before = load_before.computed;
  a.received_before = load_before.received;

  // Larger n first: ties keep fewer transfers. Up to 16 devices every n;
  // beyond, the n whose copy count D - 1 - n is 0, 1, 2, 4, ..., D - 1.
  std::vector<int> ns;
  if (in.n >= 0) {
    ns.push_back(in.n);
  } else if (D <= 16) {
    for (int n = D - 1; n >= 0; --n) ns.push_back(n);
  } else {
    for (int copies = 0; copies < D - 1; copies = copies == 0 ? 1 : 2 * copies) ns.push_back(D - 1 - copies);
    ns.push_back(0);
  }
  double best = std::numeric_limits<double>::infinity();
  for (int n : ns) {
    auto p = plan::pro_prophet_greedy(in.routing, n, in.alpha, in.model, in.sizes);
    const auto load = plan::placement_load(in.routing, p);
    const auto t = plan::estimate_layer_time(load, D, static_cast<int>(p.selected.size()), n, in.model, in.sizes);
    if (t.total < best) {
      best = t.total;
      a.placement = std::move(p);
      a.n = n;
      a.after = t;
      a.computed_after = load.computed;
      a.received_after = load.received;
    }
  }
  plan::ProProphetModel unhidden = in.model;
  unhidden.hide_under_computation = false;
  a.after_unhidden = plan::estimate_layer_time(plan::placement_load(in.routing, a.placement), D,
                                               static_cast<int>(a.placement.selected.size()), a.n, unhidden,
                                               in.sizes);
  a.balance_degree_before = plan::balance_degree(a.computed_before);
  a.balance_degree_after = plan::balance_degree(a.computed_after);
  a.rb = plan::rb(a.balance_degree_before, a.balance_degree_after);
  a.gain = a.before.total > 0 ? (a.before.total - a.after.total) / a.before.total : 0;
  return a;
}

}  // namespace moetrace::analyzer
