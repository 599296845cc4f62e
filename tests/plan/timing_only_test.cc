// The timing-only mode of the expert-parallel builders (builders.h
// PlanDetail): the same ops as the full plan, with per-rank all-to-all totals
// derived here by hand.
#include <gtest/gtest.h>

#include "moetrace/plan/builders.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace {

// 2 ranks, 2 experts (expert e on rank e), top-1, one layer and iteration.
// Rank 0 routes 3 tokens to expert 0 and 2 to expert 1; rank 1 routes 1 to
// expert 0 and 4 to expert 1.
ExpertLoad hand_load() {
  ExpertLoad load = ExpertLoad::zeros(1, 1, 2, 2, 1);
  load.tokens_of(0, 0) = 5;
  load.tokens_of(0, 1) = 5;
  load.count(0, 0, 0, 0) = 3;
  load.count(0, 0, 0, 1) = 2;
  load.count(0, 0, 1, 0) = 1;
  load.count(0, 0, 1, 1) = 4;
  return load;
}

CommonConfig hand_common() {
  CommonConfig c;
  c.model.num_layers = 1;
  c.model.num_experts = 2;
  c.model.top_k = 1;
  c.model.model_dim = 4;
  c.model.expert_hidden = 8;
  c.model.elem_bytes = 2;  // a row is 8 bytes
  c.ranks = 2;
  c.iterations = 1;
  return c;
}

const Op& op_named(const Plan& p, const std::string& name, int rank) {
  for (const Op& op : p.ops)
    if (op.name == name && op.rank.value == rank) return op;
  throw Error("no op " + name);
}

struct Totals {
  std::int64_t self_rows, remote_rows;
};

void expect_totals(const std::vector<PeerTransfer>& t, int rank, Totals want) {
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].peer, RankId(rank));
  EXPECT_EQ(t[0].view.rows, want.self_rows);
  EXPECT_EQ(t[0].bytes, want.self_rows * 8);
  EXPECT_FALSE(t[1].peer.valid());
  EXPECT_EQ(t[1].view.rows, want.remote_rows);
  EXPECT_EQ(t[1].bytes, want.remote_rows * 8);
}

TEST(TimingOnlyPlan, AllToAllsCarryPerRankTotals) {
  const Plan p = build_dpmoe(DpMoeConfig{hand_common(), false}, hand_load(), PlanDetail{true});
  // Dispatch: rank 0 keeps 3 rows, sends 2 to rank 1 and receives 1 from it.
  const Op& d0 = op_named(p, "L0.it0.dispatch_all_to_all", 0);
  expect_totals(d0.collective()->sends, 0, {3, 2});
  expect_totals(d0.collective()->recvs, 0, {3, 1});
  EXPECT_EQ(d0.bytes, 2 * 8);
  EXPECT_TRUE(d0.collective()->group.empty());
  const Op& d1 = op_named(p, "L0.it0.dispatch_all_to_all", 1);
  expect_totals(d1.collective()->sends, 1, {4, 1});
  expect_totals(d1.collective()->recvs, 1, {4, 2});
  EXPECT_EQ(d1.bytes, 1 * 8);
  // Combine returns them: rank 0 sends back the 1 row it computed for rank 1.
  const Op& c0 = op_named(p, "L0.it0.combine_all_to_all", 0);
  expect_totals(c0.collective()->sends, 0, {3, 1});
  expect_totals(c0.collective()->recvs, 0, {3, 2});
  EXPECT_EQ(c0.bytes, 1 * 8);
  // Expert 1 computes rank 0's 2 rows and rank 1's 4: 4 x 6 rows x M x H FLOPs.
  EXPECT_EQ(op_named(p, "L0.it0.expert_ffn.e1", 1).flops, 4.0 * 6 * 4 * 8);
}

TEST(TimingOnlyPlan, SameOpsAsTheFullPlanWithoutLayouts) {
  const PipeMoeConfig config{hand_common(), 2};
  const Plan full = build_pipemoe(config, hand_load());
  const Plan timing = build_pipemoe(config, hand_load(), PlanDetail{true});
  ASSERT_EQ(full.ops.size(), timing.ops.size());
  for (std::size_t i = 0; i < full.ops.size(); ++i) {
    const Op &f = full.ops[i], &t = timing.ops[i];
    EXPECT_EQ(f.name, t.name);
    EXPECT_EQ(f.bytes, t.bytes) << f.name;
    EXPECT_EQ(f.flops, t.flops) << f.name;
    EXPECT_EQ(f.deps, t.deps) << f.name;
    if (const auto* perm = std::get_if<Permute>(&t.data)) {
      EXPECT_TRUE(perm->layout.experts.empty()) << t.name;
      EXPECT_FALSE(std::get<Permute>(f.data).layout.experts.empty()) << f.name;
    }
  }
}

TEST(TimingOnlyPlan, CapacityPaddingNeedsTheFullPlan) {
  EXPECT_THROW(build_dpmoe(DpMoeConfig{hand_common(), true}, hand_load(), PlanDetail{true}), ConfigError);
}

}  // namespace
}  // namespace moetrace::plan
