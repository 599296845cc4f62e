#include "moetrace/analyzer/recommend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
#include "moetrace/plan/flops.h"
#include "moetrace/sim/run_spec.h"
#include "hardware.h"
#include "recommend_internal.h"
#include "trace_advice.h"

namespace moetrace::analyzer {
using detail::Hardware;
using detail::hardware_terms;
using detail::LayerNotes;
using detail::resolve_hardware;
using detail::scaled;
using detail::LayerMeasures;
using detail::ms;
using detail::replay_layer;
using detail::own_iteration_replay;
using detail::advise_pipeline;
using detail::advise_memory;
using detail::advise_placement;
using detail::advise_layout;
using detail::pipeline_item;
using detail::memory_item;
using detail::placement_item;
using detail::layout_item;
}  // namespace moetrace::analyzer

namespace moetrace::analyzer {

namespace {

// From the breakdown rows and the ops of the layer.
std::map<int, LayerMeasures> layer_measures(const Trace& t, const Breakdown& b) {
  std::map<int, LayerMeasures> out;
  std::map<int, std::map<std::pair<int, int>, std::int64_t>> win;  // layer -> (iteration, phase) -> max window
  for (const auto& row : b.rows) {
    auto& w = win[row.layer][{row.iteration, static_cast<int>(row.phase)}];
    w = std::max(w, row.t.window_ns);
  }
  for (const auto& [layer, by] : win) {
    std::map<int, std::int64_t> per_iteration;
    for (const auto& [key, ns] : by) per_iteration[key.first] += ns;
    double sum = 0;
    for (const auto& [it, ns] : per_iteration) sum += static_cast<double>(ns);
    auto& m = out[layer];
    m.iterations = static_cast<int>(per_iteration.size());
    m.layer_s = per_iteration.empty() ? -1 : sum * 1e-9 / static_cast<double>(per_iteration.size());
  }
  // Chunks, and the block's non-MoE compute (attention, dense FFN and its
  // tensor-parallel all-reduce): per (iteration, phase) the slowest rank.
  std::map<int, std::map<std::tuple<int, int, int>, std::int64_t>> nonmoe;  // layer -> (it, phase, rank) -> ns
  for (const auto& op : t.ops) {
    if (op.layer < 0) continue;
    if (op.kind == OpKind::kAttention || op.kind == OpKind::kDenseFfn || op.kind == OpKind::kTensorParallelAllReduce)
      nonmoe[op.layer][{op.iteration, static_cast<int>(op.phase), op.rank.value}] += op.duration();
  }
  for (const auto& [layer, by] : nonmoe) {
    std::map<std::pair<int, int>, std::int64_t> slowest;
    for (const auto& [key, ns] : by) {
      auto& s = slowest[{std::get<0>(key), std::get<1>(key)}];
      s = std::max(s, ns);
    }
    std::map<int, std::pair<double, int>> per_phase;  // phase -> (sum, iterations)
    for (const auto& [key, ns] : slowest) {
      per_phase[key.second].first += static_cast<double>(ns) * 1e-9;
      per_phase[key.second].second += 1;
    }
    auto mean = [&](Phase p) {
      auto it = per_phase.find(static_cast<int>(p));
      return it == per_phase.end() ? 0.0 : it->second.first / it->second.second;
    };
    out[layer].fnec_s = mean(Phase::kForward);
    out[layer].bnec_s = mean(Phase::kBackward);
  }
  return out;
}


}  // namespace

namespace {

// Layers whose expert GEMMs the hardware model bounds by their weights
// (sim cost_model.h's roofline): a forward pass of the busiest rank's
// experts, its rows spread evenly over them (at least one row an expert
// with rows), takes longer by its bytes than by its FLOPs. Below about
// e x gemm_seconds_per_byte / (2 x seconds_per_flop) rows an expert (plan
// flops.h: 4 r M H FLOPs against 2 M H e bytes of weights) the weights set
// the time, and a pipeline degree r reads them r times.
void weight_bound_notes(const std::vector<MoeLayerWorkload>& workloads, const sim::CostModel& m,
                        std::vector<std::string>& notes) {
  const auto& c = m.compute_cost(OpKind::kExpertFfn);
  if (c.gemm_seconds_per_byte <= 0 || c.seconds_per_flop <= 0) return;
  LayerNotes bound;
  for (const auto& w : workloads) {
    const int local = w.experts_per_rank();
    const std::int64_t rows = local > 0 ? (w.max_rows_computed() + local - 1) / local : 0;
    if (rows <= 0) continue;
    const double flops_s = plan::ffn_forward_flops(rows, w.model_dim, w.ffn_hidden()) * c.seconds_per_flop;
    const double bytes_s =
        plan::ffn_forward_bytes(rows, w.model_dim, w.ffn_hidden(), w.elem_bytes) * c.gemm_seconds_per_byte;
    if (bytes_s > flops_s)
      bound.add(w.layer, fmt::format("the expert GEMMs are bound by their weights on {} (under about {:.0f} rows an "
                                     "expert in {}-byte elements their bytes take longer than their FLOPs): a "
                                     "pipeline degree r reads the weights r times",
                                     m.name, w.elem_bytes * c.gemm_seconds_per_byte / (2 * c.seconds_per_flop),
                                     w.elem_bytes));
  }
  auto note = [&](std::string s) { notes.push_back(std::move(s)); };
  bound.say(note);
}

Recommendations recommend_impl(const Trace& trace, const RecommendOptions& o, const Breakdown* breakdown,
                               std::int64_t peak, const CostModel* fits) {
  Recommendations out;
  out.trace = trace.run.path;
  auto progress = [&](std::string_view stage, double f) {
    if (o.progress) o.progress(stage, f);
  };
  if (o.model) {
    out.notes.push_back(fmt::format("model shape from {} ({}):", o.model->path, o.model->format));
    for (auto& line : o.model->describe()) out.notes.push_back("  " + line);
  }
  const auto workloads = moe_layer_workloads(trace, &out.notes, o.sources());
  if (workloads.empty()) {
    out.hardware.source = "preset";
    out.hardware.terms = hardware_terms(o.cost_model ? *o.cost_model : sim::cost_model_preset("h100-nvlink-ib"), 2);
    out.hardware.description = out.notes.empty() ? "none needed (no MoE layer to advise on)"
                                                  : "none needed (no MoE layer could be advised on; see the notes)";
    return out;
  }
  progress("fitting", 0.0);
  const Hardware hw = resolve_hardware(trace, o, fits, workloads.front().ranks, out.notes);
  hw.model.validate();
  out.hardware = hw.info;
  out.hardware.terms = hardware_terms(hw.model, workloads.front().ranks);
  weight_bound_notes(workloads, hw.model, out.notes);
  Breakdown computed;
  if (!breakdown) {
    progress("breakdown", 0.0);
    computed = compute_breakdown(trace);
    breakdown = &computed;
  }
  const Breakdown& b = *breakdown;
  const auto measures = layer_measures(trace, b);

  // mpipemoe's range search: (B, n, time) of this trace and the others.
  std::map<int, std::vector<GranularityRun>> runs;
  std::vector<const Trace*> all = {&trace};
  for (const Trace* t : o.other_runs)
    if (t) all.push_back(t);
  if (all.size() > 1) {
    for (const Trace* t : all) {
      const auto ws = moe_layer_workloads(*t, nullptr, o.sources());
      const auto ms_ = layer_measures(*t, t == &trace ? b : compute_breakdown(*t));
      for (const auto& w : ws) {
        auto it = ms_.find(w.layer);
        if (it == ms_.end() || it->second.layer_s <= 0) continue;
        runs[w.layer].push_back({w.max_tokens_per_rank(), pipeline_degree(*t, w.layer), it->second.layer_s, t->run.path});
      }
    }
  }

  const auto iteration_replay = own_iteration_replay(trace, o, hw, workloads, out.notes);
  // A trace that ran on hardware: its own execution graph, replayed and
  // changed (trace_advice.h), is the basis of the pipeline-degree advice.
  std::map<int, TraceReplay> trace_replays;
  if (!trace.run.simulated && o.simulate) {
    progress("replaying the trace", 0.0);
    trace_replays = detail::trace_replay_by_layer(
        trace, hw, o.r_candidates.empty() ? std::vector<int>{1, 2, 4, 8} : o.r_candidates,
        o.sources());
  }
  std::vector<int> forward_only;  // layers the trace records no backward pass of
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    progress("recommending", static_cast<double>(i) / static_cast<double>(workloads.size()));
    LayerRecommendation L;
    L.workload = workloads[i];
    L.layer = L.workload.layer;
    L.variant = trace.run.variant;
    LayerMeasures meas;
    if (auto it = measures.find(L.layer); it != measures.end()) meas = it->second;
    L.measured_layer_s = meas.layer_s;
    L.iterations = meas.iterations;
    advise_pipeline(trace, o, hw, L);
    replay_layer(trace, o, hw, b, iteration_replay ? &*iteration_replay : nullptr, L);
    if (L.replay.forward_only) forward_only.push_back(L.layer);
    // The trace's own execution graph, replayed: the basis of the
    // pipeline-degree advice where its what-if could split the layer
    // (trace_pipeline_item says whether that replay holds); every other
    // item's choice is the models', which the replay of the trace's own
    // configuration checks (L.replay).
    if (auto tr = trace_replays.find(L.layer); tr != trace_replays.end()) L.trace_replay = tr->second;
    // An overlapped schedule (DualPipe-style chunks, Megatron-Core's EP
    // overlap) runs the layer's forward and backward side by side: the union
    // of their windows is less than their sum. The recommenders model one
    // layer instance at a time.
    for (const auto& s : b.layers) {
      if (s.layer != L.layer || s.ranks <= 0 || s.iterations <= 0) continue;
      const double sum = static_cast<double>(s.forward.window_ns + s.backward.window_ns) /
                         (static_cast<double>(s.ranks) * static_cast<double>(s.iterations));
      if (sum > 0 && static_cast<double>(s.mean_window_ns) < 0.95 * sum)
        out.notes.push_back(fmt::format(
            "layer {}: its forward and backward run side by side (an overlapped schedule: the union of their "
            "windows is {:.0f} % of their sum); the advice assumes a non-overlapped schedule",
            L.layer, 100.0 * static_cast<double>(s.mean_window_ns) / sum));
    }
    if (auto r = runs.find(L.layer); r != runs.end() && r->second.size() > 1) {
      L.pipeline.runs = r->second;
      L.pipeline.measured = mpipemoe_range_search(r->second, L.workload.max_tokens_per_rank());
    }
    advise_memory(trace, o, hw, peak, L);
    advise_placement(trace, o, hw, meas, L);
    advise_layout(trace, o, hw, L);
    const std::size_t first_item = out.items.size();
    const bool from_trace = L.trace_replay.computed && L.pipeline.current_r == 1 && L.trace_replay.predictions.size() > 1;
    out.items.push_back(from_trace ? detail::trace_pipeline_item(L, o.min_gain) : pipeline_item(L, hw, o.min_gain));
    out.items.push_back(memory_item(L));
    out.items.back().evidence += detail::trace_what_if_evidence(L, "reuse");
    out.items.push_back(placement_item(L, o.min_gain));
    out.items.back().evidence += detail::trace_what_if_evidence(L, "placement");
    out.items.push_back(layout_item(L, o.min_gain));
    // The gains' interval from the fitted terms' uncertainty: the same advice
    // by the closed forms on the nominal model and on the four corner models
    // (+-1 relative residual of the expert GEMM and all-to-all fits); each
    // corner moves the gain by its closed-form difference to the nominal.
    if (hw.expert_rel_sd > 0 || hw.a2a_rel_sd > 0) {
      RecommendOptions closed = o;
      closed.simulate = false;
      auto gains = [&](const Hardware& h) {
        LayerRecommendation C;
        C.workload = L.workload;
        C.layer = L.layer;
        C.variant = L.variant;
        C.measured_layer_s = L.measured_layer_s;
        C.iterations = L.iterations;
        advise_pipeline(trace, closed, h, C);
        advise_memory(trace, closed, h, peak, C);
        advise_placement(trace, closed, h, meas, C);
        advise_layout(trace, closed, h, C);
        return std::array<RecommendationItem, 4>{pipeline_item(C, h, o.min_gain), memory_item(C),
                                                 placement_item(C, o.min_gain), layout_item(C, o.min_gain)};
      };
      const auto nominal = gains(hw);
      for (std::size_t k = 0; k < 4; ++k) {
        auto& it = out.items[first_item + k];
        if (k == 0 && from_trace) continue;
        it.gain_interval = it.gain_known && nominal[k].gain_known;
        it.gain_low = it.gain_high = it.predicted_gain;
      }
      for (const double se : {-1.0, 1.0})
        for (const double sa : {-1.0, 1.0}) {
          const auto corner = gains(scaled(hw, se * hw.expert_rel_sd, sa * hw.a2a_rel_sd));
          for (std::size_t k = 0; k < 4; ++k) {
            auto& it = out.items[first_item + k];
            if (k == 0 && from_trace) continue;  // its range comes from the graph what-ifs
            if (!it.gain_interval || !corner[k].gain_known) continue;
            const double g = it.predicted_gain + corner[k].predicted_gain - nominal[k].predicted_gain;
            it.gain_low = std::min(it.gain_low, g);
            it.gain_high = std::max(it.gain_high, g);
          }
        }
    }
    // Marked: the items the models chose (the pipeline degree too where the
    // trace's graph could not be split) when the models replay the trace's
    // own configuration off by more than the tolerance.
    if (L.replay.unreliable)
      for (std::size_t k = first_item + (from_trace ? 1 : 0); k < out.items.size(); ++k)
        out.items[k].evidence = fmt::format(
            "Unreliable: replaying the trace's own configuration gives {} per iteration against {} measured "
            "({:+.0f} %; {}). {}",
            ms(L.replay.simulated_s), ms(L.replay.measured_s), L.replay.error * 100, off_term_text(L.replay),
            out.items[k].evidence);
    out.layers.push_back(std::move(L));
  }
  // An inference run, or a profile of the forward alone: the models add the
  // backward pass a training step would run.
  if (!forward_only.empty())
    out.notes.push_back(fmt::format(
        "the trace records no backward pass of {} (an inference run, or a profile of the forward alone): each "
        "replay compares the forward pass, and the advice is about a training step, forward and backward, at the "
        "shapes and routing of that forward",
        forward_only.size() == out.layers.size() ? std::string("its MoE layers")
                                                 : fmt::format("MoE layer{} {}", forward_only.size() == 1 ? "" : "s",
                                                               fmt::join(forward_only, ", "))));
  progress("recommending", 1.0);
  return out;
}

}  // namespace

Recommendations recommend(const Trace& trace, const RecommendOptions& o) {
  return recommend_impl(trace, o, nullptr, memory_timeline(trace).measured_peak_bytes(), nullptr);
}

Recommendations recommend(const Trace& trace, const Analyses& a, const RecommendOptions& o) {
  return recommend_impl(trace, o, &a.breakdown, a.memory.measured_peak_bytes(), &a.cost_model);
}

void add_recommendations(const Trace& trace, Analyses& a, const RecommendOptions& options) {
  a.recommendations = recommend(trace, a, options);
}

}  // namespace moetrace::analyzer
