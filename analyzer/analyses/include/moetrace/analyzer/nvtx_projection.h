// GPU projection of NVTX ranges: the GPU work a host-side range launched.
//
// An NVTX range (a PyTorch `cpu_op` or `user_annotation` in an imported
// Kineto trace, a push/pop range in an Nsight Systems export) times the host
// thread; the kernels, copies and memsets it launched run later, on other
// streams. A range's projection is the activities whose launching API call
// (joined by rank and correlation id) starts inside the range on the same
// rank and thread; nested ranges project their children's work too, as in
// Nsight Systems' "NVTX GPU projection". This is what a trace without MoE op
// ranges offers per annotated region; op ranges have their own projection
// (projection.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct NvtxGpuProjection {
  std::int64_t api_calls = 0;   // launching calls inside the range
  std::int64_t activities = 0;  // GPU activities they launched
  std::int64_t gpu_start_ns = -1, gpu_end_ns = -1;  // first start, last end; -1: none
  std::int64_t gpu_busy_ns = 0;                     // union of the activities' intervals
};

class NvtxProjector {
 public:
  explicit NvtxProjector(const Trace& trace);
  NvtxGpuProjection project(const NvtxRange& range) const;

 private:
  const Trace& trace_;
  // API call indices per (rank, thread), sorted by start.
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::uint32_t>> calls_;
  // (rank, correlation id, activity index), sorted.
  struct Launch {
    std::int32_t rank;
    std::int64_t correlation_id;
    std::uint32_t activity;
    auto operator<=>(const Launch&) const = default;
  };
  std::vector<Launch> launches_;
};

// One range without an index: linear scans of the API calls and activities
// (tens of ms on 10 M events), for a viewer projecting the range a user
// clicked; NvtxProjector is for projecting many.
NvtxGpuProjection project_nvtx_range(const Trace& trace, const NvtxRange& range);

// Per range name (and domain), over all ranks: the report's table for traces
// with NVTX ranges from outside moetrace.
struct NvtxNameSummary {
  std::string domain, name;
  std::int64_t ranges = 0;
  std::int64_t host_ns = 0;       // sum of the ranges' durations (closed ranges)
  std::int64_t activities = 0;    // GPU activities launched inside them
  std::int64_t gpu_busy_ns = 0;   // sum over ranges of each range's projected busy time
};

struct NvtxAnalysis {
  std::int64_t ranges = 0;            // NVTX ranges outside the moetrace domain
  std::int64_t ranges_with_gpu = 0;   // of which launched GPU work
  std::vector<NvtxNameSummary> names; // sorted by gpu_busy_ns, then host_ns, descending
};

// Summarises every NVTX range outside domain "moetrace" (moetrace's own
// ranges are op ranges and reported as such).
NvtxAnalysis analyze_nvtx(const Trace& trace);
// The analyses of traces of disjoint ranks as analyze_nvtx() of their union:
// the names' sums added up. Consumes `parts`.
NvtxAnalysis merge_nvtx(std::vector<NvtxAnalysis> parts);

}  // namespace moetrace::analyzer
