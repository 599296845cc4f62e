// What the recommenders found for each MoE layer of a trace: the result
// types of recommend.h (the target moetrace::recommend above the analyses,
// which simulates what-ifs) and their reports. The analyses carry them
// (Analyses::recommendations) without linking the simulator; the report, the
// GUI and `moetrace recommend` print them.
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
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/layer_workload.h"
#include "moetrace/analyzer/memory_reuse.h"
#include "moetrace/analyzer/pipeline_degree.h"
#include "moetrace/analyzer/placement.h"
#include "moetrace/analyzer/ppmoe_layout.h"
#include "moetrace/plan/config.h"
#include "moetrace/plan/pro_prophet.h"

namespace moetrace::analyzer {

// The hardware model the recommenders used and where it came from.
// One term of a hardware model fitted from the trace: measured, or taken
// from the preset where the trace does not measure it well enough.
struct HardwareFitTerm {
  std::string term;    // "expert GEMMs", "all-to-all at P = 8", "all-reduce at P = 4", "copies d2h", ...
  std::string source;  // "fitted" or "preset"
  std::string x;       // "flops" or "bytes"
  int points = 0;
  double r2 = 0, x_min = 0, x_max = 0;
  std::string why;     // source "preset": what the trace lacks
};

struct HardwareModelInfo {
  std::string source;  // "given", "trace", "fitted", "preset"
  std::string description;
  std::vector<HardwareFitTerm> fits;  // source "fitted": each term, fitted or preset
  // The model's name and the terms the recommenders read from it (expert
  // GEMMs, the all-to-all at the layer's P, link sharing, interference), as
  // the report prints them under "hardware_model".
  nlohmann::json terms = nlohmann::json::object();
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

// The configuration the trace ran (its pipeline degree and routing), on the
// hardware model, beside what was measured: the check before any advice.
// Off by more than kReplayTolerance: the layer's advice is unreliable, and
// the term that is off is named by comparing the model's expert computation,
// all-to-all time and the rest of the layer's window (its other ops and idle
// time) with the measured ones (the busiest rank's expert-compute and
// all-to-all categories in the replayed iteration); where all agree, what is
// off is their overlap.
inline constexpr double kReplayTolerance = 0.20;
struct Replay {
  bool computed = false;
  double measured_s = -1, simulated_s = -1;  // layer per iteration, forward + backward
  // The trace records no backward pass of the layer (an inference run, or a
  // profile of the forward alone): both sides are the forward pass's.
  bool forward_only = false;
  // "iteration" (the trace's iteration simulated whole as its run's
  // configuration), "simulation" (the layer alone) or "closed_form"
  std::string basis;
  double error = 0;                          // simulated / measured - 1
  bool unreliable = false;
  std::string off_term;                      // "compute", "all-to-all", "other ops", "overlap" (unreliable only)
  double measured_compute_s = -1, model_compute_s = -1;
  double measured_all_to_all_s = -1, model_all_to_all_s = -1;
};

// The layer in the trace's own execution graph (exec_graph.h), for a trace
// that ran on hardware: measured, replayed with the measured durations, and
// predicted by the graph what-ifs (graph_whatif.h) at other pipeline degrees.
// Where it is computed it is the basis of the pipeline-degree advice; a
// replay off by more than kTraceReplayTolerance says so and names what the
// graph misses.
inline constexpr double kTraceReplayTolerance = 0.05;
struct TraceReplay {
  bool computed = false;
  std::string skipped;                    // why not computed (or why no what-if changed the layer)
  double measured_s = -1, replayed_s = -1;  // mean layer window over ranks and iterations
  double error = 0;                       // replayed / measured - 1
  bool within = false;                    // |error| <= kTraceReplayTolerance
  std::vector<std::string> missing;       // the graph's missing parts (exec_graph.h)
  std::string cost_source;                // where the what-ifs' new durations came from
  struct Prediction {
    int r = 1;
    double predicted_s = -1;
    double low_s = -1, high_s = -1;       // with the fitted betas at -/+ one relative residual; -1: none
  };
  std::vector<Prediction> predictions;    // by r
  int best_r = -1;
  // The other what-ifs on the same graph: reuse=S1..S4 (memory reuse added)
  // and placement=pro-prophet; the layer window predicted (-1: not
  // computed), and why not where it was not.
  std::vector<std::pair<std::string, double>> other_predictions;  // ("reuse=S3", s), ("placement=pro-prophet", s)
  std::vector<std::string> other_notes;
};

struct LayerRecommendation {
  int layer = 0;
  MoeLayerWorkload workload;
  std::string variant;
  double measured_layer_s = -1;  // mean over iterations of the slowest rank's fwd + bwd window
  int iterations = 0;
  Replay replay;
  TraceReplay trace_replay;
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
  // Where the hardware model was fitted from the trace: the gain's range
  // when the expert GEMM and all-to-all terms move by one relative residual
  // (rms / mean time) of their fits, every combination of either sign.
  bool gain_interval = false;
  double gain_low = 0, gain_high = 0;
  bool change = false;         // false: keep what the trace runs
};

struct Recommendations {
  std::string trace;
  HardwareModelInfo hardware;
  std::vector<std::string> notes;  // trace-wide caveats
  std::vector<LayerRecommendation> layers;
  std::vector<RecommendationItem> items;
};

// Reports (JSON: schemas/recommendations.schema.json).
inline constexpr int kRecommendationsVersion = 1;
nlohmann::json recommendations_to_json(const Recommendations& r);
void write_recommendations_text(std::ostream& out, const Recommendations& r);
void write_recommendations_markdown(std::ostream& out, const Recommendations& r);
// "replay of the trace's own configuration: 1.234 ms (simulated) against
// 1.200 ms measured, +2.8 %" (+ ": UNRELIABLE, the compute term is off");
// empty where no replay was computed.
std::string replay_text(const Replay& r);
// What is off, for an unreliable replay: "the compute term is off", "the
// all-to-all term is off", "its other ops and idle time are off", "the
// overlap term is off".
std::string off_term_text(const Replay& r);
// "replay of the trace's own execution graph: 1.357 ms against 1.383 ms
// measured per layer window, -1.9 %"; empty where not computed.
std::string trace_replay_text(const TraceReplay& t);

}  // namespace moetrace::analyzer
