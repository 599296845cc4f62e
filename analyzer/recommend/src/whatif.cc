#include "moetrace/analyzer/whatif.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "moetrace/plan/builders.h"
#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/timing_plan.h"

namespace moetrace::analyzer {

AllToAllVolumes all_to_all_volumes(const MoeLayerWorkload& w, const sim::CostModel& m) {
  const auto& r = w.routing;
  const double row_bytes = static_cast<double>(w.model_dim) * w.elem_bytes;
  std::vector<double> send(static_cast<std::size_t>(r.devices), 0.0), recv = send, local = send;
  for (int src = 0; src < r.devices; ++src)
    for (int e = 0; e < r.experts; ++e) {
      const double b = static_cast<double>(r.count(src, e)) * row_bytes;
      const int home = r.home(e);
      send[static_cast<std::size_t>(src)] += b;
      recv[static_cast<std::size_t>(home)] += b;
      if (home == src) local[static_cast<std::size_t>(src)] += b;
    }
  auto rule = [&](double s, double v) {
    switch (m.all_to_all_volume) {
      case sim::AllToAllVolume::kMaxSend: return s;
      case sim::AllToAllVolume::kMaxRecv: return v;
      case sim::AllToAllVolume::kMaxSendRecv: break;
    }
    return std::max(s, v);
  };
  AllToAllVolumes out;
  for (std::size_t q = 0; q < send.size(); ++q) {
    const double own = m.all_to_all_counts_local ? 0.0 : local[q];
    const double s = send[q] - own, v = recv[q] - own;
    out.dispatch = std::max(out.dispatch, rule(s, v));
    out.combine = std::max(out.combine, rule(v, s));  // the experts send back what they received
  }
  return out;
}

LayerPipelineTerms pipeline_terms(const MoeLayerWorkload& w, const sim::CostModel& m) {
  const sim::LinearCost a2a = m.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, w.ranks));
  const auto vol = all_to_all_volumes(w, m);
  const auto& expert = m.compute_cost(OpKind::kExpertFfn);
  const std::int64_t rows = w.max_rows_computed();
  const double flops_fw = 4.0 * static_cast<double>(rows) * static_cast<double>(w.model_dim) *
                          static_cast<double>(w.hidden);
  const double l = std::max(1, w.experts_per_rank());
  LayerPipelineTerms t;
  t.forward.alpha_a = a2a.alpha_s;
  t.forward.comm_s = a2a.beta_s * 0.5 * (vol.dispatch + vol.combine);
  t.forward.alpha_e = l * 2 * expert.alpha_s;  // Eq. 14: 2 GEMMs per expert FFN
  t.forward.comp_s = flops_fw * expert.seconds_per_flop;
  t.backward = t.forward;
  t.backward.alpha_e = l * 4 * expert.alpha_s;  // 4 GEMMs (mpipemoe Table II)
  t.backward.comp_s = 2 * t.forward.comp_s;
  return t;
}

ReuseInputs reuse_inputs(const MoeLayerWorkload& w, const sim::CostModel& m, int partitions) {
  ReuseInputs in;
  // B of mpipemoe Table I is one number (balanced routing); here the
  // busiest expert device's rows for T_DI, T_M, T_DO and the busiest
  // source's rows for T_I, T_O (the permuted input and combined output).
  in.tokens = static_cast<double>(w.max_rows_computed());
  in.own_tokens = static_cast<double>(w.max_rows_routed());
  in.model_dim = static_cast<double>(w.model_dim);
  in.hidden = static_cast<double>(w.hidden);
  in.experts = w.experts;
  in.experts_per_device = std::max(1, w.experts_per_rank());
  in.elem_bytes = w.elem_bytes;
  in.partitions = partitions;
  const auto& expert = m.compute_cost(OpKind::kExpertFfn);
  in.seconds_per_flop = expert.seconds_per_flop;
  in.alpha_gemm = expert.alpha_s;
  const sim::LinearCost a2a = m.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, w.ranks));
  in.a2a_alpha = a2a.alpha_s;
  in.a2a_beta = a2a.beta_s;
  in.copy_alpha = 0.5 * (m.copy_d2h.alpha_s + m.copy_h2d.alpha_s);
  in.copy_beta = 0.5 * (m.copy_d2h.beta_s + m.copy_h2d.beta_s);
  const auto& f = m.interference;  // the factors of Eq. 10
  in.sigma_comm = f.sigma_comm;
  in.sigma_all = f.sigma_all;
  in.mu_comp = f.mu_comp;
  in.mu_all = f.mu_all;
  in.eta_all = f.eta_all;
  return in;
}

PlacementInputs placement_inputs(const MoeLayerWorkload& w, const sim::CostModel& m, double fnec_s,
                                 double bnec_s, bool block_schedule) {
  PlacementInputs in;
  in.routing = w.routing;
  const sim::LinearCost a2a = m.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, w.ranks));
  if (a2a.beta_s > 0) in.model.bandwidth_bytes_per_s = 1.0 / a2a.beta_s;  // B-bar, Eq. 1
  const double spf = m.compute_cost(OpKind::kExpertFfn).seconds_per_flop;
  const double flops_per_token = 4.0 * static_cast<double>(w.model_dim) * static_cast<double>(w.hidden);
  if (spf > 0 && flops_per_token > 0) in.model.expert_tokens_per_s = 1.0 / (spf * flops_per_token);  // t, Eq. 2
  in.model.fnec_seconds = fnec_s;
  in.model.bnec_seconds = bnec_s;
  in.model.hide_under_computation = block_schedule;  // Eq. 8 under Alg. 2's schedule
  plan::ModelShape shape;
  shape.model_dim = w.model_dim;
  shape.expert_hidden = w.hidden;
  shape.elem_bytes = w.elem_bytes;
  in.sizes = plan::planner_sizes(shape);
  return in;
}

LayoutInputs layout_inputs(const MoeLayerWorkload& w, const sim::CostModel& m, int tensor_parallel) {
  LayoutInputs in;
  in.experts = w.experts;
  in.ranks = w.ranks;
  in.tensor_parallel = tensor_parallel;
  in.tokens = static_cast<double>(w.max_tokens_per_rank());
  in.top_k = w.top_k;
  in.model_dim = static_cast<double>(w.model_dim);
  in.hidden = static_cast<double>(w.hidden);
  in.elem_bytes = w.elem_bytes;
  const auto& expert = m.compute_cost(OpKind::kExpertFfn);
  in.alpha_gemm = expert.alpha_s;
  in.seconds_per_flop = expert.seconds_per_flop;
  const sim::LinearCost a2a = m.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, w.ranks));
  in.a2a_alpha = a2a.alpha_s;
  in.a2a_beta = a2a.beta_s;
  const sim::LinearCost ar = m.collective(plan::CollectiveKind::kAllReduce).at(std::max(2, tensor_parallel));
  in.ar_alpha = ar.alpha_s;
  in.ar_beta = ar.beta_s;
  return in;
}

// ---------------------------------------------------------------------------

namespace {

bool pipeline_kind(OpKind k) {
  switch (k) {
    case OpKind::kDispatchAllToAll:
    case OpKind::kExpertFfn:
    case OpKind::kCombineAllToAll:
    case OpKind::kOffload:
    case OpKind::kPrefetch:
    case OpKind::kRecompute:
    case OpKind::kRecommunicate: return true;
    default: return false;
  }
}

}  // namespace

WhatIfResult simulate_layer(const MoeLayerWorkload& w, const sim::CostModel& m, const WhatIf& what) {
  WhatIfResult out;
  try {
    plan::CommonConfig common;
    common.ranks = w.ranks;
    common.iterations = 1;
    auto& s = common.model;
    s.num_layers = 1;
    s.num_experts = w.experts;
    // Each routed row as a token of its own (top_k = 1): the dispatch
    // volumes and expert rows are those measured, whatever the gate did
    // (tokens dropped by a capacity factor included).
    s.top_k = 1;
    s.model_dim = w.model_dim;
    s.expert_hidden = w.hidden;
    s.dense_hidden = 0;
    s.attention = false;
    s.elem_bytes = w.elem_bytes;
    plan::ExpertLoad load = plan::ExpertLoad::zeros(1, 1, w.ranks, w.experts, 1);
    for (int q = 0; q < w.ranks; ++q) {
      std::int64_t rows = 0;
      for (int e = 0; e < w.experts; ++e) {
        load.count(0, 0, q, e) = w.routing.count(q, e);
        rows += w.routing.count(q, e);
      }
      load.tokens_of(0, q) = rows;
    }
    plan::Plan p;
    if (what.variant == "dpmoe") {
      plan::DpMoeConfig c{common};
      c.capacity_padding = what.capacity_padding;
      p = plan::build_dpmoe(c, load);
    } else if (what.variant == "fastermoe") {
      plan::FasterMoeConfig c;
      c.common = common;
      c.shadow_experts = what.shadow_experts;
      if (what.planner) c.model = *what.planner;
      p = plan::build_fastermoe(c, load);
    } else if (what.variant == "pipemoe") {
      sim::RunSpec spec;
      spec.variant = "pipemoe";
      spec.common = common;
      spec.pipeline_degree = what.partitions;
      // Full plans carry P x P transfers per all-to-all; beyond 64 ranks the
      // timing-only builder (same ops, same simulated times) is used.
      p = w.ranks > 64 || what.timing_plan ? sim::build_timing_plan(spec, load)
                       : plan::build_pipemoe(plan::PipeMoeConfig{common, what.partitions}, load);
    } else if (what.variant == "mpipemoe") {
      p = plan::build_mpipemoe(plan::MPipeMoeConfig{common, what.partitions, what.strategy}, load);
    } else if (what.variant == "pro_prophet") {
      plan::ProProphetConfig c;
      c.common = common;
      c.n = what.pro_prophet_n;
      c.alpha = what.pro_prophet_alpha;
      if (what.planner) c.model = *what.planner;
      c.block_schedule = false;  // one iteration: planned on its own load (Fig. 7 order)
      p = plan::build_pro_prophet(c, load);
    } else {
      out.error = fmt::format("no what-if for variant \"{}\"", what.variant);
      return out;
    }
    const sim::SimResult r = sim::simulate(p, m);
    // Per (rank, phase): [first start, last end] of the chosen ops.
    std::map<std::pair<int, int>, std::pair<double, double>> win;
    std::map<int, std::pair<double, double>> busy;  // rank -> (compute, all-to-all)
    for (const auto& op : p.ops) {
      if (op.coords.layer != 0) continue;
      const bool in = what.window == LayerWindow::kPipeline ? pipeline_kind(op.kind) : op_kind_info(op.kind).moe_layer;
      if (!in || op.coords.phase == Phase::kOther) continue;
      const auto i = static_cast<std::size_t>(op.id.value);
      const Category cat = op_category(op.kind);
      if (cat == Category::kExpertCompute) busy[op.rank.value].first += r.end_s[i] - r.start_s[i];
      if (cat == Category::kAllToAll) busy[op.rank.value].second += r.end_s[i] - r.start_s[i];
      auto [it, fresh] = win.try_emplace({op.rank.value, static_cast<int>(op.coords.phase)}, r.start_s[i], r.end_s[i]);
      if (!fresh) {
        it->second.first = std::min(it->second.first, r.start_s[i]);
        it->second.second = std::max(it->second.second, r.end_s[i]);
      }
    }
    for (const auto& [key, span] : win) {
      double& slot = key.second == static_cast<int>(Phase::kForward) ? out.forward_s : out.backward_s;
      slot = std::max(slot, span.second - span.first);
    }
    for (const auto& [rank, b] : busy) {
      out.compute_s = std::max(out.compute_s, b.first);
      out.all_to_all_s = std::max(out.all_to_all_s, b.second);
    }
    out.makespan_s = r.makespan_s;
    for (const auto& mem : r.memory) out.peak_bytes = std::max(out.peak_bytes, mem.peak_bytes);
    out.ok = true;
  } catch (const Error& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

}  // namespace moetrace::analyzer
