// Per-MoE-layer tuning recommendations of a trace: pipeline degree,
// memory-reuse strategy under a memory budget, expert placement, and whether
// PPMoE's layout would beat expert parallelism. Each states its evidence (the
// measured and modelled numbers, the equations) and a predicted gain.
//
// The recommenders and their what-ifs (whatif.h) are the target
// moetrace::recommend (analyzer/recommend/), above the analyses: it alone of
// the analyzer links the simulator. What they find (recommendations.h) is
// plain data the analyses, the reports and the GUI carry.
//
// Inputs per layer (recommend.cc extracts them from the trace):
//   shape       layers table (E, top_k, M, H), run_config (model.*), world size
//   routing     expert_load of the last iteration: tokens [source rank][expert]
//   measured    MoE-layer time per iteration (breakdown window, forward +
//               backward, slowest rank, mean over iterations), pipeline degree
//               (chunks of its ops or run_config), strategy, peak memory,
//               time of the block's non-MoE ops (T_FNEC, T_BNEC)
//   hardware    a sim::CostModel, in this order: the one given
//               (RecommendOptions::cost_model, `--cost-model FILE|PRESET`),
//               the one a simulated trace ran with (run_config
//               sim.cost_model_json), the one fitted from the trace
//               (cost_model.h: expert GEMMs and the all-to-all at P measured;
//               everything else from the h100-nvlink-ib preset; first where
//               prefer_fitted, `--cost-model fitted`), a preset (with a note
//               that nothing was measured)
//
// The recommenders (headers alongside):
//   pipeline degree  pipemoe Theorem 1 on both passes (pipeline_degree.h);
//                    simulator what-if of every r in [1, min(r_max, 16)]
//                    with the measured routing (whatif.h), whose best is the
//                    recommendation where it ran; mpipemoe's range search on
//                    the other traces given (several granularities / B)
//   memory reuse     mpipemoe Eq. 10 with sigma, mu, eta, Eq. 1-6 memory vs
//                    the budget (memory_reuse.h); what-if of each strategy
//   placement        pro-prophet Alg. 1 on the measured load, Eq. 6/8 before
//                    and after (placement.h); what-if DPMoE vs Pro-Prophet
//   layout           ppmoe Eq. 2/5 and the alpha-beta comparison (ppmoe_layout.h)
//
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/model_spec.h"
#include "moetrace/analyzer/recommendations.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer {

struct Analyses;  // analyses.h

// What fills in for a trace without expert load or layer sizes.
struct WorkloadSources {
  const ModelSpec* model = nullptr;
  std::int64_t tokens_per_rank = -1;
};

struct RecommendOptions {
  std::optional<sim::CostModel> cost_model;  // overrides the trace's own model
  std::string cost_model_source;             // how it was obtained, for the evidence
  // Use the model fitted from the trace (cost_model.h) even where the trace
  // is simulated and names the model it ran with.
  bool prefer_fitted = false;
  int r_max = 64;                            // pipeline degrees considered: [1, r_max]
  std::vector<int> r_candidates;             // non-empty: only these (e.g. the paper's 1, 2, 4, 8)
  std::int64_t memory_budget_bytes = -1;     // -1: run_config memory_budget_bytes, else device memory
  int tensor_parallel = -1;                  // PPMoE's T; -1: GPUs per node (<= 8) dividing E
  bool simulate = true;                      // run the what-ifs
  int max_simulated_ranks = 256;             // above: no what-ifs (their cost grows with P^2)
  double pro_prophet_alpha = 0.25;           // Eq. 7
  // A pipeline degree, placement or layout change predicted to save less
  // than this share of the layer's time is not recommended (noise of the
  // models; every change has a cost of its own).
  double min_gain = 0.01;
  // Further traces of the same model at other granularities or token counts
  // (mpipemoe's range search, its Algorithm 1).
  std::vector<const Trace*> other_runs;
  std::function<void(std::string_view stage, double fraction)> progress;
  // The user's model (--model): layer shapes where the trace lacks them; a
  // shape the trace gives too must agree (ConfigError naming both).
  const ModelSpec* model = nullptr;
  // Tokens a rank holds per MoE layer (--tokens), for traces without expert
  // load or dispatch bytes; -1: from the trace.
  std::int64_t tokens_per_rank = -1;
  // The two above, as the workloads and the what-ifs take them.
  WorkloadSources sources() const { return {model, tokens_per_rank}; }
};

// Throws moetrace::Error only for an unusable option (a bad cost model);
// a trace without MoE layers or loads gives no layers and a note.
Recommendations recommend(const Trace& trace, const RecommendOptions& options = {});
// The same reusing what analyze() computed (breakdown, memory peak, fits).
Recommendations recommend(const Trace& trace, const Analyses& analyses, const RecommendOptions& options = {});

// The layers of a trace as the recommenders see them (also used by tests).
// Throws ConfigError where the trace and the model disagree on a shape.
std::vector<MoeLayerWorkload> moe_layer_workloads(const Trace& trace, std::vector<std::string>* notes = nullptr,
                                                  const WorkloadSources& sources = {});

// Runs the recommenders on the analyses and stores them in
// Analyses::recommendations (the report's recommendations section).
void add_recommendations(const Trace& trace, Analyses& a, const RecommendOptions& options = {});

}  // namespace moetrace::analyzer
