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
#include <string_view>
#include <tuple>

#include <fmt/format.h>

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

// One op of rank 0 with its one kernel, in us.
struct Work {
  std::string_view kind;
  int stream, layer;  // layer -1: none
  std::string_view phase;
  int micro_batch;
  std::int64_t start_us, end_us;
  std::string_view kernel;
};

// The trace text of `streams` (each "id role"), `work` (op i + 1 is
// work[i]) and `deps` ("dep op=.. on=.." lines).
std::string trace_text(std::initializer_list<std::string_view> streams, std::initializer_list<Work> work,
                       std::string_view deps = {}) {
  std::string s;
  for (auto st : streams) s += fmt::format("stream id={} rank=0 role={}\n", st.substr(0, 1), st.substr(2));
  int id = 0;
  for (const auto& w : work) {
    ++id;
    s += fmt::format("op id={} rank=0 stream={} kind={}{} iteration=0 phase={} micro_batch={} start={} end={}\n", id,
                     w.stream, w.kind, w.layer >= 0 ? fmt::format(" layer={}", w.layer) : "", w.phase, w.micro_batch,
                     w.start_us * kNsPerUs, w.end_us * kNsPerUs);
    s += fmt::format("kernel rank=0 stream={} start={} end={} name={} op={}\n", w.stream, w.start_us * kNsPerUs,
                     w.end_us * kNsPerUs, w.kernel, id);
  }
  return s + std::string(deps);
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
const std::string kTwoMicroBatches = trace_text(
    {"0 compute", "1 comm"},
    {{"dispatch_all_to_all", 1, 0, "fwd", 0, 0, 100, "ncclDevKernel_SendRecv"},
     {"expert_ffn", 0, 0, "fwd", 0, 100, 200, "Sm90_Grouped_Gemm_bf16"},
     {"combine_all_to_all", 1, 0, "fwd", 0, 200, 300, "ncclDevKernel_SendRecv"},
     {"dispatch_all_to_all", 1, 0, "fwd", 1, 300, 400, "ncclDevKernel_SendRecv"},
     {"expert_ffn", 0, 0, "fwd", 1, 400, 500, "Sm90_Grouped_Gemm_bf16"},
     {"combine_all_to_all", 1, 0, "fwd", 1, 500, 600, "ncclDevKernel_SendRecv"}},
    "dep op=2 on=1\ndep op=3 on=2\ndep op=5 on=4\ndep op=6 on=5\n");

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
  std::string text = kTwoMicroBatches;
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
const std::string kOneFOneB = trace_text(
    {"0 compute"},
    {{"attention", 0, 0, "fwd", 1, 0, 100, "flash_fwd_kernel"},
     {"dispatch_all_to_all", 0, 0, "fwd", 1, 100, 150, "ncclKernel_AllToAll"},
     {"expert_ffn", 0, 0, "fwd", 1, 150, 250, "cutlass_grouped_gemm"},
     {"combine_all_to_all", 0, 0, "fwd", 1, 250, 300, "ncclKernel_AllToAll"},
     {"attention", 0, 1, "fwd", 1, 300, 400, "flash_fwd_kernel"},
     {"dispatch_all_to_all", 0, 1, "fwd", 1, 400, 450, "ncclKernel_AllToAll"},
     {"expert_ffn", 0, 1, "fwd", 1, 450, 550, "cutlass_grouped_gemm"},
     {"combine_all_to_all", 0, 1, "fwd", 1, 550, 600, "ncclKernel_AllToAll"},
     {"pipeline_send", 0, -1, "fwd", 1, 600, 650, "ncclKernel_SendRecv"},
     {"combine_all_to_all", 0, 1, "bwd", 0, 650, 700, "ncclKernel_AllToAll"},
     {"expert_ffn", 0, 1, "bwd", 0, 700, 900, "cutlass_grouped_gemm_dgrad"},
     {"dispatch_all_to_all", 0, 1, "bwd", 0, 900, 950, "ncclKernel_AllToAll"},
     {"attention", 0, 1, "bwd", 0, 950, 1050, "flash_bwd_kernel"},
     {"combine_all_to_all", 0, 0, "bwd", 0, 1050, 1100, "ncclKernel_AllToAll"},
     {"expert_ffn", 0, 0, "bwd", 0, 1100, 1300, "cutlass_grouped_gemm_dgrad"},
     {"dispatch_all_to_all", 0, 0, "bwd", 0, 1300, 1350, "ncclKernel_AllToAll"},
     {"attention", 0, 0, "bwd", 0, 1350, 1450, "flash_bwd_kernel"}});

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

// The replayed start (us) of rank `rank`'s activity that started at `start_us`.
std::int64_t rank_start_after(const Trace& t, const ExecGraph& g, const std::vector<std::int64_t>& times,
                              std::int32_t rank, std::int64_t start_us) {
  for (std::size_t i = 0; i < t.activities.size(); ++i)
    if (t.activities[i].rank.value == rank && t.activities[i].start_ns == start_us * kNsPerUs)
      return times[g.activity_start[i]] / kNsPerUs;
  ADD_FAILURE() << "no activity of rank " << rank << " starts at " << start_us << " us";
  return -1;
}

// Two ranks of one expert-parallel group, each running micro-batch 0's and
// micro-batch 1's forward of a MoE layer one after the other; the
// all-to-alls are collectives of both ranks, joined by their coordinates
// (us; streams 0/2 compute, 1/3 communication; each op waits for the one
// before it in its micro-batch):
//   rank 0: pd [0,100] pe [100,200] pc [200,300]
//           qd [300,650] (waits for rank 1's) qe [650,750] qc [750,850]
//   rank 1: pd [0,100] pe [100,200] pc [200,300]
//           qg [300,550] (its gate, 250 us: rank 1 routes slowly)
//           qd [550,650] qe [650,750] qc [750,850]
// Each collective's transfer is its end less its last participant's start:
// 100 for each of the four. The replay is exact.
// overlap=on pairs p with q on both ranks. Offsets from each segment's
// start: rank 0 q: d 0; rank 1 q: g 0, d 250, c 450, and p: c 200. By
// offset, rank 1 would issue pc before qd and rank 0 qd before pc: each
// rank's collective would wait for the other's (a cycle). Communication
// instead alternates each pass's ops in their order: pd, qd, pc, qc on both
// ranks. Compute lanes by offset: rank 0 pe, qe; rank 1 qg (0), pe (100),
// qe (350). Replay (a collective ends at the latest of its own start + 100
// and the other rank's start + 100):
//   pd both [0,100]; rank 1 qg [0,250] (issued with p);
//   rank 0: pe [100,200]; qd_0 starts 100;
//   rank 1: pe after qg [250,350]; qd_1 after pd, qg: starts 250;
//   qd ends at max(100, 250) + 100 = 350 on both;
//   rank 0: pc after qd, pe: starts 350; qe after pe, qd [350,450];
//   rank 1: pc after qd, pe: starts 350; qe after pe, qd [350,450];
//   pc ends 450 on both; qc after pc, qe: starts 450, ends 550 on both.
// Each rank's iteration: 850 -> 550.
constexpr std::string_view kTwoRanksTwoMicroBatches = R"(
  run world_size=2
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  stream id=2 rank=1 role=compute
  stream id=3 rank=1 role=comm
  op id=1 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=0 start=0 end=100000
  op id=2 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=0 start=100000 end=200000
  op id=3 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=0 start=200000 end=300000
  op id=4 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=300000 end=650000
  op id=5 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=1 start=650000 end=750000
  op id=6 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=750000 end=850000
  op id=11 rank=1 stream=3 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=0 start=0 end=100000
  op id=12 rank=1 stream=2 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=0 start=100000 end=200000
  op id=13 rank=1 stream=3 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=0 start=200000 end=300000
  op id=14 rank=1 stream=2 kind=gate layer=0 iteration=0 phase=fwd micro_batch=1 start=QG_START end=550000
  op id=15 rank=1 stream=3 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=550000 end=650000
  op id=16 rank=1 stream=2 kind=expert_ffn layer=0 iteration=0 phase=fwd micro_batch=1 start=650000 end=750000
  op id=17 rank=1 stream=3 kind=combine_all_to_all layer=0 iteration=0 phase=fwd micro_batch=1 start=750000 end=850000
  kernel rank=0 stream=1 start=0 end=100000 name=ncclDevKernel_AllToAll_RING op=1
  kernel rank=0 stream=0 start=100000 end=200000 name=nvjet_hsh_grouped_gemm op=2
  kernel rank=0 stream=1 start=200000 end=300000 name=ncclDevKernel_AllToAll_RING op=3
  kernel rank=0 stream=1 start=300000 end=650000 name=ncclDevKernel_AllToAll_RING op=4
  kernel rank=0 stream=0 start=650000 end=750000 name=nvjet_hsh_grouped_gemm op=5
  kernel rank=0 stream=1 start=750000 end=850000 name=ncclDevKernel_AllToAll_RING op=6
  kernel rank=1 stream=3 start=0 end=100000 name=ncclDevKernel_AllToAll_RING op=11
  kernel rank=1 stream=2 start=100000 end=200000 name=nvjet_hsh_grouped_gemm op=12
  kernel rank=1 stream=3 start=200000 end=300000 name=ncclDevKernel_AllToAll_RING op=13
  kernel rank=1 stream=2 start=QG_START end=550000 name=topkGatingSoftmax op=14
  kernel rank=1 stream=3 start=550000 end=650000 name=ncclDevKernel_AllToAll_RING op=15
  kernel rank=1 stream=2 start=650000 end=750000 name=nvjet_hsh_grouped_gemm op=16
  kernel rank=1 stream=3 start=750000 end=850000 name=ncclDevKernel_AllToAll_RING op=17
  dep op=2 on=1
  dep op=3 on=2
  dep op=5 on=4
  dep op=6 on=5
  dep op=12 on=11
  dep op=13 on=12
  dep op=15 on=14
  dep op=16 on=15
  dep op=17 on=16
)";

// overlap_on() of a trace whose replay is exact, checked to hold no cycle.
Overlapped overlap_exact(const Trace& t) {
  EXPECT_EQ(replay(t).max_iteration_error, 0.0);
  auto o = overlap_on(t);
  EXPECT_EQ(o.unresolved, 0u);
  return o;
}

std::string two_ranks(std::string_view gate_start_us) {
  std::string s(kTwoRanksTwoMicroBatches);
  const std::string ns = fmt::format("{}000", gate_start_us);
  for (auto pos = s.find("QG_START"); pos != std::string::npos; pos = s.find("QG_START")) s.replace(pos, 8, ns);
  return s;
}

TEST(WhatIfOverlapOn, RanksOfACommunicatorKeepOneCollectiveOrder) {
  const auto t = testing::load_text_trace("overlap-ranks.db", two_ranks("300"));
  const auto o = overlap_exact(t);
  EXPECT_EQ(o.result.instances_changed, 4);
  // (rank, measured start) -> replayed start, in the order of the comment
  const std::vector<std::tuple<std::int32_t, std::int64_t, std::int64_t>> expected = {
      {0, 0, 0},     {1, 0, 0},     {1, 300, 0},   {0, 100, 100}, {0, 300, 100},
      {1, 100, 250}, {1, 550, 250}, {0, 200, 350}, {0, 650, 350}, {1, 200, 350},
      {1, 650, 350}, {0, 750, 450}, {1, 750, 450}};
  for (const auto& [rank, measured, replayed] : expected)
    EXPECT_EQ(rank_start_after(t, o.graph, o.times, rank, measured), replayed)
        << "rank " << rank << ", the activity measured at " << measured;

  GraphWhatIfs w;
  parse_graph_what_if("overlap=on", w);
  const auto p = replay_with_what_ifs(t, w, RecommendOptions{});
  ASSERT_EQ(p.summary.iterations.size(), 2u);
  for (const auto& it : p.summary.iterations) {
    EXPECT_EQ(it.measured_ns, 850 * kNsPerUs);
    EXPECT_EQ(it.predicted_ns, 550 * kNsPerUs);
  }
  EXPECT_EQ(p.predicted_unresolved, 0);
}

// The same, but rank 1's gate of micro-batch 1 starts at 200 us, while
// micro-batch 0's combine still runs: rank 1 ran the two passes side by
// side, so rank 0 cannot reorder its collectives alone. Its pair is left
// as it ran, a note says why, and nothing moves.
TEST(WhatIfOverlapOn, APairOneRankOfTheCommunicatorDoesNotMakeIsLeft) {
  const auto t = testing::load_text_trace("overlap-ranks-declined.db", two_ranks("200"));
  const auto o = overlap_exact(t);
  EXPECT_EQ(o.result.instances_changed, 0);
  EXPECT_EQ(std::count_if(o.result.notes.begin(), o.result.notes.end(),
                          [](const std::string& n) {
                            return n.find("1 pair of passes left as they ran") != std::string::npos;
                          }),
            1);
  for (std::int64_t s : {0, 100, 200, 300, 650, 750}) EXPECT_EQ(rank_start_after(t, o.graph, o.times, 0, s), s);
  for (std::int64_t s : {0, 100, 200, 550, 650, 750}) EXPECT_EQ(rank_start_after(t, o.graph, o.times, 1, s), s);
}

}  // namespace
}  // namespace moetrace::analyzer
