// The expert-parallel builders (builders.h): DPMoE, PipeMoE, MPipeMoE,
// Pro-Prophet and FasterMoE are one emitter (ep_builder.h) with different
// specs; this file assembles the whole plan and holds the public entry points.
#include <algorithm>
#include <limits>

#include "ep_builder.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace detail {

EpBuilder::EpBuilder(const EpSpec& spec, const ExpertLoad& load)
    : spec_(spec),
      load_(load),
      m_(spec.common.model),
      P_(spec.common.ranks),
      E_(m_.num_experts),
      local_(E_ / P_),
      b_(spec.variant, P_) {
  if (spec.detail.timing_only && (spec.balance != Balance::kNone || spec.capacity_padding))
    throw ConfigError(fmt::format("{}{} has no timing-only plan (replicated experts and capacity padding need "
                                  "the full plan)",
                                  spec.variant, spec.capacity_padding ? " with capacity padding" : ""));
}

// Parameters: per layer, the gate and dense FFN on every rank (data
// parallel), each expert on its home rank.
void EpBuilder::add_params() {
  for (int l = 0; l < m_.num_layers; ++l) {
    gate_.emplace_back();
    dense_.emplace_back();
    experts_.emplace_back();
    for (int r = 0; r < P_; ++r) {
      gate_.back().push_back(add_param(b_, RankId(r), {ParamKind::kGate, l, -1, 0, E_}, m_.model_dim,
                                       m_.elem_bytes, fmt::format("L{}.gate", l)));
      if (m_.dense_hidden > 0)
        dense_.back().push_back(add_param(b_, RankId(r), {ParamKind::kDense, l, -1, 0, m_.dense_hidden},
                                          2 * m_.model_dim, m_.elem_bytes, fmt::format("L{}.dense", l)));
    }
    for (int e = 0; e < E_; ++e)
      experts_.back().push_back(add_param(b_, RankId(home(e)), {ParamKind::kExpert, l, e, 0, m_.expert_hidden},
                                          2 * m_.model_dim, m_.elem_bytes, fmt::format("L{}.expert{}", l, e)));
  }
}

// The routing load: every (iteration, layer, source, expert) entry, or
// above PlanDetail::max_load_entries per-expert totals (source -1).
void EpBuilder::add_loads() {
  Plan& plan = b_.plan();
  const std::int64_t entries =
      static_cast<std::int64_t>(load_.iterations) * load_.layers * load_.sources * load_.experts;
  for (int j = 0; j < load_.iterations; ++j)
    for (int l = 0; l < load_.layers; ++l) {
      if (entries <= spec_.detail.max_load_entries) {
        for (int s = 0; s < load_.sources; ++s)
          for (int e = 0; e < load_.experts; ++e) plan.loads.push_back({j, l, s, e, load_.count(j, l, s, e)});
      } else {
        const auto totals = load_.expert_totals(j, l);
        for (int e = 0; e < load_.experts; ++e) plan.loads.push_back({j, l, -1, e, totals[at(e)]});
      }
    }
}

Plan EpBuilder::build() {
  home_only_ = ExpertPlacement::none(E_);
  Plan& plan = b_.plan();
  plan.iterations = spec_.common.iterations;
  plan.blocks = P_;
  plan.dims = {m_.num_layers, E_, m_.top_k, m_.model_dim, m_.expert_hidden, m_.dense_hidden, m_.elem_bytes};
  plan.config_json = spec_.config_json;
  for (int r = 0; r < P_; ++r)
    streams_.push_back({b_.stream(RankId(r), StreamRole::kCompute), b_.stream(RankId(r), StreamRole::kComm), StreamId()});
  add_params();
  const std::size_t params = plan.buffers.size();  // persistent; the rest is per iteration
  layers_.resize(at(m_.num_layers));
  plan_ops_.assign(at(spec_.common.iterations),
                   std::vector<std::vector<OpId>>(at(m_.num_layers), std::vector<OpId>(at(P_))));
  if (timing_only()) {
    std::int64_t most = 0;  // a pair's count is at most its source's tokens
    for (int j = 0; j < load_.iterations; ++j)
      for (int p = 0; p < load_.sources; ++p) most = std::max(most, load_.tokens_of(j, p));
    most = std::min<std::int64_t>(most, 1 << 16);
    for (std::int64_t cnt = 0; cnt <= most; ++cnt)
      for (int c = 0; c < spec_.chunks; ++c) split_.push_back(chunk_rows(cnt, c, spec_.chunks));
  }
  for (int j = 0; j < spec_.common.iterations; ++j) {
    for (int l = 0; l < m_.num_layers; ++l) {
      prepare(j, l);
      for (int e = 0; e < E_; ++e) {
        plan.placements.push_back({j, l, e, RankId(home(e)), "home"});
        for (int r : placement(j, l).replicas[at(e)])
          plan.placements.push_back({j, l, e, RankId(r), spec_.balance == Balance::kFasterMoe ? "shadow" : "replica"});
      }
    }
    for (int l = 0; l < m_.num_layers; ++l) forward(j, l);
    for (int l = m_.num_layers - 1; l >= 0; --l) backward(j, l);
    for (int r = 0; r < P_; ++r) {
      for (int l = 0; l < m_.num_layers; ++l) {
        add_sgd(b_, RankId(r), streams(r).compute, gate_[at(l)][at(r)], j, m_.learning_rate);
        if (m_.dense_hidden > 0) add_sgd(b_, RankId(r), streams(r).compute, dense_[at(l)][at(r)], j, m_.learning_rate);
        for (int e = r * local_; e < (r + 1) * local_; ++e)
          add_sgd(b_, RankId(r), streams(r).compute, experts_[at(l)][at(e)], j, m_.learning_rate);
      }
    }
    if (j == 0) {
      // Every iteration adds as many ops and buffers as the first: size the
      // plan once rather than grow it (moving a million ops) by doubling.
      const auto iterations = static_cast<std::size_t>(spec_.common.iterations);
      b_.reserve(plan.ops.size() * iterations, params + (plan.buffers.size() - params) * iterations);
    }
  }
  add_loads();
  return b_.finish();
}

namespace {

// The spec of a validated configuration and load.
template <class Config>
EpSpec base_spec(const char* variant, const Config& config, const ExpertLoad& load) {
  config.validate();
  check_load(load, config.common.model, config.common.iterations, config.common.ranks, "ranks");
  EpSpec s;
  s.variant = variant;
  s.config_json = to_json(config);
  s.common = config.common;
  return s;
}

}  // namespace
}  // namespace detail

using detail::Balance;
using detail::EpBuilder;
using detail::EpSpec;

Plan build_dpmoe(const DpMoeConfig& config, const ExpertLoad& load, const PlanDetail& mode) {
  EpSpec spec = detail::base_spec("dpmoe", config, load);
  spec.capacity_padding = config.capacity_padding;
  spec.detail = mode;
  return EpBuilder(spec, load).build();
}

Plan build_pipemoe(const PipeMoeConfig& config, const ExpertLoad& load, const PlanDetail& mode) {
  EpSpec spec = detail::base_spec("pipemoe", config, load);
  spec.chunks = config.pipeline_degree;
  // Tutel's built-in experts (tutel/impls/moe_layer.py, FusedExpertsNetwork)
  // hold the local experts' weights as one [E/P, M, H] tensor and run both
  // layers with one batched torch.matmul each; pipemoe Eq. 14-15 and its
  // solver.py charge alpha_e = 2 alpha_gemm a chunk whatever E/P is.
  spec.batched_experts = config.fused_experts;
  spec.detail = mode;
  return EpBuilder(spec, load).build();
}

Plan build_mpipemoe(const MPipeMoeConfig& config, const ExpertLoad& load) {
  EpSpec spec = detail::base_spec("mpipemoe", config, load);
  spec.chunks = config.partitions;
  spec.alternate = true;
  spec.strategy = config.strategy;
  return EpBuilder(spec, load).build();
}

std::vector<std::vector<ExpertPlacement>> pro_prophet_placements(const ProProphetConfig& config,
                                                                 const ExpertLoad& load) {
  if (!config.placements.empty()) return config.placements;
  const auto sizes = planner_sizes(config.common.model);
  std::vector<std::vector<ExpertPlacement>> out;
  for (int j = 0; j < config.common.iterations; ++j) {
    out.emplace_back();
    for (int l = 0; l < config.common.model.num_layers; ++l) {
      if (config.block_schedule && j == 0) {
        out.back().push_back(ExpertPlacement::none(config.common.model.num_experts));
        continue;
      }
      // Scheduled: planned during iteration j-1 on its distribution (locality).
      const int from = config.block_schedule ? j - 1 : j;
      out.back().push_back(pro_prophet_greedy(detail::layer_routing(load, from, l), config.n,
                                              config.alpha, config.model, sizes));
    }
  }
  return out;
}

Plan build_pro_prophet(const ProProphetConfig& config, const ExpertLoad& load) {
  EpSpec spec = detail::base_spec("pro_prophet", config, load);
  spec.balance = Balance::kProProphet;
  spec.block_schedule = config.block_schedule;
  spec.perf = config.model;
  spec.placement = pro_prophet_placements(config, load);
  return EpBuilder(spec, load).build();
}

Plan build_fastermoe(const FasterMoeConfig& config, const ExpertLoad& load) {
  EpSpec spec = detail::base_spec("fastermoe", config, load);
  spec.balance = Balance::kFasterMoe;
  spec.perf = config.model;
  if (config.smart_schedule_group > 0) {
    // smart_schedule.cpp: pipeline_gran is capped at the world size.
    const int g = std::min(config.smart_schedule_group, config.common.ranks);
    spec.chunks = config.common.ranks / g;
    spec.exchange_peers = spec.chunks > 1 ? g : 0;
  }
  spec.count_exchange = config.count_exchange;
  const auto sizes = planner_sizes(config.common.model);
  const int P = config.common.ranks, E = config.common.model.num_experts;
  if (!config.placements.empty()) {
    spec.placement = config.placements;
    return EpBuilder(spec, load).build();
  }
  for (int j = 0; j < config.common.iterations; ++j) {
    spec.placement.emplace_back();
    for (int l = 0; l < config.common.model.num_layers; ++l) {
      if (config.shadow_experts.empty()) {
        spec.placement.back().push_back(fastermoe_shadowing(detail::layer_routing(load, j, l), config.model, sizes));
        continue;
      }
      ExpertPlacement p = ExpertPlacement::none(E);
      for (int e : config.shadow_experts) {
        if (!p.replicas[static_cast<std::size_t>(e)].empty()) continue;
        p.selected.push_back(e);
        for (int d = 0; d < P; ++d)
          if (d != e / (E / P)) p.replicas[static_cast<std::size_t>(e)].push_back(d);
      }
      spec.placement.back().push_back(std::move(p));
    }
  }
  return EpBuilder(spec, load).build();
}

}  // namespace moetrace::plan
