// Plans of every variant the builders provide, on one model, ranks and load:
// shared by the CPU-side schedule tests and the GPU tests.
#pragma once

#include <string>
#include <vector>

#include "moetrace/plan/builders.h"

namespace moetrace::testing {

struct NamedPlan {
  std::string name;
  plan::Plan plan;
};

inline plan::CommonConfig common_config(const plan::ModelShape& shape, int ranks, int iterations) {
  return {.model = shape, .ranks = ranks, .iterations = iterations};
}

// dpmoe, pipemoe (r = 2), mpipemoe with n = 3 and every reuse strategy,
// pro_prophet with and without the block-wise schedule, fastermoe shadowing
// expert 0; ppmoe with 2 tensor-parallel ranks x 2 pipeline stages and 4
// micro-batches where ranks is a multiple of 4 (then its blocks are the load's
// sources: ranks / 4 data-parallel groups x 4 micro-batches).
inline std::vector<NamedPlan> variant_plans(const plan::ModelShape& shape, int ranks, int iterations,
                                            const plan::ExpertLoad& load) {
  using namespace plan;
  std::vector<NamedPlan> out;
  const CommonConfig common = common_config(shape, ranks, iterations);
  {
    DpMoeConfig c;
    c.common = common;
    out.push_back({"dpmoe", build_dpmoe(c, load)});
  }
  {
    PipeMoeConfig c;
    c.common = common;
    c.pipeline_degree = 2;
    out.push_back({"pipemoe_r2", build_pipemoe(c, load)});
  }
  for (ReuseStrategy s : {ReuseStrategy::kNone, ReuseStrategy::kS1, ReuseStrategy::kS2,
                          ReuseStrategy::kS3, ReuseStrategy::kS4}) {
    MPipeMoeConfig c;
    c.common = common;
    c.partitions = 3;
    c.strategy = s;
    out.push_back({"mpipemoe_n3_" + std::string(reuse_strategy_name(s)), build_mpipemoe(c, load)});
  }
  for (bool scheduled : {true, false}) {
    ProProphetConfig c;
    c.common = common;
    c.n = 0;
    c.block_schedule = scheduled;
    c.model.fnec_seconds = 1e-4;
    c.model.bnec_seconds = 2e-4;
    out.push_back({scheduled ? "pro_prophet_scheduled" : "pro_prophet_unscheduled",
                   build_pro_prophet(c, load)});
  }
  if (ranks % 4 == 0 && shape.num_layers % 2 == 0) {
    PpMoeConfig c;
    c.common = common;
    c.tensor_parallel = 2;
    c.pipeline_stages = 2;
    c.micro_batches = 4;
    out.push_back({"ppmoe_t2_s2_mb4", build_ppmoe(c, load)});
  }
  {
    FasterMoeConfig c;
    c.common = common;
    c.shadow_experts = {0};
    out.push_back({"fastermoe", build_fastermoe(c, load)});
  }
  return out;
}

}  // namespace moetrace::testing
