// Golden tests of critical_path.h: the critical path of one rank as Holistic
// Trace Analysis (HTA) defines it. Every expected number is derived by hand
// from the definitions in critical_path.h, in the comment above the trace.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "gunzip.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/critical_path.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_loader.h"
#include "json_schema.h"
#include "loaded_trace.h"
#include "shared_data.h"

namespace moetrace::analyzer {
namespace {

const std::string kCpReportSchema = std::string(MOETRACE_SOURCE_DIR) + "/schemas/report.schema.json";

// The shape of kGpuBound and kCpuBound: one step [0, step_end) on rank 0,
// thread 1, stream 0; in it three ops (op_a, op_b, op_c), each launching one
// GEMM (gemm_a, ...): per op its range, its launch call's and its kernel's
// [start, end); then the blocking call `sync_name` over `sync`.
using CpSpan = std::pair<std::int64_t, std::int64_t>;
struct CpOp {
  CpSpan range, launch, kernel;
};
std::string three_op_step(std::int64_t step_end, const CpOp (&ops)[3], CpSpan sync,
                          std::string_view sync_name) {
  std::string s = "stream id=0 rank=0 role=compute\n";
  s += fmt::format("nvtx rank=0 thread=1 start=0 end={} domain=torch name=step\n", step_end);
  const char letter[] = {'a', 'b', 'c'};
  for (int i = 0; i < 3; ++i)
    s += fmt::format("nvtx rank=0 thread=1 start={} end={} domain=torch name=op_{}\n", ops[i].range.first,
                     ops[i].range.second, letter[i]);
  for (int i = 0; i < 3; ++i)
    s += fmt::format("api rank=0 thread=1 start={} end={} corr={}\n", ops[i].launch.first, ops[i].launch.second,
                     i + 1);
  s += fmt::format("api rank=0 thread=1 start={} end={} corr=4 name={}\n", sync.first, sync.second, sync_name);
  for (int i = 0; i < 3; ++i)
    s += fmt::format("kernel rank=0 stream=0 start={} end={} corr={} name=gemm_{}\n", ops[i].kernel.first,
                     ops[i].kernel.second, i + 1, letter[i]);
  return s;
}

// GPU bound. Rank 0, thread 1, stream 0 (times in ns):
//   step [0, 1000)
//     op_a [10, 100)   launch L1 [20, 40)   -> K1 [50, 400)
//     op_b [110, 200)  launch L2 [120, 140) -> K2 [400, 700)
//     op_c [210, 300)  launch L3 [220, 240) -> K3 [710, 900)
//     cudaDeviceSynchronize S [310, 950)
// Edges: host stack: step.s->op_a.s 10 (step), op_a.s->L1.s 10 (op_a), L1 20,
//   L1.e->op_a.e 60 (op_a), op_a.e->op_b.s 10 (step), ... op_c.e->S.s 10
//   (step), S.s->S.e 0 (blocking), S.e->step.e 50 (step).
//   K1: nothing before it on the stream -> launch edge L1.s->K1.s 30.
//   K2: K1 ends (400) after L2 starts (120) -> kernel gap K1.e->K2.s 0.
//   K3: K2 ends (700) after L3 starts -> kernel gap K2.e->K3.s 10 (K2's).
//   Sync: K3 launched (220) before S started (310), ended (900) by S's end
//   (950) -> K3.e->S.e 0.
// Longest path: step.s -10-> op_a.s -10-> L1.s -30-> K1.s -350-> K1.e -0->
//   K2.s -300-> K2.e -10-> K3.s -190-> K3.e -0-> S.e -50-> step.e = 950.
//   (All on the host: 10+10+20+60 + 10+10+20+60 + 10+10+20+60 + 10+0+50 = 360.)
// Categories: cpu_op 10+10+50 = 70, kernel_compute 350+300+190 = 840,
//   launch_delay 30, kernel_gap 10 (+0); total 950.
// Path events (event, category) with time: K1 350, K2 300, K3 190, step 60,
//   K1 launch 30, op_a 10 (start 10), K2 gap 10 (start 400): 7 rows.
const std::string kGpuBound = three_op_step(1000,
                                           {{{10, 100}, {20, 40}, {50, 400}},     // op_a, L1, K1
                                            {{110, 200}, {120, 140}, {400, 700}},  // op_b, L2, K2
                                            {{210, 300}, {220, 240}, {710, 900}}},
                                           {310, 950}, "cudaDeviceSynchronize");
// CPU bound: the same shape, slow ops and short kernels.
//   step [0, 2000)
//     op_a [100, 600)    launch L1 [500, 520)   -> K1 [530, 630)
//     op_b [600, 1200)   launch L2 [1100, 1120) -> K2 [1130, 1230)
//     op_c [1200, 1800)  launch L3 [1700, 1720) -> K3 [1730, 1830)
//     cudaStreamSynchronize S [1800, 1900)
// Every kernel finds its stream empty (the previous one ended before the
// launch call started) -> launch edges of 30 each; K1.e and K2.e lead
// nowhere. Sync: K3 (launched 1700 < 1800, ends 1830 <= 1900) -> K3.e->S.e.
// Distances: L1.s 100+400 = 500; op_a.e 500+20+80 = 600; op_b.e 1200;
//   L3.s 1700; K3.e 1700+30+100 = 1830; S.e max(1830 via K3, 1800 via S.s
//   with the blocking call's 0) = 1830; step.e 1830+100 = 1930.
// Length 1930: cpu_op 100+400+20+80 + 500+20+80 + 500 + 100 = 1800,
//   launch_delay 30 (L3 -> K3), kernel_compute 100 (K3).
const std::string kCpuBound = three_op_step(2000,
                                           {{{100, 600}, {500, 520}, {530, 630}},     // op_a, L1, K1
                                            {{600, 1200}, {1100, 1120}, {1130, 1230}},  // op_b, L2, K2
                                            {{1200, 1800}, {1700, 1720}, {1730, 1830}}},
                                           {1800, 1900}, "cudaStreamSynchronize_v3020");
// Rank 1 beside kGpuBound's rank 0, each on its own. No host ranges: the
// calls are the top-level events.
//   L11 [0, 10)    -> NCCL all-reduce A [20, 520) on stream 10
//   L12 cudaMemcpyAsync [530, 550) -> memcpy M [600, 700) on stream 11
//   cudaDeviceSynchronize S [560, 800)
// Host: L11 10, L11.e->L12.s 0 (dependency), L12 0 (a blocking call in HTA's
//   list), L12.e->S.s 0, S 0. Launch edges L11.s->A.s 20, L12.s->M.s 70.
//   Device sync: A (launched 0, ends 520) and M (launched 530 < 560, ends
//   700) -> A.e->S.e, M.e->S.e.
// Longest: L11.s -20-> A.s -500-> A.e = 520 (via M: 10+0+70+100 = 180).
//   launch_delay 20, kernel_communication 500.
constexpr std::string_view kRankOne = R"(
  stream id=10 rank=1 role=comm
  stream id=11 rank=1 role=copy
  api rank=1 thread=7 start=0 end=10 corr=11
  api rank=1 thread=7 start=530 end=550 corr=12 name=cudaMemcpyAsync
  api rank=1 thread=7 start=560 end=800 corr=13 name=cudaDeviceSynchronize
  kernel rank=1 stream=10 start=20 end=520 corr=11 name=ncclDevKernel_AllReduce_Sum_f32_RING_LL
  memcpy rank=1 stream=11 start=600 end=700 bytes=4096 corr=12
)";

std::int64_t cat(const RankCriticalPath& p, PathCategory c) { return p.at(c); }

// A path's length and its time in each category named (ns); the categories
// not named are not checked.
void expect_path(const RankCriticalPath& p, std::int64_t length_ns,
                 std::initializer_list<std::pair<PathCategory, std::int64_t>> at) {
  EXPECT_EQ(p.length_ns, length_ns);
  for (const auto& [c, ns] : at) EXPECT_EQ(cat(p, c), ns) << path_category_name(c);
}

TEST(CriticalPath, GpuBoundKernelsAndTheSyncThatWaitsForThem) {
  const auto trace = testing::load_text_trace("cp-gpu.db", kGpuBound);
  const auto paths = critical_paths(trace);
  ASSERT_EQ(paths.size(), 1u);
  const auto& p = paths[0];
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.start_ns, 0);
  EXPECT_EQ(p.end_ns, 1000);
  expect_path(p, 950,
              {{PathCategory::kCpuOp, 70},
               {PathCategory::kKernelCompute, 840},
               {PathCategory::kLaunchDelay, 30},
               {PathCategory::kKernelGap, 10},
               {PathCategory::kKernelCommunication, 0},
               {PathCategory::kMemcpyMemset, 0}});
  EXPECT_DOUBLE_EQ(p.share(PathCategory::kKernelCompute), 840.0 / 950.0);
  // 11 nodes: step.s op_a.s L1.s K1.s K1.e K2.s K2.e K3.s K3.e S.e step.e
  EXPECT_EQ(p.path_edges, 10);
  ASSERT_EQ(p.path_event_count, 7);
  ASSERT_EQ(p.events.size(), 7u);
  const std::pair<std::string, std::int64_t> want[] = {{"gemm_a", 350}, {"gemm_b", 300}, {"gemm_c", 190},
                                                       {"step", 60},    {"gemm_a", 30},  {"op_a", 10},
                                                       {"gemm_b", 10}};
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(p.events[i].name, want[i].first) << i;
    EXPECT_EQ(p.events[i].path_ns, want[i].second) << i;
  }
  EXPECT_EQ(p.events[0].kind, PathEvent::Kind::kKernel);
  EXPECT_EQ(p.events[0].stream, 0);
  EXPECT_EQ(p.events[0].correlation_id, 1);
  EXPECT_EQ(p.events[3].kind, PathEvent::Kind::kNvtx);
  EXPECT_EQ(p.events[3].thread, 1);
  EXPECT_EQ(p.events[3].stream, -1);
  EXPECT_EQ(p.events[4].category, PathCategory::kLaunchDelay);
  EXPECT_EQ(p.events[6].category, PathCategory::kKernelGap);

  CriticalPathOptions o;
  o.top_events = 2;
  const auto few = critical_paths(trace, o);
  ASSERT_EQ(few[0].events.size(), 2u);
  EXPECT_EQ(few[0].path_event_count, 7);
  EXPECT_EQ(few[0].length_ns, 950);
}

// HTA's queue length at a launch and at a GPU start, where a launch and
// another kernel's start fall at one time: the launch counts first. Rank 0,
// thread 1, stream 0 (ns): launch L1 [0, 5) -> K1 [20, 30); launch L2 [20,
// 25) -> K2 [40, 60). Queue: L1 +1 (1 at K1's launch); at 20 L2 +1 (2), then
// K1's start -1 (1); K2's start -1 (0). So K1 (1 at its launch, 1 at its
// start) gets no launch-delay edge, and nothing leads into its start; K2 (2
// at its launch) none either, but a kernel gap from K1's end (30 > 20, L2's
// start). Longest path: K1.s -10-> K1.e -10-> K2.s -20-> K2.e = 40
// (kernel_compute 30, kernel_gap 10). Were the start counted first, K1
// would read 1 and 0 and get L1.s -20-> K1.s (launch delay): 60.
TEST(CriticalPath, ALaunchAndAStartAtOneTimeTheLaunchCountsFirst) {
  const auto trace = testing::load_text_trace("cp-tie.db", R"(
    stream id=0 rank=0 role=compute
    api rank=0 thread=1 start=0 end=5 corr=1
    api rank=0 thread=1 start=20 end=25 corr=2
    kernel rank=0 stream=0 start=20 end=30 corr=1 name=gemm_a
    kernel rank=0 stream=0 start=40 end=60 corr=2 name=gemm_b
  )");
  const auto paths = critical_paths(trace);
  ASSERT_EQ(paths.size(), 1u);
  expect_path(paths[0], 40,
              {{PathCategory::kKernelCompute, 30},
               {PathCategory::kKernelGap, 10},
               {PathCategory::kLaunchDelay, 0},
               {PathCategory::kCpuOp, 0}});
}

TEST(CriticalPath, CpuBoundLaunchesPutTheHostOnThePath) {
  const auto trace = testing::load_text_trace("cp-cpu.db", kCpuBound);
  const auto paths = critical_paths(trace);
  ASSERT_EQ(paths.size(), 1u);
  const auto& p = paths[0];
  expect_path(p, 1930,
              {{PathCategory::kCpuOp, 1800},
               {PathCategory::kLaunchDelay, 30},
               {PathCategory::kKernelCompute, 100},
               {PathCategory::kKernelGap, 0}});
  EXPECT_DOUBLE_EQ(p.share(PathCategory::kCpuOp), 1800.0 / 1930.0);
  // The kernel on the path is the last one, reached through its launch.
  bool k3 = false;
  for (const auto& e : p.events) {
    EXPECT_NE(e.name, "gemm_a");
    EXPECT_NE(e.name, "gemm_b");
    if (e.name == "gemm_c" && e.category == PathCategory::kLaunchDelay) k3 = e.path_ns == 30;
  }
  EXPECT_TRUE(k3);
}

TEST(CriticalPath, EachRankOnItsOwnAndOneRankOnRequest) {
  const auto trace = testing::load_text_trace("cp-ranks.db", std::string(kGpuBound) + std::string(kRankOne));
  const auto paths = critical_paths(trace);
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0].rank, 0);
  EXPECT_EQ(paths[0].length_ns, 950);
  EXPECT_EQ(paths[1].rank, 1);
  expect_path(paths[1], 520,
              {{PathCategory::kLaunchDelay, 20},
               {PathCategory::kKernelCommunication, 500},
               {PathCategory::kMemcpyMemset, 0},
               {PathCategory::kCpuOp, 0}});

  CriticalPathOptions o;
  o.rank = 1;
  const auto one = critical_paths(trace, o);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].rank, 1);
  EXPECT_EQ(one[0].length_ns, 520);
  o.rank = 5;
  EXPECT_TRUE(critical_paths(trace, o).empty());
}

TEST(CriticalPath, ReportSectionsInEveryFormat) {
  const auto trace = testing::load_text_trace("cp-report.db", kGpuBound);
  const auto a = analyze(trace);
  const auto j = report_json(trace, a, {});
  EXPECT_EQ(testing::schema_errors(j, kCpReportSchema), std::vector<std::string>{});
  const auto& r = j["critical_path"]["ranks"];
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["length_ns"], 950);
  EXPECT_EQ(r[0]["categories"][1]["category"], "kernel_compute");
  EXPECT_EQ(r[0]["categories"][1]["ns"], 840);
  EXPECT_EQ(r[0]["events"][0]["name"], "gemm_a");
  EXPECT_EQ(r[0]["events"][0]["path_ns"], 350);

  std::ostringstream text, md, html;
  write_text_report(text, trace, a, {});
  write_markdown_report(md, trace, a, {});
  write_html_report(html, trace, a, {});
  EXPECT_NE(text.str().find("\nCritical path per rank\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("950 ns"), std::string::npos);
  EXPECT_NE(text.str().find("rank 0's path (5 of 7;"), std::string::npos) << text.str();
  EXPECT_NE(md.str().find("## Critical path per rank"), std::string::npos);
  EXPECT_NE(html.str().find("<section id=\"critical_path\">"), std::string::npos);
}

TEST(CriticalPath, NoEventsNoPath) {
  const auto trace = testing::load_text_trace("cp-none.db", R"(
    stream id=0 rank=0 role=compute
    op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
  )");
  EXPECT_TRUE(critical_paths(trace).empty());
  const auto j = report_json(trace, analyze(trace), {});
  EXPECT_TRUE(j["critical_path"]["ranks"].empty());
  EXPECT_EQ(testing::schema_errors(j, kCpReportSchema), std::vector<std::string>{});
}

// Across ranks (critical_path.h "Across ranks"). `slow` computes 100 us
// then joins an all-reduce, `fast` computes 10 us then joins; the
// all-reduce runs 20 us on both after the later start (slow's kernel
// [100, 120) us; fast's [10, 121) us: it waits 90 us and leaves 1 us after).
// GPU only: each kernel follows the previous one on its stream (gap 0).
// Per rank alone: slow 100 + 20 = 120 us; fast 10 + 111 = 121 us, nearly all
// of it "communication".
// Across ranks: last start = 100 us. Kernel edges of the all-reduce keep
// only their time after it: slow's 20, fast's 121 - 100 = 21 (waiting taken
// off: 111 - 21 = 90 us). Collective edges: slow.s -> fast.e 121 - 100 = 21;
// fast.s -> slow.e 120 - max(10, 100) = 20; held as 3 through the hub
// slow.s (the last start): fast.s -> slow.s 0, slow.s -> fast.e 21,
// slow.s -> slow.e 20.
// Longest: slow's gemm 100 -> slow's all-reduce start -21-> fast's all-reduce
// end = 121 us (slow's own end 120; through fast's compute 10 + 21 = 31).
// kernel_compute 100 us (slow's gemm), kernel_communication 21 us (fast's
// all-reduce kernel, the collective edge); one crossing, slow -> fast.
std::string two_ranks(int slow, int fast, bool described) {
  auto r = [](int rank, std::int64_t compute_end, std::int64_t ar_end, int corr) {
    return fmt::format(
        "  stream id={0} rank={0} role=compute\n"
        "  kernel rank={0} stream={0} start=0 end={1} corr={3} name=gemm_r{0}\n"
        "  kernel rank={0} stream={0} start={1} end={2} corr={4} name=ncclDevKernel_AllReduce_Sum_f32_RING_LL\n",
        rank, compute_end, ar_end, corr, corr + 1);
  };
  std::string t = r(slow, 100'000, 120'000, 10 * slow + 1) + r(fast, 10'000, 121'000, 10 * fast + 1);
  if (described)  // Kineto's record of the NCCL call: paired by process group and sequence number
    for (int rank : {slow, fast})
      t += fmt::format("  collective rank={} start=0 end=1 name=allreduce group_size=2 corr={} process_group=7 seq=3\n",
                       rank, 10 * rank + 2);
  return t;
}

void expect_slow_rank_on_path(const Trace& trace, int slow, int fast) {
  const auto x = critical_path_across_ranks(trace);
  EXPECT_EQ(x.ranks, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(x.collective_instances, 1);
  EXPECT_EQ(x.collective_edges, 3);
  EXPECT_EQ(x.waiting_ns, 90'000);
  EXPECT_EQ(x.path.rank, -1);
  EXPECT_EQ(x.path.length_ns, 121'000);
  EXPECT_EQ(x.path.start_ns, 0);
  EXPECT_EQ(x.path.end_ns, 121'000);
  EXPECT_EQ(cat(x.path, PathCategory::kKernelCompute), 100'000);
  EXPECT_EQ(cat(x.path, PathCategory::kKernelCommunication), 21'000);
  EXPECT_EQ(x.crossings, 1);
  std::vector<std::pair<std::int32_t, std::int64_t>> by_rank{{0, 0}, {1, 0}};
  by_rank[static_cast<std::size_t>(slow)].second = 100'000;
  by_rank[static_cast<std::size_t>(fast)].second = 21'000;
  EXPECT_EQ(x.rank_ns, by_rank);
  ASSERT_EQ(x.path.events.size(), 2u);
  EXPECT_EQ(x.path.events[0].name, fmt::format("gemm_r{}", slow));
  EXPECT_EQ(x.path.events[0].rank, slow);
  EXPECT_EQ(x.path.events[0].path_ns, 100'000);
  EXPECT_EQ(x.path.events[1].name, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(x.path.events[1].rank, fast);
  EXPECT_EQ(x.path.events[1].category, PathCategory::kKernelCommunication);
  EXPECT_EQ(x.path.events[1].path_ns, 21'000);
  // The per-rank paths are unchanged: each rank on its own.
  const auto per_rank = critical_paths(trace);
  ASSERT_EQ(per_rank.size(), 2u);
  EXPECT_EQ(per_rank[static_cast<std::size_t>(slow)].length_ns, 120'000);
  EXPECT_EQ(per_rank[static_cast<std::size_t>(fast)].length_ns, 121'000);
  EXPECT_EQ(cat(per_rank[static_cast<std::size_t>(fast)], PathCategory::kKernelCommunication), 111'000);
}

TEST(CriticalPathAcrossRanks, TheSlowRanksComputeThenTheCollective) {
  expect_slow_rank_on_path(testing::load_text_trace("cp-x01.db", two_ranks(0, 1, false)), 0, 1);
}

TEST(CriticalPathAcrossRanks, SwappingTheRanksComputeSwapsThePath) {
  expect_slow_rank_on_path(testing::load_text_trace("cp-x10.db", two_ranks(1, 0, false)), 1, 0);
}

TEST(CriticalPathAcrossRanks, CollectivesPairedBySequenceNumber) {
  expect_slow_rank_on_path(testing::load_text_trace("cp-xseq.db", two_ranks(1, 0, true)), 1, 0);
}

// Without a shared collective the graphs stay apart: kGpuBound on rank 0 and
// kCpuBound on rank 1, both on thread 1 (threads of different ranks are not
// one call stack) -> the longer of the two, 1930 ns, all on rank 1.
TEST(CriticalPathAcrossRanks, NoCollectiveTheLongerRank) {
  std::string one(kCpuBound);
  for (auto [from, to] : {std::pair<std::string, std::string>{"rank=0", "rank=1"}, {"stream id=0", "stream id=5"},
                          {"stream=0", "stream=5"}})
    for (auto at = one.find(from); at != std::string::npos; at = one.find(from, at + to.size()))
      one.replace(at, from.size(), to);
  const auto trace = testing::load_text_trace("cp-xnone.db", std::string(kGpuBound) + one);
  const auto x = critical_path_across_ranks(trace);
  EXPECT_EQ(x.collective_instances, 0);
  EXPECT_EQ(x.path.length_ns, 1930);
  EXPECT_EQ(cat(x.path, PathCategory::kCpuOp), 1800);
  EXPECT_EQ(x.crossings, 0);
  EXPECT_EQ(x.rank_ns, (std::vector<std::pair<std::int32_t, std::int64_t>>{{0, 0}, {1, 1930}}));
}

TEST(CriticalPathAcrossRanks, ReportSectionsInEveryFormat) {
  const auto trace = testing::load_text_trace("cp-xreport.db", two_ranks(0, 1, false));
  const auto a = analyze(trace);
  ASSERT_TRUE(a.critical_path_across_ranks.has_value());
  const auto j = report_json(trace, a, {});
  EXPECT_EQ(testing::schema_errors(j, kCpReportSchema), std::vector<std::string>{});
  const auto& x = j["critical_path"]["across_ranks"];
  EXPECT_EQ(x["length_ns"], 121'000);
  EXPECT_EQ(x["crossings"], 1);
  EXPECT_EQ(x["events"][0]["rank"], 0);
  EXPECT_EQ(x["events"][1]["rank"], 1);
  EXPECT_EQ(x["rank_ns"][0]["ns"], 100'000);
  std::ostringstream text, md, html;
  write_text_report(text, trace, a, {});
  write_markdown_report(md, trace, a, {});
  write_html_report(html, trace, a, {});
  for (const auto* out : {&text, &md, &html}) {
    EXPECT_NE(out->str().find("The critical path across ranks"), std::string::npos) << out->str();
    EXPECT_NE(out->str().find("changes rank 1 times"), std::string::npos);
  }
  // One rank: no path across ranks.
  const auto single = testing::load_text_trace("cp-xsingle.db", kGpuBound);
  const auto b = analyze(single);
  EXPECT_FALSE(b.critical_path_across_ranks.has_value());
  EXPECT_FALSE(report_json(single, b, {})["critical_path"].contains("across_ranks"));
}

// The CUDA runtime's lock is a process's: two ranks' calls that overlap in
// time do not close each other. Rank 0: cudaLaunchKernel [0, 100); rank 1:
// cudaLaunchKernel [10, 50), no GPU work. Each call's start -> end is its
// span: rank 0's path 100 (cpu_op), rank 1's 40. Across ranks (no
// collective joins them) the longest is rank 0's, 100, all of it rank 0's.
// (Had rank 1's end closed rank 0's call, rank 0's call would have lost its
// span and the path across ranks would be rank 1's 40.)
TEST(CriticalPathAcrossRanks, RuntimeLockIsPerRank) {
  const auto trace = testing::load_text_trace("cp-xlock.db", R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=1 role=compute
  api rank=0 thread=1 start=0 end=100 corr=1
  api rank=1 thread=7 start=10 end=50 corr=1
)");
  const auto x = critical_path_across_ranks(trace);
  EXPECT_EQ(x.path.length_ns, 100);
  EXPECT_EQ(cat(x.path, PathCategory::kCpuOp), 100);
  EXPECT_EQ(x.rank_ns, (std::vector<std::pair<std::int32_t, std::int64_t>>{{0, 100}, {1, 0}}));
  const auto per_rank = critical_paths(trace);
  ASSERT_EQ(per_rank.size(), 2u);
  EXPECT_EQ(per_rank[0].length_ns, 100);
  EXPECT_EQ(per_rank[1].length_ns, 40);
}

void expect_same_path(const RankCriticalPath& a, const RankCriticalPath& b, const std::string& what) {
  SCOPED_TRACE(what + ", rank " + std::to_string(a.rank));
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.length_ns, b.length_ns);
  EXPECT_EQ(a.start_ns, b.start_ns);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_EQ(a.window_start_ns, b.window_start_ns);
  EXPECT_EQ(a.window_end_ns, b.window_end_ns);
  EXPECT_EQ(a.nodes, b.nodes);
  EXPECT_EQ(a.edges, b.edges);
  EXPECT_EQ(a.path_edges, b.path_edges);
  EXPECT_EQ(a.path_event_count, b.path_event_count);
  EXPECT_EQ(a.category_ns, b.category_ns);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const auto &x = a.events[i], &y = b.events[i];
    EXPECT_EQ(std::tie(x.kind, x.name, x.start_ns, x.end_ns, x.stream, x.native_stream, x.thread, x.correlation_id,
                       x.rank, x.category, x.path_ns),
              std::tie(y.kind, y.name, y.start_ns, y.end_ns, y.stream, y.native_stream, y.thread, y.correlation_id,
                       y.rank, y.category, y.path_ns))
        << "event " << i;
  }
}

// critical_paths_and_across: each rank's path from the graph across ranks
// is the one the rank's own graph gives, event for event (ties included),
// and the path across ranks is critical_path_across_ranks'. On two real
// PyTorch-profiler ranks read as one run (HTA's sampled ranks), on the
// H200 recordings with collectives between ranks (whose participants' own
// edges the graph across ranks shortens), and on the two-rank trace above;
// the ranks' paths read on two threads as on one.
TEST(CriticalPathAcrossRanks, EachRanksPathFromTheOneGraph) {
  const auto r0 = testing::shared_data("kineto/hta-sampled_rank-0.json.gz");
  const auto r1 = testing::shared_data("kineto/hta-sampled_rank-1.json.gz");
  MOETRACE_NEED_SHARED(r0);
  MOETRACE_NEED_SHARED(r1);
  std::vector<std::pair<std::string, Trace>> traces;
  traces.emplace_back("hta sampled ranks", load_run({r0, r1}));
  traces.emplace_back("two ranks", testing::load_text_trace("cp-xsame.db", two_ranks(0, 1, false)));
  for (const char* gz : {"dpmoe.db.gz", "ppmoe.db.gz", "fastermoe.db.gz"}) {
    const std::string path = std::string(MOETRACE_GPU_FIXTURES_DIR) + "/" + gz;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    traces.emplace_back(gz, load_trace(testing::inflated(path, std::string("cp_same_") + gz)));
  }
  for (const auto& [name, t] : traces) {
    const auto calls = collective_calls(t);
    const auto both = critical_paths_and_across(t, calls);
    const auto alone = critical_paths(t);
    ASSERT_EQ(both.ranks.size(), alone.size()) << name;
    ASSERT_GE(alone.size(), 2u) << name;
    for (std::size_t i = 0; i < alone.size(); ++i) expect_same_path(both.ranks[i], alone[i], name);
    const auto two = critical_paths_and_across(t, calls, 20, 2);
    ASSERT_EQ(two.ranks.size(), alone.size()) << name;
    for (std::size_t i = 0; i < alone.size(); ++i) expect_same_path(two.ranks[i], alone[i], name + " (2 threads)");
    const auto across = critical_path_across_ranks(t, calls);
    expect_same_path(both.across.path, across.path, name + " across");
    EXPECT_EQ(both.across.crossings, across.crossings) << name;
    EXPECT_EQ(both.across.rank_ns, across.rank_ns) << name;
    EXPECT_EQ(both.across.waiting_ns, across.waiting_ns) << name;
  }
}

}  // namespace
}  // namespace moetrace::analyzer
