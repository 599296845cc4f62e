// `moetrace diff`: metrics of two hand-built traces, threshold parsing and
// evaluation. Expected numbers are derived by hand in the comments.
#include <gtest/gtest.h>

#include "moetrace/analyzer/diff.h"
#include "moetrace/schema/error.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

// One MoE layer on one rank, all-to-all 400 of 1000 ns (40 %), as in the
// breakdown tests; the new trace's combine is 200 ns longer: window 1200,
// all-to-all 600 -> 50 %.
std::string layer(int combine_end, int unpermute_end) {
  return "stream id=0 rank=0 role=compute\nstream id=1 rank=0 role=comm\n"
         "op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100\n"
         "op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=100 end=300\n"
         "op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=300 end=700\n"
         "op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=600 end=" +
         std::to_string(combine_end) + "\n" + "op rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=" +
         std::to_string(combine_end) + " end=" + std::to_string(unpermute_end) + "\n";
}

struct Pair {
  Trace base, next;
  Analyses ba, na;
};

Pair pair_of(const std::string& base_text, const std::string& new_text, const LoadOptions& options = {}) {
  const auto bp = testing::temp_path("diff-base.db"), np = testing::temp_path("diff-new.db");
  testing::write_text_trace(bp, base_text);
  testing::write_text_trace(np, new_text);
  Pair p{load_trace(bp, options), load_trace(np, options), {}, {}};
  p.ba = analyze(p.base);
  p.na = analyze(p.next);
  return p;
}

const DiffEntry& entry(const TraceDiff& d, std::string_view name) {
  for (const auto& e : d.entries)
    if (e.name == name) return e;
  throw std::runtime_error("no metric " + std::string(name));
}

TEST(Diff, SharesTimesAndOpKinds) {
  auto p = pair_of(layer(800, 1000), layer(1000, 1200));
  const auto d = diff_traces(p.base, p.ba, p.next, p.na, {});
  const auto& a2a = entry(d, "a2a_share");
  EXPECT_DOUBLE_EQ(*a2a.base, 0.4);
  EXPECT_DOUBLE_EQ(*a2a.next, 0.5);
  // Relative change (0.5 - 0.4) / 0.4 = +25 %; absolute +0.1.
  EXPECT_NEAR(*a2a.relative_change(), 0.25, 1e-12);
  EXPECT_NEAR(*a2a.change(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(*entry(d, "layer0.time").base, 1000);
  EXPECT_DOUBLE_EQ(*entry(d, "layer0.time").next, 1200);
  // Combine ops: 200 ns -> 400 ns each.
  EXPECT_DOUBLE_EQ(*entry(d, "op.combine_all_to_all.time").base, 200);
  EXPECT_DOUBLE_EQ(*entry(d, "op.combine_all_to_all.time").next, 400);
  EXPECT_DOUBLE_EQ(*entry(d, "op.gate.count").next, 1);
}

// Traces without op ranges (imports) still diff over the whole run, kernels
// classified by name. Base: NCCL all-to-all [0, 300) beside a grouped GEMM
// [200, 1000): span 1000, a2a 300 (30 %), expert 800, comm hidden 100 of 300.
// New: the all-to-all grows to [0, 500): a2a 50 %, hidden 300 of 500.
TEST(Diff, TracesWithoutOpRangesDiffOverTheWholeRun) {
  auto text = [](int a2a_end) {
    return "stream id=0 rank=0 role=compute\nstream id=1 rank=0 role=comm\n"
           "kernel rank=0 stream=1 start=0 end=" + std::to_string(a2a_end) +
           " name=ncclDevKernel_SendRecv\n"
           "kernel rank=0 stream=0 start=200 end=1000 name=cutlass_GemmGrouped_kernel\n";
  };
  // Run-level numbers only: MoE recognition (which would take the grouped
  // GEMM and the all-to-all for one MoE layer) is off.
  LoadOptions plain;
  plain.recognize = false;
  auto p = pair_of(text(300), text(500), plain);
  const auto d = diff_traces(p.base, p.ba, p.next, p.na, {});
  EXPECT_DOUBLE_EQ(*entry(d, "run_time").base, 1000);
  EXPECT_DOUBLE_EQ(*entry(d, "run_a2a_share").base, 0.3);
  EXPECT_DOUBLE_EQ(*entry(d, "run_a2a_share").next, 0.5);
  EXPECT_DOUBLE_EQ(*entry(d, "run_expert_share").base, 0.8);
  EXPECT_DOUBLE_EQ(*entry(d, "run_comm_share").next, 0.5);
  EXPECT_DOUBLE_EQ(*entry(d, "run_hidden_fraction").base, 100.0 / 300.0);
  EXPECT_DOUBLE_EQ(*entry(d, "run_hidden_fraction").next, 300.0 / 500.0);
  EXPECT_DOUBLE_EQ(*entry(d, "run_idle_share").base, 0.0);
  EXPECT_THROW(entry(d, "a2a_share"), std::runtime_error);  // no MoE layers: no MoE shares
  const auto gated = diff_traces(p.base, p.ba, p.next, p.na, {parse_threshold("run_a2a_share > +10pp")});
  ASSERT_EQ(gated.thresholds.size(), 1u);
  EXPECT_TRUE(gated.thresholds[0].violated);
}

TEST(Diff, ThresholdsRelativeAbsoluteAndOnTheNewValue) {
  auto p = pair_of(layer(800, 1000), layer(1000, 1200));
  const std::vector<Threshold> t{
      parse_threshold("a2a_share > +5%"),         // +25 % relative: violated
      parse_threshold("a2a_share > +30%"),        // +25 % is not above +30 %
      parse_threshold("a2a_share >= +10pp"),      // +10 points: violated (>=)
      parse_threshold("a2a_share > 60%"),         // new 50 % is not above 60 %
      parse_threshold("layer0.time > +150ns"),    // +200 ns: violated
      parse_threshold("layer0.time < 1us"),       // new 1.2 us is not below 1 us
      parse_threshold("peak_memory > +1GiB"),     // no memory in either trace: cannot evaluate
  };
  const auto d = diff_traces(p.base, p.ba, p.next, p.na, t);
  ASSERT_EQ(d.thresholds.size(), t.size());
  EXPECT_TRUE(d.thresholds[0].violated);
  EXPECT_FALSE(d.thresholds[1].violated);
  EXPECT_TRUE(d.thresholds[2].violated);
  EXPECT_FALSE(d.thresholds[3].violated);
  EXPECT_TRUE(d.thresholds[4].violated);
  EXPECT_FALSE(d.thresholds[5].violated);
  EXPECT_TRUE(d.thresholds[6].violated);
  EXPECT_FALSE(d.thresholds[6].evaluated);
  EXPECT_EQ(d.violations(), 4);
  EXPECT_EQ(d.thresholds[0].message, "a2a_share > +5%: 40.0% -> 50.0% (+10.0pp, +25.0%)");
  EXPECT_EQ(d.thresholds[6].message, "peak_memory > +1GiB: cannot evaluate, either trace has no peak_memory");
}

TEST(Diff, ParsesThresholds) {
  auto t = parse_threshold("  iteration_time<=-2.5ms ");
  EXPECT_EQ(t.metric, "iteration_time");
  EXPECT_EQ(t.op, Threshold::Op::kLessEqual);
  EXPECT_EQ(t.mode, Threshold::Mode::kAbsoluteChange);
  EXPECT_DOUBLE_EQ(t.value, -2.5e6);
  t = parse_threshold("peak_memory > 70GiB");
  EXPECT_EQ(t.mode, Threshold::Mode::kNewValue);
  EXPECT_DOUBLE_EQ(t.value, 70.0 * 1024 * 1024 * 1024);
  t = parse_threshold("op.expert_ffn.time > +10%");
  EXPECT_EQ(t.mode, Threshold::Mode::kRelativeChange);
  EXPECT_DOUBLE_EQ(t.value, 0.10);
  t = parse_threshold("layer12.balance_degree >= +1.5e2");
  EXPECT_DOUBLE_EQ(t.value, 150);
}

TEST(Diff, RejectsBadThresholdsWithOneLine) {
  auto error = [](std::string_view e) {
    try {
      parse_threshold(e);
    } catch (const ConfigError& x) {
      return std::string(x.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error("a2a_shar > +5%"),
            "--fail-if \"a2a_shar > +5%\": unknown metric \"a2a_shar\" (see `moetrace diff --help`)");
  EXPECT_EQ(error("a2a_share = 5%"), "--fail-if \"a2a_share = 5%\": expected one of > >= < <= after the metric");
  EXPECT_EQ(error("a2a_share > +5ms"), "--fail-if \"a2a_share > +5ms\": a2a_share is measured in fraction, not in ms");
  EXPECT_EQ(error("iteration_time > +5pp"),
            "--fail-if \"iteration_time > +5pp\": pp applies to shares and fractions, not to iteration_time");
  EXPECT_EQ(error("a2a_share > lots"), "--fail-if \"a2a_share > lots\": expected a number after the operator");
  EXPECT_EQ(error("op.nonsense.time > 1"),
            "--fail-if \"op.nonsense.time > 1\": unknown metric \"op.nonsense.time\" (see `moetrace diff --help`)");
}

}  // namespace
}  // namespace moetrace::analyzer
