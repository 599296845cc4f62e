// The PPMoE plan's pipeline and tensor-parallel order, simulated under a cost
// model whose every term is set by hand, so each expected time below is a
// sum of those terms: a stage starts a micro-batch's forward right after the
// previous stage's forward and send of it (1F1B, ppmoe Fig. 2), and the
// attention's output all-reduce runs after the attention.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "moetrace/plan/builders.h"
#include "moetrace/plan/routing.h"
#include "moetrace/plan/validate.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/simulator.h"

namespace moetrace::sim {
namespace ppmoe_schedule_test {  // named: unity builds join this file with others

using plan::Op;

constexpr double kGateS = 1e-3;       // one gate (forward or backward): one launch
constexpr double kAttentionS = 1e-3;  // one attention (forward or backward)
constexpr double kSendS = 0.25e-3;    // one stage-to-stage transfer
constexpr double kAllReduceS = 0.5e-3;

// Only the terms named above cost time: every other compute op and copy is
// free, links are independent and nothing interferes.
CostModel hand_model(bool attention_costs) {
  CostModel m;
  m.name = "hand";
  m.link_sharing = LinkSharing::kIndependent;
  m.compute_by_kind[OpKind::kGate] = {attention_costs ? 0.0 : kGateS, 0, 0};
  m.compute_by_kind[OpKind::kAttention] = {attention_costs ? kAttentionS : 0.0, 0, 0};
  for (auto& c : m.collectives) c.points = {{2, 0, 0}};
  m.collective(plan::CollectiveKind::kSendRecv).points = {{2, kSendS, 0}};
  m.collective(plan::CollectiveKind::kAllReduce).points = {{2, kAllReduceS, 0}};
  return m;
}

plan::PpMoeConfig config(int stages, int tensor_parallel, int micro_batches, bool attention) {
  plan::PpMoeConfig c;
  c.common.model = {.num_layers = stages, .num_experts = 4, .top_k = 1, .model_dim = 8, .expert_hidden = 16};
  c.common.model.attention = attention;
  c.common.model.sequence_length = 4;
  c.common.ranks = stages * tensor_parallel;  // data_parallel = 1
  c.common.iterations = 1;
  c.tensor_parallel = tensor_parallel;
  c.pipeline_stages = stages;
  c.micro_batches = micro_batches;
  return c;
}

plan::ExpertLoad load(const plan::PpMoeConfig& c) {
  return plan::synthetic_load({.iterations = 1, .layers = c.common.model.num_layers, .sources = c.micro_batches,
                               .experts = 4, .top_k = 1, .tokens_per_source = 16});
}

// The op of `kind` (and name part) on `rank` in the forward of micro-batch m.
const Op& forward_op(const plan::Plan& p, int rank, OpKind kind, int m, const std::string& part = "") {
  for (const Op& op : p.ops)
    if (op.rank.value == rank && op.kind == kind && op.coords.phase == Phase::kForward && op.coords.micro_batch == m &&
        op.name.find(part) != std::string::npos)
      return op;
  throw std::runtime_error("no such op");
}

// Three stages, one rank each, four micro-batches: stage 0 warms up with two
// forwards and runs a third before its first backward. By hand, with
// f = kGateS (a stage's forward of one micro-batch: its one layer's gate; the
// other ops cost nothing) and c = kSendS:
//   stage 0: F0 [0, f], send F0 [f, f + c]
//   stage 1: F0 [f + c, 2f + c], send F0 [2f + c, 2f + 2c]
//   stage 2: F0 starts at 2 (f + c) = 2.5 ms.
// Were stage 1's receives of F1 and F2 queued ahead of its send of F0 on one
// stream, that send would wait for stage 0's F2 (ending 3f, received at
// 3f + c) and stage 2 would start at 3f + 2c = 3.5 ms.
TEST(PpMoeSchedule, EachStageStartsAfterThePreviousStagesFirstForwardAndSend) {
  const plan::PpMoeConfig c = config(3, 1, 4, false);
  const plan::Plan p = plan::build_ppmoe(c, load(c));
  ASSERT_TRUE(plan::check_plan(p).empty());
  const SimResult r = simulate(p, hand_model(false));
  auto start = [&](const Op& op) { return r.start_s[static_cast<std::size_t>(op.id.value)]; };
  auto end = [&](const Op& op) { return r.end_s[static_cast<std::size_t>(op.id.value)]; };
  const double f = kGateS, cs = kSendS;
  EXPECT_NEAR(end(forward_op(p, 0, OpKind::kGate, 0)), f, 1e-12);
  EXPECT_NEAR(end(forward_op(p, 0, OpKind::kPipelineSend, 0)), f + cs, 1e-12);
  EXPECT_NEAR(start(forward_op(p, 1, OpKind::kGate, 0)), f + cs, 1e-12);
  EXPECT_NEAR(start(forward_op(p, 1, OpKind::kPipelineSend, 0)), 2 * f + cs, 1e-12);
  EXPECT_NEAR(start(forward_op(p, 2, OpKind::kGate, 0)), 2 * (f + cs), 1e-12);
  // The sends and receives between two stages share one stream on each of
  // them; stage 1 talks to stage 0 and to stage 2 on different streams.
  EXPECT_NE(forward_op(p, 1, OpKind::kPipelineRecv, 0).stream, forward_op(p, 1, OpKind::kPipelineSend, 0).stream);
}

// One stage of two TP ranks, one micro-batch, one layer with an attention.
// By hand, with the gate and the experts free: the MoE all-reduce [0, a]
// (a = kAllReduceS), the attention reads its output [a, a + t]
// (t = kAttentionS), and the attention's all-reduce sums the attention's
// output, [a + t, 2a + t] = [1.5, 2] ms; issued with no dependency it would
// run at [a, 2a], beside the attention.
TEST(PpMoeSchedule, AttentionAllReduceFollowsTheAttention) {
  const plan::PpMoeConfig c = config(1, 2, 1, true);
  const plan::Plan p = plan::build_ppmoe(c, load(c));
  ASSERT_TRUE(plan::check_plan(p).empty());
  const SimResult r = simulate(p, hand_model(true));
  const double a = kAllReduceS, t = kAttentionS;
  for (int rank = 0; rank < 2; ++rank) {
    const Op& attention = forward_op(p, rank, OpKind::kAttention, 0);
    const Op& reduce = forward_op(p, rank, OpKind::kTensorParallelAllReduce, 0, "attention");
    EXPECT_NEAR(r.start_s[static_cast<std::size_t>(attention.id.value)], a, 1e-12);
    EXPECT_NEAR(r.start_s[static_cast<std::size_t>(reduce.id.value)], a + t, 1e-12);
    EXPECT_NEAR(r.end_s[static_cast<std::size_t>(reduce.id.value)], 2 * a + t, 1e-12);
  }
}

}  // namespace ppmoe_schedule_test
}  // namespace moetrace::sim
