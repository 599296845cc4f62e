// Cross-stream waits the profiler recorded with their event (Kineto's
// "Stream Wait Event" records with wait_on_stream and
// wait_on_cuda_event_record_corr_id, enable_cuda_sync_events=True): which
// GPU work waited for which, as HTA pairs them for its critical path.
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct StreamWait {
  std::uint32_t producer = 0;  // index into Trace::activities
  std::uint32_t consumer = 0;  // index into Trace::activities
};

// For each recorded wait (SyncEvent kind kStreamWaitEvent with its event's
// record): the producer is the last activity launched on the recording
// stream before the cudaEventRecord call, the consumer the first activity
// launched on the waiting stream after the wait call. Correlation ids count
// a process's runtime calls in order, so "before" is a smaller id. Waits
// whose producer or consumer the trace lacks are left out; `recorded`
// (optional) counts every wait with its record, paired or not.
std::vector<StreamWait> recorded_stream_waits(const Trace& t, std::int64_t* recorded = nullptr);

}  // namespace moetrace::analyzer
