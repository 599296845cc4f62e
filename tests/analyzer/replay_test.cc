// Golden tests of exec_graph.h and replay.h: the execution graph of a trace
// and its replay. Every expected time is derived by hand from the rules in
// exec_graph.h, in the comment above each trace (times in microseconds; the
// fixtures write them in ns, x 1000, so that the 10 us threshold for an
// unexplained start applies as it would on a real trace).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "loaded_trace.h"
#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/analyzer/replay.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer {
namespace {

constexpr std::int64_t us = 1000;

// The index of the activity that starts at `start_us` (measured).
std::size_t activity_at(const Trace& t, std::int64_t start_us) {
  for (std::size_t i = 0; i < t.activities.size(); ++i)
    if (t.activities[i].start_ns == start_us * us) return i;
  ADD_FAILURE() << "no activity starts at " << start_us << " us";
  return 0;
}

std::int64_t replayed_start(const Trace& t, const ExecGraph& g, const std::vector<std::int64_t>& times,
                            std::int64_t start_us) {
  return times[g.activity_start[activity_at(t, start_us)]];
}

// Makes the activity of `rank` that started first (at 0) last `duration`:
// its duration edge's latency.
void set_first_duration(const Trace& t, ExecGraph& g, std::int32_t rank, std::int64_t duration) {
  for (auto& e : g.edges)
    if (e.kind == ExecEdgeKind::kDuration && g.nodes[e.from].measured_ns == 0 &&
        t.activities[g.nodes[e.from].ref].rank.value == rank)
      e.latency_ns = duration;
}

// One thread, one stream, a stream synchronisation (us):
//   L1 [0,10]    -> K1 [15,115]   first of its stream: no latency sample
//   L2 [200,210] -> K2 [215,315]  idle stream: sample 15 from start, 5 from end
//   L3 [400,410] -> K3 [420,520]  idle: 20, 10
//   L4 [450,460] -> K4 [522,622]  queued behind K3 (450 < 520): queue gap 2
//   S  cudaStreamSynchronize [470,630]: waits for K4 (launched 450 < 470,
//      ended 622 <= 630; 622 > 470: it waited), return latency 630 - 622 = 8
//   L5 [640,650] -> K5 [655,755]  idle (622 < 640): 15, 5
// Launch latency: lower medians of {15,20,15} and {5,10,5}: 15 and 5.
// Queue gap: {2}: 2.
// Replay: K1 = max(0+15, 10+5) = 15. K2 = max(215, 215) = 215.
//   K3 = max(400+15, 410+5, 315+2) = 415 (5 early: nothing held it in the
//   trace's terms), ends 515. K4 = max(465, 465, 515+2) = 517, ends 617.
//   S ends at K4's end + 8 = 625 (its host edge weighs 0: it waited).
//   L5 starts 10 after S's end: 635, ends 645. K5 = max(650, 650, 619) = 650,
//   ends 750.
// The span (first GPU start to last GPU end): measured 755 - 15 = 740,
// replayed 750 - 15 = 735: -5/740.
constexpr std::string_view kOneStream = R"(
  stream id=0 rank=0 role=compute
  api rank=0 thread=1 start=0 end=10000 corr=1 name=cudaLaunchKernel
  api rank=0 thread=1 start=200000 end=210000 corr=2 name=cudaLaunchKernel
  api rank=0 thread=1 start=400000 end=410000 corr=3 name=cudaLaunchKernel
  api rank=0 thread=1 start=450000 end=460000 corr=4 name=cudaLaunchKernel
  api rank=0 thread=1 start=470000 end=630000 corr=5 name=cudaStreamSynchronize
  api rank=0 thread=1 start=640000 end=650000 corr=6 name=cudaLaunchKernel
  kernel rank=0 stream=0 start=15000 end=115000 corr=1 name=k1
  kernel rank=0 stream=0 start=215000 end=315000 corr=2 name=k2
  kernel rank=0 stream=0 start=420000 end=520000 corr=3 name=k3
  kernel rank=0 stream=0 start=522000 end=622000 corr=4 name=k4
  kernel rank=0 stream=0 start=655000 end=755000 corr=6 name=k5
)";

TEST(ExecGraph, ReplaysLaunchesStreamOrderAndASynchronisation) {
  const auto t = testing::load_text_trace("replay-one.db", kOneStream);
  const auto g = build_exec_graph(t);
  ASSERT_EQ(g.latencies.size(), 1u);
  EXPECT_EQ(g.latencies[0].launch_ns[0], 15 * us);
  EXPECT_EQ(g.latencies[0].launch_after_call_ns[0], 5 * us);
  EXPECT_EQ(g.latencies[0].launch_samples[0], 3);
  EXPECT_EQ(g.latencies[0].queue_gap_ns, 2 * us);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kSync)], 1);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kLaunch)], 10);  // two per kernel
  const auto times = evaluate_exec_graph(g);
  EXPECT_EQ(replayed_start(t, g, times, 15), 15 * us);
  EXPECT_EQ(replayed_start(t, g, times, 215), 215 * us);
  EXPECT_EQ(replayed_start(t, g, times, 420), 415 * us);
  EXPECT_EQ(replayed_start(t, g, times, 522), 517 * us);
  EXPECT_EQ(replayed_start(t, g, times, 655), 650 * us);
  std::size_t sync = 0;
  for (std::size_t i = 0; i < t.api_calls.size(); ++i)
    if (t.str(t.api_calls[i].name) == "cudaStreamSynchronize") sync = i;
  EXPECT_EQ(times[g.api_end[sync]], 625 * us);

  const auto s = replay(t);
  ASSERT_EQ(s.iterations.size(), 1u);  // no iterations: the span
  EXPECT_EQ(s.iterations[0].iteration, -1);
  EXPECT_EQ(s.iterations[0].measured_ns, 740 * us);
  EXPECT_EQ(s.iterations[0].replayed_ns, 735 * us);
  EXPECT_NEAR(s.max_iteration_error, 5.0 / 740.0, 1e-12);
}

// Two streams, a wait the trace does not record (us):
//   s0: L0a [0,10] -> A0 [15,25] (first); L1 [200,210] -> K1 [215,715]
//   s1: L0b [30,40] -> B0 [45,55] (first); L2 [320,330] -> K2 [335,385];
//       L2b [340,350] -> K2b [387,397] (queued: gap 2);
//       cudaStreamWaitEvent [400,410] (recorded without its event);
//       L3 [420,430] -> K3 [717,767]
// Launch samples (idle stream, not first): K1 15/5, K2 15/5, K3 297/287:
// lower medians 15 and 5. Queue gap {2}: 2.
// K3 is allowed at max(420+15, 430+5, 397+2) = 435 but started at 717:
// 282 us unexplained by its launch and stream, so the other stream's
// activity that ended last before 717 is looked for: K1 (715), and
// 715 + 2 = 717 > 435: an inferred edge K1 end -> K3 start, latency 2, and
// K3 replays at 717. With K1 100 us longer (its duration edge 600 us), K3
// moves with it to 817; without the inferred edge it would stay at 435.
constexpr std::string_view kTwoStreams = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  api rank=0 thread=1 start=0 end=10000 corr=1 name=cudaLaunchKernel
  api rank=0 thread=1 start=30000 end=40000 corr=2 name=cudaLaunchKernel
  api rank=0 thread=1 start=200000 end=210000 corr=3 name=cudaLaunchKernel
  api rank=0 thread=1 start=320000 end=330000 corr=4 name=cudaLaunchKernel
  api rank=0 thread=1 start=340000 end=350000 corr=5 name=cudaLaunchKernel
  api rank=0 thread=1 start=400000 end=410000 corr=6 name=cudaStreamWaitEvent
  api rank=0 thread=1 start=420000 end=430000 corr=7 name=cudaLaunchKernel
  kernel rank=0 stream=0 start=15000 end=25000 corr=1 name=a0
  kernel rank=0 stream=1 start=45000 end=55000 corr=2 name=b0
  kernel rank=0 stream=0 start=215000 end=715000 corr=3 name=k1
  kernel rank=0 stream=1 start=335000 end=385000 corr=4 name=k2
  kernel rank=0 stream=1 start=387000 end=397000 corr=5 name=k2b
  kernel rank=0 stream=1 start=717000 end=767000 corr=7 name=k3
)";

TEST(ExecGraph, InfersACrossStreamWaitTheTraceDoesNotRecord) {
  auto t = testing::load_text_trace("replay-two.db", kTwoStreams);
  auto g = build_exec_graph(t);
  EXPECT_EQ(g.stream_wait_calls, 1);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kInferredCrossStream)], 1);
  EXPECT_EQ(g.unexplained, 0);
  EXPECT_EQ(replayed_start(t, g, evaluate_exec_graph(g), 717), 717 * us);
  const auto k1 = activity_at(t, 215);
  for (auto& e : g.edges)
    if (e.kind == ExecEdgeKind::kDuration && e.from == g.activity_start[k1]) e.latency_ns = 600 * us;
  EXPECT_EQ(replayed_start(t, g, evaluate_exec_graph(g), 717), 817 * us);
  bool says = false;
  for (const auto& m : g.missing) says = says || m.find("1 inferred from the timeline") != std::string::npos;
  EXPECT_TRUE(says);
}

// Two ranks, one all-to-all (an op range of each, paired by its MoE
// coordinates), no launching calls (us):
//   rank 0: C0 [0,100], then A0 [100,400] (its all-to-all kernel)
//   rank 1: C1 [0,300], then A1 [300,400]
// The last participant starts at 300: each one's transfer is 400 - 300 =
// 100; A0's end waits for A1's start + 100 and A1's for A0's start + 100.
// Replay: exact. With C1 shortened to 200 (rank 1 no longer late), A1
// starts at 200 and both end at max(200, 100) + 100 = 300.
constexpr std::string_view kTwoRanks = R"(
  run world_size=2
  stream id=0 rank=0 role=compute
  stream id=1 rank=1 role=compute
  op id=1 rank=0 stream=0 kind=dispatch_all_to_all layer=0 iteration=0 start=100000 end=400000
  op id=2 rank=1 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=300000 end=400000
  kernel rank=0 stream=0 start=0 end=100000 name=c0
  kernel rank=0 stream=0 start=100000 end=400000 name=a2a op=1
  kernel rank=1 stream=1 start=0 end=300000 name=c1
  kernel rank=1 stream=1 start=300000 end=400000 name=a2a op=2
)";

TEST(ExecGraph, JoinsACollectiveAcrossRanks) {
  const auto t = testing::load_text_trace("replay-ranks.db", kTwoRanks);
  auto g = build_exec_graph(t);
  EXPECT_EQ(g.collective_instances, 1);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kCollective)], 2);
  auto times = evaluate_exec_graph(g);
  const auto a0 = activity_at(t, 100), a1 = activity_at(t, 300);
  EXPECT_EQ(times[g.activity_end[a0]], 400 * us);
  EXPECT_EQ(times[g.activity_end[a1]], 400 * us);
  set_first_duration(t, g, 1, 200 * us);
  times = evaluate_exec_graph(g);
  EXPECT_EQ(times[g.activity_start[a1]], 200 * us);
  EXPECT_EQ(times[g.activity_end[a0]], 300 * us);
  EXPECT_EQ(times[g.activity_end[a1]], 300 * us);
  // Without the join each keeps its measured duration: A0 ends at 400.
  ExecGraphOptions off;
  off.collectives = false;
  auto g2 = build_exec_graph(t, off);
  EXPECT_EQ(g2.collective_instances, 0);
  set_first_duration(t, g2, 1, 200 * us);
  times = evaluate_exec_graph(g2);
  EXPECT_EQ(times[g2.activity_end[a0]], 400 * us);
}

// The replayed trace is the trace at its replayed times: op ranges follow
// their activities, and the report's windows are computed on it as on the
// measured one.
TEST(ExecGraph, ReplayedTraceMovesOpRangesWithTheirActivities) {
  const auto t = testing::load_text_trace("replay-ops.db", kTwoRanks);
  auto g = build_exec_graph(t);
  set_first_duration(t, g, 1, 200 * us);
  const auto r = replayed_trace(t, g, evaluate_exec_graph(g));
  ASSERT_EQ(r.ops.size(), 2u);
  for (const auto& op : r.ops) {
    EXPECT_EQ(op.end_ns, 300 * us);
    EXPECT_EQ(op.start_ns, op.rank.value == 0 ? 100 * us : 200 * us);
  }
  const auto s = compare_replay(t, r, g);
  // One iteration on each rank, its window the envelope of its ops (the
  // kernels c0, c1 belong to no op): rank 0 [100,400] -> [100,300]; rank 1
  // [300,400] -> [200,300].
  ASSERT_EQ(s.iterations.size(), 2u);
  EXPECT_EQ(s.iterations[0].rank, 0);
  EXPECT_EQ(s.iterations[0].measured_ns, 300 * us);
  EXPECT_EQ(s.iterations[0].replayed_ns, 200 * us);
  EXPECT_EQ(s.iterations[1].measured_ns, 100 * us);
  EXPECT_EQ(s.iterations[1].replayed_ns, 100 * us);
}

// Two MoE layer instances side by side on one rank, as an overlapped
// schedule runs them (us; no launching calls, so the queue gap is 0):
//   stream 0: A1 [0,100] (layer 0 forward experts), B1 [100,200] (layer 1
//             backward experts), A2 [200,300] (layer 0 forward experts)
//   stream 1: B0 [10,160] (layer 1 backward dispatch), A3 [300,350] (layer 0
//             forward combine)
// Replay: A3 is allowed at B0's end (160) but started at 300: A2 (stream 0)
// ended last before it, at 300: an inferred edge; everything exact.
// overlap=off: layer 0 forward (started at 0) runs first: stream 0 A1, A2,
// B1; stream 1 A3, B0; layer 1's first work on each stream (B1, B0) waits for
// layer 0's last (A3). A1 [0,100], A2 [100,200], A3 [200,250] (after A2),
// B0 [250,400], B1 [250,350]. Layer windows: layer 0 350 -> 250, layer 1
// 190 -> 150; the iteration [0,350] -> [0,400].
constexpr std::string_view kSideBySide = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  op id=1 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd start=0 end=300000
  op id=2 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 phase=fwd start=300000 end=350000
  op id=3 rank=0 stream=1 kind=dispatch_all_to_all layer=1 iteration=0 phase=bwd start=10000 end=160000
  op id=4 rank=0 stream=0 kind=expert_ffn layer=1 iteration=0 phase=bwd start=100000 end=200000
  kernel rank=0 stream=0 start=0 end=100000 name=a1 op=1
  kernel rank=0 stream=0 start=100000 end=200000 name=b1 op=4
  kernel rank=0 stream=0 start=200000 end=300000 name=a2 op=1
  kernel rank=0 stream=1 start=10000 end=160000 name=b0 op=3
  kernel rank=0 stream=1 start=300000 end=350000 name=a3 op=2
)";

TEST(WhatIf, OverlapOffRunsSideBySideInstancesOneAfterTheOther) {
  const auto t = testing::load_text_trace("replay-overlap.db", kSideBySide);
  const auto replayed = replay(t);
  EXPECT_EQ(replayed.max_iteration_error, 0.0);
  GraphWhatIfs w;
  parse_graph_what_if("overlap=off", w);
  const auto p = replay_with_what_ifs(t, w, RecommendOptions{});
  EXPECT_EQ(p.what_ifs.instances_changed, 1);
  EXPECT_EQ(p.summary.unresolved, 0);
  EXPECT_EQ(p.predicted_unresolved, 0);
  ASSERT_EQ(p.summary.iterations.size(), 1u);
  EXPECT_EQ(p.summary.iterations[0].measured_ns, 350 * us);
  EXPECT_EQ(p.summary.iterations[0].predicted_ns, 400 * us);
  ASSERT_EQ(p.summary.layers.size(), 2u);
  EXPECT_EQ(p.summary.layers[0].measured_ns, 350 * us);
  EXPECT_EQ(p.summary.layers[0].predicted_ns, 250 * us);
  EXPECT_EQ(p.summary.layers[1].measured_ns, 190 * us);
  EXPECT_EQ(p.summary.layers[1].predicted_ns, 150 * us);
}

// One MoE layer issued from one thread, all on one stream, no FLOPs or
// bytes recorded (us):
//   D [0,10] -> d [15,35] (dispatch), E [40,50] -> e [55,155] (expert, a
//   GEMM kernel), C [160,170] -> c [175,195] (combine), X [200,210] ->
//   x [215,225] (unpermute).
// Launch samples (not first on the stream): e, c, x each 15 from the call's
// start, 5 from its end; no queue gap sample: 0. The replay is exact.
// pipeline_degree=2 on a cost model of alpha 10 us a GEMM launch and 4 us an
// all-to-all: the part of a time that scales is its time beyond alpha, so
// d and c chunks last 20 - (20 - 4) / 2 = 12, e chunks 100 - 90 / 2 = 55.
// Host: D (chunk 0) [0,10]; D' follows it with the gap that followed D (30):
// [40,50]; E comes as it came, 30 after: [80,90]; E' 110 after (the gap
// that followed E): [200,210]; C 110 after: [320,330]; C' 30 after (the gap
// that followed C): [360,370]; X 30 after: [400,410].
// Kernels (the stream in issue order d, d', e, e', c, c', x; each at its
// call's start + 15 = its end + 5, or after the one before it):
// d [15,27], d' [55,67], e [95,150], e' [215,270], c [335,347],
// c' [375,387], x [415,425]. The layer's window [15,225] -> [15,425].
constexpr std::string_view kUnsplitLayer = R"(
  stream id=0 rank=0 role=compute
  op id=1 rank=0 stream=0 kind=dispatch_all_to_all layer=0 iteration=0 start=15000 end=35000
  op id=2 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=55000 end=155000
  op id=3 rank=0 stream=0 kind=combine_all_to_all layer=0 iteration=0 start=175000 end=195000
  op id=4 rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=215000 end=225000
  api rank=0 thread=1 start=0 end=10000 corr=1 name=cudaLaunchKernel
  api rank=0 thread=1 start=40000 end=50000 corr=2 name=cudaLaunchKernel
  api rank=0 thread=1 start=160000 end=170000 corr=3 name=cudaLaunchKernel
  api rank=0 thread=1 start=200000 end=210000 corr=4 name=cudaLaunchKernel
  kernel rank=0 stream=0 start=15000 end=35000 corr=1 name=dispatch_kernel op=1
  kernel rank=0 stream=0 start=55000 end=155000 corr=2 name=gemm_e op=2
  kernel rank=0 stream=0 start=175000 end=195000 corr=3 name=combine_kernel op=3
  kernel rank=0 stream=0 start=215000 end=225000 corr=4 name=unpermute_kernel op=4
)";

TEST(WhatIf, PipelineDegreeSplitsALayerAsPipeMoeIssuesIt) {
  const auto t = testing::load_text_trace("replay-split.db", kUnsplitLayer);
  EXPECT_EQ(replay(t).max_iteration_error, 0.0);
  RecommendOptions o;
  sim::CostModel m;
  m.compute_by_kind[OpKind::kExpertFfn] = {10e-6, 0, 0};
  m.collective(plan::CollectiveKind::kAllToAllV).points = {{2, 4e-6, 0}};
  o.cost_model = m;
  GraphWhatIfs w;
  parse_graph_what_if("pipeline_degree=2", w);
  auto g = build_exec_graph(t);
  const auto result = apply_graph_what_ifs(t, g, w, o);
  EXPECT_EQ(result.instances_changed, 1);
  std::size_t unresolved = 0;
  const auto times = evaluate_exec_graph(g, &unresolved);
  EXPECT_EQ(unresolved, 0u);
  const auto r = replayed_trace(t, g, times);
  std::vector<std::pair<std::int64_t, std::int64_t>> got;
  for (const auto& a : r.activities) got.push_back({a.start_ns / us, a.end_ns / us});
  const std::vector<std::pair<std::int64_t, std::int64_t>> want = {{15, 27},   {55, 67},   {95, 150}, {215, 270},
                                                                   {335, 347}, {375, 387}, {415, 425}};
  EXPECT_EQ(got, want);
  const auto p = replay_with_what_ifs(t, w, o);
  ASSERT_EQ(p.summary.layers.size(), 1u);
  EXPECT_EQ(p.summary.layers[0].measured_ns, 210 * us);
  EXPECT_EQ(p.summary.layers[0].predicted_ns, 410 * us);
}

}  // namespace
}  // namespace moetrace::analyzer
