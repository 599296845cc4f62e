#include "trace_advice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "recommend_internal.h"

namespace moetrace::analyzer::detail {
namespace {

// layer -> mean window (s) over its (rank, iteration) windows.
std::map<int, double> layer_windows_s(const Trace& t) {
  std::map<int, std::pair<double, int>> sum;
  for (const auto& w : compute_breakdown(t).layer_windows) {
    sum[w.layer].first += static_cast<double>(w.ns) * 1e-9;
    ++sum[w.layer].second;
  }
  std::map<int, double> out;
  for (const auto& [layer, s] : sum) out[layer] = s.first / s.second;
  return out;
}

// A what-if's note about `layer`, else its first note.
const std::string& note_for_layer(const GraphWhatIfResult& r, int layer) {
  const auto it = r.layer_notes.find(layer);
  return it != r.layer_notes.end() ? it->second : r.notes.front();
}

}  // namespace

std::map<int, TraceReplay> trace_replay_by_layer(const Trace& trace, const Hardware& hw,
                                                  const std::vector<int>& candidates,
                                                  const WorkloadSources& sources) {
  std::map<int, TraceReplay> out;
  const auto g = build_exec_graph(trace);
  std::size_t unresolved = 0;
  const auto measured = layer_windows_s(trace);
  const auto replayed = layer_windows_s(replayed_trace(trace, g, evaluate_exec_graph(g, &unresolved)));
  for (const auto& [layer, m] : measured) {
    auto& r = out[layer];
    r.computed = true;
    r.measured_s = m;
    r.replayed_s = replayed.contains(layer) ? replayed.at(layer) : -1;
    r.error = m > 0 && r.replayed_s > 0 ? r.replayed_s / m - 1 : 0;
    r.within = std::abs(r.error) <= kTraceReplayTolerance && unresolved == 0;
    if (!r.within) r.missing = g.missing;
    r.cost_source = hw.info.description;
    r.predictions.push_back({1, r.replayed_s, -1, -1});
  }
  // The betas at -/+ one relative residual of their fits, where fitted.
  std::vector<sim::CostModel> corners;
  if (hw.expert_rel_sd > 0 || hw.a2a_rel_sd > 0)
    for (const double s : {-1.0, 1.0}) corners.push_back(scaled(hw, s * hw.expert_rel_sd, s * hw.a2a_rel_sd).model);
  for (int r : candidates) {
    if (r <= 1) continue;
    GraphWhatIfs w;
    w.pipeline_degree = r;
    auto predict = [&](const sim::CostModel& m, GraphWhatIfResult* result) {
      auto changed = g;
      auto res = apply_graph_what_ifs(trace, changed, w, m, hw.info.description, sources);
      if (result) *result = std::move(res);
      return layer_windows_s(replayed_trace(trace, changed, evaluate_exec_graph(changed)));
    };
    GraphWhatIfResult result;
    const auto nominal = predict(hw.model, &result);
    if (result.instances_changed == 0) {
      for (auto& [layer, tr] : out)
        if (tr.skipped.empty())
          tr.skipped = result.notes.empty() ? "no layer instance could be split" : result.notes.front();
      break;
    }
    std::vector<std::map<int, double>> ranges;
    for (const auto& m : corners) ranges.push_back(predict(m, nullptr));
    for (auto& [layer, tr] : out) {
      TraceReplay::Prediction p{r, nominal.contains(layer) ? nominal.at(layer) : -1, -1, -1};
      for (const auto& c : ranges)
        if (c.contains(layer)) {
          const double v = c.at(layer);
          p.low_s = p.low_s < 0 ? v : std::min(p.low_s, v);
          p.high_s = std::max(p.high_s, v);
        }
      tr.predictions.push_back(p);
    }
  }
  // Memory reuse and placement on the same graph (their advice keeps its
  // models' choice: the graph gives the time, not the memory).
  for (const auto* kv : {"reuse=S1", "reuse=S2", "reuse=S3", "reuse=S4", "placement=pro-prophet"}) {
    GraphWhatIfs w;
    parse_graph_what_if(kv, w);
    auto changed = g;
    const auto res = apply_graph_what_ifs(trace, changed, w, hw.model, hw.info.description, sources);
    std::size_t cyc = 0;
    const auto windows = layer_windows_s(replayed_trace(trace, changed, evaluate_exec_graph(changed, &cyc)));
    for (auto& [layer, tr] : out) {
      if (res.instances_changed == 0 || cyc > 0) {
        tr.other_notes.push_back(fmt::format("{}: {}", kv, cyc > 0 ? "the changed graph holds a cycle"
                                                           : res.notes.empty() ? "nothing to change"
                                                                               : note_for_layer(res, layer)));
        continue;
      }
      tr.other_predictions.push_back({kv, windows.contains(layer) ? windows.at(layer) : -1});
    }
  }
  for (auto& [layer, tr] : out) {
    double best = -1;
    for (const auto& p : tr.predictions)
      if (p.predicted_s > 0 && (best < 0 || p.predicted_s < best)) {
        best = p.predicted_s;
        tr.best_r = p.r;
      }
  }
  return out;
}

std::string trace_what_if_evidence(const LayerRecommendation& L, std::string_view prefix) {
  const auto& t = L.trace_replay;
  if (!t.computed) return {};
  std::string e;
  for (const auto& [what, s] : t.other_predictions)
    if (what.starts_with(prefix) && s > 0)
      e += fmt::format("{}{} {} ({:+.1f} %)", e.empty() ? "" : ", ", what, ms(s), 100 * (s / t.replayed_s - 1));
  for (const auto& n : t.other_notes)
    if (n.starts_with(prefix)) e += fmt::format("{}{}", e.empty() ? "" : "; ", n);
  if (e.empty()) return {};
  return fmt::format(" On the trace's own execution graph (replayed {} per layer window): {}.", ms(t.replayed_s), e);
}

RecommendationItem trace_pipeline_item(const LayerRecommendation& L, double min_gain) {
  const auto& t = L.trace_replay;
  RecommendationItem it;
  it.layer = L.layer;
  it.subject = "pipeline degree";
  const double base = t.replayed_s;
  double best_s = base;
  int best_r = 1;
  const TraceReplay::Prediction* best_p = nullptr;
  for (const auto& p : t.predictions)
    if (p.predicted_s > 0 && p.predicted_s < best_s) {
      best_s = p.predicted_s;
      best_r = p.r;
      best_p = &p;
    }
  const double gain = base > 0 ? (base - best_s) / base : 0;
  it.change = best_r != 1 && gain >= min_gain;
  it.action = it.change ? fmt::format("r = {}", best_r) : "keep r = 1";
  std::string preds;
  for (const auto& p : t.predictions)
    if (p.r > 1 && p.predicted_s > 0) preds += fmt::format("{}r = {} {}", preds.empty() ? "" : ", ", p.r, ms(p.predicted_s));
  std::string e = fmt::format(
      "From the trace's own execution graph: measured {} per layer window, replayed {} ({:+.1f} %); split into r "
      "pipelined chunks (the graph what-if): {}. New kernel durations from {}.",
      ms(t.measured_s), ms(t.replayed_s), 100 * t.error, preds.empty() ? "no layer instance could be split" : preds,
      t.cost_source);
  if (!t.skipped.empty()) e += " " + t.skipped + ".";
  if (!t.within) {
    std::string missing;
    for (const auto& m : t.missing) missing += (missing.empty() ? "" : "; ") + m;
    e = fmt::format("Replay off by {:+.1f} % (more than {:.0f} %): the graph misses what set this layer's time ({}). {}",
                    100 * t.error, 100 * kTraceReplayTolerance, missing.empty() ? "not known" : missing, e);
  }
  if (!it.change && best_r != 1)
    e += fmt::format(" The best r = {} would save less than the {:.1f} % threshold: kept.", best_r, 100 * min_gain);
  it.evidence = e;
  it.predicted_gain = std::max(0.0, it.change ? gain : 0.0);
  it.gain_known = base > 0;
  if (it.change && best_p != nullptr && best_p->low_s > 0) {
    it.gain_interval = true;
    it.gain_low = (base - best_p->high_s) / base;
    it.gain_high = (base - best_p->low_s) / base;
  }
  return it;
}

}  // namespace moetrace::analyzer::detail
