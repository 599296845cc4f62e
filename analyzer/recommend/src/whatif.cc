#include "moetrace/analyzer/whatif.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "moetrace/plan/builders.h"
#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/timing_plan.h"

namespace moetrace::analyzer {

namespace {

// The cost of the layer's expert-parallel all-to-all (its group: the ranks).
sim::LinearCost all_to_all_cost(const MoeLayerWorkload& w, const sim::CostModel& m) {
  return m.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, w.ranks));
}

// The expert GEMM's and the all-to-all's costs of `m`, as the reuse and the
// layout models take them.
template <typename Inputs>
void set_gemm_and_all_to_all_costs(Inputs& in, const MoeLayerWorkload& w, const sim::CostModel& m) {
  const auto& expert = m.compute_cost(OpKind::kExpertFfn);
  in.seconds_per_flop = expert.seconds_per_flop;
  in.alpha_gemm = expert.alpha_s;
  const sim::LinearCost a2a = all_to_all_cost(w, m);
  in.a2a_alpha = a2a.alpha_s;
  in.a2a_beta = a2a.beta_s;
}

}  // namespace

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

LayerPipelineTerms pipeline_terms(const MoeLayerWorkload& w, const sim::CostModel& m, bool fused_experts) {
  const sim::LinearCost a2a = all_to_all_cost(w, m);
  const auto vol = all_to_all_volumes(w, m);
  const auto& expert = m.compute_cost(OpKind::kExpertFfn);
  const std::int64_t rows = w.max_rows_computed();
  const double flops_fw = 4.0 * static_cast<double>(rows) * static_cast<double>(w.model_dim) *
                          static_cast<double>(w.ffn_hidden());
  const double l = fused_experts ? 1 : std::max(1, w.experts_per_rank());
  LayerPipelineTerms t;
  t.forward.alpha_a = a2a.alpha_s;
  t.forward.comm_s = a2a.beta_s * 0.5 * (vol.dispatch + vol.combine);
  t.forward.alpha_e = l * 2 * expert.alpha_s;  // Eq. 14: 2 GEMMs per expert FFN (or per fused chunk)
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
  in.hidden = static_cast<double>(w.ffn_hidden());
  in.experts = w.experts;
  in.experts_per_device = std::max(1, w.experts_per_rank());
  in.elem_bytes = w.elem_bytes;
  in.partitions = partitions;
  set_gemm_and_all_to_all_costs(in, w, m);
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
  const sim::LinearCost a2a = all_to_all_cost(w, m);
  if (a2a.beta_s > 0) in.model.bandwidth_bytes_per_s = 1.0 / a2a.beta_s;  // B-bar, Eq. 1
  const double spf = m.compute_cost(OpKind::kExpertFfn).seconds_per_flop;
  const double flops_per_token = 4.0 * static_cast<double>(w.model_dim) * static_cast<double>(w.ffn_hidden());
  if (spf > 0 && flops_per_token > 0) in.model.expert_tokens_per_s = 1.0 / (spf * flops_per_token);  // t, Eq. 2
  in.model.fnec_seconds = fnec_s;
  in.model.bnec_seconds = bnec_s;
  in.model.hide_under_computation = block_schedule;  // Eq. 8 under Alg. 2's schedule
  plan::ModelShape shape;
  shape.model_dim = w.model_dim;
  shape.expert_hidden = w.ffn_hidden();
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
  in.hidden = static_cast<double>(w.ffn_hidden());
  in.elem_bytes = w.elem_bytes;
  set_gemm_and_all_to_all_costs(in, w, m);
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

// Per layer, the times of a simulated plan as the analyses take the
// measured ones (breakdown.cc): per (rank, pass) the union of the windows
// (first start to last end) of each micro-batch's ops; per pass the slowest
// rank. The window's ops: pipeline_kind's or every MoE-layer op, of the
// given iteration.
std::map<int, WhatIfResult> layer_results(const plan::Plan& p, const sim::SimResult& r, LayerWindow window,
                                          int iteration) {
  // (layer, rank, phase) -> micro-batch -> window
  std::map<std::tuple<int, int, int>, std::map<int, std::pair<double, double>>> win;
  // (layer, rank) -> (compute, all-to-all) of both passes [0] and of the forward [1]
  std::map<std::pair<int, int>, std::array<std::pair<double, double>, 2>> busy;
  for (const auto& op : p.ops) {
    if (op.coords.layer < 0 || op.coords.phase == Phase::kOther || op.coords.iteration != iteration) continue;
    const bool in = window == LayerWindow::kPipeline ? pipeline_kind(op.kind) : op_kind_info(op.kind).moe_layer;
    if (!in) continue;
    const auto i = static_cast<std::size_t>(op.id.value);
    const double start = r.start_s[i], end = r.end_s[i];
    const Category cat = op_category(op.kind);
    auto& b = busy[{op.coords.layer, op.rank.value}];
    auto add = [&](std::pair<double, double>& t) {
      if (cat == Category::kExpertCompute) t.first += end - start;
      if (cat == Category::kAllToAll) t.second += end - start;
    };
    add(b[0]);
    if (op.coords.phase == Phase::kForward) add(b[1]);
    auto& by_mb = win[{op.coords.layer, op.rank.value, static_cast<int>(op.coords.phase)}];
    auto [it, fresh] = by_mb.try_emplace(op.coords.micro_batch, start, end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, start);
      it->second.second = std::max(it->second.second, end);
    }
  }
  std::map<int, WhatIfResult> out;
  for (const auto& [key, by_mb] : win) {
    const auto& [layer, rank, phase] = key;
    std::vector<std::pair<double, double>> spans;
    for (const auto& [mb, span] : by_mb) spans.push_back(span);
    std::sort(spans.begin(), spans.end());
    double length = 0, reach = -std::numeric_limits<double>::infinity();
    for (const auto& [a, b] : spans) {
      length += std::max(0.0, b - std::max(a, reach));
      reach = std::max(reach, b);
    }
    WhatIfResult& res = out[layer];
    double& slot = phase == static_cast<int>(Phase::kForward) ? res.forward_s : res.backward_s;
    slot = std::max(slot, length);
  }
  for (const auto& [key, b] : busy) {
    WhatIfResult& res = out[key.first];
    res.compute_s = std::max(res.compute_s, b[0].first);
    res.all_to_all_s = std::max(res.all_to_all_s, b[0].second);
    res.forward_compute_s = std::max(res.forward_compute_s, b[1].first);
    res.forward_all_to_all_s = std::max(res.forward_all_to_all_s, b[1].second);
  }
  std::int64_t peak = 0;
  for (const auto& mem : r.memory) peak = std::max(peak, mem.peak_bytes);
  for (auto& [layer, res] : out) {
    res.makespan_s = r.makespan_s;
    res.peak_bytes = peak;
    res.ok = true;
  }
  return out;
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
    s.expert_hidden = w.ffn_hidden();
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
      spec.fused_experts = what.fused_experts;
      // Full plans carry P x P transfers per all-to-all; beyond 64 ranks the
      // timing-only builder (same ops, same simulated times) is used.
      p = w.ranks > 64 || what.timing_plan ? sim::build_timing_plan(spec, load)
                       : plan::build_pipemoe(plan::PipeMoeConfig{common, what.partitions, what.fused_experts}, load);
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
    out = layer_results(p, sim::simulate(p, m), what.window, 0)[0];
    out.ok = true;
  } catch (const Error& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

IterationReplay replay_iterations(sim::RunSpec spec, const std::vector<std::vector<plan::LayerRouting>>& routings,
                                  const std::vector<std::vector<plan::ExpertPlacement>>& placements,
                                  const sim::CostModel& m) {
  IterationReplay out;
  try {
    const int J = static_cast<int>(routings.size());
    const int L = spec.common.model.num_layers, P = spec.common.ranks, E = spec.common.model.num_experts;
    const int k = std::max(1, spec.common.model.top_k);
    if (J < 1) throw ConfigError("no iteration to replay");
    spec.common.iterations = J;
    spec.cost_model = m;
    plan::ExpertLoad load = plan::ExpertLoad::zeros(J, L, P, E, k);
    for (int j = 0; j < J; ++j) {
      if (static_cast<int>(routings[static_cast<std::size_t>(j)].size()) != L)
        throw ConfigError(fmt::format("the recorded load covers {} of the run's {} MoE layers",
                                      routings[static_cast<std::size_t>(j)].size(), L));
      for (int l = 0; l < L; ++l) {
        const auto& r = routings[static_cast<std::size_t>(j)][static_cast<std::size_t>(l)];
        if (r.devices != P || r.experts != E)
          throw ConfigError(fmt::format("layer {}'s recorded load is {} ranks x {} experts, the run's {} x {}", l,
                                        r.devices, r.experts, P, E));
        for (int q = 0; q < P; ++q) {
          std::int64_t rows = 0;
          for (int e = 0; e < E; ++e) {
            load.count(j, l, q, e) = r.count(q, e);
            rows += r.count(q, e);
          }
          // Each token goes to k experts: the source's tokens, the most any
          // layer routed (a capacity may have dropped rows in another).
          load.tokens_of(j, q) = std::max(load.tokens_of(j, q), (rows + k - 1) / k);
        }
      }
    }
    const plan::Plan p = sim::build_plan(spec, load, placements);
    out.layers = layer_results(p, sim::simulate(p, m), LayerWindow::kMoeLayer, J - 1);
    out.ok = true;
  } catch (const Error& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

}  // namespace moetrace::analyzer
