// The timing-only plan (timing_plan.h) is the plan of build_dpmoe /
// build_pipemoe, op for op, except for aggregated all-to-all transfers; the
// simulator gives both the same times.
#include <gtest/gtest.h>

#include <ostream>

#include "moetrace/plan/builders.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/timing_plan.h"

namespace moetrace::sim {
namespace {

RunSpec small_spec(const std::string& variant, int r, bool dense) {
  RunSpec s = run_preset(variant);
  s.common.ranks = 4;
  s.common.iterations = 2;
  s.common.model.num_layers = 2;
  s.common.model.num_experts = 8;
  s.common.model.top_k = 2;
  s.common.model.model_dim = 64;
  s.common.model.expert_hidden = 128;
  s.common.model.dense_hidden = dense ? 96 : 0;
  s.routing.pattern = plan::LoadPattern::kDrifting;
  s.routing.source_noise = 0.4;
  s.routing.tokens_per_source = 301;  // chunks of unequal size
  s.pipeline_degree = r;
  s.plan_builder = "full";
  return s;
}

void expect_same_plan(const plan::Plan& a, const plan::Plan& b) {
  ASSERT_EQ(a.ops.size(), b.ops.size());
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  ASSERT_EQ(a.streams.size(), b.streams.size());
  for (std::size_t i = 0; i < a.streams.size(); ++i) {
    EXPECT_EQ(a.streams[i].name, b.streams[i].name);
    EXPECT_EQ(a.streams[i].rank, b.streams[i].rank);
  }
  for (std::size_t i = 0; i < a.buffers.size(); ++i) {
    const auto &x = a.buffers[i], &y = b.buffers[i];
    EXPECT_EQ(x.name, y.name) << i;
    EXPECT_EQ(x.rank, y.rank) << x.name;
    EXPECT_EQ(x.tag, y.tag) << x.name;
    EXPECT_EQ(x.bytes(), y.bytes()) << x.name;
    EXPECT_EQ(x.rows, y.rows) << x.name;
    EXPECT_EQ(x.persistent, y.persistent) << x.name;
    EXPECT_EQ(x.memory, y.memory) << x.name;
    EXPECT_EQ(x.layer, y.layer) << x.name;
    EXPECT_EQ(x.chunk, y.chunk) << x.name;
  }
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const auto &x = a.ops[i], &y = b.ops[i];
    ASSERT_EQ(x.name, y.name) << i;
    EXPECT_EQ(x.kind, y.kind) << x.name;
    EXPECT_EQ(x.rank, y.rank) << x.name;
    EXPECT_EQ(x.stream, y.stream) << x.name;
    EXPECT_EQ(x.coords.layer, y.coords.layer) << x.name;
    EXPECT_EQ(x.coords.iteration, y.coords.iteration) << x.name;
    EXPECT_EQ(x.coords.chunk, y.coords.chunk) << x.name;
    EXPECT_EQ(x.coords.phase, y.coords.phase) << x.name;
    EXPECT_EQ(x.flops, y.flops) << x.name;
    EXPECT_EQ(x.bytes, y.bytes) << x.name;
    EXPECT_EQ(x.deps, y.deps) << x.name;
    EXPECT_EQ(x.alloc_before, y.alloc_before) << x.name;
    EXPECT_EQ(x.free_after, y.free_after) << x.name;
    ASSERT_EQ(x.buffers.size(), y.buffers.size()) << x.name;
    for (std::size_t k = 0; k < x.buffers.size(); ++k) {
      EXPECT_EQ(x.buffers[k].buffer, y.buffers[k].buffer) << x.name;
      EXPECT_EQ(x.buffers[k].access, y.buffers[k].access) << x.name;
    }
    EXPECT_EQ(x.data.index(), y.data.index()) << x.name;
  }
  EXPECT_EQ(a.placements.size(), b.placements.size());
  EXPECT_EQ(a.loads.size(), b.loads.size());
}

void expect_same_times(const plan::Plan& a, const plan::Plan& b, const CostModel& m) {
  const auto ra = simulate(a, m), rb = simulate(b, m);
  ASSERT_EQ(ra.start_s.size(), rb.start_s.size());
  for (std::size_t i = 0; i < ra.start_s.size(); ++i) {
    EXPECT_EQ(ra.start_s[i], rb.start_s[i]) << a.ops[i].name;
    EXPECT_EQ(ra.end_s[i], rb.end_s[i]) << a.ops[i].name;
  }
  for (std::size_t r = 0; r < ra.memory.size(); ++r) EXPECT_EQ(ra.memory[r].peak_bytes, rb.memory[r].peak_bytes);
}

struct Case {
  const char* variant;
  int r;
  bool dense;
};

// gtest would otherwise print the struct's bytes, padding included
// (uninitialised under valgrind).
void PrintTo(const Case& c, std::ostream* os) { *os << c.variant << " r=" << c.r << (c.dense ? " dense" : ""); }

class TimingPlan : public ::testing::TestWithParam<Case> {};

TEST_P(TimingPlan, SamePlanAndTimesAsTheFullBuilder) {
  const auto c = GetParam();
  const RunSpec spec = small_spec(c.variant, c.r, c.dense);
  const plan::Plan full = build_plan(spec);
  const plan::Plan timing = build_timing_plan(spec, plan::synthetic_load(spec.load_config()));
  expect_same_plan(full, timing);
  for (const char* model : {"h100-nvlink-ib", "pipemoe-2080ti-ib100", "a100-nvlink-ib200", "rtx3090-pcie-ib100"})
    expect_same_times(full, timing, cost_model_preset(model));
}

INSTANTIATE_TEST_SUITE_P(Variants, TimingPlan,
                         ::testing::Values(Case{"dpmoe", 1, false}, Case{"dpmoe", 1, true}, Case{"pipemoe", 2, false},
                                           Case{"pipemoe", 3, true}, Case{"pipemoe", 4, false}));

TEST(TimingPlan, LargeLoadsAreKeptAsPerExpertTotals) {
  RunSpec spec = small_spec("dpmoe", 1, false);
  const auto load = plan::synthetic_load(spec.load_config());
  const plan::Plan p = build_timing_plan(spec, load, /*max_load_entries=*/10);
  ASSERT_EQ(p.loads.size(), static_cast<std::size_t>(2 * 2 * 8));  // iterations x layers x experts
  for (const auto& e : p.loads) {
    EXPECT_EQ(e.source, -1);
    EXPECT_EQ(e.tokens, load.expert_totals(e.iteration, e.layer)[static_cast<std::size_t>(e.expert)]);
  }
}

TEST(TimingPlan, OtherVariantsAreRefusedByName) {
  RunSpec spec = small_spec("mpipemoe", 2, false);
  spec.plan_builder = "timing";
  EXPECT_THROW(spec.validate(), ConfigError);
}

}  // namespace
}  // namespace moetrace::sim
