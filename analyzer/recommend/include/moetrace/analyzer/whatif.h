// For one MoE layer as the recommenders see it (layer_workload.h), the
// bridges from a hardware model to their inputs: pipemoe's terms,
// mpipemoe's Eq. 10 speeds, pro-prophet's planner model, ppmoe's layout
// inputs; plus simulator what-ifs that build the layer's plan at another
// pipeline degree, reuse strategy or placement and run it.
//
// The hardware model is the simulator's CostModel (kernels/sim cost_model.h):
// a fitted model (the analyses' `moetrace fit` writes that format), the one a
// simulated trace was run with, or a preset. Where a term comes from:
//   alpha_gemm, seconds per FLOP   compute_by_kind[expert_ffn] (or compute)
//   all-to-all alpha(P), beta(P)    collectives.all_to_all_v at P ranks
//   all-reduce alpha(T), beta(T)    collectives.all_reduce at T ranks
//   copies                          copy.d2h / copy.h2d
//   sigma, mu, eta                  interference
// Volumes of the all-to-all follow the model's own rule (all_to_all_volume,
// all_to_all_counts_local), computed from the measured routing, so the terms
// charge what the simulator (and the fit behind it) charges.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "moetrace/analyzer/layer_workload.h"
#include "moetrace/analyzer/memory_reuse.h"
#include "moetrace/analyzer/pipeline_degree.h"
#include "moetrace/analyzer/placement.h"
#include "moetrace/analyzer/ppmoe_layout.h"
#include "moetrace/plan/config.h"
#include "moetrace/plan/pro_prophet.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/run_spec.h"

namespace moetrace::analyzer {

// The all-to-all volume (bytes) that sets the dispatch's and the combine's
// time under the model's rule: the busiest rank.
struct AllToAllVolumes {
  double dispatch = 0, combine = 0;
};
AllToAllVolumes all_to_all_volumes(const MoeLayerWorkload& w, const sim::CostModel& m);

// pipemoe Eq. 15-18 for the layer: alpha_a, beta_a at P; beta_a n_d with n_d
// the mean of the dispatch and combine volumes (Eq. 25/33/40 count them in
// pairs); alpha_e = (E/P) x 2 alpha_gemm forward (one FFN op of 2 GEMMs per
// local expert and chunk, as the builders emit), x 2 backward, or 2
// alpha_gemm with fused experts (Tutel's one batched GEMM pair a chunk, Eq.
// 14 as the paper and its solver.py write it); beta_e n_e = seconds per
// FLOP x the busiest rank's expert FLOPs (4 M H per row forward, twice that
// backward).
LayerPipelineTerms pipeline_terms(const MoeLayerWorkload& w, const sim::CostModel& m, bool fused_experts = false);

// mpipemoe Eq. 10's inputs for the layer at n partitions.
ReuseInputs reuse_inputs(const MoeLayerWorkload& w, const sim::CostModel& m, int partitions);

// pro-prophet's planner model (Eq. 1-8) for the layer: B-bar = 1 / beta of
// the all-to-all at P, t = 1 / (seconds per FLOP x 4 M H), T_FNEC / T_BNEC
// as given (measured non-MoE time of the block).
PlacementInputs placement_inputs(const MoeLayerWorkload& w, const sim::CostModel& m, double fnec_s,
                                 double bnec_s, bool block_schedule);

// ppmoe's comparison for the layer with a tensor-parallel group of T.
LayoutInputs layout_inputs(const MoeLayerWorkload& w, const sim::CostModel& m, int tensor_parallel);

// ---------------------------------------------------------------------------
// What-ifs: the layer alone (one iteration, one block, no attention or dense
// part) built by the plan builders with the measured routing and simulated.

// Which ops make up the time compared.
enum class LayerWindow : std::uint8_t {
  // pipemoe Eq. 12: first dispatch to last combine, with the restore ops of
  // mpipemoe (offload, prefetch, recompute, re-communicate): the pipelined part.
  kPipeline = 0,
  // Every op of the MoE layer (gate, permute, ..., Plan, Trans, Agg).
  kMoeLayer = 1,
};

struct WhatIf {
  std::string variant = "pipemoe";  // "dpmoe", "pipemoe", "mpipemoe", "pro_prophet", "fastermoe"
  int partitions = 1;               // pipemoe r / mpipemoe n
  bool capacity_padding = false;    // dpmoe: every (rank, expert) segment padded to the capacity
  std::vector<int> shadow_experts;  // fastermoe: the experts shadowed (empty: none)
  plan::ReuseStrategy strategy = plan::ReuseStrategy::kNone;
  int pro_prophet_n = 0;
  double pro_prophet_alpha = 0.25;
  std::optional<plan::ProProphetModel> planner;  // pro_prophet: the model Alg. 1 plans with
  LayerWindow window = LayerWindow::kPipeline;
  // pipemoe: the timing-only builder (sim/timing_plan.h; the same ops and
  // simulated times, without per-peer transfers) at any size, not only
  // above 64 ranks. For large sweeps.
  bool timing_plan = false;
  bool fused_experts = false;  // pipemoe: Tutel's fused experts (plan::PipeMoeConfig::fused_experts)
};

// Never throws for a configuration the builders refuse: ok = false, error says why.
WhatIfResult simulate_layer(const MoeLayerWorkload& w, const sim::CostModel& m, const WhatIf& what);

// A trace of moetrace's own runs, its iterations replayed whole: the run's
// configuration (its RunSpec, from the trace's run record) on the hardware
// model, with the recorded load of every MoE layer (routings[i][l]:
// iteration i of those replayed, layer l) and, for pro_prophet and
// fastermoe, the placements it ran ([i][l]; empty: planned as the run plans
// them). Unlike simulate_layer, each layer runs among its neighbours, as it
// did: the next block's Trans on its communication stream, the gradient
// all-reduce queued ahead of its backward all-to-all, the tail of the
// iteration before. The layers' times are those of the last iteration,
// taken as the analyses take the measured ones (every MoE-layer op; per
// pass the slowest rank's union of its micro-batches' windows).
struct IterationReplay {
  bool ok = false;
  std::string error;
  std::map<int, WhatIfResult> layers;  // the last iteration's, by layer
};
IterationReplay replay_iterations(sim::RunSpec spec, const std::vector<std::vector<plan::LayerRouting>>& routings,
                                  const std::vector<std::vector<plan::ExpertPlacement>>& placements,
                                  const sim::CostModel& m);

}  // namespace moetrace::analyzer
