// What `moetrace run` runs: a variant with its configuration, the routing
// load, and (for the simulator) the hardware cost model. A spec comes from a
// named preset of the papers' tables, a JSON config file, or both (the file
// may name a preset as its base), plus command-line overrides. Backends (the
// simulator here; the CUDA executor later) turn it into a plan with
// build_plan() and execute it.
//
// JSON (every key optional; unknown keys are errors that name the key):
// {
//   "preset": "pipemoe-t4-p16-b4-l1024-h4096-m4096-e1",   // start from a preset
//   "variant": "pipemoe",      // dpmoe, ppmoe, pipemoe, mpipemoe, pro_prophet, fastermoe
//   "ranks": 16, "iterations": 2, "memory_budget_bytes": 0,
//   "model": {"num_layers", "num_experts", "top_k", "model_dim", "expert_hidden",
//             "dense_hidden", "attention", "attention_per_block", "sequence_length",
//             "elem_bytes", "learning_rate"},
//   "routing": {"pattern": "balanced" | "zipf" | "drifting", "tokens_per_source",
//               "zipf_skew", "locality", "source_noise", "seed"},
//   "dpmoe": {"capacity_padding": false},   // DeepSpeed-MoE without token dropping
//   "pipemoe": {"pipeline_degree", "fused_experts": false},  // Tutel's fused experts
//   "mpipemoe": {"partitions", "strategy": "none" | "S1" | ... | "S4"},
//   "ppmoe": {"tensor_parallel", "pipeline_stages", "micro_batches"},
//   "pro_prophet": {"n", "alpha", "block_schedule", "model": {...}},
//   "fastermoe": {"shadow_experts": [...], "model": {...}, "smart_schedule_group": 0,
//                 "count_exchange": false},
//   "plan_builder": "auto" | "full" | "timing",
//   "cost_model": "<hardware preset>" | { cost model JSON, see cost_model.h }
// }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/plan/builders.h"
#include "moetrace/plan/config.h"
#include "moetrace/plan/routing.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::sim {

inline constexpr const char* kVariants[] = {"dpmoe", "ppmoe", "pipemoe", "mpipemoe", "pro_prophet", "fastermoe"};

struct RunSpec {
  std::string preset;   // the preset it started from, if any
  std::string source;   // where the preset's numbers come from (paper, table)
  std::string variant = "pipemoe";
  plan::CommonConfig common;
  // Tokens of one source block (a rank's batch; a micro-batch for PPMoE) and
  // how they are routed. sources/experts/layers/iterations/top_k are set from
  // the configuration by load_config().
  plan::SyntheticLoadConfig routing;
  bool capacity_padding = false;  // dpmoe: DeepSpeed-MoE's padding and einsums (DpMoeConfig)
  int pipeline_degree = 2;  // pipemoe r
  bool fused_experts = false;  // pipemoe: Tutel's fused experts (plan::PipeMoeConfig::fused_experts)
  int partitions = 2;       // mpipemoe n
  plan::ReuseStrategy strategy = plan::ReuseStrategy::kNone;
  int tensor_parallel = 1, pipeline_stages = 1, micro_batches = 1;  // ppmoe
  int pro_prophet_n = 0;
  double pro_prophet_alpha = 0.25;
  bool block_schedule = true;
  // Pro-Prophet's / FasterMoE's planner model; derived from the cost model
  // (derive_planner_model) unless the configuration gives it.
  std::optional<plan::ProProphetModel> planner_model;
  std::vector<int> shadow_experts;
  // FasterMoE's smart schedule and FastMoE's count exchange
  // (plan::FasterMoeConfig::smart_schedule_group, count_exchange).
  int smart_schedule_group = 0;
  bool count_exchange = false;
  // Which plan builder: "full" (kernels/plan, executable by every executor),
  // "timing" (timing_plan.h: aggregated all-to-alls, simulator only, scales
  // to 1024+ ranks; dpmoe and pipemoe), "auto" (timing above 128 ranks where
  // supported).
  std::string plan_builder = "auto";
  std::string cost_model_name = "h100-nvlink-ib";
  std::optional<CostModel> cost_model;  // set: overrides cost_model_name

  // Throws ConfigError naming the field for an impossible configuration
  // (also the builders' own checks: experts not divisible by ranks, r < 1,
  // a memory budget below the model states, ...).
  void validate() const;
  CostModel resolved_cost_model() const;
  // The routing config for build_plan: sources, experts, layers, iterations.
  plan::SyntheticLoadConfig load_config() const;
  // The whole spec as JSON (RunRecord.config_json): reading it back gives the
  // same spec.
  std::string to_json() const;
};

struct RunPreset {
  std::string name;
  std::string variant;
  std::string summary;  // what and where from (paper, table)
};
// Named presets; the pipemoe Table IV grid is also addressable by pattern
// (see pipemoe_table4_pattern()).
std::vector<RunPreset> run_presets();
std::string pipemoe_table4_pattern();
RunSpec run_preset(std::string_view name);  // throws ConfigError for an unknown name

// Reads a JSON configuration on top of `base` (a preset named by "preset"
// replaces base first). Throws ConfigError naming the offending key.
RunSpec run_spec_from_json(std::string_view json_text, RunSpec base = {});

// Pro-Prophet's planner model (pro-prophet Eq. 1-8) from the cost model, so
// the planner predicts what the simulator will charge: B-bar from the
// all-to-all beta at P ranks, t from the expert FFN's FLOP rate, T_FNEC and
// T_BNEC from attention and dense FFN of one block.
plan::ProProphetModel derive_planner_model(const RunSpec& spec, const CostModel& model);

// The plan of the spec (builds the routing load, then the variant's builder,
// or the timing-only builder per plan_builder).
plan::Plan build_plan(const RunSpec& spec);
// On a given load (iterations, layers, ranks and experts as the spec's),
// and for pro_prophet and fastermoe with given placements [iteration][layer]
// (empty: planned as a run plans them): a replay of what a trace ran.
plan::Plan build_plan(const RunSpec& spec, const plan::ExpertLoad& load,
                      const std::vector<std::vector<plan::ExpertPlacement>>& placements = {});
bool uses_timing_plan(const RunSpec& spec);

}  // namespace moetrace::sim
