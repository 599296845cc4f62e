// Pro-Prophet's planner (pro-prophet Sec. IV): the performance model of a
// MoE layer under a lightweight expert placement (Eq. 1-8) and the greedy
// search of Algorithm 1; and the FasterMoE-style shadowing decision built on
// the same model.
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/plan/config.h"

namespace moetrace::plan {

// The routing of one (iteration, layer): counts[source * experts + expert].
// Devices are the ranks; expert e lives at home(e) = e / (experts / devices).
struct LayerRouting {
  int devices = 0;
  int experts = 0;
  std::vector<std::int64_t> counts;

  std::int64_t count(int source, int expert) const {
    return counts[static_cast<std::size_t>(source * experts + expert)];
  }
  int home(int expert) const { return expert / (experts / devices); }
};

// ExpertPlacement (Sec. IV-A): config.h.

// Per-device quantities of Eq. 1-2 under a placement.
struct PlacementLoad {
  std::vector<double> computed;  // H_i: inputs computed on device i
  std::vector<double> received;  // R_i: inputs device i receives from other devices
};
PlacementLoad placement_load(const LayerRouting& routing, const ExpertPlacement& placement);

// Sizes the model needs (bytes of one input token, of one expert's parameters).
struct PlannerSizes {
  double input_bytes = 0;   // size(input) = model_dim x elem_bytes
  double expert_bytes = 0;  // size(e.params) = size(e.grads) = 2 model_dim hidden x elem_bytes
};
PlannerSizes planner_sizes(const ModelShape& m);

// The terms of Eq. 6 / Eq. 8 for s selected experts and n.
struct LayerTimeEstimate {
  double a2a = 0;    // T_A2A(R), Eq. 1
  double fec = 0;    // T_FEC(H), Eq. 2
  double bec = 0;    // T_BEC(H) = 2 T_FEC, Eq. 3
  double trans = 0;  // T_Trans(s, n), Eq. 4 (or its unhidden part, Eq. 8)
  double agg = 0;    // T_Agg(s, n), Eq. 5 (or its unhidden part, Eq. 8)
  double total = 0;  // 4 T_A2A + 3 T_FEC + trans + agg
};
LayerTimeEstimate estimate_layer_time(const PlacementLoad& load, int devices, int selected,
                                      int n, const ProProphetModel& model,
                                      const PlannerSizes& sizes);

// Algorithm 1 (greedy search). With several experts per device the paper's
// "heaviest device" step picks, on the heaviest device, its heaviest expert
// not chosen yet (inputs computed there); with one expert per device this is
// the paper's rule. BottomK picks the n devices other than the home with the
// fewest inputs for the expert (ties: lower index); the expert is sent to the
// remaining D - 1 - n devices, i.e. present on D - n devices (Eq. 4/5 count
// D - n). The loop stops when Eq. 7 holds or when the heaviest device has no
// unchosen expert left (the paper's "i in Used" break); the placement is the
// best-scoring prefix L[0:cnt] (Alg. 1 lines 31-40).
ExpertPlacement pro_prophet_greedy(const LayerRouting& routing, int n, double alpha,
                                   const ProProphetModel& model, const PlannerSizes& sizes);

// FasterMoE-style shadowing (interpretation: FasterMoE's own model is not in
// our papers): repeatedly shadow the expert with the most tokens to every
// device while the Eq. 6 estimate with n = 0 and no hiding keeps improving.
ExpertPlacement fastermoe_shadowing(const LayerRouting& routing, const ProProphetModel& model,
                                    const PlannerSizes& sizes);

}  // namespace moetrace::plan
