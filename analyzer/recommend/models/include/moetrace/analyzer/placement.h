// Expert placement of an MoE layer from its measured load: pro-prophet's
// greedy planner (Algorithm 1, kernels/plan pro_prophet.h) on the
// performance model of Eq. 1-8, with the layer time before (home placement,
// s = 0) and after, the per-device loads H and R, and the balance degree.
//
// Algorithm 1 takes n (the devices a selected expert is NOT sent to) as an
// input; where the caller does not fix it we run it for every n in
// [0, D - 1] (above 16 devices: the n that send an expert to 0, 1, 2, 4, ...,
// D - 1 other devices) and keep the fastest prediction (ties: the larger n,
// fewer transfers). With several experts per device the planner takes the
// heaviest expert of the heaviest device (NOTES.md).
#pragma once

#include <vector>

#include "moetrace/plan/pro_prophet.h"

namespace moetrace::analyzer {

struct PlacementInputs {
  plan::LayerRouting routing;      // measured tokens [source][expert] of one iteration
  plan::ProProphetModel model;     // B-bar, t, T_FNEC, T_BNEC (and Eq. 8 vs Eq. 6)
  plan::PlannerSizes sizes;
  double alpha = 0.25;             // Eq. 7
  int n = -1;                      // -1: search n in [0, D - 1]
};

struct PlacementAdvice {
  plan::ExpertPlacement placement;  // selected experts and their replica devices
  int n = 0;
  plan::LayerTimeEstimate before;   // Eq. 6/8 with s = 0 (home placement)
  plan::LayerTimeEstimate after;    // Eq. 6/8 (per model.hide_under_computation) for the placement
  plan::LayerTimeEstimate after_unhidden;  // Eq. 6: Trans/Agg not hidden (no block-wise schedule)
  std::vector<double> computed_before, computed_after;  // H_i (Eq. 2)
  std::vector<double> received_before, received_after;  // R_i (Eq. 1)
  double balance_degree_before = 0, balance_degree_after = 0;  // std of H
  double rb = 1;                    // balance degree before / after (pro-prophet Sec. VI-C)
  double gain = 0;                  // (before - after) / before, by the model
};

PlacementAdvice recommend_placement(const PlacementInputs& in);

}  // namespace moetrace::analyzer
