// NVTX-to-GPU projection on hand-built traces: which op launched each kernel.
#include <gtest/gtest.h>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/projection.h"
#include "loaded_trace.h"

namespace moetrace::analyzer {
namespace {

// Op id of the op an activity of the given name is attributed to, or -1.
std::int64_t op_of(const Trace& t, std::string_view kernel) {
  for (const auto& a : t.activities)
    if (t.str(a.name) == kernel) return a.op >= 0 ? t.ops[static_cast<std::size_t>(a.op)].id.value : -1;
  throw std::runtime_error("no such kernel");
}

const OpRange& op(const Trace& t, std::int64_t id) {
  return t.ops[static_cast<std::size_t>(t.op_index(OpId(id)))];
}

// Host side (thread 1): op A launches during [0, 100], op B during [100, 200].
// A's GPU kernel (corr 1, API call at 10) queues behind other work and runs
// on the GPU at [500, 900), long after B's launch range began; B's kernel
// (corr 2, API call at 150) runs at [900, 1000). The kernels carry no op id.
// By correlation id, kernel_a belongs to A (its API call lies inside A's
// launch range), however late it ran.
constexpr std::string_view kLateKernel = R"(
  stream id=0 rank=0 role=compute
  op id=1 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=0 end=100 launch_start=0 launch_end=100
  op id=2 rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=100 end=200 launch_start=100 launch_end=200
  api rank=0 thread=1 start=10 end=15 corr=1
  api rank=0 thread=1 start=150 end=155 corr=2
  kernel rank=0 stream=0 start=500 end=900 name=kernel_a corr=1
  kernel rank=0 stream=0 start=900 end=1000 name=kernel_b corr=2
)";

TEST(Projection, KernelLaunchedInsideOpAIsAttributedToAEvenWhenItRunsLater) {
  const auto t = testing::load_text_trace("late.db", kLateKernel);
  EXPECT_EQ(op_of(t, "kernel_a"), 1);
  EXPECT_EQ(op_of(t, "kernel_b"), 2);
  EXPECT_TRUE(t.projection.ran);
  EXPECT_EQ(t.projection.projected, 2);
  EXPECT_EQ(t.projection.unattributed(), 0);
  // A GPU run (not simulated): ops take the GPU span of their kernels.
  EXPECT_EQ(op(t, 1).start_ns, 500);
  EXPECT_EQ(op(t, 1).end_ns, 900);
  EXPECT_EQ(op(t, 2).start_ns, 900);
  EXPECT_EQ(t.projection.ops_retimed, 2);
}

TEST(Projection, BreakdownCountsGpuTimeNotLaunchTime) {
  // Expert compute = kernel_a's 400 ns of GPU time, other compute = 100 ns;
  // the layer window is the GPU span [500, 1000) = 500 ns.
  const auto b = compute_breakdown(testing::load_text_trace("late-breakdown.db", kLateKernel));
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(b.rows[0].t.window_ns, 500);
  EXPECT_EQ(b.rows[0].t.at(Category::kExpertCompute), 400);
  EXPECT_EQ(b.rows[0].t.at(Category::kOtherCompute), 100);
  EXPECT_EQ(b.ranks[0].unattributed_ns, 0);
}

TEST(Projection, WithoutProjectionTheKernelsStayUnattributed) {
  LoadOptions o;
  o.project = false;
  const auto t = testing::load_text_trace("late-off.db", kLateKernel, o);
  EXPECT_EQ(op_of(t, "kernel_a"), -1);
  EXPECT_FALSE(t.projection.ran);
}

// Nested host ranges on one thread: a layer-wide op [0, 1000] holds a gate
// op [100, 200]. An API call at 150 is inside both; the innermost (gate)
// wins. A call at 500 is inside the outer op only.
TEST(Projection, InnermostRangeWins) {
  const auto t = testing::load_text_trace("nested.db", R"(
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=other start=0 end=1 launch_start=0 launch_end=1000
    op id=2 rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=1 launch_start=100 launch_end=200
    api rank=0 thread=1 start=150 end=151 corr=1
    api rank=0 thread=1 start=500 end=501 corr=2
    kernel rank=0 stream=0 start=2000 end=2100 name=k_gate corr=1
    kernel rank=0 stream=0 start=2100 end=2200 name=k_outer corr=2
  )");
  EXPECT_EQ(op_of(t, "k_gate"), 2);
  EXPECT_EQ(op_of(t, "k_outer"), 1);
}

// NVTX ranges give ops their threads. Op 1's range is on thread 1, op 2's on
// thread 2, both over [0, 100]. The call on thread 2 belongs to op 2 only.
// Op 3 has no launch range; the moetrace-domain NVTX range whose payload is
// 3 names it (thread 1, [200, 300]). A range of another domain is ignored.
TEST(Projection, NvtxRangesNameTheThreadAndTheOp) {
  const auto t = testing::load_text_trace("nvtx.db", R"(
    stream id=0 rank=0 role=compute
    nvtx rank=0 thread=1 start=0 end=100 name=op1        # id 1
    nvtx rank=0 thread=2 start=0 end=100 name=op2        # id 2
    nvtx rank=0 thread=1 start=200 end=300 name=op3 payload=3
    nvtx rank=0 thread=1 start=400 end=500 domain=other name=x payload=1
    op id=1 rank=0 stream=0 kind=gate start=0 end=1 launch_start=0 launch_end=100 nvtx=1
    op id=2 rank=0 stream=0 kind=permute start=0 end=1 launch_start=0 launch_end=100 nvtx=2
    op id=3 rank=0 stream=0 kind=expert_ffn start=0 end=1
    api rank=0 thread=2 start=50 end=51 corr=1
    api rank=0 thread=1 start=60 end=61 corr=2
    api rank=0 thread=1 start=250 end=251 corr=3
    api rank=0 thread=1 start=450 end=451 corr=4
    kernel rank=0 stream=0 start=1000 end=1100 name=k1 corr=1
    kernel rank=0 stream=0 start=1100 end=1200 name=k2 corr=2
    kernel rank=0 stream=0 start=1200 end=1300 name=k3 corr=3
    kernel rank=0 stream=0 start=1300 end=1400 name=k4 corr=4
  )");
  EXPECT_EQ(op_of(t, "k1"), 2);
  EXPECT_EQ(op_of(t, "k2"), 1);
  EXPECT_EQ(op_of(t, "k3"), 3);
  EXPECT_EQ(op_of(t, "k4"), -1);
  EXPECT_EQ(t.projection.outside_ranges, 1);
}

// Correlation ids are per process: rank 1's call with id 1 must not claim
// rank 0's kernel with id 1. Copies and memsets are projected like kernels;
// an op id already in the trace is kept even where the call says otherwise.
TEST(Projection, RanksCopiesAndRecordedOpIds) {
  const auto t = testing::load_text_trace("ranks.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=1 role=compute
    op id=1 rank=0 stream=0 kind=offload start=0 end=1 launch_start=0 launch_end=100
    op id=2 rank=1 stream=1 kind=gate start=0 end=1 launch_start=0 launch_end=100
    op id=3 rank=0 stream=0 kind=prefetch start=0 end=1 launch_start=200 launch_end=300
    api rank=1 thread=1 start=10 end=11 corr=1
    api rank=0 thread=1 start=20 end=21 corr=1
    api rank=0 thread=1 start=30 end=31 corr=2
    api rank=0 thread=1 start=40 end=41 corr=3
    memcpy rank=0 stream=0 start=500 end=600 bytes=4096 corr=1
    memset rank=0 stream=0 start=600 end=650 bytes=64 corr=2
    kernel rank=0 stream=0 start=700 end=800 name=recorded corr=3 op=3
    kernel rank=0 stream=0 start=800 end=900 name=orphan
  )");
  ASSERT_EQ(t.activities.size(), 4u);
  for (const auto& a : t.activities) {
    if (a.type == ActivityType::kMemcpy || a.type == ActivityType::kMemset) {
      ASSERT_GE(a.op, 0);
      EXPECT_EQ(t.ops[static_cast<std::size_t>(a.op)].id.value, 1);
    }
  }
  EXPECT_EQ(op_of(t, "recorded"), 3);
  EXPECT_EQ(op_of(t, "orphan"), -1);
  EXPECT_EQ(t.projection.attributed_in_trace, 1);
  EXPECT_EQ(t.projection.projected, 2);
  EXPECT_EQ(t.projection.no_correlation, 1);
}

TEST(Projection, SimulatedRunsKeepTheirOpTimes) {
  const auto t = testing::load_text_trace("sim.db", std::string("run simulated=1\n") + std::string(kLateKernel));
  EXPECT_EQ(op_of(t, "kernel_a"), 1);
  EXPECT_EQ(op(t, 1).start_ns, 0);
  EXPECT_EQ(t.projection.ops_retimed, 0);
}

}  // namespace
}  // namespace moetrace::analyzer
