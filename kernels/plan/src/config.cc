#include "moetrace/plan/config.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "moetrace/schema/enum_names.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace {

[[noreturn]] void fail(const std::string& message) { throw ConfigError(message); }

void require_positive(std::string_view field, std::int64_t value) {
  if (value < 1) fail(fmt::format("{} ({}) must be at least 1", field, value));
}

nlohmann::json model_json(const ModelShape& m) {
  return {{"num_layers", m.num_layers},       {"num_experts", m.num_experts},
          {"top_k", m.top_k},                 {"model_dim", m.model_dim},
          {"expert_hidden", m.expert_hidden}, {"dense_hidden", m.dense_hidden},
          {"attention", m.attention},         {"attention_per_block", m.attention_per_block},
          {"sequence_length", m.sequence_length}, {"elem_bytes", m.elem_bytes},
          {"learning_rate", m.learning_rate}};
}

nlohmann::json common_json(const CommonConfig& c) {
  return {{"model", model_json(c.model)},
          {"ranks", c.ranks},
          {"iterations", c.iterations},
          {"memory_budget_bytes", c.memory_budget_bytes}};
}

nlohmann::json perf_json(const ProProphetModel& m) {
  return {{"bandwidth_bytes_per_s", m.bandwidth_bytes_per_s},
          {"expert_tokens_per_s", m.expert_tokens_per_s},
          {"fnec_seconds", m.fnec_seconds},
          {"bnec_seconds", m.bnec_seconds},
          {"hide_under_computation", m.hide_under_computation},
          {"plan_flops", m.plan_flops}};
}

void check_budget(const CommonConfig& c, double experts_per_rank, int dense_tp) {
  if (c.memory_budget_bytes < 0)
    fail(fmt::format("memory_budget_bytes ({}) must not be negative", c.memory_budget_bytes));
  if (c.memory_budget_bytes == 0) return;
  const std::int64_t states = model_state_bytes(c.model, experts_per_rank, dense_tp);
  if (c.memory_budget_bytes < states)
    fail(fmt::format(
        "memory_budget_bytes ({}) is below the model states of one rank ({} bytes, mpipemoe Eq. 1)",
        c.memory_budget_bytes, states));
}

void check_expert_parallel(const CommonConfig& c) {
  c.validate();
  if (c.model.num_experts % c.ranks != 0)
    fail(fmt::format("num_experts ({}) is not divisible by ranks ({})", c.model.num_experts,
                     c.ranks));
  check_budget(c, static_cast<double>(c.model.num_experts) / c.ranks, 1);
}

}  // namespace

void ModelShape::validate() const {
  require_positive("num_layers", num_layers);
  require_positive("num_experts", num_experts);
  require_positive("top_k", top_k);
  if (top_k > num_experts)
    fail(fmt::format("top_k ({}) is greater than num_experts ({})", top_k, num_experts));
  require_positive("model_dim", model_dim);
  require_positive("expert_hidden", expert_hidden);
  if (dense_hidden < 0) fail(fmt::format("dense_hidden ({}) must not be negative", dense_hidden));
  if (attention) {
    require_positive("sequence_length", sequence_length);
    require_positive("attention_per_block", attention_per_block);
  }
  require_positive("elem_bytes", elem_bytes);
  if (!(learning_rate >= 0))
    fail(fmt::format("learning_rate ({}) must not be negative", learning_rate));
}

void CommonConfig::validate() const {
  model.validate();
  require_positive("ranks", ranks);
  require_positive("iterations", iterations);
}

void DpMoeConfig::validate() const { check_expert_parallel(common); }

void PipeMoeConfig::validate() const {
  check_expert_parallel(common);
  require_positive("pipeline_degree", pipeline_degree);
}

void MPipeMoeConfig::validate() const {
  check_expert_parallel(common);
  require_positive("partitions", partitions);
  if (strategy != ReuseStrategy::kNone && partitions < 2)
    fail(fmt::format("partitions ({}) must be at least 2 for memory reuse strategy {}", partitions,
                     reuse_strategy_name(strategy)));
}

int PpMoeConfig::data_parallel() const {
  const int per_group = tensor_parallel * pipeline_stages;
  return per_group > 0 ? common.ranks / per_group : 0;
}

void PpMoeConfig::validate() const {
  common.validate();
  require_positive("tensor_parallel", tensor_parallel);
  require_positive("pipeline_stages", pipeline_stages);
  require_positive("micro_batches", micro_batches);
  if (common.ranks % tensor_parallel != 0)
    fail(fmt::format("tensor_parallel ({}) does not divide ranks ({})", tensor_parallel,
                     common.ranks));
  if (common.ranks % (tensor_parallel * pipeline_stages) != 0)
    fail(fmt::format("pipeline_stages ({}) x tensor_parallel ({}) does not divide ranks ({})",
                     pipeline_stages, tensor_parallel, common.ranks));
  if (common.model.num_experts % tensor_parallel != 0)
    fail(fmt::format("num_experts ({}) is not divisible by tensor_parallel ({})",
                     common.model.num_experts, tensor_parallel));
  if (common.model.num_layers % pipeline_stages != 0)
    fail(fmt::format("num_layers ({}) is not divisible by pipeline_stages ({})",
                     common.model.num_layers, pipeline_stages));
  if (common.model.dense_hidden % tensor_parallel != 0)
    fail(fmt::format("dense_hidden ({}) is not divisible by tensor_parallel ({})",
                     common.model.dense_hidden, tensor_parallel));
  // A stage holds num_layers / pipeline_stages blocks; its budget covers them.
  ModelShape stage = common.model;
  stage.num_layers = common.model.num_layers / pipeline_stages;
  CommonConfig per_stage = common;
  per_stage.model = stage;
  check_budget(per_stage, static_cast<double>(common.model.num_experts) / tensor_parallel,
               tensor_parallel);
}

namespace {

// Given placements: one per (iteration, layer), replicas of each expert on
// ranks other than its home.
void check_given_placements(const CommonConfig& c, const std::vector<std::vector<ExpertPlacement>>& given) {
  if (given.empty()) return;
  const int E = c.model.num_experts, P = c.ranks;
  if (static_cast<int>(given.size()) != c.iterations)
    fail(fmt::format("placements cover {} iterations, the run has {}", given.size(), c.iterations));
  for (const auto& layers : given) {
    if (static_cast<int>(layers.size()) != c.model.num_layers)
      fail(fmt::format("placements cover {} layers, the model has {}", layers.size(), c.model.num_layers));
    for (const auto& p : layers) {
      if (static_cast<int>(p.replicas.size()) != E)
        fail(fmt::format("a placement lists replicas of {} experts, the model has {}", p.replicas.size(), E));
      for (int e : p.selected)
        if (e < 0 || e >= E) fail(fmt::format("placement: expert {} is not below num_experts ({})", e, E));
      for (int e = 0; e < E; ++e)
        for (int r : p.replicas[static_cast<std::size_t>(e)])
          if (r < 0 || r >= P || r == e / (E / P))
            fail(fmt::format("placement: expert {} has a replica on rank {} (its home or not a rank)", e, r));
    }
  }
}

}  // namespace

void ProProphetConfig::validate() const {
  check_expert_parallel(common);
  if (n < 0 || n > common.ranks - 1)
    fail(fmt::format("n ({}) must be between 0 and ranks - 1 ({})", n, common.ranks - 1));
  if (!(alpha >= 0)) fail(fmt::format("alpha ({}) must not be negative", alpha));
  if (!(model.bandwidth_bytes_per_s > 0))
    fail(fmt::format("bandwidth_bytes_per_s ({}) must be positive", model.bandwidth_bytes_per_s));
  if (!(model.expert_tokens_per_s > 0))
    fail(fmt::format("expert_tokens_per_s ({}) must be positive", model.expert_tokens_per_s));
  if (model.fnec_seconds < 0 || model.bnec_seconds < 0)
    fail(fmt::format("fnec_seconds ({}) and bnec_seconds ({}) must not be negative",
                     model.fnec_seconds, model.bnec_seconds));
  check_given_placements(common, placements);
}

void FasterMoeConfig::validate() const {
  check_expert_parallel(common);
  if (!(model.bandwidth_bytes_per_s > 0))
    fail(fmt::format("bandwidth_bytes_per_s ({}) must be positive", model.bandwidth_bytes_per_s));
  if (!(model.expert_tokens_per_s > 0))
    fail(fmt::format("expert_tokens_per_s ({}) must be positive", model.expert_tokens_per_s));
  for (int e : shadow_experts)
    if (e < 0 || e >= common.model.num_experts)
      fail(fmt::format("shadow_experts entry ({}) is not an expert index below num_experts ({})",
                       e, common.model.num_experts));
  if (smart_schedule_group < 0)
    fail(fmt::format("smart_schedule_group ({}) must not be negative", smart_schedule_group));
  if (smart_schedule_group > 0 && smart_schedule_group < common.ranks && common.ranks % smart_schedule_group != 0)
    fail(fmt::format("ranks ({}) is not divisible by smart_schedule_group ({})", common.ranks,
                     smart_schedule_group));
  check_given_placements(common, placements);
}

std::string_view reuse_strategy_name(ReuseStrategy s) { return reuse_strategy_traits(s).name; }

constexpr EnumName<Restore> kRestores[] = {
    {Restore::kKeep, "keep"},
    {Restore::kOffload, "offload"},
    {Restore::kRecommunicate, "re-communicate"},
    {Restore::kRecompute, "recompute"},
};

std::string_view restore_name(Restore r) { return enum_name(kRestores, r); }

std::string reuse_strategy_action(ReuseStrategy s) {
  const auto& t = reuse_strategy_traits(s);
  if (!t.reuses()) return "none (no memory reuse)";
  return fmt::format("{}: {} T_DI, {} T_M", t.name, restore_name(t.t_di), restore_name(t.t_m));
}

std::string reuse_strategy_names() {
  std::string out;
  for (const auto& t : kReuseStrategies) out += fmt::format("{}{}", out.empty() ? "" : ", ", t.name);
  return out;
}

ReuseStrategy parse_reuse_strategy(std::string_view name) {
  for (const auto& t : kReuseStrategies)
    if (t.name == name) return t.strategy;
  fail(fmt::format("strategy ({}) is not one of {}", name, reuse_strategy_names()));
}

std::int64_t model_state_bytes(const ModelShape& m, double experts_per_rank,
                               int dense_tensor_parallel) {
  const double gate = static_cast<double>(m.model_dim) * m.num_experts;
  const double experts = experts_per_rank * 2.0 * static_cast<double>(m.model_dim) * m.expert_hidden;
  const double dense = 2.0 * static_cast<double>(m.model_dim) * m.dense_hidden /
                       std::max(1, dense_tensor_parallel);
  return static_cast<std::int64_t>(4.0 * (gate + experts + dense) * m.num_layers * m.elem_bytes);
}

std::string to_json(const ModelShape& m) { return model_json(m).dump(); }

std::string to_json(const DpMoeConfig& c) {
  nlohmann::json j{{"variant", "dpmoe"}, {"common", common_json(c.common)}};
  if (c.capacity_padding) j["capacity_padding"] = true;
  return j.dump();
}
std::string to_json(const PipeMoeConfig& c) {
  nlohmann::json j{{"variant", "pipemoe"}, {"common", common_json(c.common)}, {"pipeline_degree", c.pipeline_degree}};
  if (c.fused_experts) j["fused_experts"] = true;
  return j.dump();
}
std::string to_json(const MPipeMoeConfig& c) {
  return nlohmann::json{{"variant", "mpipemoe"},
                        {"common", common_json(c.common)},
                        {"partitions", c.partitions},
                        {"strategy", reuse_strategy_name(c.strategy)}}
      .dump();
}
std::string to_json(const PpMoeConfig& c) {
  return nlohmann::json{{"variant", "ppmoe"},
                        {"common", common_json(c.common)},
                        {"tensor_parallel", c.tensor_parallel},
                        {"pipeline_stages", c.pipeline_stages},
                        {"micro_batches", c.micro_batches}}
      .dump();
}
std::string to_json(const ProProphetConfig& c) {
  return nlohmann::json{{"variant", "pro_prophet"}, {"common", common_json(c.common)},
                        {"n", c.n},                 {"alpha", c.alpha},
                        {"model", perf_json(c.model)}, {"block_schedule", c.block_schedule}}
      .dump();
}
std::string to_json(const FasterMoeConfig& c) {
  return nlohmann::json{{"variant", "fastermoe"},
                        {"common", common_json(c.common)},
                        {"model", perf_json(c.model)},
                        {"shadow_experts", c.shadow_experts},
                        {"smart_schedule_group", c.smart_schedule_group},
                        {"count_exchange", c.count_exchange}}
      .dump();
}

}  // namespace moetrace::plan
