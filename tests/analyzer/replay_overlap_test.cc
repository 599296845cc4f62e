// Golden tests of the overlap=on what-if (graph_overlap.h): two passes of
// different micro-batches that ran one after the other run side by side.
// Every expected time is derived by hand from the rules in graph_overlap.h
// and exec_graph.h, in the comment above each trace (us; the fixtures write
// ns, x 1000). No launching calls: the queue gap is 0 and nothing is issued
// late. Op and kernel names follow Megatron-Core's MoE layer (its token
// dispatcher's all-to-alls, grouped GEMM) in other spellings.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "loaded_trace.h"
#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/analyzer/replay.h"

namespace moetrace::analyzer {
namespace {

constexpr std::int64_t kNsPerUs = 1000;

// The replayed start (us) of the activity that started at `start_us`.
std::int64_t start_after(const Trace& t, const ExecGraph& g, const std::vector<std::int64_t>& times,
                         std::int64_t start_us) {
  for (std::size_t i = 0; i < t.activities.size(); ++i)
    if (t.activities[i].start_ns == start_us * kNsPerUs) return times[g.activity_start[i]] / kNsPerUs;
  ADD_FAILURE() << "no activity starts at " << start_us << " us";
  return -1;
}

struct Overlapped {
  ExecGraph graph;
  std::vector<std::int64_t> times;
  GraphWhatIfResult result;
  std::size_t unresolved = 0;
};

Overlapped overlap_on(const Trace& t) {
  Overlapped o{build_exec_graph(t), {}, {}, 0};
  GraphWhatIfs w;
  parse_graph_what_if("overlap=on", w);
  o.result = apply_graph_what_ifs(t, o.graph, w, RecommendOptions{});
  o.times = evaluate_exec_graph(o.graph, &o.unresolved);
  return o;
}

// Two micro-batches' forward of one MoE layer, one after the other, as
// DeepSeek's two-micro-batch overlap would run side by side (us):
//   stream 1 (comm):    pd [0,100] (mb 0 dispatch), pc [200,300] (mb 0
//                       combine), qd [300,400], qc [500,600] (mb 1)
//   stream 0 (compute): pe [100,200] (mb 0 experts), qe [400,500] (mb 1)
// Each op waits for the one before it in its micro-batch (op deps). The
// replay is exact: 600.
// overlap=on: one pair (mb 0, mb 1), one segment each; offsets in the
// segment: d 0, e 100, c 200. Stream 1: pd, qd, pc, qc (ties: mb 0 first);
// stream 0: pe, qe. pd [0,100]; qd after pd [100,200]; pe after pd
// [100,200]; pc after pe and qd [200,300]; qe after qd and pe [200,300];
// qc after qe and pc [300,400]. The iteration: 600 -> 400.
constexpr std::string_view kTwoMicroBatches = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  op id=1 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=0 start=0 end=100000
  op id=2 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=0 start=100000 end=200000
  op id=3 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=0 start=200000 end=300000
  op id=4 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=300000 end=400000
  op id=5 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=1 start=400000 end=500000
  op id=6 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=500000 end=600000
  dep op=2 on=1
  dep op=3 on=2
  dep op=5 on=4
  dep op=6 on=5
  kernel rank=0 stream=1 start=0 end=100000 name=ncclDevKernel_SendRecv op=1
  kernel rank=0 stream=0 start=100000 end=200000 name=Sm90_Grouped_Gemm_bf16 op=2
  kernel rank=0 stream=1 start=200000 end=300000 name=ncclDevKernel_SendRecv op=3
  kernel rank=0 stream=1 start=300000 end=400000 name=ncclDevKernel_SendRecv op=4
  kernel rank=0 stream=0 start=400000 end=500000 name=Sm90_Grouped_Gemm_bf16 op=5
  kernel rank=0 stream=1 start=500000 end=600000 name=ncclDevKernel_SendRecv op=6
)";

TEST(WhatIfOverlapOn, TwoMicroBatchesRunSideBySide) {
  const auto t = testing::load_text_trace("overlap-on.db", kTwoMicroBatches);
  EXPECT_EQ(replay(t).max_iteration_error, 0.0);
  const auto o = overlap_on(t);
  EXPECT_EQ(o.unresolved, 0u);
  EXPECT_EQ(o.result.instances_changed, 2);
  EXPECT_EQ(start_after(t, o.graph, o.times, 0), 0);      // pd
  EXPECT_EQ(start_after(t, o.graph, o.times, 300), 100);  // qd beside pe
  EXPECT_EQ(start_after(t, o.graph, o.times, 100), 100);  // pe
  EXPECT_EQ(start_after(t, o.graph, o.times, 200), 200);  // pc beside qe
  EXPECT_EQ(start_after(t, o.graph, o.times, 400), 200);  // qe
  EXPECT_EQ(start_after(t, o.graph, o.times, 500), 300);  // qc

  GraphWhatIfs w;
  parse_graph_what_if("overlap=on", w);
  const auto p = replay_with_what_ifs(t, w, RecommendOptions{});
  ASSERT_EQ(p.summary.iterations.size(), 1u);
  EXPECT_EQ(p.summary.iterations[0].measured_ns, 600 * kNsPerUs);
  EXPECT_EQ(p.summary.iterations[0].predicted_ns, 400 * kNsPerUs);
  EXPECT_EQ(p.predicted_unresolved, 0);
}

// The same trace without micro-batches: nothing is independent, nothing
// changes, and the result says why.
TEST(WhatIfOverlapOn, NoMicroBatchesNoChange) {
  std::string text(kTwoMicroBatches);
  for (auto pos = text.find(" micro_batch="); pos != std::string::npos; pos = text.find(" micro_batch="))
    text.erase(pos, std::string(" micro_batch=0").size());
  const auto t = testing::load_text_trace("overlap-none.db", text);
  const auto o = overlap_on(t);
  EXPECT_EQ(o.result.instances_changed, 0);
  // (the other notes say where the cost model came from)
  EXPECT_EQ(std::count_if(o.result.notes.begin(), o.result.notes.end(),
                          [](const std::string& n) { return n.find("names no micro-batches") != std::string::npos; }),
            1);
  for (std::int64_t s : {0, 100, 200, 300, 400, 500}) EXPECT_EQ(start_after(t, o.graph, o.times, s), s);
}

// 1F1B's steady state on one stream: micro-batch 1's forward through two
// MoE layers, a pipeline send, micro-batch 0's backward through them (us;
// every op on stream 0, one after the other, gap 0; d dispatch, e experts,
// c combine; a attention, not part of a MoE layer):
//   forward mb 1:  a [0,100] d [100,150] e [150,250] c [250,300]      (layer 0)
//                  a [300,400] d [400,450] e [450,550] c [550,600]    (layer 1)
//   send [600,650]
//   backward mb 0: c [650,700] e [700,900] d [900,950]                (layer 1)
//                  a [950,1050] c [1050,1100] e [1100,1300] d [1300,1350] (layer 0)
//                  a [1350,1450]
// overlap=on pairs the forward pass with the backward one. A pass runs
// from its first MoE layer's work to its last's: the first attention (0)
// comes before it, outside. Segments (offsets from the segment's start):
// forward 0 = d 0, e 50, c 150 (from 100); forward 1 = a 0, d 100, e 150,
// c 250 (from 300); backward 0 = c 0, e 50, d 250 (from 650); backward 1 =
// a 0, c 100, e 150, d 350 (from 950). The send is between them: last. The
// last attention (1350) follows the backward's last layer: outside.
// Communication ran on the computation's stream: it takes a lane of its own.
// Comm lane (segment, offset, forward first on ties): Fd0, Bc0, Fc0, Bd0,
// Fd1, Bc1, Fc1, Bd1, send. Compute lane: Fe0, Be0, Fa1, Ba1, Fe1, Be1.
// Both lanes follow the first attention. Each pass keeps its own order.
// Replay:
//   Fa0 [0,100]; Fd0 [100,150]; Bc0 after Fd0 [150,200]; Fe0 after Fa0,
//   Fd0 [150,250]; Be0 after Fe0, Bc0 [250,450]; Fc0 after Bc0, Fe0
//   [250,300]; Bd0 after Fc0, Be0 [450,500]; Fa1 after Be0, Fc0 [450,550];
//   Ba1 after Fa1, Bd0 [550,650]; Fd1 after Bd0, Fa1 [550,600]; Bc1 after
//   Fd1, Ba1 [650,700]; Fe1 after Ba1, Fd1 [650,750]; Fc1 after Bc1, Fe1
//   [750,800]; Be1 after Fe1, Bc1 [750,950]; Bd1 after Fc1, Be1 [950,1000];
//   send after Bd1 [1000,1050]; the last attention after both lanes
//   [1050,1150].
// The iteration: 1450 -> 1150.
constexpr std::string_view kOneFOneB = R"(
  stream id=0 rank=0 role=compute
  op id=1 rank=0 stream=0 kind=attention layer=0 iteration=0 phase=fwd micro_batch=1 start=0 end=100000
  op id=2 rank=0 stream=0 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=100000 end=150000
  op id=3 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=1 start=150000 end=250000
  op id=4 rank=0 stream=0 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=250000 end=300000
  op id=5 rank=0 stream=0 kind=attention layer=1 iteration=0 phase=fwd micro_batch=1 start=300000 end=400000
  op id=6 rank=0 stream=0 kind=dispatch_all_to_all layer=1 iteration=0 phase=fwd micro_batch=1 start=400000 end=450000
  op id=7 rank=0 stream=0 kind=expert_ffn layer=1 iteration=0 phase=fwd micro_batch=1 start=450000 end=550000
  op id=8 rank=0 stream=0 kind=combine_all_to_all layer=1 iteration=0 phase=fwd micro_batch=1 start=550000 end=600000
  op id=9 rank=0 stream=0 kind=pipeline_send iteration=0 phase=fwd micro_batch=1 start=600000 end=650000
  op id=10 rank=0 stream=0 kind=combine_all_to_all layer=1 iteration=0 phase=bwd micro_batch=0 start=650000 end=700000
  op id=11 rank=0 stream=0 kind=expert_ffn layer=1 iteration=0 phase=bwd micro_batch=0 start=700000 end=900000
  op id=12 rank=0 stream=0 kind=dispatch_all_to_all layer=1 iteration=0 phase=bwd micro_batch=0 start=900000 end=950000
  op id=13 rank=0 stream=0 kind=attention layer=1 iteration=0 phase=bwd micro_batch=0 start=950000 end=1050000
  op id=14 rank=0 stream=0 kind=combine_all_to_all layer=0 iteration=0 phase=bwd micro_batch=0 start=1050000 end=1100000
  op id=15 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=bwd micro_batch=0 start=1100000 end=1300000
  op id=16 rank=0 stream=0 kind=dispatch_all_to_all layer=0 iteration=0 phase=bwd micro_batch=0 start=1300000 end=1350000
  op id=17 rank=0 stream=0 kind=attention layer=0 iteration=0 phase=bwd micro_batch=0 start=1350000 end=1450000
  kernel rank=0 stream=0 start=0 end=100000 name=flash_fwd_kernel op=1
  kernel rank=0 stream=0 start=100000 end=150000 name=ncclKernel_AllToAll op=2
  kernel rank=0 stream=0 start=150000 end=250000 name=cutlass_grouped_gemm op=3
  kernel rank=0 stream=0 start=250000 end=300000 name=ncclKernel_AllToAll op=4
  kernel rank=0 stream=0 start=300000 end=400000 name=flash_fwd_kernel op=5
  kernel rank=0 stream=0 start=400000 end=450000 name=ncclKernel_AllToAll op=6
  kernel rank=0 stream=0 start=450000 end=550000 name=cutlass_grouped_gemm op=7
  kernel rank=0 stream=0 start=550000 end=600000 name=ncclKernel_AllToAll op=8
  kernel rank=0 stream=0 start=600000 end=650000 name=ncclKernel_SendRecv op=9
  kernel rank=0 stream=0 start=650000 end=700000 name=ncclKernel_AllToAll op=10
  kernel rank=0 stream=0 start=700000 end=900000 name=cutlass_grouped_gemm_dgrad op=11
  kernel rank=0 stream=0 start=900000 end=950000 name=ncclKernel_AllToAll op=12
  kernel rank=0 stream=0 start=950000 end=1050000 name=flash_bwd_kernel op=13
  kernel rank=0 stream=0 start=1050000 end=1100000 name=ncclKernel_AllToAll op=14
  kernel rank=0 stream=0 start=1100000 end=1300000 name=cutlass_grouped_gemm_dgrad op=15
  kernel rank=0 stream=0 start=1300000 end=1350000 name=ncclKernel_AllToAll op=16
  kernel rank=0 stream=0 start=1350000 end=1450000 name=flash_bwd_kernel op=17
)";

TEST(WhatIfOverlapOn, OneFOneBForwardBesideBackward) {
  const auto t = testing::load_text_trace("overlap-1f1b.db", kOneFOneB);
  EXPECT_EQ(replay(t).max_iteration_error, 0.0);
  const auto o = overlap_on(t);
  EXPECT_EQ(o.unresolved, 0u);
  EXPECT_EQ(o.result.instances_changed, 4);
  ASSERT_EQ(o.result.applied.size(), 1u);
  EXPECT_NE(o.result.applied[0].find("takes a stream of its own"), std::string::npos) << o.result.applied[0];
  // measured start -> replayed start, in the order of the comment above
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected = {
      {0, 0},      {100, 100},  {650, 150},  {150, 150},  {700, 250},   {250, 250},
      {900, 450},  {300, 450},  {950, 550},  {400, 550},  {1050, 650},  {450, 650},
      {550, 750},  {1100, 750}, {1300, 950}, {600, 1000}, {1350, 1050}};
  for (const auto& [measured, replayed] : expected)
    EXPECT_EQ(start_after(t, o.graph, o.times, measured), replayed) << "the activity measured at " << measured;

  GraphWhatIfs w;
  parse_graph_what_if("overlap=on", w);
  const auto p = replay_with_what_ifs(t, w, RecommendOptions{});
  ASSERT_EQ(p.summary.iterations.size(), 1u);
  EXPECT_EQ(p.summary.iterations[0].measured_ns, 1450 * kNsPerUs);
  EXPECT_EQ(p.summary.iterations[0].predicted_ns, 1150 * kNsPerUs);
}

}  // namespace
}  // namespace moetrace::analyzer
