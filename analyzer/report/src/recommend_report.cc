// Recommendations as JSON (schemas/recommendations.schema.json), text and
// Markdown.
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "moetrace/analyzer/recommendations.h"
#include "moetrace/plan/config.h"

namespace moetrace::analyzer {

namespace {

using nlohmann::json;

// Finite numbers only (JSON has no infinity): null otherwise.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json terms_json(const PipelineTerms& t) {
  return {{"alpha_a_s", t.alpha_a}, {"beta_a_n_d_s", t.comm_s}, {"alpha_e_s", t.alpha_e}, {"beta_e_n_e_s", t.comp_s}};
}

json candidate_json(const PipelineCandidate& c) {
  json j = {{"feasible", c.feasible}};
  if (c.feasible) {
    j["r"] = c.r;
    j["t_s"] = c.t;
  }
  return j;
}

json theorem1_json(const Theorem1Result& t) {
  return {{"r", t.r},
          {"t_s", t.t},
          {"regime", std::string(pipeline_regime_name(t.regime))},
          {"equation", std::string(pipeline_regime_equation(t.regime))},
          {"t1_s", t.t1},
          {"case2", candidate_json(t.case2)},
          {"case3", candidate_json(t.case3)},
          {"case4", candidate_json(t.case4)}};
}

json whatif_json(const WhatIfResult& r) {
  if (!r.ok) return {{"ok", false}, {"error", r.error}};
  return {{"ok", true},
          {"forward_s", r.forward_s},
          {"backward_s", r.backward_s},
          {"layer_s", r.layer_s()},
          {"makespan_s", r.makespan_s},
          {"peak_bytes", r.peak_bytes}};
}

json replay_json(const Replay& r) {
  if (!r.computed) return {{"computed", false}};
  json j = {{"computed", true},
            {"measured_s", r.measured_s},
            {"simulated_s", r.simulated_s},
            {"basis", r.basis},
            {"error", r.error},
            {"unreliable", r.unreliable},
            {"forward_only", r.forward_only},
            {"model_compute_s", r.model_compute_s},
            {"model_all_to_all_s", r.model_all_to_all_s}};
  if (r.measured_compute_s >= 0) j["measured_compute_s"] = r.measured_compute_s;
  if (r.measured_all_to_all_s >= 0) j["measured_all_to_all_s"] = r.measured_all_to_all_s;
  if (r.unreliable) j["off_term"] = r.off_term;
  return j;
}

json trace_replay_json(const TraceReplay& t) {
  if (!t.computed) return {{"computed", false}};
  json preds = json::array();
  for (const auto& p : t.predictions) {
    json row = {{"pipeline_degree", p.r}, {"predicted_s", p.predicted_s}};
    if (p.low_s > 0) row["range_s"] = {p.low_s, p.high_s};
    preds.push_back(std::move(row));
  }
  json j = {{"computed", true},
            {"measured_s", t.measured_s},
            {"replayed_s", t.replayed_s},
            {"error", t.error},
            {"within_tolerance", t.within},
            {"tolerance", kTraceReplayTolerance},
            {"cost_source", t.cost_source},
            {"predictions", preds},
            {"best_pipeline_degree", t.best_r}};
  if (!t.within) j["missing"] = t.missing;
  json others = json::array();
  for (const auto& [what, s] : t.other_predictions) others.push_back({{"what_if", what}, {"predicted_s", s}});
  j["other_what_ifs"] = others;
  if (!t.other_notes.empty()) j["other_notes"] = t.other_notes;
  if (!t.skipped.empty()) j["skipped"] = t.skipped;
  return j;
}

json pipeline_json(const PipelineDegreeAdvice& a) {
  if (!a.computed) return {{"computed", false}, {"skipped", a.skipped}};
  json sims = json::array();
  for (const auto& [r, res] : a.simulated) {
    json s = whatif_json(res);
    s["r"] = r;
    sims.push_back(s);
  }
  json j = {{"computed", true},
            {"variant", a.variant},
            {"current_r", a.current_r},
            {"recommended_r", a.recommended_r},
            {"best_r", a.best_r},
            {"basis", a.basis},
            {"predicted_current_s", a.predicted_current_s},
            {"predicted_s", a.predicted_s},
            {"forward_terms", terms_json(a.terms.forward)},
            {"backward_terms", terms_json(a.terms.backward)},
            {"closed_form",
             {{"r", a.choice.r},
              {"t_s", a.choice.t},
              {"current_t_s", a.closed_form_current_s},
              {"t_by_r_s", a.choice.t_by_r},
              {"forward", theorem1_json(a.choice.forward)},
              {"backward", theorem1_json(a.choice.backward)}}},
            {"simulated", sims},
            {"simulated_best_r", a.simulated_best_r}};
  if (a.measured) {
    json runs = json::array();
    for (const auto& r : a.runs)
      runs.push_back({{"tokens", r.tokens}, {"partitions", r.partitions}, {"time_s", r.time_s}, {"trace", r.source}});
    json ranges = json::array();
    for (const auto& r : a.measured->ranges)
      ranges.push_back({{"partitions", r.partitions}, {"lower", r.lower}, {"upper", r.upper}});
    j["range_search"] = {{"runs", runs},
                         {"ranges", ranges},
                         {"monotone", a.measured->monotone},
                         {"partitions", a.measured->partitions},
                         {"measured", a.measured->measured},
                         {"note", a.measured->note}};
  }
  return j;
}

json memory_json_(const MemoryReuseAdvice& a) {
  if (!a.computed) return {{"computed", false}, {"skipped", a.skipped}};
  json cands = json::array();
  for (const auto& c : a.choice.candidates) {
    auto q = [](const ReuseQ& x) { return json::array({x.gemms, x.all_to_alls, x.copies_di, x.copies_m}); };
    cands.push_back({{"strategy", std::string(plan::reuse_strategy_name(c.strategy))},
                     {"q_forward", q(c.q_forward)},
                     {"q_backward", q(c.q_backward)},
                     {"sigma", c.sigma},
                     {"mu", c.mu},
                     {"eta", c.eta},
                     {"eq10_forward_s", c.eq10_forward_s},
                     {"eq10_backward_s", c.eq10_backward_s},
                     {"eq10_s", c.eq10_s()},
                     {"with_alpha_s", c.alpha_s()},
                     {"bound", c.bound},
                     {"layer_memory_bytes", c.layer_memory_bytes},
                     {"predicted_peak_bytes", c.predicted_peak_bytes},
                     {"fits", c.fits},
                     {"simulated", whatif_json(a.simulated[static_cast<std::size_t>(c.strategy)])}});
  }
  const auto& m = a.choice.memory;
  return {{"computed", true},
          {"partitions", a.partitions},
          {"budget_bytes", a.budget_bytes},
          {"budget_source", a.budget_source},
          {"measured_peak_bytes", a.measured_peak_bytes},
          {"current", std::string(plan::reuse_strategy_name(a.current))},
          {"recommended", std::string(plan::reuse_strategy_name(a.choice.strategy))},
          {"fits", a.choice.fits},
          {"reason", a.choice.reason},
          {"eq1_model_states_bytes", m.model_states},
          {"eq4_activations_bytes", m.activations},
          {"eq4_buffers_bytes", m.buffers},
          {"eq5_saving_bytes", m.saving},
          {"eq6_saving_ratio", m.saving_ratio},
          {"candidates", cands}};
}

json estimate_json(const plan::LayerTimeEstimate& t) {
  return {{"a2a_s", t.a2a}, {"fec_s", t.fec}, {"bec_s", t.bec}, {"trans_s", t.trans}, {"agg_s", t.agg}, {"total_s", t.total}};
}

json placement_json(const PlacementAdviceInfo& a, const MoeLayerWorkload& w) {
  if (!a.computed) return {{"computed", false}, {"skipped", a.skipped}};
  const auto& p = a.advice;
  json sel = json::array();
  for (int e : p.placement.selected)
    sel.push_back({{"expert", e}, {"home", w.routing.home(e)}, {"replicas", p.placement.replicas[static_cast<std::size_t>(e)]}});
  return {{"computed", true},
          {"iteration", a.iteration},
          {"n", p.n},
          {"alpha", a.alpha},
          {"bandwidth_bytes_per_s", a.model.bandwidth_bytes_per_s},
          {"expert_tokens_per_s", a.model.expert_tokens_per_s},
          {"fnec_s", a.fnec_s},
          {"bnec_s", a.bnec_s},
          {"selected", sel},
          {"before", estimate_json(p.before)},
          {"after", estimate_json(p.after)},
          {"after_unscheduled", estimate_json(p.after_unhidden)},
          {"computed_before", p.computed_before},
          {"computed_after", p.computed_after},
          {"received_before", p.received_before},
          {"received_after", p.received_after},
          {"balance_degree_before", p.balance_degree_before},
          {"balance_degree_after", p.balance_degree_after},
          {"rb", num(p.rb)},
          {"model_gain", p.gain},
          {"current", a.has_current ? json{{"n", a.current_n},
                                          {"estimate", estimate_json(a.current_estimate)},
                                          {"experts", a.current.selected}}
                                    : json(nullptr)},
          {"simulated_home", whatif_json(a.simulated_home)},
          {"simulated_placed", whatif_json(a.simulated_placed)}};
}

json layout_json(const LayoutAdvice& a) {
  if (!a.computed) return {{"computed", false}, {"skipped", a.skipped}};
  const auto& c = a.comparison;
  return {{"computed", true},
          {"tensor_parallel", a.tensor_parallel},
          {"flops_per_s", c.flops_per_s},
          {"a2a_bandwidth_bytes_per_s", c.a2a_bandwidth},
          {"allreduce_bandwidth_bytes_per_s", c.ar_bandwidth},
          {"eq2_ratio", c.eq2_ratio},
          {"eq5_ratio", c.eq5_ratio},
          {"t_a2a_s", c.t_a2a},
          {"t_expert_ep_s", c.t_expert_ep},
          {"t_allreduce_s", c.t_allreduce},
          {"t_expert_ppmoe_s", c.t_expert_pp},
          {"expert_parallel_s", c.ep_s},
          {"ppmoe_s", c.ppmoe_s},
          {"ppmoe_better", c.ppmoe_better},
          {"gain", c.gain}};
}

json hardware_json(const HardwareModelInfo& h) {
  json j = {{"source", h.source}, {"description", h.description}};
  if (h.terms.is_object()) j.update(h.terms);
  if (!j.contains("name")) j["name"] = "";
  if (!h.fits.empty()) {
    json fits = json::array();
    for (const auto& f : h.fits) {
      json e = {{"term", f.term}, {"source", f.source}, {"x", f.x},         {"points", f.points},
                {"r2", num(f.r2)}, {"x_min", num(f.x_min)}, {"x_max", num(f.x_max)}};
      if (!f.why.empty()) e["why"] = f.why;
      fits.push_back(std::move(e));
    }
    j["fits"] = std::move(fits);
  }
  return j;
}

std::string gain_text(const RecommendationItem& it) {
  if (!it.gain_known) return "-";
  if (it.gain_interval)
    return fmt::format("{:+.1f} % ({:+.1f} to {:+.1f} %)", it.predicted_gain * 100.0, it.gain_low * 100.0,
                       it.gain_high * 100.0);
  return fmt::format("{:+.1f} %", it.predicted_gain * 100.0);
}

}  // namespace

json recommendations_to_json(const Recommendations& r) {
  json items = json::array();
  for (const auto& it : r.items) {
    json j = {{"layer", it.layer}, {"subject", it.subject}, {"action", it.action}, {"evidence", it.evidence},
              {"change", it.change}};
    if (it.gain_known) j["predicted_gain"] = num(it.predicted_gain);
    if (it.gain_interval) j["predicted_gain_interval"] = {num(it.gain_low), num(it.gain_high)};
    items.push_back(j);
  }
  json layers = json::array();
  for (const auto& L : r.layers) {
    const auto& w = L.workload;
    layers.push_back({{"layer", L.layer},
                      {"variant", L.variant},
                      {"workload",
                       {{"ranks", w.ranks},
                        {"experts", w.experts},
                        {"top_k", w.top_k},
                        {"model_dim", w.model_dim},
                        {"hidden", w.hidden},
                        {"gated", w.gated},
                        {"elem_bytes", w.elem_bytes},
                        {"iteration", w.iteration},
                        {"max_tokens_per_rank", w.max_tokens_per_rank()}}},
                      {"measured_layer_s", L.measured_layer_s},
                      {"iterations", L.iterations},
                      {"replay", replay_json(L.replay)},
                      {"trace_replay", trace_replay_json(L.trace_replay)},
                      {"pipeline_degree", pipeline_json(L.pipeline)},
                      {"memory_reuse", memory_json_(L.memory)},
                      {"expert_placement", placement_json(L.placement, w)},
                      {"layout", layout_json(L.layout)}});
  }
  return {{"recommendations_version", kRecommendationsVersion},
          {"status", "computed"},
          {"trace", r.trace},
          {"hardware_model", hardware_json(r.hardware)},
          {"notes", r.notes},
          {"items", items},
          {"layers", layers}};
}

std::string trace_replay_text(const TraceReplay& t) {
  if (!t.computed) return "";
  return fmt::format("replay of the trace's own execution graph: {:.3f} ms against {:.3f} ms measured per layer "
                     "window, {:+.1f} %{}",
                     t.replayed_s * 1e3, t.measured_s * 1e3, t.error * 100,
                     t.within ? "" : fmt::format(": off by more than {:.0f} %", kTraceReplayTolerance * 100));
}

std::string off_term_text(const Replay& r) {
  if (r.off_term == "other ops") return "its other ops and idle time are off";
  return fmt::format("the {} term is off", r.off_term);
}

std::string replay_text(const Replay& r) {
  if (!r.computed) return "";
  return fmt::format("replay of the trace's own configuration: {:.3f} ms ({}{}) against {:.3f} ms measured, {:+.1f} %{}",
                     r.simulated_s * 1e3,
                     r.basis == "iteration"    ? "its iteration simulated"
                     : r.basis == "simulation" ? "the layer simulated"
                                               : "closed form",
                     r.forward_only ? ", forward pass only: the trace has no backward" : "", r.measured_s * 1e3,
                     r.error * 100, r.unreliable ? ": UNRELIABLE, " + off_term_text(r) : "");
}

void write_recommendations_text(std::ostream& out, const Recommendations& r) {
  out << "moetrace recommend: " << r.trace << "\n";
  out << "hardware model: " << r.hardware.description << "\n";
  for (const auto& n : r.notes) out << "note: " << n << "\n";
  if (r.items.empty()) {
    out << "\nNo recommendations (no MoE layer could be advised on: the notes say why).\n";
    return;
  }
  int layer = -2;
  for (const auto& it : r.items) {
    if (it.layer != layer) {
      layer = it.layer;
      const LayerRecommendation* L = nullptr;
      for (const auto& l : r.layers)
        if (l.layer == layer) L = &l;
      out << fmt::format("\nLayer {}", layer);
      if (L) {
        const auto& w = L->workload;
        out << fmt::format(" ({} ranks, {} experts, top-{}, M = {}, H = {}{}, {}-byte elements{})", w.ranks, w.experts,
                           w.top_k, w.model_dim, w.hidden, w.gated ? " gated" : "", w.elem_bytes,
                           L->measured_layer_s > 0 ? fmt::format("; measured {:.3f} ms per iteration", L->measured_layer_s * 1e3)
                                                   : "");
      }
      out << "\n";
      if (L && L->trace_replay.computed) out << "  " << trace_replay_text(L->trace_replay) << "\n";
      if (L && L->replay.computed) out << "  " << replay_text(L->replay) << "\n";
    }
    out << fmt::format("  {:<17} {}   [gain {}]\n", it.subject + ":", it.action, gain_text(it));
    out << "      " << it.evidence << "\n";
  }
  out << "\ngain: predicted time saved per iteration as a share of the layer's time (negative: the change costs "
         "time, e.g. memory reuse buys memory)\n";
}

void write_recommendations_markdown(std::ostream& out, const Recommendations& r) {
  out << "# moetrace recommendations\n\n";
  out << "Trace: `" << r.trace << "`  \nHardware model: " << r.hardware.description << "\n\n";
  for (const auto& n : r.notes) out << "> " << n << "\n\n";
  if (r.items.empty()) {
    out << "No recommendations (no MoE layer could be advised on: the notes say why).\n";
    return;
  }
  out << "| layer | subject | action | predicted gain |\n|---:|---|---|---:|\n";
  for (const auto& it : r.items)
    out << fmt::format("| {} | {} | {} | {} |\n", it.layer, it.subject, it.action, gain_text(it));
  out << "\n## Evidence\n";
  int layer = -2;
  for (const auto& it : r.items) {
    if (it.layer != layer) {
      layer = it.layer;
      out << fmt::format("\n### Layer {}\n\n", layer);
      for (const auto& l : r.layers)
        if (l.layer == layer) {
          if (l.trace_replay.computed) out << trace_replay_text(l.trace_replay) << "\n\n";
          if (l.replay.computed) out << replay_text(l.replay) << "\n\n";
        }
    }
    out << fmt::format("- **{}: {}** — {}\n", it.subject, it.action, it.evidence);
  }
  out << "\nPredicted gain: time saved per iteration as a share of the layer's time (negative: the change "
         "costs time).\n";
}

}  // namespace moetrace::analyzer
