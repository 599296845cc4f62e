// The calibration sweep of `moetrace run --calibrate`: a plan of isolated
// GEMMs, collectives and copies over a range of sizes and group sizes, so
// that alpha-beta models fitted on its trace (pipemoe Eq. 13 and 16, the
// analyzer's `moetrace fit`) are well conditioned; then overlapped pairs of
// those ops for the interference factors sigma, mu, eta (mpipemoe Sec.
// II-C). It is an ordinary plan: the simulator and the CUDA executor run the
// same sweep (pipemoe Sec. V-B: "we measure the elapsed time with a range of
// sizes for the GEMM computation and the all-to-all communication").
//
// Per rank, in this order, every op waiting for the previous one of its rank
// (so each runs alone on its rank, the fits' "lone" samples):
//  1. expert FFN forward (2 GEMMs) and backward (4 GEMMs) on rows
//     min_rows, 2 min_rows, ..., max_rows of the one expert the rank holds
//     (M x H), `repeats` times each;
//  2. for each group size g (ranks 0..g-1 take part, the others idle): an
//     all-to-all with R rows (of M elements) to every other member, R =
//     min_peer_rows, 2 min_peer_rows, ..., max_peer_rows, none to itself (so
//     its op bytes are its volume under every all-to-all rule); then
//     all-reduces of g x R rows;
//  2b. the routing ops on min_rows .. max_rows tokens, `repeats` times
//     each: gate forward (softmax top-k over `experts`), permute, unpermute,
//     and their backward passes (unpermute, permute, gate), so that `fit`
//     has per-kind models of them over a range of sizes (the workload's
//     runs hold them at one size only). The gate's input and weight are
//     zero, so every token's probabilities tie and it routes to experts
//     0 .. top_k-1 (ties go to the lower index, plan.h GateForward) on
//     every executor: the permuted layout is known when the plan is built;
//  3. offload (device to pinned host) and prefetch (back) of rows
//     min_rows .. max_rows;
//  4. interference: a long op of one class (compute, communication, copy)
//     with K = 4 ops of another class on another stream, sized from
//     `estimates` to cover 90 % of it, in both orders and with all three
//     classes at once.
// Every collective instance has its own coordinates (layer -1, iteration 0,
// chunk = sample number) so the analyzer counts its participants.
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/plan/config.h"
#include "moetrace/plan/plan.h"

namespace moetrace::plan {

// First guesses of the hardware, used only to size the interference pairs
// (a simulator backend passes its cost model's numbers; a GPU backend may
// pass a previous fit). Seconds, per FLOP, per byte a rank sends.
struct CalibrationEstimates {
  double gemm_alpha_s = 5e-6;
  double gemm_seconds_per_flop = 1.0 / 300e12;
  double all_to_all_alpha_s = 20e-6;
  double all_to_all_seconds_per_byte = 1.0 / 40e9;
  double copy_alpha_s = 10e-6;
  double copy_seconds_per_byte = 1.0 / 20e9;
};

struct CalibrationConfig {
  int ranks = 8;
  std::int64_t model_dim = 1024;       // M: GEMM shape, and the row of collectives and copies
  std::int64_t expert_hidden = 4096;   // H
  int elem_bytes = 2;
  std::int64_t min_rows = 64, max_rows = 16384;       // GEMM and copy rows (x2 steps)
  std::int64_t min_peer_rows = 4, max_peer_rows = 4096;  // all-to-all rows per peer (x2 steps)
  std::vector<int> group_sizes{};      // empty: 2, 4, 8, ..., and `ranks`
  int repeats = 2;
  bool backward = true;                // FFN backward too (4 GEMMs: alpha per GEMM separates)
  bool all_reduce = true;
  bool copies = true;
  bool interference = true;
  // The routing ops' gate: the workload's number of experts and top-k (the
  // gate's GEMM is tokens x M x experts; permute and unpermute move tokens x
  // top_k rows).
  bool routing_ops = true;
  int experts = 8;
  int top_k = 2;
  CalibrationEstimates estimates{};

  void validate() const;  // throws ConfigError naming the field
  std::vector<int> groups() const;  // the group sizes swept
};

// The model the executors draw weights and data for (one layer, M x H; rank
// q's FFN ops use expert q; with routing ops, max(ranks, experts) experts and
// their top-k, else one expert per rank and top-1).
ModelShape calibration_model_shape(const CalibrationConfig& c);

// The sweep as a plan (variant "calibration", one iteration).
Plan build_calibration(const CalibrationConfig& c);

}  // namespace moetrace::plan
