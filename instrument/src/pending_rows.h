// The rows a TraceWriter holds between flushes (trace_writer.cc adds them,
// trace_writer_flush.cc writes them). Private to the writer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/instrument/trace_writer.h"

namespace moetrace::instrument {

struct PendingKernel {
  KernelRecord k;
  std::int64_t launch_id;  // -1: unknown
};

// An op row with its links encoded (schema v2's op_ranges.deps / .buffers).
struct PendingOp {
  OpRangeRecord r;
  std::string deps, buffers;  // JSON arrays; "" for none
};

// A dependency or a buffer access added on its own (not with its op).
struct TraceWriter::Link {
  OpId op;
  std::int64_t other;   // the op waited for, or the buffer
  std::int32_t access;  // 0: a dependency; 1-3: a buffer access
  auto operator<=>(const Link&) const = default;
};

struct TraceWriter::Pending {
  std::vector<std::pair<StringId, std::string>> strings;
  std::vector<std::pair<std::int32_t, LaunchConfigKey>> launches;
  std::vector<std::pair<std::string, std::string>> config;
  std::vector<DeviceRecord> devices;
  std::vector<RankRecord> ranks;
  std::vector<StreamRecord> streams;
  std::vector<LayerRecord> layers;
  std::vector<PendingKernel> kernels;
  std::vector<MemcpyRecord> memcpys;
  std::vector<MemsetRecord> memsets;
  std::vector<MemoryEventRecord> memory_events;
  std::vector<ApiCallRecord> api_calls;
  std::vector<SyncRecord> syncs;
  std::vector<OverheadRecord> overheads;
  std::vector<NvtxRangeRecord> nvtx;
  std::vector<CollectiveRecord> collectives;
  std::vector<PendingOp> ops;
  std::vector<TraceWriter::Link> links;
  std::vector<BufferRecord> buffers;
  std::vector<ExpertLoadRecord> expert_load;
  std::vector<ExpertPlacementRecord> placements;
  std::size_t rows = 0;

  // Empties every list but keeps its capacity: the writer swaps two Pending
  // buffers, so steady-state tracing allocates nothing.
  void clear() {
    auto c = [](auto&... v) { (v.clear(), ...); };
    c(strings, launches, config, devices, ranks, streams, layers, kernels, memcpys, memsets,
      memory_events, api_calls, syncs, overheads, nvtx, collectives, ops, links, buffers, expert_load,
      placements);
    rows = 0;
  }
};

}  // namespace moetrace::instrument
