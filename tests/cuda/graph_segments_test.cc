// CUDA graph mode's cut of the issue order (schedule.h graph_segments): one
// graph per iteration, in issue order, every op issued here in exactly one.
#include <gtest/gtest.h>

#include <set>

#include "moetrace/cuda/schedule.h"
#include "moetrace/plan/routing.h"
#include "variant_plans.h"

namespace moetrace::cuda {
namespace {

std::vector<testing::NamedPlan> graph_test_plans(int ranks, int iterations) {
  const plan::ModelShape shape{.num_layers = 2, .num_experts = 8, .top_k = 2, .model_dim = 8, .expert_hidden = 16,
                               .dense_hidden = 12, .attention = true};
  plan::SyntheticLoadConfig lc{.iterations = iterations, .layers = 2, .sources = ranks, .experts = 8, .top_k = 2,
                               .tokens_per_source = 24, .pattern = plan::LoadPattern::kZipf, .zipf_skew = 1.2,
                               .source_noise = 0.3, .seed = 7};
  return testing::variant_plans(shape, ranks, iterations, plan::synthetic_load(lc));
}

TEST(GraphSegments, OneGraphPerIterationInIssueOrder) {
  const int iterations = 3;
  for (const auto& [name, p] : graph_test_plans(4, iterations)) {
    SCOPED_TRACE(name);
    const auto order = issue_order(p, [](RankId) { return true; });
    const GraphSegments g = graph_segments(p, order);
    // Three iterations issued one after the other: three graphs, the first
    // starting at the first step.
    ASSERT_EQ(g.count(), iterations);
    EXPECT_EQ(g.first_step.front(), 0u);
    std::vector<std::set<int>> iterations_of(static_cast<std::size_t>(g.count()));
    int last = 0;
    for (std::size_t i = 0; i < order.size(); ++i)
      for (OpId x : order[i].ops) {
        const int s = g.of_op.at(static_cast<std::size_t>(x.value));
        ASSERT_GE(s, last) << p.op(x).name;  // graphs follow the issue order
        last = s;
        EXPECT_GE(i, g.first_step[static_cast<std::size_t>(s)]);
        if (p.op(x).coords.iteration >= 0) iterations_of[static_cast<std::size_t>(s)].insert(p.op(x).coords.iteration);
      }
    for (int s = 0; s < g.count(); ++s) EXPECT_EQ(iterations_of[static_cast<std::size_t>(s)], std::set<int>{s});
    for (const plan::Op& op : p.ops) EXPECT_GE(g.of_op.at(static_cast<std::size_t>(op.id.value)), 0) << op.name;
  }
}

TEST(GraphSegments, OpsOfOtherRanksBelongToNoGraph) {
  for (const auto& [name, p] : graph_test_plans(2, 2)) {
    SCOPED_TRACE(name);
    const auto order = issue_order(p, [](RankId r) { return r.value == 1; }, true);
    const GraphSegments g = graph_segments(p, order);
    for (const plan::Op& op : p.ops)
      EXPECT_EQ(g.of_op.at(static_cast<std::size_t>(op.id.value)) >= 0, op.rank.value == 1) << op.name;
  }
}

// ncclGetVersion's code is major * 10000 + minor * 100 + patch since 2.9:
// 22805 is 2.28.5 (captures), 20806 would be 2.8.6 (does not).
TEST(NcclGraphRefusal, BeforeTwoNineIsRefusedInOneLine) {
  EXPECT_EQ(nccl_graph_refusal(22805), "");
  EXPECT_EQ(nccl_graph_refusal(20900), "");
  const std::string why = nccl_graph_refusal(20806);
  EXPECT_EQ(why, "CUDA graph mode needs NCCL 2.9 or later to capture collectives (this is NCCL 2.8.6)");
}

}  // namespace
}  // namespace moetrace::cuda
