// Locality of expert load across iterations: the premise of Pro-Prophet's
// planner (Sec. II "Locality", Fig. 4) that the load of iteration j predicts
// the load of iteration j + 1, so placements can be planned one iteration
// ahead (Sec. V, Fig. 8).
//
// For every MoE layer and every pair of iterations (j, j + d) that both have
// expert_load rows, with x = tokens per expert (summed over source ranks):
// - cosine similarity x_j . x_{j+d} / (|x_j| |x_{j+d}|) (1 when both are zero,
//   0 when one is);
// - L1 distance of the normalised distributions sum |x_j/sum x_j - x_{j+d}/sum x_{j+d}|,
//   in [0, 2];
// - the error of predicting x_{j+d} by x_j ("the load does not change"):
//   relative L1 error sum |x_j - x_{j+d}| / sum x_{j+d}, and whether the
//   heaviest expert of j is the heaviest of j + d (ties: lowest index).
// Consecutive pairs (d = 1) are listed; the curve averages each measure over
// the pairs at distance d = 1 .. max_distance.
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct LocalityPair {
  std::int32_t layer = 0, from_iteration = 0, to_iteration = 0;
  double cosine_similarity = 0;
  double l1_distance = 0;         // of the normalised distributions, [0, 2]
  double relative_l1_error = 0;   // predicting to_iteration's tokens per expert by from_iteration's
  std::int32_t heaviest_from = -1, heaviest_to = -1;
  bool heaviest_predicted() const { return heaviest_from == heaviest_to; }
};

struct LocalityPoint {
  std::int32_t distance = 1;  // iterations apart
  int pairs = 0;
  double cosine_similarity = 0;  // means over the pairs
  double l1_distance = 0;
  double relative_l1_error = 0;
  double heaviest_predicted = 0;  // fraction of the pairs
};

struct LayerLocality {
  std::int32_t layer = 0;
  int iterations = 0;
  LocalityPoint consecutive;          // distance 1 (pairs == 0: no consecutive iterations)
  double min_cosine_similarity = 1;   // worst consecutive pair (1 when there is none)
  std::vector<LocalityPoint> curve;   // distance 1 .. max_distance, where pairs exist
};

struct LocalityAnalysis {
  bool has_load = false;
  int max_distance = 0;
  std::vector<LocalityPair> pairs;     // consecutive pairs, by (layer, from_iteration)
  std::vector<LayerLocality> layers;   // by layer
  std::vector<LocalityPoint> curve;    // all layers together
};

LocalityAnalysis analyze_locality(const Trace& trace, int max_distance = 8);

// The measures of one pair of load vectors (shorter one padded with zeros).
LocalityPair compare_loads(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to);

}  // namespace moetrace::analyzer
