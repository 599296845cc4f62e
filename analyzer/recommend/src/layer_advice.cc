// The four recommenders of one MoE layer (pipeline degree, memory reuse,
// expert placement, PPMoE layout) and the replay of the trace's own
// configuration beside its measured time (recommend_internal.h).
#include "moetrace/analyzer/recommend.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/recorded_shapes.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/run_spec.h"
#include "hardware.h"
#include "recommend_internal.h"
#include "trace_advice.h"

namespace moetrace::analyzer {

using detail::Hardware;
using detail::hardware_terms;
using detail::scaled;

namespace {

int tensor_parallel_for(const Trace& t, const MoeLayerWorkload& w, int requested) {
  if (requested > 0) return requested;
  // GPUs per node: ranks sharing a host, at most 8 (PPMoE keeps TP inside a node).
  std::map<std::string, int> per_host;
  for (const auto& r : t.ranks) ++per_host[r.host];
  int gpn = 0;
  for (const auto& [host, n] : per_host) gpn = std::max(gpn, n);
  if (gpn <= 1) gpn = 8;
  for (int T = std::min({gpn, 8, w.ranks}); T > 1; --T)
    if (w.experts % T == 0) return T;
  return 0;
}

}  // namespace

namespace detail {

// The configuration the trace ran, as a what-if of its layer: its variant,
// pipeline degree and reuse strategy, DPMoE's capacity padding,
// Pro-Prophet's n and alpha, the experts FasterMoE shadowed in the layer's
// iteration. A trace of another tool runs as its ops show: pipemoe at its r
// (r = 1: plain expert parallelism). nullopt: a variant no what-if builds.
std::optional<WhatIf> own_configuration(const Trace& trace, const LayerRecommendation& L) {
  WhatIf w;
  w.window = LayerWindow::kMoeLayer;  // what the measured layer time spans
  const std::string& v = L.variant;
  if (v.empty() || v == "pipemoe" || v == "mpipemoe") {
    w.variant = v.empty() ? "pipemoe" : v;
    w.partitions = std::max(1, L.pipeline.current_r);
    w.fused_experts = w.variant == "pipemoe" && L.workload.fused_experts;
    if (v == "mpipemoe") {
      const auto s = trace.config_value("strategy");
      w.strategy = plan::parse_reuse_strategy(s.empty() ? "none" : s);
      if (w.partitions < 2) w.strategy = plan::ReuseStrategy::kNone;
    }
  } else if (v == "dpmoe") {
    w.variant = "dpmoe";
    w.capacity_padding = trace.config_value("dpmoe.capacity_padding") == "true";
  } else if (v == "pro_prophet") {
    w.variant = "pro_prophet";
    w.pro_prophet_n = config_number<int>(trace, "pro_prophet.n").value_or(0);
    w.pro_prophet_alpha = config_number<double>(trace, "pro_prophet.alpha").value_or(0.25);
  } else if (v == "fastermoe") {
    w.variant = "fastermoe";
    std::set<int> shadow;
    for (const auto& p : trace.placements)
      if (p.layer == L.layer && p.iteration == L.workload.iteration && p.role == "shadow") shadow.insert(p.expert);
    w.shadow_experts.assign(shadow.begin(), shadow.end());
  } else {
    return std::nullopt;
  }
  return w;
}

// Replay (recommendations.h): the trace's own configuration on the hardware
// model against the measured layer time, and per term: the expert
// computation and the all-to-alls. Simulated where the what-ifs can build the
// configuration (the busiest rank's expert and all-to-all time); else the
// pipeline advice at the trace's r by Theorem 1's closed form: the expert
// computation r t_e(r) (Eq. 15) and the dispatch + combine 2 r t_d(r) (Eq. 17)
// of each pass.
void replay_layer(const Trace& trace, const RecommendOptions& o, const Hardware& hw, const Breakdown& b,
                  const IterationReplay* iteration, LayerRecommendation& L) {
  auto& rp = L.replay;
  const auto& a = L.pipeline;
  if (!a.computed || !(L.measured_layer_s > 0) || !(a.predicted_current_s > 0)) return;
  rp.computed = true;
  // The iteration whose load the workload holds: loads drift between
  // iterations, so the mean over them is not what the replay ran. Per pass
  // the slowest rank's window (as measured_layer_s); per term the busiest
  // rank's time (as the model's).
  std::map<int, std::int64_t> window;  // phase -> slowest rank's window
  std::map<int, std::pair<double, double>> terms;  // rank -> (compute, all-to-all) ns
  for (const auto& row : b.rows) {
    if (row.layer != L.layer || row.iteration != L.workload.iteration) continue;
    auto& w = window[static_cast<int>(row.phase)];
    w = std::max(w, row.t.window_ns);
    auto& t = terms[row.rank];
    t.first += static_cast<double>(row.t.at(Category::kExpertCompute));
    t.second += static_cast<double>(row.t.at(Category::kAllToAll));
  }
  if (window.empty()) {
    rp.measured_s = L.measured_layer_s;
  } else {
    rp.measured_s = 0;
    for (const auto& [phase, ns] : window) rp.measured_s += static_cast<double>(ns) * 1e-9;
    rp.measured_compute_s = rp.measured_all_to_all_s = 0;
    for (const auto& [rank, t] : terms) {
      rp.measured_compute_s = std::max(rp.measured_compute_s, t.first * 1e-9);
      rp.measured_all_to_all_s = std::max(rp.measured_all_to_all_s, t.second * 1e-9);
    }
  }
  // A trace without the layer's backward pass is compared on the forward.
  rp.forward_only = !window.empty() && window.rbegin()->first == static_cast<int>(Phase::kForward);
  const bool fw = rp.forward_only;
  const int r = std::max(1, a.current_r);
  const double rr = static_cast<double>(r);
  rp.basis = "closed_form";
  rp.simulated_s = fw ? pipemoe_time(a.terms.forward, r) : a.closed_form_current_s;
  rp.model_compute_s = rr * (a.terms.forward.t_e(r) + (fw ? 0 : a.terms.backward.t_e(r)));
  rp.model_all_to_all_s = 2 * rr * (a.terms.forward.t_d(r) + (fw ? 0 : a.terms.backward.t_d(r)));
  auto take = [&](const WhatIfResult& res) {
    rp.simulated_s = fw ? res.forward_s : res.layer_s();
    rp.model_compute_s = fw ? res.forward_compute_s : res.compute_s;
    rp.model_all_to_all_s = fw ? res.forward_all_to_all_s : res.all_to_all_s;
  };
  const auto replayed = iteration ? iteration->layers.find(L.layer) : std::map<int, WhatIfResult>::const_iterator{};
  if (iteration && replayed != iteration->layers.end()) {
    rp.basis = "iteration";
    take(replayed->second);
  } else if (o.simulate && L.workload.ranks <= o.max_simulated_ranks) {
    if (const auto own = own_configuration(trace, L)) {
      const auto res = simulate_layer(L.workload, hw.model, *own);
      if (res.ok) {
        rp.basis = "simulation";
        take(res);
      }
    }
  }
  rp.error = rp.simulated_s / rp.measured_s - 1;
  rp.unreliable = std::fabs(rp.error) > kReplayTolerance;
  if (!rp.unreliable) return;
  // The term whose model is furthest from its measurement, where one is off
  // by more than the tolerance; else their overlap.
  double worst = 0;
  rp.off_term = "overlap";
  auto consider = [&](const char* name, double model, double measured) {
    if (!(measured > 0)) return;
    const double off = std::fabs(model / measured - 1);
    if (off > kReplayTolerance && std::fabs(model - measured) > worst) {
      worst = std::fabs(model - measured);
      rp.off_term = name;
    }
  };
  consider("compute", rp.model_compute_s, rp.measured_compute_s);
  consider("all-to-all", rp.model_all_to_all_s, rp.measured_all_to_all_s);
  // The layer's other ops (gate, permutes, gathers, copies): the window
  // less its expert computation and all-to-alls, each side.
  if (rp.measured_compute_s >= 0 && rp.measured_all_to_all_s >= 0)
    consider("other ops", std::max(0.0, rp.simulated_s - rp.model_compute_s - rp.model_all_to_all_s),
             std::max(0.0, rp.measured_s - rp.measured_compute_s - rp.measured_all_to_all_s));
}

void advise_pipeline(const Trace& trace, const RecommendOptions& o, const Hardware& hw, LayerRecommendation& L) {
  auto& a = L.pipeline;
  const auto& w = L.workload;
  a.variant = L.variant.empty() ? "pipemoe" : L.variant;
  if (a.variant == "pro_prophet" || a.variant == "fastermoe") a.variant = "dpmoe";
  a.current_r = pipeline_degree(trace, L.layer);
  const int r_max = std::max(1, o.r_max);
  a.terms = pipeline_terms(w, hw.model, w.fused_experts);
  a.choice = choose_pipeline_degree(a.terms, std::max(r_max, a.current_r), o.r_candidates);
  a.closed_form_current_s = a.choice.t_by_r[static_cast<std::size_t>(a.current_r - 1)];
  a.recommended_r = a.choice.r;
  a.basis = "closed_form";
  a.predicted_current_s = a.closed_form_current_s;
  a.predicted_s = a.choice.t;
  a.computed = true;
  if (o.simulate && w.ranks <= o.max_simulated_ranks) {
    std::set<int> rs;
    if (o.r_candidates.empty())
      for (int r = 1; r <= std::min(r_max, 16); ++r) rs.insert(r);
    else
      for (int r : o.r_candidates)
        if (r >= 1 && r <= r_max) rs.insert(r);
    rs.insert(a.current_r);
    rs.insert(a.choice.r);
    // The what-if runs the layer's own schedule: MPipeMoE's alternating
    // order for an mpipemoe trace (with its strategy), pipemoe's otherwise.
    WhatIf what;
    what.variant = L.variant == "mpipemoe" ? "mpipemoe" : "pipemoe";
    what.fused_experts = what.variant == "pipemoe" && w.fused_experts;
    if (what.variant == "mpipemoe")
      what.strategy = plan::parse_reuse_strategy(trace.config_value("strategy").empty() ? "none" : trace.config_value("strategy"));
    double best = 0;
    for (int r : rs) {
      what.partitions = r;
      if (what.variant == "mpipemoe" && r < 2 && what.strategy != plan::ReuseStrategy::kNone) continue;
      auto res = simulate_layer(w, hw.model, what);
      if (res.ok && (a.simulated_best_r < 0 || res.layer_s() < best)) {
        best = res.layer_s();
        a.simulated_best_r = r;
      }
      a.simulated.push_back({r, std::move(res)});
    }
    if (a.simulated_best_r > 0) {
      a.recommended_r = a.simulated_best_r;
      a.basis = "simulation";
      a.predicted_s = best;
      for (const auto& [r, res] : a.simulated)
        if (r == a.current_r && res.ok) a.predicted_current_s = res.layer_s();
    }
  }
  a.best_r = a.recommended_r;
  const double layer = L.measured_layer_s > 0 ? L.measured_layer_s : a.predicted_current_s;
  if (a.recommended_r != a.current_r && layer > 0 && (a.predicted_current_s - a.predicted_s) < o.min_gain * layer) {
    a.recommended_r = a.current_r;
    a.predicted_s = a.predicted_current_s;
  }
}

void advise_memory(const Trace& trace, const RecommendOptions& o, const Hardware& hw, std::int64_t peak,
                   LayerRecommendation& L) {
  auto& a = L.memory;
  const auto& w = L.workload;
  // At the pipeline degree the layer would run after the pipeline advice
  // (reuse needs n >= 2 partitions).
  a.partitions = std::max(2, L.pipeline.computed ? L.pipeline.recommended_r : 2);
  if (L.variant == "mpipemoe")
    a.current = plan::parse_reuse_strategy(trace.config_value("strategy").empty() ? "none" : trace.config_value("strategy"));
  a.measured_peak_bytes = peak;
  if (o.memory_budget_bytes >= 0) {
    a.budget_bytes = o.memory_budget_bytes;
    a.budget_source = "option";
  } else if (auto b = config_number<std::int64_t>(trace, "memory_budget_bytes"); b && *b > 0) {
    a.budget_bytes = *b;
    a.budget_source = "run_config memory_budget_bytes";
  } else {
    for (const auto& d : trace.devices)
      if (d.memory_bytes > 0) a.budget_bytes = a.budget_bytes > 0 ? std::min(a.budget_bytes, d.memory_bytes) : d.memory_bytes;
    a.budget_source = a.budget_bytes > 0 ? "device memory" : "none";
  }
  ReuseInputs in = reuse_inputs(w, hw.model, a.partitions);
  in.budget_bytes = a.budget_bytes;
  in.measured_peak_bytes = peak;
  in.current = a.current;
  // The measured peak is the whole run's; a candidate moves it by the change
  // of this layer's Eq. 1-5 memory (Eq. 2 = Eq. 4 for an unpipelined layer).
  a.choice = choose_reuse_strategy(in);
  a.computed = true;
  if (o.simulate && w.ranks <= o.max_simulated_ranks) {
    for (int s = 0; s < 5; ++s) {
      WhatIf what;
      what.variant = "mpipemoe";
      what.partitions = a.partitions;
      what.strategy = static_cast<plan::ReuseStrategy>(s);
      a.simulated[static_cast<std::size_t>(s)] = simulate_layer(w, hw.model, what);
    }
  }
}

// The placement a trace ran for (iteration, layer): experts with replica or
// shadow rows, their ranks other than home.
bool trace_placement(const Trace& t, const MoeLayerWorkload& w, plan::ExpertPlacement& p, int& n) {
  p = plan::ExpertPlacement::none(w.experts);
  for (const auto& row : t.placements) {
    if (row.iteration != w.iteration || row.layer != w.layer || row.role == "home") continue;
    if (row.expert < 0 || row.expert >= w.experts || row.rank < 0 || row.rank >= w.ranks) continue;
    if (row.rank == w.routing.home(row.expert)) continue;
    auto& reps = p.replicas[static_cast<std::size_t>(row.expert)];
    if (std::find(reps.begin(), reps.end(), row.rank) == reps.end()) reps.push_back(row.rank);
  }
  double copies = 0;
  for (int e = 0; e < w.experts; ++e) {
    auto& reps = p.replicas[static_cast<std::size_t>(e)];
    if (reps.empty()) continue;
    std::sort(reps.begin(), reps.end());
    p.selected.push_back(e);
    copies += static_cast<double>(reps.size());
  }
  if (p.selected.empty()) return false;
  // Eq. 4/5 take one n for all selected experts: the mean number of devices
  // an expert is not sent to.
  n = static_cast<int>(std::lround(w.ranks - 1 - copies / static_cast<double>(p.selected.size())));
  return true;
}

// A trace of moetrace's own runs replayed an iteration at a time
// (whatif.h replay_iteration): its run record holds the configuration, and
// every MoE layer is advised at the same iteration. nullopt: another tool's
// trace, ppmoe (its micro-batches and tensor-parallel groups are not the
// workload's ranks), or a configuration the builders refuse (notes say why).
std::optional<IterationReplay> own_iteration_replay(const Trace& trace, const RecommendOptions& o, const Hardware& hw,
                                                    const std::vector<MoeLayerWorkload>& workloads,
                                                    std::vector<std::string>& notes) {
  const std::string& v = trace.run.variant;
  if (!o.simulate || trace.run.config_json.empty() || workloads.empty() || v == "ppmoe" ||
      std::find(std::begin(sim::kVariants), std::end(sim::kVariants), v) == std::end(sim::kVariants))
    return std::nullopt;
  sim::RunSpec spec;
  try {
    spec = sim::run_spec_from_json(trace.run.config_json);
  } catch (const Error&) {
    return std::nullopt;  // not a configuration of ours (or of an older moetrace)
  }
  if (spec.variant != v || spec.common.ranks > o.max_simulated_ranks) return std::nullopt;
  // The layers' iteration, after the one before it (whose tail runs into it:
  // the last Agg or gradient all-reduce on the communication stream).
  const int iteration = workloads.front().iteration;
  const int L = spec.common.model.num_layers, P = spec.common.ranks, E = spec.common.model.num_experts;
  if (static_cast<int>(workloads.size()) != L) return std::nullopt;
  for (const auto& w : workloads)
    if (w.iteration != iteration || w.layer < 0 || w.layer >= L || w.ranks != P || w.experts != E) return std::nullopt;
  const bool placed = v == "pro_prophet" || v == "fastermoe";
  std::vector<std::vector<plan::LayerRouting>> routings;
  std::vector<std::vector<plan::ExpertPlacement>> placements;
  for (int j = std::max(0, iteration - 1); j <= iteration; ++j) {
    routings.emplace_back();
    if (placed) placements.emplace_back();
    for (int l = 0; l < L; ++l) {
      routings.back().push_back(recorded_routing(trace, l, j, P, E));
      if (!placed) continue;
      MoeLayerWorkload at;
      at.layer = l;
      at.iteration = j;
      at.ranks = P;
      at.experts = E;
      at.routing = routings.back().back();
      plan::ExpertPlacement p;
      int n = 0;
      if (!trace_placement(trace, at, p, n)) p = plan::ExpertPlacement::none(E);
      placements.back().push_back(std::move(p));
    }
  }
  auto replay = replay_iterations(spec, routings, placements, hw.model);
  if (!replay.ok) {
    notes.push_back(fmt::format("replay of iteration {} as the run's configuration: {}; each layer replayed alone",
                                iteration, replay.error));
    return std::nullopt;
  }
  return replay;
}

void advise_placement(const Trace& trace, const RecommendOptions& o, const Hardware& hw,
                      const LayerMeasures& meas, LayerRecommendation& L) {
  auto& a = L.placement;
  const auto& w = L.workload;
  a.iteration = w.iteration;
  a.fnec_s = meas.fnec_s;
  a.bnec_s = meas.bnec_s;
  PlacementInputs in = placement_inputs(w, hw.model, a.fnec_s, a.bnec_s, true);
  in.alpha = o.pro_prophet_alpha;
  a.model = in.model;
  a.alpha = in.alpha;
  a.advice = recommend_placement(in);
  a.computed = true;
  a.has_current = trace_placement(trace, w, a.current, a.current_n);
  a.current_estimate = a.has_current
                           ? plan::estimate_layer_time(plan::placement_load(w.routing, a.current), w.ranks,
                                                       static_cast<int>(a.current.selected.size()), a.current_n,
                                                       in.model, in.sizes)
                           : a.advice.before;
  if (o.simulate && w.ranks <= o.max_simulated_ranks) {
    WhatIf home;
    home.variant = "dpmoe";
    home.window = LayerWindow::kMoeLayer;
    a.simulated_home = simulate_layer(w, hw.model, home);
    if (a.advice.placement.selected.empty()) return;  // nothing to compare
    WhatIf placed = home;
    placed.variant = "pro_prophet";
    placed.pro_prophet_n = a.advice.n;
    placed.pro_prophet_alpha = o.pro_prophet_alpha;
    plan::ProProphetModel planner = in.model;
    planner.hide_under_computation = false;  // unscheduled in the what-if (one iteration)
    placed.planner = planner;
    a.simulated_placed = simulate_layer(w, hw.model, placed);
  }
}

void advise_layout(const Trace& trace, const RecommendOptions& o, const Hardware& hw, LayerRecommendation& L) {
  auto& a = L.layout;
  const auto& w = L.workload;
  a.tensor_parallel = tensor_parallel_for(trace, w, o.tensor_parallel);
  if (a.tensor_parallel < 2) {
    a.skipped = fmt::format("no tensor-parallel size in [2, 8] divides {} experts on {} ranks", w.experts, w.ranks);
    return;
  }
  a.comparison = compare_ppmoe_layout(layout_inputs(w, hw.model, a.tensor_parallel));
  a.computed = a.comparison.applicable;
  if (!a.computed)
    a.skipped = fmt::format("PPMoE with T = {} does not apply ({} experts, {} ranks)", a.tensor_parallel, w.experts, w.ranks);
}

}  // namespace detail
}  // namespace moetrace::analyzer
