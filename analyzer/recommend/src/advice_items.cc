// The recommenders' findings as items: action, evidence, predicted gain
// (recommend_internal.h).
#include "moetrace/analyzer/recommend.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

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

namespace detail {


double layer_time(const LayerRecommendation& L, double model_time) {
  return L.measured_layer_s > 0 ? L.measured_layer_s : model_time;
}

// An item's layer and subject; complete ("not computed", with the reason)
// where its analysis did not run.
template <class Analysis>
RecommendationItem item_head(const LayerRecommendation& L, const char* subject, const Analysis& a) {
  RecommendationItem it;
  it.layer = L.layer;
  it.subject = subject;
  if (!a.computed) {
    it.action = "not computed";
    it.evidence = a.skipped;
  }
  return it;
}

// A computed item, complete with its predicted gain (a fraction of the
// layer's time).
RecommendationItem with_gain(RecommendationItem it, double predicted_gain) {
  it.predicted_gain = predicted_gain;
  it.gain_known = true;
  return it;
}

RecommendationItem pipeline_item(const LayerRecommendation& L, const Hardware& hw, double min_gain) {
  const auto& a = L.pipeline;
  RecommendationItem it = item_head(L, "pipeline degree", a);
  if (!a.computed) return it;
  const bool mp = L.variant == "mpipemoe";
  const char* sym = mp ? "n" : "r";
  it.change = a.recommended_r != a.current_r;
  it.action = it.change ? fmt::format("{} = {}", sym, a.recommended_r) : fmt::format("keep {} = {}", sym, a.current_r);
  const bool below_threshold = a.best_r != a.recommended_r;
  const auto& f = a.choice.forward;
  const PipelineTerms& t = a.terms.forward;
  std::string e = fmt::format(
      "pipemoe Theorem 1 on {}: alpha_a = {}, beta_a n_d = {}, alpha_e = {}, beta_e n_e = {} (forward; backward "
      "doubles the expert terms). Forward alone (Algorithm 1): r = {} ({}, {}); forward + backward: r = {}, {} vs "
      "{} at the current {} = {}.",
      hw.model.name, ms(t.alpha_a), ms(t.comm_s), ms(t.alpha_e), ms(t.comp_s), f.r, pipeline_regime_name(f.regime),
      pipeline_regime_equation(f.regime), a.choice.r, ms(a.choice.t), ms(a.closed_form_current_s), sym, a.current_r);
  if (a.simulated_best_r > 0) {
    double at_rec = 0;
    for (const auto& [r, res] : a.simulated)
      if (r == a.choice.r && res.ok) at_rec = res.layer_s();
    e += fmt::format(" Simulated with the measured routing ({} what-ifs, r = {}..{}): best r = {} at {}, current {}",
                     a.simulated.size(), a.simulated.front().first, a.simulated.back().first, a.simulated_best_r,
                     ms(a.predicted_s), ms(a.predicted_current_s));
    if (a.simulated_best_r != a.choice.r && at_rec > 0)
      e += fmt::format(" (the closed form's r = {} simulates at {}, {} slower)", a.choice.r, ms(at_rec),
                       pct(at_rec / a.predicted_s - 1));
    e += ".";
  }
  if (L.measured_layer_s > 0) e += fmt::format(" Measured MoE-layer time {} per iteration.", ms(L.measured_layer_s));
  if (below_threshold)
    e += fmt::format(" The best r = {} would save less than the {} threshold: kept.", a.best_r, pct(min_gain));
  if (a.measured) {
    std::string ranges;
    for (const auto& r : a.measured->ranges)
      ranges += fmt::format("{}n = {}: B in [{}, {}]", ranges.empty() ? "" : "; ", r.partitions, r.lower, r.upper);
    e += fmt::format(" mpipemoe Algorithm 1 on {} measured runs: {}; {} -> n = {}.", a.runs.size(), ranges,
                     a.measured->note, a.measured->partitions);
  }
  it.evidence = e;
  const double saved = a.predicted_current_s - a.predicted_s;
  return with_gain(std::move(it), saved / layer_time(L, a.predicted_current_s));
}

RecommendationItem memory_item(const LayerRecommendation& L) {
  const auto& a = L.memory;
  RecommendationItem it = item_head(L, "memory reuse", a);
  if (!a.computed) return it;
  const auto& c = a.choice;
  it.change = c.strategy != a.current;
  it.action = it.change ? plan::reuse_strategy_action(c.strategy) : "keep " + plan::reuse_strategy_action(a.current);
  std::string costs, sims;
  for (const auto& cand : c.candidates) {
    costs += fmt::format("{}{} {}{}", costs.empty() ? "" : ", ", plan::reuse_strategy_name(cand.strategy),
                         ms(cand.eq10_s()), cand.fits ? "" : " (does not fit)");
    const auto& s = a.simulated[static_cast<std::size_t>(cand.strategy)];
    if (s.ok)
      sims += fmt::format("{}{} {} / peak {}", sims.empty() ? "" : ", ", plan::reuse_strategy_name(cand.strategy),
                          ms(s.layer_s()), format_gib(static_cast<double>(s.peak_bytes)));
  }
  const auto& none = c.candidates[0];
  const auto& reuse = c.candidates[static_cast<std::size_t>(c.strategy == plan::ReuseStrategy::kNone ? 4 : static_cast<int>(c.strategy))];
  std::string e = fmt::format(
      "mpipemoe at n = {}: Eq. 1 model states {}, Eq. 4 activations and buffers {} each, Eq. 5 saves {} of each "
      "(Eq. 6 ratio {}). Budget {} ({}){}; predicted peak without reuse {}, with reuse {}. Eq. 10 (forward + "
      "backward, sigma {:.2f}/{:.2f}, mu {:.2f}/{:.2f}, eta {:.2f}): {}. {}.",
      a.partitions, format_gib(c.memory.model_states), format_gib(c.memory.activations), format_gib(c.memory.saving),
      pct(c.memory.saving_ratio), a.budget_bytes > 0 ? format_gib(static_cast<double>(a.budget_bytes)) : "none",
      a.budget_source, a.measured_peak_bytes >= 0 ? fmt::format(", measured peak {}", format_gib(static_cast<double>(a.measured_peak_bytes))) : "",
      format_gib(none.predicted_peak_bytes), format_gib(reuse.predicted_peak_bytes), none.sigma, reuse.sigma, none.mu, reuse.mu, reuse.eta,
      costs, c.reason);
  if (!sims.empty()) e += fmt::format(" Simulated (mpipemoe, n = {}): {}.", a.partitions, sims);
  it.evidence = e;
  const auto& chosen = c.candidates[static_cast<std::size_t>(c.strategy)];
  const auto& cur = c.candidates[static_cast<std::size_t>(a.current)];
  const auto& s_chosen = a.simulated[static_cast<std::size_t>(c.strategy)];
  const auto& s_cur = a.simulated[static_cast<std::size_t>(a.current)];
  if (s_chosen.ok && s_cur.ok)
    return with_gain(std::move(it), (s_cur.layer_s() - s_chosen.layer_s()) / layer_time(L, s_cur.layer_s()));
  return with_gain(std::move(it), (cur.alpha_s() - chosen.alpha_s()) / layer_time(L, cur.alpha_s()));
}

RecommendationItem placement_item(const LayerRecommendation& L, double min_gain) {
  const auto& a = L.placement;
  RecommendationItem it = item_head(L, "expert placement", a);
  if (!a.computed) return it;
  const auto& p = a.advice;
  const auto& w = L.workload;
  auto same = [&](const plan::ExpertPlacement& x, const plan::ExpertPlacement& y) {
    std::vector<int> sx = x.selected, sy = y.selected;
    std::sort(sx.begin(), sx.end());
    std::sort(sy.begin(), sy.end());
    return sx == sy && x.replicas == y.replicas;
  };
  it.change = a.has_current ? !same(p.placement, a.current) : !p.placement.selected.empty();
  const double model_gain = a.current_estimate.total > 0 ? (a.current_estimate.total - p.after.total) / a.current_estimate.total : 0.0;
  const bool below_threshold = it.change && model_gain < min_gain;
  if (below_threshold) it.change = false;
  if (!it.change) {
    it.action = a.has_current ? "keep the trace's placement" : "keep the home placement";
  } else {
    std::string s;
    const std::size_t shown = std::min<std::size_t>(p.placement.selected.size(), 4);
    for (std::size_t i = 0; i < shown; ++i) {
      const int e = p.placement.selected[i];
      const auto& reps = p.placement.replicas[static_cast<std::size_t>(e)];
      s += fmt::format("{}expert {} (home rank {}) to {} rank{}", i ? "; " : "", e, w.routing.home(e), reps.size(),
                       reps.size() == 1 ? "" : "s");
    }
    if (p.placement.selected.size() > shown) s += fmt::format("; {} more", p.placement.selected.size() - shown);
    it.action = fmt::format("replicate {} (pro-prophet, n = {})", s, p.n);
  }
  auto list = [](const std::vector<double>& v) {
    std::string s;
    const std::size_t n = std::min<std::size_t>(v.size(), 8);
    for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}{:.0f}", i ? ", " : "", v[i]);
    if (v.size() > n) s += ", ...";
    return "[" + s + "]";
  };
  const double max_before = p.computed_before.empty() ? 0 : *std::max_element(p.computed_before.begin(), p.computed_before.end());
  std::string e = fmt::format(
      "Load of iteration {}: tokens computed per rank H = {} (max {:.0f}, balance degree {:.1f}). pro-prophet "
      "Algorithm 1 (alpha = {}, B-bar {:.3g} GB/s, t {:.3g} tokens/s, T_FNEC {}, T_BNEC {}): {} expert{} "
      "selected; Eq. 8 layer time {} -> {} (4 T_A2A {} -> {}, 3 T_FEC {} -> {}, unhidden Trans + Agg {}); "
      "without the block-wise schedule (Eq. 6) {}; H after = {}, balance degree {:.1f} (RB {}).",
      a.iteration, list(p.computed_before), max_before, p.balance_degree_before, a.alpha,
      a.model.bandwidth_bytes_per_s * 1e-9, a.model.expert_tokens_per_s, ms(a.fnec_s), ms(a.bnec_s),
      p.placement.selected.size(), p.placement.selected.size() == 1 ? "" : "s", ms(p.before.total), ms(p.after.total),
      ms(4 * p.before.a2a), ms(4 * p.after.a2a), ms(3 * p.before.fec), ms(3 * p.after.fec), ms(p.after.trans + p.after.agg),
      ms(p.after_unhidden.total), list(p.computed_after), p.balance_degree_after,
      std::isfinite(p.rb) ? fmt::format("{:.2f}", p.rb) : "inf");
  if (a.has_current)
    e += fmt::format(" The trace ran {} replicated expert{} in iteration {} (n = {} on average): Eq. 8 {} on this "
                     "load.",
                     a.current.selected.size(), a.current.selected.size() == 1 ? "" : "s", a.iteration, a.current_n,
                     ms(a.current_estimate.total));
  if (a.simulated_home.ok && a.simulated_placed.ok)
    e += fmt::format(" Simulated MoE layer with the measured load: DPMoE {} vs Pro-Prophet (n = {}, unscheduled) {}.",
                     ms(a.simulated_home.layer_s()), p.n, ms(a.simulated_placed.layer_s()));
  if (below_threshold)
    e += fmt::format(" The planned placement would save {} by Eq. 8, below the {} threshold: kept.", pct(model_gain),
                     pct(min_gain));
  it.evidence = e;
  // Eq. 6/8 leave out startups and the rest of the layer: their relative
  // saving, not their seconds, is the prediction.
  const double gain = it.change ? model_gain : 0.0;
  return with_gain(std::move(it), gain);
}

RecommendationItem layout_item(const LayerRecommendation& L, double min_gain) {
  const auto& a = L.layout;
  RecommendationItem it = item_head(L, "layout", a);
  if (!a.computed) return it;
  const auto& c = a.comparison;
  it.change = c.ppmoe_better && c.gain >= min_gain;
  it.action = it.change ? fmt::format("PPMoE layout (experts over tensor-parallel groups of {})", a.tensor_parallel)
                             : "keep expert parallelism";
  it.evidence = fmt::format(
      "ppmoe Eq. 2: t_a2a / t_FFN = {:.3g} (F = {:.3g} TFLOP/s, B = {:.3g} GB/s from the all-to-all at P = {}); Eq. 5: "
      "t_allreduce / t_cal = {:.3g} (all-reduce at T = {}: {:.3g} GB/s). With alpha terms, per device and iteration "
      "(forward + backward): expert parallelism 4 all-to-alls of {} + experts {} = {}; PPMoE experts {} + 2 "
      "all-reduces of {} = {}.",
      c.eq2_ratio, c.flops_per_s * 1e-12, c.a2a_bandwidth * 1e-9, L.workload.ranks, c.eq5_ratio, a.tensor_parallel,
      c.ar_bandwidth * 1e-9, ms(c.t_a2a), ms(3 * c.t_expert_ep), ms(c.ep_s), ms(3 * c.t_expert_pp), ms(c.t_allreduce),
      ms(c.ppmoe_s));
  const double gain = it.change && c.ep_s > 0 ? (c.ep_s - c.ppmoe_s) / c.ep_s : 0.0;
  return with_gain(std::move(it), gain);
}

}  // namespace detail
}  // namespace moetrace::analyzer
