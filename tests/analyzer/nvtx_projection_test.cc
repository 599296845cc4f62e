// GPU projection of NVTX ranges from outside moetrace (nvtx_projection.h), on
// a hand-built trace whose answer follows from the lines below.
#include "moetrace/analyzer/nvtx_projection.h"

#include <gtest/gtest.h>

#include "moetrace/analyzer/analyses.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

// Rank 0, thread 1: "step" [0, 1000) holds "mm" [100, 300) and "ar" [400, 600).
// mm's call (corr 1, t=150) launches kernel [1000, 1400) and its copy (corr 2,
// t=250) memcpy [1300, 1500); ar's call (corr 3, t=450) launches an NCCL
// kernel [1600, 2000). A call on thread 2 (corr 4, t=500) is inside the step's
// time but on another thread: not projected. A moetrace-domain range is left
// out of the summary.
//   mm:   2 activities, GPU [1000, 1500), busy 500 (union of 400 and 200 overlapping by 100)
//   ar:   1 activity, busy 400
//   step: 3 activities (its children's), GPU [1000, 2000), busy 500 + 400 = 900
constexpr const char* kNvtxTrace = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  nvtx rank=0 thread=1 start=0 end=1000 domain=pytorch name=step
  nvtx rank=0 thread=1 start=100 end=300 domain=pytorch name=mm
  nvtx rank=0 thread=1 start=400 end=600 domain=pytorch name=ar
  nvtx rank=0 thread=1 start=0 end=50 domain=moetrace name=op
  api rank=0 thread=1 start=150 end=160 corr=1
  api rank=0 thread=1 start=250 end=260 corr=2 name=cudaMemcpyAsync
  api rank=0 thread=1 start=450 end=460 corr=3
  api rank=0 thread=2 start=500 end=510 corr=4
  kernel rank=0 stream=0 start=1000 end=1400 corr=1 name=gemm
  memcpy rank=0 stream=0 start=1300 end=1500 corr=2 bytes=64
  kernel rank=0 stream=1 start=1600 end=2000 corr=3 name=ncclDevKernel_AllReduce
  kernel rank=0 stream=0 start=2100 end=2200 corr=4 name=other
)";

const NvtxNameSummary& named(const NvtxAnalysis& n, const std::string& name) {
  for (const auto& e : n.names)
    if (e.name == name) return e;
  throw std::runtime_error("no " + name);
}

TEST(NvtxProjection, RangesProjectTheWorkTheirThreadLaunched) {
  const Trace t = testing::load_text_trace("nvtx-proj.db", kNvtxTrace);
  const NvtxProjector projector(t);
  const NvtxRange* mm = nullptr;
  for (const auto& r : t.nvtx)
    if (t.str(r.name) == "mm") mm = &r;
  ASSERT_NE(mm, nullptr);
  const auto p = projector.project(*mm);
  EXPECT_EQ(p.api_calls, 2);
  EXPECT_EQ(p.activities, 2);
  EXPECT_EQ(p.gpu_start_ns, 1000);
  EXPECT_EQ(p.gpu_end_ns, 1500);
  EXPECT_EQ(p.gpu_busy_ns, 500);
  // The index-free projection of one range (the viewer's) agrees, range by range.
  for (const auto& r : t.nvtx) {
    const auto a = projector.project(r), b = project_nvtx_range(t, r);
    EXPECT_EQ(a.api_calls, b.api_calls) << t.str(r.name);
    EXPECT_EQ(a.activities, b.activities) << t.str(r.name);
    EXPECT_EQ(a.gpu_start_ns, b.gpu_start_ns) << t.str(r.name);
    EXPECT_EQ(a.gpu_end_ns, b.gpu_end_ns) << t.str(r.name);
    EXPECT_EQ(a.gpu_busy_ns, b.gpu_busy_ns) << t.str(r.name);
  }

  const auto n = analyze(t).nvtx;
  EXPECT_EQ(n.ranges, 3);  // the moetrace-domain range is not counted
  EXPECT_EQ(n.ranges_with_gpu, 3);
  ASSERT_EQ(n.names.size(), 3u);
  EXPECT_EQ(n.names[0].name, "step");  // most GPU time first
  EXPECT_EQ(named(n, "step").activities, 3);
  EXPECT_EQ(named(n, "step").gpu_busy_ns, 900);
  EXPECT_EQ(named(n, "step").host_ns, 1000);
  EXPECT_EQ(named(n, "ar").activities, 1);
  EXPECT_EQ(named(n, "ar").gpu_busy_ns, 400);
  EXPECT_EQ(named(n, "mm").gpu_busy_ns, 500);
  EXPECT_EQ(named(n, "mm").domain, "pytorch");
}

TEST(NvtxProjection, OnlyMoetraceRangesGiveAnEmptySummary) {
  const auto path = testing::temp_path("nvtx-proj-own.db");
  testing::write_text_trace(path, R"(
    stream id=0 rank=0 role=compute
    nvtx rank=0 thread=1 start=0 end=50 domain=moetrace name=op
    api rank=0 thread=1 start=10 end=20 corr=1
    kernel rank=0 stream=0 start=100 end=200 corr=1 name=k
  )");
  const auto n = analyze(load_trace(path)).nvtx;
  EXPECT_EQ(n.ranges, 0);
  EXPECT_TRUE(n.names.empty());
}

}  // namespace
}  // namespace moetrace::analyzer
