// Expert load and its imbalance, per MoE layer and iteration (pro-prophet
// Sec. II and VI-C).
//
// Definitions:
// - tokens per expert: expert_load summed over source ranks.
// - Devices P: the run's world size (or more, where load or placement rows
//   name higher ranks).
// - Home placement: where expert_placement has no row of role "home" for an
//   expert, expert e lives on rank floor(e P / E) (= e / (E/P) when P divides
//   E, GShard-style expert parallelism).
// - Actual placement: the home rank plus every "replica" (Pro-Prophet Trans
//   target) and "shadow" (FasterMoE) rank recorded for that iteration and
//   layer. How a replicated expert's tokens split: tokens that source rank d
//   routes to expert e are computed on d when d holds a copy of e (the
//   lightweight placement of pro-prophet Fig. 6b and FasterMoE's shadows
//   compute local tokens), otherwise on e's home rank.
// - tokens per device H_i (pro-prophet Eq. 2): tokens computed on rank i;
//   received R_i (Eq. 1): those of them that came from other ranks.
// - balance degree (pro-prophet Sec. VI-C): the standard deviation of the
//   per-device load H (population: divided by P). RB = balance degree under
//   home placement / balance degree under the actual placement (1 when the
//   run placed no copies; +infinity when the actual placement is perfectly
//   balanced and home is not).
// - coefficient of variation (CV) of the expert load: its standard deviation
//   over its mean (population).
// - Time the imbalance costs (from the breakdown, forward + backward of the
//   layer in the iteration): the slowest rank's MoE-layer window minus the
//   mean window over ranks; and the expert-compute time of the rank with the
//   most tokens (busiest rank) next to the mean expert-compute time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// One MoE layer in one iteration.
struct LoadRow {
  std::int32_t layer = 0, iteration = 0;
  std::vector<std::int64_t> tokens_per_expert;       // E entries
  std::vector<std::int64_t> tokens_per_device_home;  // P entries: H under home placement
  std::vector<std::int64_t> tokens_per_device;       // P entries: H under the actual placement
  std::vector<std::int64_t> received_per_device;     // P entries: R under the actual placement
  bool has_placement = false;  // expert_placement rows for this iteration and layer
  int copies = 0;              // replica and shadow rows
  std::int64_t total_tokens = 0;
  std::int32_t heaviest_expert = -1;
  double expert_max_over_mean = 0;
  double expert_cv = 0;
  std::int32_t busiest_rank = -1;     // most tokens under the actual placement
  double device_max_over_mean_home = 0;
  double device_max_over_mean = 0;
  double balance_degree_home = 0;     // std of H, home placement
  double balance_degree = 0;          // std of H, actual placement
  double rb = 1;                      // balance_degree_home / balance_degree
  // From the breakdown; -1 where it has no rows for this layer and iteration.
  std::int32_t slowest_rank = -1;
  std::int64_t slowest_window_ns = -1, mean_window_ns = -1;
  std::int64_t busiest_expert_compute_ns = -1, mean_expert_compute_ns = -1;
  std::int64_t imbalance_ns() const {
    return slowest_window_ns >= 0 ? slowest_window_ns - mean_window_ns : -1;
  }
};

// A layer over its iterations: means of the per-iteration numbers.
struct LayerLoadSummary {
  std::int32_t layer = 0;
  int iterations = 0;
  int experts = 0, devices = 0;
  std::vector<std::int64_t> tokens_per_expert;  // summed over iterations (heatmap row)
  double expert_max_over_mean = 0, expert_cv = 0;
  double device_max_over_mean_home = 0, device_max_over_mean = 0;
  double balance_degree_home = 0, balance_degree = 0;
  double rb = 1;  // balance_degree_home / balance_degree of the means (+infinity: balanced after)
  bool has_placement = false;
  // Means over iterations with breakdown rows; -1 where none.
  std::int64_t imbalance_ns = -1;
  std::int64_t busiest_expert_compute_ns = -1, mean_expert_compute_ns = -1;
};

struct ExpertLoadAnalysis {
  bool has_load = false;
  std::string origin;  // Trace::expert_load_origin: empty for the trace's own expert_load table
  int experts = 0;  // max over layers
  int devices = 0;
  std::vector<LoadRow> rows;              // by (layer, iteration)
  std::vector<LayerLoadSummary> layers;   // by layer
};

ExpertLoadAnalysis analyze_expert_load(const Trace& trace, const Breakdown& breakdown);

// Population standard deviation and mean of a load vector.
double load_mean(const std::vector<std::int64_t>& v);
double load_stddev(const std::vector<std::int64_t>& v);

}  // namespace moetrace::analyzer
