// The CUPTI activity collector: records what the GPU did (concurrent
// kernels, memcpy, memset, memory alloc/free, runtime and driver API calls
// with correlation ids, synchronisation, NVTX markers and ranges, CUPTI
// overhead) and writes it through the trace writer as it arrives, with the
// MoE op of every activity (activity_converter.h).
//
// Activity buffers come from a bounded pool (buffer_pool.h); records CUPTI
// drops (cuptiActivityGetNumDroppedRecords) are added to the trace's
// run.dropped_records, which `moetrace info` shows. close() flushes CUPTI
// (cuptiActivityFlushAll), writes the op ranges and closes the writer; the
// destructor and an atexit handler call it too, so a run that exits early
// still leaves a complete trace. CUPTI is process-wide: one collector at a time.
//
// The header is CUDA-free (streams are passed as void*, the cudaStream_t).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "moetrace/cupti/op_message.h"
#include "moetrace/instrument/records.h"
#include "moetrace/instrument/trace_writer.h"

namespace moetrace::cupti {

struct CollectorOptions {
  std::size_t buffer_bytes = 8u << 20;
  std::size_t max_buffers = 128;       // 1 GiB of records in flight at most
  std::size_t reserved_buffers = 4;    // made and faulted in before tracing starts (buffer_pool.h)
  bool driver_api = true;
  bool runtime_api = true;
  bool memory = true;                  // CUPTI_ACTIVITY_KIND_MEMORY2
  bool nvtx = true;                    // markers and ranges (sets NVTX_INJECTION64_PATH)
  bool synchronization = true;
  bool overhead = true;
  // Records of the API calls that only read state (api_filter.h); off: they
  // cost the issuing thread time and no analysis reads them.
  bool query_api = false;
  RankId default_rank{0};              // API calls and devices not mapped to a rank
};

struct CollectorStats {
  std::int64_t buffers_completed = 0;
  std::int64_t records = 0;
  std::int64_t dropped_records = 0;
  std::int64_t buffers_refused = 0;   // pool exhausted: CUPTI had to drop records
  std::int64_t kernels = 0, memcpys = 0, op_ranges = 0, nvtx_ranges = 0;
  std::int64_t activities_without_op = 0;
  std::int64_t graph_activities = 0;  // launched by a CUDA graph (their op found by graph node)
};

class Collector {
 public:
  // Starts CUPTI activity collection into `writer` (owned; closed by close()).
  // Throws moetrace::Error where CUPTI cannot start (no driver, another
  // profiler such as Nsight Systems already subscribed, another collector).
  Collector(std::unique_ptr<instrument::TraceWriter> writer, CollectorOptions options = {});
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  instrument::TraceWriter& writer();

  // Activities on `cuda_stream` (a cudaStream_t) belong to `record` (its
  // plan stream id, rank and role); writes the stream row.
  void map_stream(void* cuda_stream, const instrument::StreamRecord& record);
  void map_device(int device, RankId rank);
  // A plan buffer was just allocated at `address`.
  void note_allocation(std::uint64_t address, BufferId buffer);
  // An op the executor issued (fallback where NVTX ranges are not delivered).
  void note_op(const OpLabel& label, std::int64_t launch_start, std::int64_t launch_end);
  // The op's work waits for these ops' work on other streams (the events the
  // executor waits on): places an op that runs nothing on the device.
  void note_waits(OpId op, std::vector<OpId> waits_for);

  void flush();  // everything CUPTI holds, into the writer
  void close();  // flush, op ranges, writer close; idempotent; throws on I/O errors
  CollectorStats stats() const;

  // CUPTI's clock (ns), the clock of every timestamp in the trace.
  static std::int64_t timestamp_ns();
  // The collector of this process, or nullptr.
  static Collector* active();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One plan op while the host issues its work: an NVTX range in domain
// "moetrace" (op_message.h, payload = op id) and, while a collector is
// active, the CUPTI external correlation id = op id, so every activity the
// op launches carries its op; graph nodes a stream capture makes inside it
// are recorded as the op's, for the activities the graph's launch runs.
// Cheap when no tool listens.
class OpScope {
 public:
  explicit OpScope(const OpLabel& label);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpLabel label_;
  OpId outer_;  // the scope open on this thread before this one
  bool correlated_ = false;
  std::int64_t start_ = 0;
};

}  // namespace moetrace::cupti
