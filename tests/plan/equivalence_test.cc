// Every variant's plan, run by the CPU executor in several valid orders,
// reproduces the float64 dense reference (outputs, input gradients, every
// parameter gradient of every iteration, final parameters) to 1e-12, on
// small configurations with uneven loads and an expert that gets no token.
#include <gtest/gtest.h>

#include <algorithm>

#include "moetrace/plan/builders.h"
#include "test_util.h"

namespace moetrace::plan {

// Test names show "S1", not the enum's bytes.
void PrintTo(ReuseStrategy s, std::ostream* os) { *os << reuse_strategy_name(s); }

namespace {

using testing::expect_matches_reference;
using testing::Fixture;
using testing::make_fixture;

ModelShape shape(int layers, int experts, int top_k, std::int64_t dense_hidden = 0, bool attention = false) {
  return {.num_layers = layers, .num_experts = experts, .top_k = top_k, .model_dim = 6, .expert_hidden = 10,
          .dense_hidden = dense_hidden, .attention = attention, .learning_rate = 0.05};
}

CommonConfig common(const ModelShape& s, int ranks, int iterations) {
  return {.model = s, .ranks = ranks, .iterations = iterations};
}

int count_kind(const Plan& p, OpKind k) {
  return static_cast<int>(std::count_if(p.ops.begin(), p.ops.end(), [&](const Op& op) { return op.kind == k; }));
}

// The premises the configurations below are chosen for.
void expect_uneven_with_silent_expert(const Fixture& f, int silent) {
  const auto totals = f.ref.load.expert_totals(0, 0);
  EXPECT_EQ(totals[static_cast<std::size_t>(silent)], 0) << "the rigged expert receives tokens";
  std::int64_t lo = INT64_MAX, hi = 0;
  for (std::size_t e = 0; e < totals.size(); ++e)
    if (static_cast<int>(e) != silent) {
      lo = std::min(lo, totals[e]);
      hi = std::max(hi, totals[e]);
    }
  EXPECT_LT(lo, hi) << "loads are even: the test would not exercise all-to-all-v";
}

TEST(Equivalence, DpMoeTwoRanks) {
  DpMoeConfig c;
  c.common = common(shape(2, 4, 2), 2, 2);
  const auto f = make_fixture(c.common.model, 2, {7, 5}, 11);
  expect_matches_reference(build_dpmoe(c, f.ref.load), f);
}

TEST(Equivalence, DpMoeSilentExpertDenseAttention) {
  DpMoeConfig c;
  c.common = common(shape(2, 8, 2, 12, true), 4, 2);
  const auto f = make_fixture(c.common.model, 2, {9, 4, 6, 11}, 21, /*silent_expert=*/5);
  expect_uneven_with_silent_expert(f, 5);
  expect_matches_reference(build_dpmoe(c, f.ref.load), f);
}

TEST(Equivalence, PipeMoeChunksOfUnevenSize) {
  PipeMoeConfig c;
  c.common = common(shape(2, 4, 2, 8), 4, 2);
  c.pipeline_degree = 3;
  const auto f = make_fixture(c.common.model, 2, {10, 7, 5, 8}, 31, /*silent_expert=*/2);
  expect_uneven_with_silent_expert(f, 2);
  const Plan plan = build_pipemoe(c, f.ref.load);
  EXPECT_EQ(count_kind(plan, OpKind::kDispatchAllToAll), 2 * 2 * 2 * 3 * 4);  // it x layer x pass x r x rank
  expect_matches_reference(plan, f);
}

class MPipeMoeStrategies : public ::testing::TestWithParam<ReuseStrategy> {};

TEST_P(MPipeMoeStrategies, MatchesReference) {
  MPipeMoeConfig c;
  c.common = common(shape(2, 4, 1, 8), 4, 2);
  c.partitions = 3;
  c.strategy = GetParam();
  const auto f = make_fixture(c.common.model, 2, {12, 9, 7, 10}, 41, /*silent_expert=*/1);
  expect_uneven_with_silent_expert(f, 1);
  expect_matches_reference(build_mpipemoe(c, f.ref.load), f);
}

INSTANTIATE_TEST_SUITE_P(Table2, MPipeMoeStrategies,
                         ::testing::Values(ReuseStrategy::kNone, ReuseStrategy::kS1, ReuseStrategy::kS2,
                                           ReuseStrategy::kS3, ReuseStrategy::kS4),
                         [](const ::testing::TestParamInfo<ReuseStrategy>& p) { return std::string(reuse_strategy_name(p.param)); });

TEST(Equivalence, PpMoePipelineTensorAndDataParallel) {
  PpMoeConfig c;
  c.common = common(shape(4, 4, 2, 8, true), 8, 2);
  c.tensor_parallel = 2;
  c.pipeline_stages = 2;
  c.micro_batches = 3;  // data_parallel = 2: blocks = 2 x 3
  const auto f = make_fixture(c.common.model, 2, {6, 5, 7, 4, 8, 3}, 51, /*silent_expert=*/3);
  expect_uneven_with_silent_expert(f, 3);
  const Plan plan = build_ppmoe(c, f.ref.load);
  EXPECT_GT(count_kind(plan, OpKind::kPipelineSend), 0);
  EXPECT_GT(count_kind(plan, OpKind::kMoeAllReduce), 0);
  EXPECT_EQ(count_kind(plan, OpKind::kDispatchAllToAll), 0);
  expect_matches_reference(plan, f);
}

TEST(Equivalence, PpMoeWholeTensorParallelGroup) {
  PpMoeConfig c;
  c.common = common(shape(2, 8, 2, 0, true), 4, 1);
  c.tensor_parallel = 4;
  const auto f = make_fixture(c.common.model, 1, {9}, 61, /*silent_expert=*/6);
  expect_uneven_with_silent_expert(f, 6);
  expect_matches_reference(build_ppmoe(c, f.ref.load), f);
}

ProProphetConfig pro_prophet_config(bool scheduled) {
  ProProphetConfig c;
  c.common = common(shape(3, 4, 1, 8), 4, 3);
  c.n = 1;
  c.alpha = 0.01;  // Eq. 7 essentially never holds: the greedy search runs
  // Cheap Trans/Agg (1e12 B/s): replicas pay off.
  c.model = {.bandwidth_bytes_per_s = 1e12, .expert_tokens_per_s = 10, .fnec_seconds = 0.1, .bnec_seconds = 0.2};
  c.block_schedule = scheduled;
  return c;
}

TEST(Equivalence, ProProphetBlockWiseSchedule) {
  const ProProphetConfig c = pro_prophet_config(true);
  const auto f = make_fixture(c.common.model, 3, {9, 6, 11, 8}, 71, /*silent_expert=*/0);
  expect_uneven_with_silent_expert(f, 0);
  const Plan plan = build_pro_prophet(c, f.ref.load);
  EXPECT_GT(count_kind(plan, OpKind::kTrans), 0) << "no replica was placed: the test would not exercise Trans/Agg";
  EXPECT_GT(count_kind(plan, OpKind::kAgg), 0);
  EXPECT_GT(count_kind(plan, OpKind::kPlan), 0);
  expect_matches_reference(plan, f);
}

TEST(Equivalence, ProProphetUnscheduled) {
  const ProProphetConfig c = pro_prophet_config(false);
  const auto f = make_fixture(c.common.model, 3, {9, 6, 11, 8}, 73);
  const Plan plan = build_pro_prophet(c, f.ref.load);
  EXPECT_GT(count_kind(plan, OpKind::kTrans), 0);
  expect_matches_reference(plan, f);
}

TEST(Equivalence, FasterMoeShadowing) {
  FasterMoeConfig c;
  c.common = common(shape(2, 4, 2, 0, true), 4, 2);
  c.shadow_experts = {1, 2};
  const auto f = make_fixture(c.common.model, 2, {8, 5, 9, 6}, 81, /*silent_expert=*/3);
  const Plan plan = build_fastermoe(c, f.ref.load);
  // Two shadowed experts, broadcast from their home to 3 ranks, per layer and iteration.
  EXPECT_EQ(count_kind(plan, OpKind::kTrans), 2 * 2 * 2 * 4);
  expect_matches_reference(plan, f);
}

TEST(Equivalence, FasterMoeAutomaticShadowing) {
  FasterMoeConfig c;
  c.common = common(shape(1, 4, 1), 4, 2);
  c.model.bandwidth_bytes_per_s = 1e12;
  c.model.expert_tokens_per_s = 10;
  const auto f = make_fixture(c.common.model, 2, {12, 9, 10, 7}, 91);
  const Plan plan = build_fastermoe(c, f.ref.load);
  EXPECT_GT(count_kind(plan, OpKind::kTrans), 0);
  expect_matches_reference(plan, f);
}

}  // namespace
}  // namespace moetrace::plan
