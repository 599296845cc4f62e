// Golden breakdowns of small hand-built traces. Every expected number is
// derived by hand in the comment above it.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "expect_named.h"
#include "loaded_trace.h"

namespace moetrace::analyzer {
namespace {

Breakdown breakdown_of(const std::string& name, std::string_view text) {
  return compute_breakdown(testing::load_text_trace(name, text));
}

const LayerRow& row(const Breakdown& b, int rank, int layer, int iteration, Phase phase) {
  for (const auto& r : b.rows)
    if (r.rank == rank && r.layer == layer && r.iteration == iteration && r.phase == phase) return r;
  throw std::runtime_error("no such row");
}

constexpr auto A2A = Category::kAllToAll;

// What a test expects of a TimeSplit (ns): the fields it names, and the
// time of each category in `at` (expect_named.h).
struct SplitWant {
  std::optional<std::int64_t> window{}, busy{}, idle{}, comm{}, hidden{};
  std::vector<std::pair<Category, std::int64_t>> at{};
};
void expect_split(const TimeSplit& t, const SplitWant& w) {
  testing::expect_named(w.window, t.window_ns, "window_ns");
  testing::expect_named(w.busy, t.busy_ns, "busy_ns");
  testing::expect_named(w.idle, t.idle_ns, "idle_ns");
  testing::expect_named(w.comm, t.comm_ns, "comm_ns");
  testing::expect_named(w.hidden, t.comm_hidden_ns, "comm_hidden_ns");
  for (const auto& [c, ns] : w.at) EXPECT_EQ(t.at(c), ns) << "category " << static_cast<int>(c);
}

// One MoE layer on one rank, window [0, 1000):
//   gate      [0, 100)    compute   gating 100
//   dispatch  [100, 300)  comm      all-to-all
//   expert    [300, 700)  compute   expert 400
//   combine   [600, 800)  comm      all-to-all, overlaps expert on [600, 700)
//   unpermute [800, 1000) compute   other compute 200
// all-to-all = 200 + 200 = 400 -> 40 % of the 1000 ns layer.
// communication = 400, hidden under the expert = 100 -> a quarter hidden.
constexpr std::string_view kFortyPercent = testing::kFortyPercentLayer;

TEST(Breakdown, AllToAllIsFortyPercentAndAQuarterOfCommIsHidden) {
  const auto b = breakdown_of("forty.db", kFortyPercent);
  ASSERT_EQ(b.rows.size(), 1u);
  const auto& t = row(b, 0, 0, 0, Phase::kForward).t;
  expect_split(t, {.window = 1000,
                   .comm = 400,
                   .hidden = 100,
                   .at = {{A2A, 400},
                          {Category::kExpertCompute, 400},
                          {Category::kGating, 100},
                          {Category::kOtherCompute, 200},
                          {Category::kAllReduce, 0}}});
  EXPECT_DOUBLE_EQ(t.all_to_all_share(), 0.40);
  EXPECT_EQ(t.comm_exposed_ns, 300);
  EXPECT_DOUBLE_EQ(t.hidden_fraction(), 0.25);
  // Exclusive: all-to-all alone on [100,300) and [700,800); expert alone on [300,600).
  EXPECT_EQ(t.exclusive_ns[static_cast<std::size_t>(A2A)], 300);
  EXPECT_EQ(t.exclusive_ns[static_cast<std::size_t>(Category::kExpertCompute)], 300);
  expect_split(t, {.busy = 1000, .idle = 0});
  ASSERT_EQ(b.layers.size(), 1u);
  EXPECT_DOUBLE_EQ(b.layers[0].total.all_to_all_share(), 0.40);
}

// The same layer after 500 ns of attention (not part of the MoE layer), with
// the unpermute 100 ns late: layer window [500, 1600) = 1100 ns with 100 ns
// idle ([1300, 1400)); iteration window [0, 1600).
//   a2a share of the layer     = 400 / 1100
//   a2a share of the iteration = 400 / 1600 = 25 %
//   MoE share of the iteration = 1100 / 1600
TEST(Breakdown, IdleTimeAndSharesOfTheIteration) {
  const auto b = breakdown_of("iteration.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=0 kind=attention iteration=0 start=0 end=500
    op rank=0 stream=0 kind=gate layer=0 iteration=0 start=500 end=600
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=600 end=800
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=800 end=1200
    op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=1100 end=1300
    op rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=1400 end=1600
  )");
  const auto& t = row(b, 0, 0, 0, Phase::kForward).t;
  expect_split(t, {.window = 1100, .idle = 100});
  EXPECT_DOUBLE_EQ(t.all_to_all_share(), 400.0 / 1100.0);
  ASSERT_EQ(b.iterations.size(), 1u);
  EXPECT_EQ(b.iterations[0].t.window_ns, 1600);
  EXPECT_EQ(b.iterations[0].moe_layer_ns, 1100);
  EXPECT_EQ(b.iterations[0].t.at(Category::kOtherCompute), 500 + 200);
  EXPECT_DOUBLE_EQ(b.all_to_all_share_of_iteration(), 0.25);
  EXPECT_DOUBLE_EQ(b.moe_share_of_iteration(), 1100.0 / 1600.0);
  EXPECT_DOUBLE_EQ(b.all_to_all_share_of_moe(), 400.0 / 1100.0);
}

// Overlapping layer windows count once in the iteration's MoE share: layer
// 0's offload [300, 600) on the copy stream runs into layer 1 [400, 1000).
// Windows: layer 0 = [0, 600) = 600, layer 1 = [400, 1000) = 600; their sum
// (1200) exceeds the 1000 ns iteration, their union is [0, 1000) = 1000.
TEST(Breakdown, OverlappingLayerWindowsCountOnceInTheMoeShare) {
  const auto b = breakdown_of("overlap.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    stream id=2 rank=0 role=copy
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=300
    op rank=0 stream=2 kind=offload layer=0 iteration=0 start=300 end=600
    op rank=0 stream=0 kind=expert_ffn layer=1 iteration=0 start=400 end=1000
  )");
  EXPECT_EQ(row(b, 0, 0, 0, Phase::kForward).t.window_ns, 600);
  EXPECT_EQ(row(b, 0, 1, 0, Phase::kForward).t.window_ns, 600);
  ASSERT_EQ(b.iterations.size(), 1u);
  EXPECT_EQ(b.iterations[0].t.window_ns, 1000);
  EXPECT_EQ(b.iterations[0].moe_layer_ns, 1000);
  EXPECT_DOUBLE_EQ(b.moe_share_of_iteration(), 1.0);
  EXPECT_EQ(b.moe_total.window_ns, 1200);
}

// The forty-percent layer's gate, dispatch and expert, the expert's two
// kernels on [300, 400) and [500, 700).
constexpr std::string_view kExpertKernels = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
  op id=2 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=100 end=300
  op id=3 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=300 end=700
  kernel rank=0 stream=0 start=300 end=400 op=3 name=gemm1
  kernel rank=0 stream=0 start=500 end=700 op=3 name=gemm2
)";

// GPU time, not the op's range: the expert op spans [300, 700) but its two
// kernels ran on [300, 400) and [500, 700). Expert time is 300, and [400, 500)
// is idle (nothing else runs then).
TEST(Breakdown, AttributedKernelsReplaceTheOpRange) {
  const auto b = breakdown_of("kernels.db", kExpertKernels);
  const auto& t = row(b, 0, 0, 0, Phase::kForward).t;
  expect_split(t, {.window = 700, .idle = 100, .at = {{Category::kExpertCompute, 300}}});
  EXPECT_EQ(b.ranks[0].unattributed_ns, 0);
}

// Each rank's time is its own, with the ranks' rows interleaved and their
// work at the same times. Rank 0: expert [0, 300), gate [300, 350) (layer
// 1): span and busy 350, no communication, no overlap between its rows.
// Rank 1: expert [0, 400) (layer 0), dispatch [200, 600) (layer 1): span
// [0, 600), busy 600, communication 400 of which [200, 400) hidden by the
// expert: 200; its two rows overlap each other on [200, 400): 200 each.
// Mixed with rank 0's, rank 1 would be busy 600 still, but rank 0's rows
// would overlap rank 1's work.
TEST(Breakdown, EachRanksTimeIsItsOwnWithTheRanksRowsInterleaved) {
  const auto b = breakdown_of("two_ranks.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=1 role=compute
    stream id=2 rank=1 role=comm
    op rank=1 stream=1 kind=expert_ffn layer=0 iteration=0 start=0 end=400
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=0 end=300
    op rank=1 stream=2 kind=dispatch_all_to_all layer=1 iteration=0 start=200 end=600
    op rank=0 stream=0 kind=gate layer=1 iteration=0 start=300 end=350
  )");
  ASSERT_EQ(b.ranks.size(), 2u);
  EXPECT_EQ(b.ranks[0].rank, 0);
  expect_split(b.ranks[0].t, {.window = 350, .busy = 350, .idle = 0, .comm = 0});
  EXPECT_EQ(b.ranks[1].rank, 1);
  expect_split(b.ranks[1].t, {.window = 600, .busy = 600, .idle = 0, .comm = 400, .hidden = 200});
  EXPECT_EQ(row(b, 0, 0, 0, Phase::kForward).t.overlap_ns, 0);
  EXPECT_EQ(row(b, 0, 1, 0, Phase::kForward).t.overlap_ns, 0);
  EXPECT_EQ(row(b, 1, 0, 0, Phase::kForward).t.overlap_ns, 200);
  EXPECT_EQ(row(b, 1, 1, 0, Phase::kForward).t.overlap_ns, 200);
}

// The rows come out in one order whatever order the ranks' ops were
// recorded in: MoE-layer rows by (layer, iteration, phase, rank), iteration
// rows by (iteration, rank), layer windows by (layer, rank, iteration). The
// ops below are listed rank 1 first, the backward before the forward, layer
// 1 before layer 0; each row's window is its op's own length, so a row
// moved without its numbers shows.
TEST(Breakdown, RowsAreOrderedAcrossRanksWhateverTheOpsOrder) {
  const auto b = breakdown_of("row_order.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=1 role=compute
    op rank=1 stream=1 kind=expert_ffn layer=1 iteration=1 phase=bwd start=900 end=910
    op rank=1 stream=1 kind=expert_ffn layer=0 iteration=0 start=0 end=20
    op rank=1 stream=1 kind=expert_ffn layer=1 iteration=0 start=100 end=130
    op rank=1 stream=1 kind=expert_ffn layer=0 iteration=1 start=500 end=540
    op rank=0 stream=0 kind=expert_ffn layer=1 iteration=0 phase=bwd start=200 end=250
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=1 start=600 end=660
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=0 end=70
  )");
  struct Key {
    int layer, iteration;
    Phase phase;
    int rank;
    std::int64_t window;
    bool operator==(const Key&) const = default;
  };
  std::vector<Key> rows;
  for (const auto& r : b.rows) rows.push_back({r.layer, r.iteration, r.phase, r.rank, r.t.window_ns});
  const auto F = Phase::kForward, B = Phase::kBackward;
  EXPECT_EQ(rows, (std::vector<Key>{{0, 0, F, 0, 70},
                                    {0, 0, F, 1, 20},
                                    {0, 1, F, 0, 60},
                                    {0, 1, F, 1, 40},
                                    {1, 0, F, 1, 30},
                                    {1, 0, B, 0, 50},
                                    {1, 1, B, 1, 10}}));
  std::vector<std::pair<int, int>> iterations;  // (iteration, rank)
  for (const auto& r : b.iterations) iterations.push_back({r.iteration, r.rank});
  EXPECT_EQ(iterations, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  std::vector<std::tuple<int, int, int, std::int64_t>> windows;  // (layer, rank, iteration, ns)
  for (const auto& w : b.layer_windows) windows.push_back({w.layer, w.rank, w.iteration, w.ns});
  EXPECT_EQ(windows, (std::vector<std::tuple<int, int, int, std::int64_t>>{
                         {0, 0, 0, 70}, {0, 0, 1, 60}, {0, 1, 0, 20}, {0, 1, 1, 40}, {1, 0, 0, 50}, {1, 1, 0, 30},
                         {1, 1, 1, 10}}));
}

// Communication of layer 0 hidden by computation of another op (here the
// attention of the same iteration on the same rank) counts as hidden.
// dispatch [0, 200) overlaps attention [100, 300): hidden 100 of 200.
TEST(Breakdown, HiddenByAnyComputationOnTheRank) {
  const auto b = breakdown_of("hidden.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=200
    op rank=0 stream=0 kind=attention iteration=0 start=100 end=300
  )");
  const auto& t = row(b, 0, 0, 0, Phase::kForward).t;
  expect_split(t, {.window = 200, .comm = 200, .hidden = 100});
}

// Two micro-batches of layer 0 (1F1B) with another layer's work between
// them: the layer's window is the union of the per-micro-batch spans,
// [0, 100) and [300, 400) = 200 ns, not the 400 ns envelope.
TEST(Breakdown, MicroBatchWindowsAreUnited) {
  const auto b = breakdown_of("microbatch.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 micro_batch=0 start=0 end=100
    op rank=0 stream=0 kind=expert_ffn layer=1 iteration=0 micro_batch=0 start=100 end=300
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 micro_batch=1 start=300 end=400
  )");
  const auto& t = row(b, 0, 0, 0, Phase::kForward).t;
  expect_split(t, {.window = 200, .at = {{A2A, 200}}});
  EXPECT_DOUBLE_EQ(t.all_to_all_share(), 1.0);
}

// Forward and backward rows, two ranks; the per-layer summary sums them.
// rank 0: fwd window 1000 (the 40 % layer), bwd window [2000, 3000) with a
//         2x expert: a2a 400 of 1000 again.
// rank 1: fwd only, a2a [0, 600) on a 600 ns window (slowest? no: 600 < 2000).
// Layer 0 total: windows 1000 + 1000 + 600 = 2600, a2a 400 + 400 + 600 = 1400.
// Per rank-iteration: rank 0 = 2000, rank 1 = 600 -> mean 1300, max 2000 on rank 0.
TEST(Breakdown, LayerSummaryOverRanksAndPhases) {
  // The forty-percent layer's forward, then its backward and a second rank.
  const auto b = breakdown_of("summary.db", std::string(kFortyPercent) + R"(
    stream id=2 rank=1 role=comm
    op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 phase=bwd start=2000 end=2200
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=bwd start=2200 end=2800
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=bwd start=2800 end=3000
    op rank=1 stream=2 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=600
  )");
  ASSERT_EQ(b.layers.size(), 1u);
  const auto& l = b.layers[0];
  EXPECT_EQ(l.ranks, 2);
  EXPECT_EQ(l.iterations, 1);
  expect_split(l.total, {.window = 2600, .at = {{A2A, 1400}}});
  expect_split(l.forward, {.window = 1600});
  expect_split(l.backward, {.window = 1000});
  EXPECT_DOUBLE_EQ(l.backward.all_to_all_share(), 0.4);
  EXPECT_EQ(l.mean_window_ns, 1300);
  EXPECT_EQ(l.max_window_ns, 2000);
  EXPECT_EQ(l.slowest_rank, 0);
}

// No op ranges (e.g. a foreign trace): kernels are classified by name and
// summed per rank. NCCL all-to-all [0, 300), GEMM [200, 1000) on another
// stream: window 1000, a2a 300, hidden 100.
TEST(Breakdown, WithoutOpRangesKernelsAreClassifiedByName) {
  const auto b = breakdown_of("noops.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    kernel rank=0 stream=1 start=0 end=300 name=ncclDevKernel_AllToAll_RING_LL
    kernel rank=0 stream=0 start=200 end=1000 name=sm90_gemm
  )");
  EXPECT_FALSE(b.has_op_ranges);
  EXPECT_TRUE(b.rows.empty());
  ASSERT_EQ(b.ranks.size(), 1u);
  const auto& t = b.ranks[0].t;
  expect_split(t, {.window = 1000, .hidden = 100, .at = {{A2A, 300}, {Category::kOtherCompute, 800}}});
  EXPECT_EQ(b.ranks[0].unattributed_ns, 1000);
}


// The expert's kernels (kExpertKernels) with the combine [600, 800), an
// NCCL all-reduce kernel no op claims [640, 700) and a gate on rank 1 [0, 100),
// queried over [250, 650): dispatch [250, 300) 50, expert [300, 650) 350 (its
// kernels [300, 400) and [500, 650): 250), combine [600, 650) 50 under the
// expert; the all-reduce kernel adds 10 of all-reduce, inside the combine.
// Communication = [250, 300) + [600, 650) = 100, hidden under gemm2 50. Busy =
// [250, 400) + [500, 650) = 300, idle 100. Rank 1 has nothing in the window:
// all idle.
TEST(Breakdown, WindowQueryFollowsTheSameRules) {
  const auto trace = testing::load_text_trace("window.db", std::string(kExpertKernels) + R"(
    op id=4 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=600 end=800
    kernel rank=0 stream=1 start=640 end=700 name=ncclDevKernel_AllReduce_Sum
    stream id=2 rank=1 role=compute
    op id=5 rank=1 stream=2 kind=gate layer=0 iteration=0 start=0 end=100
  )");
  const auto w = breakdown_in_window(trace, 650, 250);  // either order
  EXPECT_EQ(w.t0_ns, 250);
  EXPECT_EQ(w.length(), 400);
  ASSERT_EQ(w.ranks.size(), 2u);
  const auto& t = w.ranks[0].t;
  expect_split(t, {.window = 400,
                   .busy = 300,
                   .idle = 100,
                   .comm = 100,
                   .hidden = 50,
                   .at = {{A2A, 100}, {Category::kExpertCompute, 250}, {Category::kAllReduce, 10}}});
  EXPECT_EQ(w.ranks[0].unattributed_ns, 10);
  EXPECT_EQ(w.ranks[0].events, 5);  // dispatch, two kernels, combine, the all-reduce kernel
  EXPECT_EQ(w.ranks[1].rank, 1);
  EXPECT_EQ(w.ranks[1].t.busy_ns, 0);
  EXPECT_EQ(w.ranks[1].t.idle_ns, 400);
  EXPECT_EQ(w.total.t.window_ns, 800);
  EXPECT_EQ(w.total.t.busy_ns, 300);
  // Over a rank's whole span the query is the breakdown's per-rank split.
  const auto b = compute_breakdown(trace);
  const auto whole = breakdown_in_window(trace, 0, 800);
  EXPECT_EQ(whole.ranks[0].t.category_ns, b.ranks[0].t.category_ns);
  EXPECT_EQ(whole.ranks[0].t.exclusive_ns, b.ranks[0].t.exclusive_ns);
  EXPECT_EQ(whole.ranks[0].t.comm_hidden_ns, b.ranks[0].t.comm_hidden_ns);
  EXPECT_EQ(whole.ranks[0].t.idle_ns, b.ranks[0].t.idle_ns);
  EXPECT_EQ(whole.ranks[0].unattributed_ns, b.ranks[0].unattributed_ns);
}

// The window of the per-rank rows. Three iterations of work on one rank:
//   it 0: expert [0, 100), dispatch [50, 150)      (50 hidden of 100)
//   it 1: expert [300, 400), dispatch [400, 500)   (none hidden)
//   it 2: expert [700, 900)
//   no iteration: a kernel no op claims [1000, 1100)
// span:           [0, 1100) = 1100, busy 150 + 200 + 200 + 100 = 650, idle 450
// steps:          [0, 900) = 900, busy 550, idle 350
// steps-but-last: [0, 500) = 500, busy 350, idle 150; comm 200, hidden 50
TEST(Breakdown, RankWindowBySteps) {
  const auto trace = testing::load_text_trace("rank_window.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=0 end=100
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=50 end=150
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=1 start=300 end=400
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=1 start=400 end=500
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=2 start=700 end=900
    kernel rank=0 stream=0 start=1000 end=1100 name=elementwise_kernel
  )");
  const auto span = compute_breakdown(trace);
  EXPECT_EQ(span.rank_window, RankWindow::kSpan);
  ASSERT_EQ(span.ranks.size(), 1u);
  expect_split(span.ranks[0].t, {.window = 1100, .idle = 450});
  const auto steps = compute_breakdown(trace, {RankWindow::kSteps});
  ASSERT_EQ(steps.ranks.size(), 1u);
  expect_split(steps.ranks[0].t, {.window = 900, .idle = 350});
  const auto but_last = compute_breakdown(trace, {RankWindow::kStepsButLast});
  EXPECT_EQ(but_last.rank_window, RankWindow::kStepsButLast);
  ASSERT_EQ(but_last.ranks.size(), 1u);
  const auto& t = but_last.ranks[0].t;
  expect_split(t, {.window = 500, .busy = 350, .idle = 150, .comm = 200, .hidden = 50});
  // The layer rows keep every iteration.
  EXPECT_EQ(but_last.rows.size(), span.rows.size());
  EXPECT_EQ(parse_rank_window("steps-but-last"), RankWindow::kStepsButLast);
  EXPECT_EQ(parse_rank_window("Steps"), std::nullopt);
}

// PyTorch-profiler traces (two or more ProfilerStep ranges): the steps'
// work is what their host ranges launched, as HTA selects it. Steps at
// [0, 1000) and [1000, 2000) on the host; kernels launched at 100 (before
// the last step), 1100 (in it) and 2500 (after both), and one without a
// launching call:
//   steps-but-last: the kernel launched at 100 alone, [200, 400)
//   steps:          the kernels launched at 100 and 1100, [200, 1500), busy 200 + 300
TEST(Breakdown, RankWindowByProfilerSteps) {
  const auto trace = testing::load_text_trace("profiler_steps.db", R"(
    stream id=0 rank=0 role=compute
    nvtx rank=0 start=0 end=1000 domain=pytorch name=ProfilerStep#7
    nvtx rank=0 start=1000 end=2000 domain=pytorch name=ProfilerStep#8
    api rank=0 start=100 end=110 corr=1
    api rank=0 start=1100 end=1110 corr=2
    api rank=0 start=2500 end=2510 corr=3
    kernel rank=0 stream=0 start=200 end=400 corr=1 name=gemm
    kernel rank=0 stream=0 start=1200 end=1500 corr=2 name=gemm
    kernel rank=0 stream=0 start=2600 end=2700 corr=3 name=gemm
    kernel rank=0 stream=0 start=3000 end=3100 name=gemm
  )");
  const auto but_last = compute_breakdown(trace, {RankWindow::kStepsButLast});
  ASSERT_EQ(but_last.ranks.size(), 1u);
  expect_split(but_last.ranks[0].t, {.window = 200, .idle = 0});
  const auto steps = compute_breakdown(trace, {RankWindow::kSteps});
  ASSERT_EQ(steps.ranks.size(), 1u);
  expect_split(steps.ranks[0].t, {.window = 1300, .busy = 500});
  EXPECT_EQ(compute_breakdown(trace).ranks[0].t.window_ns, 2900);
}

}  // namespace
}  // namespace moetrace::analyzer
