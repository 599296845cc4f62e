// Expert load imbalance and locality on hand-built traces; every expected
// number is derived by hand in the comment above it.
#include <gtest/gtest.h>

#include <cmath>

#include "moetrace/analyzer/expert_load.h"
#include "moetrace/analyzer/locality.h"
#include "loaded_trace.h"

namespace moetrace::analyzer {
namespace {

using V = std::vector<std::int64_t>;

// 4 experts on 2 devices, load [10, 20, 30, 40] (source rank 0 sends 10, 10,
// 10, 10 and source rank 1 sends 0, 10, 20, 30).
// Home placement: experts 0, 1 on rank 0 (30 tokens), 2, 3 on rank 1 (70).
//   mean 50; balance degree = sqrt(((30-50)^2 + (70-50)^2) / 2) = 20
//   device max/mean = 70 / 50 = 1.4
// Expert load: mean 25, std = sqrt((15^2 + 5^2 + 5^2 + 15^2) / 4) = sqrt(125)
//   CV = sqrt(125) / 25 = 0.4472..., max/mean = 40 / 25 = 1.6, heaviest = 3.
const std::string kLoad = R"(
  run world_size=2
  stream id=0 rank=0 role=compute
  op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=10
)" + testing::load_lines(0, 0, {{10, 10, 10, 10}, {0, 10, 20, 30}});

TEST(ExpertLoad, BalanceDegreeOfTenTwentyThirtyFortyOnTwoDevices) {
  const auto t = testing::load_text_trace("load.db", kLoad);
  const auto a = analyze_expert_load(t, compute_breakdown(t));
  ASSERT_TRUE(a.has_load);
  ASSERT_EQ(a.rows.size(), 1u);
  const auto& r = a.rows[0];
  EXPECT_EQ(r.tokens_per_expert, (V{10, 20, 30, 40}));
  EXPECT_EQ(r.tokens_per_device_home, (V{30, 70}));
  EXPECT_EQ(r.tokens_per_device, (V{30, 70}));
  EXPECT_DOUBLE_EQ(r.balance_degree_home, 20.0);
  EXPECT_DOUBLE_EQ(r.balance_degree, 20.0);
  EXPECT_DOUBLE_EQ(r.rb, 1.0);
  EXPECT_DOUBLE_EQ(r.device_max_over_mean, 1.4);
  EXPECT_DOUBLE_EQ(r.expert_max_over_mean, 1.6);
  EXPECT_NEAR(r.expert_cv, std::sqrt(125.0) / 25.0, 1e-12);
  EXPECT_EQ(r.heaviest_expert, 3);
  EXPECT_EQ(r.busiest_rank, 1);
  // Received (pro-prophet Eq. 1): rank 0 gets expert 1's 10 tokens from rank
  // 1; rank 1 gets experts 2 and 3's 10 + 10 tokens from rank 0.
  EXPECT_EQ(r.received_per_device, (V{10, 20}));
}

// The same load with expert 3 replicated on rank 0 (Pro-Prophet Trans):
// rank 0 computes its own 10 tokens of expert 3 -> devices [40, 60].
//   balance degree after = sqrt((10^2 + 10^2) / 2) = 10; RB = 20 / 10 = 2.
TEST(ExpertLoad, ReplicaComputesItsSourceRanksTokensAndRbIsTwo) {
  const auto t = testing::load_text_trace("replica.db", std::string(kLoad) + R"(
    place iteration=0 layer=0 expert=3 rank=1 role=home
    place iteration=0 layer=0 expert=3 rank=0 role=replica
  )");
  const auto a = analyze_expert_load(t, compute_breakdown(t));
  ASSERT_EQ(a.rows.size(), 1u);
  const auto& r = a.rows[0];
  EXPECT_TRUE(r.has_placement);
  EXPECT_EQ(r.copies, 1);
  EXPECT_EQ(r.tokens_per_device_home, (V{30, 70}));
  EXPECT_EQ(r.tokens_per_device, (V{40, 60}));
  EXPECT_DOUBLE_EQ(r.balance_degree, 10.0);
  EXPECT_DOUBLE_EQ(r.rb, 2.0);
  ASSERT_EQ(a.layers.size(), 1u);
  EXPECT_DOUBLE_EQ(a.layers[0].rb, 2.0);
}

// Time the busiest rank costs the layer. Rank 1 holds the heavy experts
// (70 tokens) and its expert FFN takes 700 ns against rank 0's 300 ns; the
// windows are 800 and 400 ns (gate 100 ns each) -> mean 600, slowest rank 1
// 200 ns above the mean; busiest expert compute 700 vs mean 500.
TEST(ExpertLoad, TimeTheBusiestRankCosts) {
  const auto t = testing::load_text_trace("time.db", R"(
    run world_size=2
    stream id=0 rank=0 role=compute
    stream id=1 rank=1 role=compute
    op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=100 end=400
    op rank=1 stream=1 kind=gate layer=0 iteration=0 start=0 end=100
    op rank=1 stream=1 kind=expert_ffn layer=0 iteration=0 start=100 end=800
  )" + testing::load_lines(0, 0, {{10, 20, 30, 40}}));
  const auto a = analyze_expert_load(t, compute_breakdown(t));
  ASSERT_EQ(a.rows.size(), 1u);
  const auto& r = a.rows[0];
  EXPECT_EQ(r.busiest_rank, 1);
  EXPECT_EQ(r.slowest_rank, 1);
  EXPECT_EQ(r.slowest_window_ns, 800);
  EXPECT_EQ(r.mean_window_ns, 600);
  EXPECT_EQ(r.imbalance_ns(), 200);
  EXPECT_EQ(r.busiest_expert_compute_ns, 700);
  EXPECT_EQ(r.mean_expert_compute_ns, 500);
  ASSERT_EQ(a.layers.size(), 1u);
  EXPECT_EQ(a.layers[0].imbalance_ns, 200);
}

TEST(ExpertLoad, NoLoadRowsMeansNoAnalysis) {
  const auto t = testing::load_text_trace("noload.db", "stream id=0 rank=0\nop rank=0 stream=0 kind=gate start=0 end=1\n");
  EXPECT_FALSE(analyze_expert_load(t, compute_breakdown(t)).has_load);
  EXPECT_FALSE(analyze_locality(t).has_load);
}

// Layer 0 over three iterations: [10,20,30,40], [10,20,30,40], [40,30,20,10].
//   0 -> 1: identical: cosine 1, L1 0, error 0, heaviest (3) predicted.
//   1 -> 2: cosine = (400+600+600+400) / (100+400+900+1600) = 2000/3000 = 2/3;
//           normalised [.1,.2,.3,.4] vs [.4,.3,.2,.1] -> L1 = .3+.1+.1+.3 = 0.8;
//           error = (30+10+10+30) / 100 = 0.8; heaviest 3 vs 0: missed.
//   means over the two consecutive pairs: cosine 5/6, L1 0.4, error 0.4,
//   heaviest predicted 1/2; distance 2 (0 -> 2): cosine 2/3.
TEST(Locality, ConsecutiveIterationsAndTheCurve) {
  std::string text = "stream id=0 rank=0\nop rank=0 stream=0 kind=gate start=0 end=1\n";
  const int loads[3][4] = {{10, 20, 30, 40}, {10, 20, 30, 40}, {40, 30, 20, 10}};
  for (int it = 0; it < 3; ++it)
    for (int e = 0; e < 4; ++e)
      text += "load iteration=" + std::to_string(it) + " layer=0 src=0 expert=" + std::to_string(e) +
              " tokens=" + std::to_string(loads[it][e]) + "\n";
  const auto a = analyze_locality(testing::load_text_trace("locality.db", text));
  ASSERT_EQ(a.pairs.size(), 2u);
  EXPECT_DOUBLE_EQ(a.pairs[0].cosine_similarity, 1.0);
  EXPECT_DOUBLE_EQ(a.pairs[0].l1_distance, 0.0);
  EXPECT_TRUE(a.pairs[0].heaviest_predicted());
  EXPECT_NEAR(a.pairs[1].cosine_similarity, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(a.pairs[1].l1_distance, 0.8, 1e-12);
  EXPECT_NEAR(a.pairs[1].relative_l1_error, 0.8, 1e-12);
  EXPECT_FALSE(a.pairs[1].heaviest_predicted());
  ASSERT_EQ(a.layers.size(), 1u);
  const auto& l = a.layers[0];
  EXPECT_EQ(l.consecutive.pairs, 2);
  EXPECT_NEAR(l.consecutive.cosine_similarity, 5.0 / 6.0, 1e-12);
  EXPECT_NEAR(l.consecutive.l1_distance, 0.4, 1e-12);
  EXPECT_NEAR(l.consecutive.relative_l1_error, 0.4, 1e-12);
  EXPECT_DOUBLE_EQ(l.consecutive.heaviest_predicted, 0.5);
  EXPECT_NEAR(l.min_cosine_similarity, 2.0 / 3.0, 1e-12);
  ASSERT_EQ(l.curve.size(), 2u);
  EXPECT_EQ(l.curve[1].distance, 2);
  EXPECT_NEAR(l.curve[1].cosine_similarity, 2.0 / 3.0, 1e-12);
  ASSERT_EQ(a.curve.size(), 2u);
}

}  // namespace
}  // namespace moetrace::analyzer
