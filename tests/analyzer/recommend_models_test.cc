// The recommenders' models on hand-derived numbers: pipemoe Theorem 1 in
// each regime (r from the closed forms by hand), mpipemoe Eq. 10 and Eq. 1-6
// under a budget, pro-prophet Algorithm 1 on the planner's hand-worked load,
// ppmoe Eq. 2 and 5 on the paper's numbers, and mpipemoe's range search.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "moetrace/analyzer/memory_reuse.h"
#include "moetrace/analyzer/pipeline_degree.h"
#include "moetrace/analyzer/placement.h"
#include "moetrace/analyzer/ppmoe_layout.h"

namespace moetrace::analyzer {
namespace {

// Terms in milliseconds (the model is linear in time units).
PipelineTerms ms(double alpha_a, double comm, double alpha_e, double comp) {
  return {alpha_a, comm, alpha_e, comp};
}

// A case of Theorem 1 that has a feasible degree: r, and the time t there.
void expect_feasible(const PipelineCandidate& c, int r, double t) {
  ASSERT_TRUE(c.feasible);
  EXPECT_EQ(c.r, r);
  EXPECT_DOUBLE_EQ(c.t, t);
}

TEST(PipemoeTheorem1, CommunicationBound) {
  // alpha_a = 1, beta_a n_d = 10, alpha_e = 0.1, beta_e n_e = 2.
  // Eq. 19: t1 = 2 + 0.1 + 20 + 2 = 24.1. Q1 (Eq. 27): 0.9 r >= -8 holds
  // for every r, so Eq. 28 gives r = max(2, ceil(-8 / 0.9)) = 2 and Eq. 25
  // t2* = 2 x 2 x 1 + 20 = 24 < t1; cases 3 and 4 have no feasible r.
  const auto t = ms(1, 10, 0.1, 2);
  const auto res = pipemoe_theorem1(t, 64);
  EXPECT_DOUBLE_EQ(res.t1, 24.1);
  expect_feasible(res.case2, 2, 24.0);
  EXPECT_FALSE(res.case3.feasible);
  EXPECT_FALSE(res.case4.feasible);
  EXPECT_EQ(res.r, 2);
  EXPECT_DOUBLE_EQ(res.t, 24.0);
  EXPECT_EQ(res.regime, PipelineRegime::kCommunicationBound);
}

TEST(PipemoeTheorem1, ComputationBound) {
  // alpha_a = alpha_e = 1, beta_a n_d = 8, beta_e n_e = 50: Q1 never holds
  // (alpha_a - alpha_e = 0 < 42). Eq. 34: f3 = 52 + 16 / r + r, minimum at
  // r = sqrt(2 x 8 / 1) = 4: f3(4) = 60; Q2 at 4: 6 + 12 < 54. Eq. 19:
  // t1 = 2 + 1 + 16 + 50 = 69. Q2 fails only for r - 16 / r >= 36 (r >= 37),
  // where f4 = 2 x 37 + 16 = 90.
  const auto t = ms(1, 8, 1, 50);
  const auto res = pipemoe_theorem1(t, 64);
  EXPECT_DOUBLE_EQ(res.t1, 69.0);
  EXPECT_FALSE(res.case2.feasible);
  expect_feasible(res.case3, 4, 60.0);
  expect_feasible(res.case4, 37, 90.0);
  EXPECT_EQ(res.r, 4);
  EXPECT_EQ(res.regime, PipelineRegime::kComputationBound);
}

TEST(PipemoeTheorem1, LinkBound) {
  // alpha_a = alpha_e = 1, beta_a n_d = 30, beta_e n_e = 36: Q1 never holds.
  // Q2 (Eq. 30): 2 (r-1) + 60 (r-1) / r < r + 36 holds at r = 2 (32 < 38)
  // and fails from r = 3 on (44 >= 39; r + 22 - 60 / r >= 0). Case 3:
  // only r = 2, f3 = 2 + 36 + 30 + 2 = 70. Case 4: r = 3, Eq. 40:
  // 6 + 60 = 66. t1 = 2 + 1 + 60 + 36 = 99. Theorem 1: r = 3.
  const auto t = ms(1, 30, 1, 36);
  const auto res = pipemoe_theorem1(t, 64);
  expect_feasible(res.case3, 2, 70.0);
  expect_feasible(res.case4, 3, 66.0);
  EXPECT_EQ(res.r, 3);
  EXPECT_DOUBLE_EQ(res.t, 66.0);
  EXPECT_EQ(res.regime, PipelineRegime::kLinkBound);
}

TEST(PipemoeTheorem1, NegativeAlphaDifferenceFlipsEq28) {
  // alpha_a = 1 < alpha_e = 3, beta_a n_d = 30, beta_e n_e = 25. Eq. 27
  // divides by alpha_a - alpha_e = -2 < 0: Q1 holds for r <= -5 / -2 = 2.5,
  // i.e. r = 2 (t_d = 16 >= t_e = 15.5), not r >= 2.5 as the formula read
  // literally says (r = 3: t_d = 11 < t_e = 11.33). Case 2: r = 2,
  // Eq. 25 = 4 + 60 = 64. Case 4: r = 3 (Q2: 44 >= 34), 6 + 60 = 66. Case 3
  // (Q2: r^2 - 33 r + 60 > 0, r >= 32): f3(32) = 27 + 60/32 + 96.
  const auto t = ms(1, 30, 3, 25);
  ASSERT_TRUE(pipemoe_q1(t, 2));
  ASSERT_FALSE(pipemoe_q1(t, 3));
  const auto res = pipemoe_theorem1(t, 64);
  expect_feasible(res.case2, 2, 64.0);
  ASSERT_TRUE(res.case4.feasible);
  EXPECT_EQ(res.case4.r, 3);
  expect_feasible(res.case3, 32, 27 + 60.0 / 32 + 96);
  EXPECT_EQ(res.r, 2);
  EXPECT_EQ(res.regime, PipelineRegime::kCommunicationBound);
}

TEST(PipemoeTheorem1, StartupsMakeOneBest) {
  // Large startups: t1 = 20 + 10 + 2 + 1 = 33; r = 2: max(Eq. 33 = 42,
  // Eq. 40 = 42) > t1, and every larger r costs more.
  const auto res = pipemoe_theorem1(ms(10, 1, 10, 1), 64);
  EXPECT_EQ(res.r, 1);
  EXPECT_DOUBLE_EQ(res.t, 33.0);
  EXPECT_EQ(res.regime, PipelineRegime::kNoPipelining);
}

TEST(PipemoeTheorem1, AgreesWithIntegerSearchOfTheCaseSplit) {
  // Theorem 1 solves each case in closed form; the minimum over r of the
  // case-split time (Eq. 19 / 25 / 33 / 40) must agree everywhere.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-3, 2);
  for (int i = 0; i < 20000; ++i) {
    const auto t = ms(std::pow(10, u(rng)), std::pow(10, u(rng) + 1), std::pow(10, u(rng)), std::pow(10, u(rng) + 1));
    const int r_max = 1 + static_cast<int>(rng() % 64);
    const auto res = pipemoe_theorem1(t, r_max);
    double best = pipemoe_time(t, 1);
    for (int r = 2; r <= r_max; ++r) best = std::min(best, pipemoe_time(t, r));
    ASSERT_NEAR(res.t, best, 1e-12 * best) << i;
    ASSERT_DOUBLE_EQ(pipemoe_time(t, res.r), res.t) << i;
    // pipemoe_time is max(Eq. 33, Eq. 40) for r >= 2.
    for (int r = 2; r <= 4; ++r)
      ASSERT_DOUBLE_EQ(pipemoe_time(t, r), std::max(pipemoe_eq33(t, r), pipemoe_eq25(t, r)));
  }
}

TEST(PipelineDegree, BothPassesChooseOneR) {
  // Forward of the computation-bound case (best r = 4, 60) and a backward
  // with doubled expert terms: alpha_e = 2, beta_e n_e = 100: f3 = 102 +
  // 16/r + 2r, r* = sqrt(8) -> r = 3 (102 + 5.33 + 6 = 113.33) vs r = 2
  // (102 + 8 + 4 = 114), r = 4 (102 + 4 + 8 = 114). Sum at r = 3:
  // 52 + 16/3 + 3 + 113.33 = 173.67; r = 4: 60 + 114 = 174; r = 2: 62 + 114.
  LayerPipelineTerms terms{ms(1, 8, 1, 50), ms(1, 8, 2, 100)};
  const auto c = choose_pipeline_degree(terms, 16);
  EXPECT_EQ(c.forward.r, 4);
  EXPECT_EQ(c.backward.r, 3);
  EXPECT_EQ(c.r, 3);
  EXPECT_NEAR(c.t, 52 + 16.0 / 3 + 3 + 102 + 16.0 / 3 + 6, 1e-12);
  // Restricted to the paper's {1, 2, 4, 8}: r = 4.
  EXPECT_EQ(choose_pipeline_degree(terms, 16, {1, 2, 4, 8}).r, 4);
}

// ---------------------------------------------------------------------------

ReuseInputs reuse_inputs() {
  // B = 1000 tokens, M = 100, H = 400 (= 4 M), 1-byte elements, n = 4.
  // Per GEMM 2 B H M = 8e7 FLOPs at 1e-10 s: 8 ms; an all-to-all of
  // B M = 1e5 bytes at 1e-7 s/B: 10 ms; a T_DI copy 1e5 bytes at 2e-8: 2 ms
  // (T_M: 8 ms).
  ReuseInputs in;
  in.tokens = 1000;
  in.model_dim = 100;
  in.hidden = 400;
  in.experts = 8;
  in.elem_bytes = 1;
  in.partitions = 4;
  in.seconds_per_flop = 1e-10;
  in.a2a_beta = 1e-7;
  in.copy_beta = 2e-8;
  in.mu_comp = 0.8;
  in.mu_all = 0.5;
  in.eta_all = 0.5;
  return in;
}

TEST(MpipemoeEq10, HandWorkedCosts) {
  const auto c = choose_reuse_strategy(reuse_inputs());
  auto cost = [&](plan::ReuseStrategy s) { return c.candidates[static_cast<std::size_t>(s)]; };
  // none: fw max(16, 20 / 0.8, 0) = 25; bw max(32, 25) = 32.
  EXPECT_NEAR(cost(plan::ReuseStrategy::kNone).eq10_forward_s, 25e-3, 1e-12);
  EXPECT_NEAR(cost(plan::ReuseStrategy::kNone).eq10_backward_s, 32e-3, 1e-12);
  // S1 [2,2,5]/[4,2,5] at mu_all = eta_all = 0.5: comm 40, copies 5 x 2 / 0.5 = 20.
  EXPECT_NEAR(cost(plan::ReuseStrategy::kS1).eq10_s(), 80e-3, 1e-12);
  // S2 [2,2,4]/[4,3,4]: fw 40, bw comm 3 x 10 / 0.5 = 60.
  EXPECT_NEAR(cost(plan::ReuseStrategy::kS2).eq10_s(), 100e-3, 1e-12);
  // S3 [2,2,1]/[5,2,1]: fw 40, bw max(40, 40, 4) = 40.
  EXPECT_NEAR(cost(plan::ReuseStrategy::kS3).eq10_s(), 80e-3, 1e-12);
  // S4 [2,2,0]/[5,3,0] at mu_comp: fw 25, bw max(40, 37.5) = 40.
  EXPECT_NEAR(cost(plan::ReuseStrategy::kS4).eq10_s(), 65e-3, 1e-12);
  EXPECT_STREQ(cost(plan::ReuseStrategy::kS2).bound, "comm");
  EXPECT_STREQ(cost(plan::ReuseStrategy::kS4).bound, "comp");
  // No budget: none is cheapest.
  EXPECT_EQ(c.strategy, plan::ReuseStrategy::kNone);
  EXPECT_TRUE(c.fits);
}

TEST(MpipemoeEq10, BudgetExcludesNoReuse) {
  // Eq. 1: 4 (8 x 100 + 2 x 400 x 100) = 323,200; Eq. 4: 4 B M + B H =
  // 800,000 (activations and buffers each); Eq. 5 (n = 4): 1000 (2 x 100 x
  // 2/4 + 400 x 3/4) = 400,000 each. none: 1,923,200 bytes; reuse: 1,123,200.
  auto in = reuse_inputs();
  in.budget_bytes = 1'500'000;
  const auto c = choose_reuse_strategy(in);
  EXPECT_DOUBLE_EQ(c.memory.model_states, 323200);
  EXPECT_DOUBLE_EQ(c.memory.activations, 800000);
  EXPECT_DOUBLE_EQ(c.memory.saving, 400000);
  EXPECT_DOUBLE_EQ(c.memory.saving_ratio, 800000.0 / 1923200.0);  // Eq. 6
  EXPECT_DOUBLE_EQ(c.candidates[0].layer_memory_bytes, 1923200);
  EXPECT_FALSE(c.candidates[0].fits);
  for (int i = 1; i < 5; ++i) EXPECT_DOUBLE_EQ(c.candidates[static_cast<std::size_t>(i)].layer_memory_bytes, 1123200);
  EXPECT_EQ(c.strategy, plan::ReuseStrategy::kS4);  // 65 ms, the cheapest that fits
  EXPECT_TRUE(c.fits);
  // Below every candidate: none fits; the least memory (a reuse strategy) is chosen.
  in.budget_bytes = 1'000'000;
  const auto tight = choose_reuse_strategy(in);
  EXPECT_FALSE(tight.fits);
  EXPECT_NE(tight.strategy, plan::ReuseStrategy::kNone);
}

TEST(MpipemoeEq10, MeasuredPeakShiftsByTheActivationSaving) {
  // The peak (end of the forward pass) loses Eq. 5's dM_act = 400,000 once.
  auto in = reuse_inputs();
  in.measured_peak_bytes = 2'000'000;
  in.current = plan::ReuseStrategy::kNone;
  in.budget_bytes = 1'700'000;
  auto c = choose_reuse_strategy(in);
  EXPECT_DOUBLE_EQ(c.candidates[0].predicted_peak_bytes, 2'000'000);
  EXPECT_DOUBLE_EQ(c.candidates[3].predicted_peak_bytes, 1'600'000);
  EXPECT_EQ(c.strategy, plan::ReuseStrategy::kS4);
  // A trace that ran S1: none would add dM_act back.
  in.current = plan::ReuseStrategy::kS1;
  c = choose_reuse_strategy(in);
  EXPECT_DOUBLE_EQ(c.candidates[0].predicted_peak_bytes, 2'400'000);
  EXPECT_DOUBLE_EQ(c.candidates[2].predicted_peak_bytes, 2'000'000);
}

TEST(MpipemoeEq10, UnevenRoutingSplitsEq2) {
  // T_I and T_O hold the device's own 500 rows, T_DI, T_DO and T_M the
  // 1000 its expert computes: 2 x 500 x 100 + 2 x 1000 x 100 + 1000 x 400.
  auto in = reuse_inputs();
  in.own_tokens = 500;
  EXPECT_DOUBLE_EQ(mpipemoe_memory(in).activations, 100000 + 200000 + 400000);
  EXPECT_DOUBLE_EQ(mpipemoe_memory(in).saving, 400000);  // Eq. 5 on the expert side
}

TEST(MpipemoeEq10, StartupsBreakTies) {
  // Without interference S1 and none both cost 20 + 32; S1 adds copy startups.
  auto in = reuse_inputs();
  in.mu_comp = in.mu_all = in.eta_all = 1;
  in.alpha_gemm = 1e-4;
  in.copy_alpha = 1e-3;
  in.budget_bytes = 1'500'000;
  const auto c = choose_reuse_strategy(in);
  EXPECT_NEAR(c.candidates[1].eq10_s(), 52e-3, 1e-12);
  // Backward of S1: copies 10 ms + 4 x 2 x 1 ms = 18; GEMMs 32 + 4 x 4 x 0.1 = 33.6.
  EXPECT_NEAR(c.candidates[1].alpha_backward_s, 33.6e-3, 1e-12);
  // none, S1 and S2 cost 52 by Eq. 10 (none does not fit); S1 and S2 also tie
  // with startups (53.6): the lower index.
  EXPECT_EQ(c.strategy, plan::ReuseStrategy::kS1);
}

// ---------------------------------------------------------------------------

TEST(ProProphetPlacement, HandWorkedLoad) {
  // The planner's hand-worked load (tests/plan/structure_test.cc): devices
  // send [6,0,0], [4,1,1], [4,1,1] to experts 0..2. Home: H = [14, 2, 2],
  // R = [8, 1, 1]; Eq. 6 = 4 x 8 + 3 x 14 = 74. n = 0 sends expert 0
  // everywhere: H = [6, 6, 6], R = [0, 1, 1], Trans = Agg = 2: 26.
  // n = 1: 48.67; n = 2 selects nothing (74). Best: n = 0.
  PlacementInputs in;
  in.routing = plan::LayerRouting{3, 3, {6, 0, 0, 4, 1, 1, 4, 1, 1}};
  in.model.bandwidth_bytes_per_s = 1;
  in.model.expert_tokens_per_s = 1;
  in.model.hide_under_computation = false;
  in.sizes = {1.0, 2.0};
  in.alpha = 0.5;
  const auto a = recommend_placement(in);
  EXPECT_DOUBLE_EQ(a.before.total, 74.0);
  EXPECT_EQ(a.n, 0);
  EXPECT_EQ(a.placement.selected, (std::vector<int>{0}));
  EXPECT_EQ(a.placement.replicas[0], (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(a.after.total, 26.0);
  EXPECT_EQ(a.computed_after, (std::vector<double>{6, 6, 6}));
  EXPECT_NEAR(a.gain, 48.0 / 74.0, 1e-12);
  EXPECT_NEAR(a.balance_degree_before, std::sqrt(32.0), 1e-12);
  EXPECT_DOUBLE_EQ(a.balance_degree_after, 0.0);
  EXPECT_TRUE(std::isinf(a.rb));
  // Eq. 8: Trans and Agg (2 each) hide under FEC = 6: 4 x 1 + 3 x 6 = 22.
  in.model.hide_under_computation = true;
  const auto hidden = recommend_placement(in);
  EXPECT_DOUBLE_EQ(hidden.after.total, 22.0);
  EXPECT_DOUBLE_EQ(hidden.after_unhidden.total, 26.0);
  // A fixed n = 1: expert 0 on devices 0 and 2: H = [10, 2, 6].
  in.model.hide_under_computation = false;
  in.n = 1;
  const auto n1 = recommend_placement(in);
  EXPECT_EQ(n1.placement.replicas[0], (std::vector<int>{2}));
  EXPECT_NEAR(n1.after.total, 16 + 30 + 8.0 / 3, 1e-12);
}

TEST(ProProphetPlacement, BalancedLoadKeepsHome) {
  PlacementInputs in;
  in.routing = plan::LayerRouting{2, 2, {3, 3, 3, 3}};
  in.sizes = {1, 1};
  const auto a = recommend_placement(in);
  EXPECT_TRUE(a.placement.selected.empty());
  EXPECT_DOUBLE_EQ(a.gain, 0.0);
  EXPECT_DOUBLE_EQ(a.rb, 1.0);
}

// ---------------------------------------------------------------------------

TEST(PpmoeLayout, PaperNumbers) {
  // ppmoe Sec. 3.2: F = 125 TFLOP/s, B = 300 GB/s, T = 8, h = 1e3:
  // Eq. 5 = 7 x 8 x 125e12 / (4 x 300e9 x 1e3) = 35/6.
  EXPECT_NEAR(ppmoe_eq5(8, 125e12, 300e9, 1e3), 35.0 / 6.0, 1e-12);
  // Eq. 2 with B = 12.5 GB/s and h = 1e4 is Eq. 3's bound (E - 1) E / 16:
  // 63 x 64 / 16 = 252 for E = 64.
  EXPECT_NEAR(ppmoe_eq2(64, 125e12, 12.5e9, 1e4), 252.0, 1e-9);
  EXPECT_NEAR(ppmoe_eq2(64, 125e12, 12.5e9, 1e3), 2520.0, 1e-9);
}

TEST(PpmoeLayout, AlphaBetaComparison) {
  // E = P = 8, T = 4, c = 1000 tokens, k = 1, h = 100, H = 400, 1-byte
  // elements. Expert FLOPs forward 4 c h H = 1.6e8 at 1e-10: 16 ms in both
  // layouts. All-to-all of c h = 1e5 bytes: 1 + 10 = 11 ms; all-reduce of
  // T c h = 4e5 bytes at 2e-8: 0.5 + 8 = 8.5 ms.
  // EP: (2 x 11 + 16) + (2 x 11 + 32) = 92; PPMoE: (16 + 8.5) + (32 + 8.5) = 65.
  LayoutInputs in{.experts = 8, .ranks = 8, .tensor_parallel = 4, .tokens = 1000, .top_k = 1, .model_dim = 100,
                  .hidden = 400, .elem_bytes = 1, .seconds_per_flop = 1e-10, .a2a_alpha = 1e-3, .a2a_beta = 1e-7,
                  .ar_alpha = 0.5e-3, .ar_beta = 2e-8};
  const auto c = compare_ppmoe_layout(in);
  EXPECT_NEAR(c.t_a2a, 11e-3, 1e-15);
  EXPECT_NEAR(c.t_allreduce, 8.5e-3, 1e-15);
  EXPECT_NEAR(c.ep_s, 92e-3, 1e-12);
  EXPECT_NEAR(c.ppmoe_s, 65e-3, 1e-12);
  EXPECT_TRUE(c.ppmoe_better);
  EXPECT_NEAR(c.gain, 27.0 / 92.0, 1e-12);
  // Eq. 2 / Eq. 5 with F = 1e10 FLOP/s, B = 1e7 and 5e7 bytes/s, h = 100.
  EXPECT_NEAR(c.eq2_ratio, 7 * 8 * 1e10 / (16 * 1e7 * 100), 1e-9);
  EXPECT_NEAR(c.eq5_ratio, 3 * 4 * 1e10 / (4 * 5e7 * 100), 1e-9);
  in.tensor_parallel = 3;  // 8 experts do not split over 3 ranks
  EXPECT_FALSE(compare_ppmoe_layout(in).applicable);
}

// ---------------------------------------------------------------------------

TEST(MpipemoeRangeSearch, RangesAndLookup) {
  const std::vector<GranularityRun> runs = {
      {1000, 1, 10, ""}, {1000, 2, 8, ""}, {1000, 4, 9, ""},  // best n = 2
      {4000, 2, 30, ""}, {4000, 4, 25, ""},                    // best n = 4
      {6000, 4, 40, ""}, {6000, 8, 41, ""},                    // best n = 4: range [4000, 6000]
      {8000, 4, 50, ""}, {8000, 8, 45, ""}};                   // best n = 8
  auto s = mpipemoe_range_search(runs, 5000);
  ASSERT_EQ(s.ranges.size(), 3u);
  EXPECT_EQ(s.ranges[1].partitions, 4);
  EXPECT_EQ(s.ranges[1].lower, 4000);
  EXPECT_EQ(s.ranges[1].upper, 6000);
  EXPECT_TRUE(s.monotone);
  EXPECT_EQ(s.partitions, 4);  // 5000 lies in [4000, 6000]
  EXPECT_FALSE(s.measured);
  s = mpipemoe_range_search(runs, 2000);  // nearest range: n = 2 at 1000
  EXPECT_EQ(s.partitions, 2);
  s = mpipemoe_range_search(runs, 1000);
  EXPECT_TRUE(s.measured);
  EXPECT_EQ(s.partitions, 2);
}

TEST(MpipemoeRangeSearch, NonMonotoneRunsAreFlagged) {
  // 1000 -> n = 2, 2000 -> n = 4, 3000 -> n = 2: widening n = 2's range to
  // [1000, 3000] swallows n = 4's.
  const std::vector<GranularityRun> runs = {{1000, 2, 1, ""}, {1000, 4, 2, ""}, {2000, 2, 3, ""},
                                            {2000, 4, 2, ""}, {3000, 2, 3, ""}, {3000, 4, 4, ""}};
  const auto s = mpipemoe_range_search(runs, 3000);
  EXPECT_FALSE(s.monotone);
  EXPECT_EQ(s.partitions, 2);
}

}  // namespace
}  // namespace moetrace::analyzer
