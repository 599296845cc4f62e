// pro-prophet's performance model (Eq. 1-8) against simulated plans of
// build_pro_prophet, for the placement its planner chose.
//
// Hand-made load: D = 4 devices, one expert each (E = D, as in the paper),
// top-1, every device routes a = 700 tokens to the popular expert 3 and
// b = 100 to each other expert. (The popular expert is the last one so that
// each device runs its replica's backward after its home expert's: with the
// replica first, the simulator starts Agg as soon as the replica gradient is
// ready and hides part of it under the rest of BEC, which Eq. 6 does not
// credit.) Model of Sec. IV-B: B-bar = 1e9 B/s (the
// all-to-all, Trans and Agg bandwidth), t = 1e8 tokens/s, no latencies, and
// nothing else costs time (gate, permute, Plan, gradient all-reduce,
// optimizer) but the count exchange before each dispatch, (D - 1) int64
// counts a device = 24 B at B-bar. M = 64, expert hidden 128, 2-byte elements:
// size(input) = 128 B, size(e.params) = size(e.grads) = 2 x 64 x 128 x 2 B.
//
// The planner replicates expert 3 on every device (n = 0, Eq. 4/5 with
// D - n = 4). Then (Eq. 1-2) R = [3b, 3b, 3b, 0] inputs received from other
// devices, and the outputs returned to each device are [2b, 2b, 2b, 3b], so
// every all-to-all moves max_i R_i = 3b inputs on its busiest device, and
// H = [a + 4b, a + 4b, a + 4b, a] inputs computed per device.
#include <gtest/gtest.h>

#include "moetrace/plan/builders.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/simulator.h"
#include "sim_test_util.h"

namespace moetrace::sim {
namespace pro_prophet_test {  // named, not anonymous: unity builds join this file with others

using testing::window;

constexpr int kD = 4;
constexpr std::int64_t kA = 700, kB = 100, kM = 64, kHidden = 128, kElem = 2;
constexpr double kBandwidth = 1e9, kTokensPerS = 1e8;
constexpr double kSeq = 1024;
constexpr double kFnec = 10e-6;  // T_FNEC of the attention block (Eq. 8)

plan::ExpertLoad skewed_load(int iterations, int layers) {
  auto load = plan::ExpertLoad::zeros(iterations, layers, kD, kD, 1);
  for (int j = 0; j < iterations; ++j)
    for (int s = 0; s < kD; ++s) {
      load.tokens_of(j, s) = kA + 3 * kB;
      for (int l = 0; l < layers; ++l)
        for (int e = 0; e < kD; ++e) load.count(j, l, s, e) = e == kD - 1 ? kA : kB;
    }
  return load;
}

CostModel model_of_sec_4b(bool attention) {
  CostModel m = cost_model_preset("rtx3090-pcie-ib100");
  m.compute = {0, 0, 0};
  m.compute_by_kind.clear();
  // t tokens/s: a forward expert pass is 4 M H FLOPs per token.
  m.compute_by_kind[OpKind::kExpertFfn] = {0, 1.0 / (kTokensPerS * 4.0 * kM * kHidden), 0};
  if (attention)  // forward FLOPs per token 8 M^2 + 4 S M; backward twice (BNEC = 2 FNEC)
    m.compute_by_kind[OpKind::kAttention] = {0, kFnec / ((kA + 3 * kB) * (8.0 * kM * kM + 4.0 * kSeq * kM)), 0};
  for (auto& c : m.collectives) c.points = {{kD, 0, 1.0 / kBandwidth}};
  m.collective(plan::CollectiveKind::kAllReduce).points = {{kD, 0, 0}};
  m.link_sharing = LinkSharing::kSerial;
  m.all_to_all_volume = AllToAllVolume::kMaxRecv;  // Eq. 1 literally
  m.all_to_all_counts_local = false;
  m.interference = {};
  return m;
}

plan::ProProphetConfig config(int iterations, int layers, bool schedule) {
  plan::ProProphetConfig c;
  c.common.ranks = kD;
  c.common.iterations = iterations;
  c.common.model.num_layers = layers;
  c.common.model.num_experts = kD;
  c.common.model.top_k = 1;
  c.common.model.model_dim = kM;
  c.common.model.expert_hidden = kHidden;
  c.common.model.elem_bytes = kElem;
  c.common.model.attention = schedule;
  c.common.model.sequence_length = static_cast<std::int64_t>(kSeq);
  c.n = 0;
  // Eq. 7 (max H - min H < alpha I / E, I / E = 1000): 2400 before any
  // placement, 400 after replicating expert 3, so the search stops there.
  c.alpha = 1;
  c.model.bandwidth_bytes_per_s = kBandwidth;
  c.model.expert_tokens_per_s = kTokensPerS;
  c.model.fnec_seconds = schedule ? kFnec : 0;
  c.model.bnec_seconds = schedule ? 2 * kFnec : 0;
  c.model.hide_under_computation = schedule;
  c.block_schedule = schedule;
  return c;
}

// The terms of Eq. 1-5 for this load and placement.
struct Terms {
  double a2a = 3.0 * kB * kM * kElem / kBandwidth;                          // Eq. 1, max_i R_i = 3b
  double fec = (kA + 4.0 * kB) / kTokensPerS;                               // Eq. 2, max_i H_i = a + 4b
  double trans = 1.0 * (kD - 0) * (2.0 * kM * kHidden * kElem) / (kD * kBandwidth);  // Eq. 4, s = 1, n = 0
  double agg = trans;                                                       // Eq. 5
  // Not in Eq. 6: the exchange of counts the unpadded dispatch needs first.
  double counts = (kD - 1) * 8.0 / kBandwidth;
};

void expect_popular_expert_everywhere(const plan::Plan& p, int iteration) {
  int replicas = 0;
  for (const auto& pl : p.placements) {
    if (pl.iteration != iteration || pl.role != "replica") continue;
    EXPECT_EQ(pl.expert, kD - 1);
    ++replicas;
  }
  EXPECT_EQ(replicas, (kD - 1) * p.dims.num_layers);
}

bool moe_op(const plan::Op& op) {
  return op_kind_info(op.kind).moe_layer && op.kind != OpKind::kPlan;
}

TEST(ProProphet, Eq6UnscheduledLayerTime) {
  // Fig. 7 order: counts, Plan, Trans, dispatch, FEC, combine | combine,
  // BEC, Agg, dispatch. Nothing hides: T' = 4 T_A2A(R) + 3 T_FEC(H) +
  // T_Trans + T_Agg, and the count exchange.
  const auto p = plan::build_pro_prophet(config(1, 1, false), skewed_load(1, 1));
  expect_popular_expert_everywhere(p, 0);
  const auto r = simulate(p, model_of_sec_4b(false));
  const Terms t;
  const double eq6 = 4 * t.a2a + 3 * t.fec + t.trans + t.agg + t.counts;
  for (int rank = 0; rank < kD; ++rank) {
    const auto fwd = window(p, r, [&](const plan::Op& op) {
      return op.rank.value == rank && moe_op(op) && op.coords.phase == Phase::kForward;
    });
    const auto bwd = window(p, r, [&](const plan::Op& op) {
      return op.rank.value == rank && moe_op(op) && op.coords.phase == Phase::kBackward;
    });
    EXPECT_NEAR(fwd.length() + bwd.length(), eq6, 1e-12) << "rank " << rank;
    EXPECT_NEAR(fwd.length(), t.counts + t.trans + 2 * t.a2a + t.fec, 1e-12);
  }
}

TEST(ProProphet, Eq8BlockScheduleHidesTransAndAgg) {
  // Alg. 2 with two blocks; iteration 1 runs the placement planned on
  // iteration 0 (the same load). Block 1's Trans hides under FEC_0 + FNEC_0
  // except max(0, T_Trans - T_FEC - T_FNEC) = 11.768 us; its Agg hides under
  // BNEC_0 + BEC_0 completely (Eq. 8). Block 0 has no earlier block: its Trans
  // opens the iteration and its Agg closes it (Eq. 6). Per iteration:
  //   Eq. 6 (block 0) + Eq. 8 (block 1) + 2 (T_FNEC + T_BNEC), and each
  //   block's count exchange on the comm stream before its dispatch.
  const auto p = plan::build_pro_prophet(config(2, 2, true), skewed_load(2, 2));
  expect_popular_expert_everywhere(p, 1);
  const auto r = simulate(p, model_of_sec_4b(true));
  const Terms t;
  const double fnec = kFnec, bnec = 2 * kFnec, bec = 2 * t.fec;
  const double p_trans = std::max(0.0, t.trans - t.fec - fnec);
  const double p_agg = std::max(0.0, t.agg - bec - bnec);
  ASSERT_GT(p_trans, 0);  // the case exercises a partly hidden Trans
  ASSERT_EQ(p_agg, 0);    // and a fully hidden Agg
  const double eq6_block0 = 4 * t.a2a + 3 * t.fec + t.trans + t.agg + t.counts;
  const double eq8_block1 = 4 * t.a2a + 3 * t.fec + p_trans + p_agg + t.counts;
  const double expected = eq6_block0 + eq8_block1 + 2 * (fnec + bnec);
  for (int rank = 0; rank < kD; ++rank) {
    const auto it1 = window(p, r, [&](const plan::Op& op) {
      return op.rank.value == rank && op.coords.iteration == 1;
    });
    EXPECT_NEAR(it1.length(), expected, 1e-12) << "rank " << rank;
  }
  // Without the schedule the same iteration exposes all of Trans and Agg.
  auto unscheduled = config(2, 2, true);
  unscheduled.block_schedule = false;
  const auto q = plan::build_pro_prophet(unscheduled, skewed_load(2, 2));
  const auto rq = simulate(q, model_of_sec_4b(true));
  const auto it1 = window(q, rq, [&](const plan::Op& op) { return op.rank.value == 0 && op.coords.iteration == 1; });
  EXPECT_NEAR(it1.length(), 2 * eq6_block0 + 2 * (fnec + bnec), 1e-12);
}

}  // namespace pro_prophet_test
}  // namespace moetrace::sim
