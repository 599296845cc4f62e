// Per-MoE-layer tuning recommendations of a trace (issue 5): pipeline
// degree, memory-reuse strategy under a memory budget, expert placement, and
// whether PPMoE's layout would beat expert parallelism. Each states its
// evidence (the measured and modelled numbers, the equations) and a
// predicted gain.
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
// predicted_gain of an item: the share of the layer's time per iteration the
// change saves; negative: it costs time (memory reuse trades time for
// memory); 0 for "keep". Pipeline degree and memory reuse: seconds saved by
// the simulated what-ifs (else the closed form / Eq. 10 with startups) over
// the layer's measured MoE-layer time (else the model's current time).
// Placement and layout: the relative saving of their own model (pro-prophet
// Eq. 6/8; the alpha-beta layer times of ppmoe_layout.h), whose absolute
// seconds leave out parts of the layer.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/trace.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer {

struct Analyses;  // analyses.h

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
};

// The hardware model the recommenders used and where it came from.
struct HardwareModelInfo {
  std::string source;  // "given", "trace", "preset"
  std::string description;
  sim::CostModel model;
};

struct PipelineDegreeAdvice {
  bool computed = false;
  std::string skipped;               // why not computed
  std::string variant;               // what the layer runs ("pipemoe", "mpipemoe", "dpmoe", ...)
  int current_r = 1;
  LayerPipelineTerms terms;
  PipelineDegreeChoice choice;       // the closed form (Theorem 1, both passes)
  double closed_form_current_s = 0;  // forward + backward at current_r
  // What-ifs: r -> simulated layer (pipeline window, forward + backward).
  std::vector<std::pair<int, WhatIfResult>> simulated;
  int simulated_best_r = -1;
  int recommended_r = 1;             // the simulated best where simulated, else the closed form;
                                     // the current r where that saves less than min_gain
  int best_r = 1;                    // that best, before the min_gain rule
  std::string basis;                 // "simulation" or "closed_form"
  double predicted_current_s = 0, predicted_s = 0;  // on that basis
  // mpipemoe range search over the measured runs (this trace and the others).
  std::vector<GranularityRun> runs;
  std::optional<GranularitySearch> measured;
};

struct MemoryReuseAdvice {
  bool computed = false;
  std::string skipped;
  int partitions = 2;                     // n the strategies are evaluated at
  std::int64_t budget_bytes = 0;          // 0: none
  std::string budget_source;              // "option", "run_config", "device memory", "none"
  std::int64_t measured_peak_bytes = -1;
  plan::ReuseStrategy current = plan::ReuseStrategy::kNone;
  ReuseChoice choice;
  std::array<WhatIfResult, 5> simulated;  // by strategy; ok = false where not run
};

struct PlacementAdviceInfo {
  bool computed = false;
  std::string skipped;
  int iteration = 0;          // the load it planned on
  double fnec_s = 0, bnec_s = 0;  // measured non-MoE time of the block (per pass)
  plan::ProProphetModel model;    // what Algorithm 1 planned with (Eq. 1-8)
  double alpha = 0.25;            // Eq. 7
  PlacementAdvice advice;
  // The placement the trace ran for that iteration (expert_placement rows of
  // role replica / shadow), if any, and Eq. 6/8 for it on the same load.
  bool has_current = false;
  plan::ExpertPlacement current;
  int current_n = 0;
  plan::LayerTimeEstimate current_estimate;
  WhatIfResult simulated_home, simulated_placed;  // DPMoE vs Pro-Prophet (unscheduled) on the load
};

struct LayoutAdvice {
  bool computed = false;
  std::string skipped;
  int tensor_parallel = 0;
  LayoutComparison comparison;
};

struct LayerRecommendation {
  int layer = 0;
  MoeLayerWorkload workload;
  std::string variant;
  double measured_layer_s = -1;  // mean over iterations of the slowest rank's fwd + bwd window
  int iterations = 0;
  PipelineDegreeAdvice pipeline;
  MemoryReuseAdvice memory;
  PlacementAdviceInfo placement;
  LayoutAdvice layout;
};

// One piece of advice, for reports and the GUI (gui RecommendationData).
struct RecommendationItem {
  int layer = -1;
  std::string subject;         // "pipeline degree", "memory reuse", "expert placement", "layout"
  std::string action;          // "r = 4", "S4: re-communicate T_DI, recompute T_M", ...
  std::string evidence;        // the numbers behind it, a few sentences
  double predicted_gain = -1;  // fraction of the layer time saved (see above); NaN-free
  bool gain_known = false;
  bool change = false;         // false: keep what the trace runs
};

struct Recommendations {
  std::string trace;
  HardwareModelInfo hardware;
  std::vector<std::string> notes;  // trace-wide caveats
  std::vector<LayerRecommendation> layers;
  std::vector<RecommendationItem> items;
};

// Throws moetrace::Error only for an unusable option (a bad cost model);
// a trace without MoE layers or loads gives no layers and a note.
Recommendations recommend(const Trace& trace, const RecommendOptions& options = {});
// The same reusing what analyze() computed (breakdown, memory peak, fits).
Recommendations recommend(const Trace& trace, const Analyses& analyses, const RecommendOptions& options = {});

// The layers of a trace as the recommenders see them (also used by tests).
std::vector<MoeLayerWorkload> moe_layer_workloads(const Trace& trace, std::vector<std::string>* notes = nullptr);

// Reports (JSON: schemas/recommendations.schema.json).
inline constexpr int kRecommendationsVersion = 1;
nlohmann::json recommendations_to_json(const Recommendations& r);
void write_recommendations_text(std::ostream& out, const Recommendations& r);
void write_recommendations_markdown(std::ostream& out, const Recommendations& r);

}  // namespace moetrace::analyzer
