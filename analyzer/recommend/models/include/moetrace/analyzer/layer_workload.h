// One MoE layer as the recommenders see it (shape, devices, the measured
// routing of one iteration) and what a simulated what-if of it gives
// (whatif.h runs them). Plain data: no simulator here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetrace/plan/pro_prophet.h"  // plan::LayerRouting

namespace moetrace::analyzer {

struct MoeLayerWorkload {
  int layer = 0;
  int ranks = 0;     // P (devices; expert e lives on rank e / (E / P))
  int experts = 0;   // E
  int top_k = 1;
  std::int64_t model_dim = 0;  // M (h)
  std::int64_t hidden = 0;     // H of an expert
  int elem_bytes = 2;
  plan::LayerRouting routing;  // tokens [source rank][expert] of one iteration
  int iteration = 0;           // the iteration `routing` is from
  // The rank's experts run as one batched or grouped GEMM per projection
  // (Tutel's fused experts, torch.bmm over the experts, grouped GEMMs), not
  // one GEMM launch per expert: the models charge a GEMM's startup once per
  // projection and chunk instead of once per local expert.
  bool fused_experts = false;
  // Gated experts (SwiGLU, GeGLU: down(act(gate(x)) * up(x))): three M x H
  // matrices, 6 N M H FLOPs a forward pass of N rows, where the models'
  // expert is pipemoe's two-matrix FFN (W1: M x H, W2: H x M; 4 N M H,
  // Eq. 14's beta_e n_e with n_e = N M H).
  bool gated = false;

  // The hidden size of the models' two-matrix expert that does the GEMM
  // work and holds the weights of this one: H, or 3H/2 for a gated expert
  // (4 N M (3H/2) = 6 N M H FLOPs; 2 M (3H/2) = 3 M H weights). Its middle
  // activation is then N x 3H/2 a pass, where a gated expert computes N x 2H
  // (gate and up) and N x H (their product).
  std::int64_t ffn_hidden() const { return gated ? (3 * hidden + 1) / 2 : hidden; }
  int experts_per_rank() const { return ranks > 0 ? experts / ranks : 0; }
  // Tokens of source rank q (its routed rows / top_k).
  std::int64_t tokens_of(int source) const;
  std::int64_t max_tokens_per_rank() const;
  // Rows each expert rank computes (received, its own included), and the
  // most any rank computes; one pass over the routing.
  std::vector<std::int64_t> rows_computed() const;
  std::int64_t max_rows_computed() const;
  // Rows (tokens x top_k) each source routes, and the most of any source.
  std::int64_t max_rows_routed() const;
};

// A balanced routing: every source sends tokens x top_k / E rows to each
// expert (pipemoe's and mpipemoe's models assume it).
plan::LayerRouting balanced_routing(int ranks, int experts, int top_k, std::int64_t tokens_per_rank);

struct WhatIfResult {
  bool ok = false;
  std::string error;          // why it could not be simulated
  double forward_s = 0, backward_s = 0;  // per pass: the slowest rank's window
  double layer_s() const { return forward_s + backward_s; }
  double makespan_s = 0;
  std::int64_t peak_bytes = 0;  // device memory, the highest rank
  // Per iteration and rank, both passes, the busiest rank: time in expert
  // computation (FFN, recompute) and in all-to-alls (dispatch, combine,
  // re-communicate) among the window's ops.
  double compute_s = 0, all_to_all_s = 0;
  // The same of the forward pass alone (a trace that records no backward).
  double forward_compute_s = 0, forward_all_to_all_s = 0;
};

}  // namespace moetrace::analyzer
