// Chrome trace-event JSON of a moetrace trace, for Perfetto (ui.perfetto.dev)
// and chrome://tracing:
// - one process per rank; one thread per stream, named with its role; op
//   ranges on a thread of their own beside their stream ("... ops"), with
//   their MoE coordinates in args; host threads for API calls and for NVTX;
// - kernels, copies, memsets, op ranges, API calls and closed NVTX ranges as
//   complete slices (ph X); NVTX ranges never closed as instant events;
// - device memory in use per rank as a counter track (from memory_events),
//   and each device allocation and free as a Kineto-style "[memory]" instant
//   on a "memory events" thread (so `moetrace import` reads them back);
// - flow arrows from each API call to the activities it launched (same rank,
//   same correlation id).
// Timestamps are microseconds with three decimals (ns precision), counted from
// the earliest event (its ns time is otherData.time_origin_ns), because a
// double cannot hold ns since 1970. Slices that overlap without nesting on one
// thread (which the format cannot show) move to extra lanes ("#2", "#3").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "moetrace/analyzer/trace.h"

namespace moetrace::exporters {

struct ChromeExportStats {
  std::int64_t activity_slices = 0;  // kernels + memcpy + memset
  std::int64_t op_slices = 0;
  std::int64_t api_slices = 0;
  std::int64_t nvtx_slices = 0;      // closed NVTX ranges
  std::int64_t nvtx_instants = 0;    // NVTX ranges never closed
  std::int64_t counter_events = 0;
  std::int64_t memory_instants = 0;  // "[memory]" instants (device allocations and frees)
  std::int64_t flows = 0;            // launch arrows (each one "s" and one "f" event)
  std::int64_t extra_lanes = 0;      // threads added for non-nesting overlaps
};

// Writes `trace` (loaded from `trace_path`, the name the JSON gives it) as
// Chrome JSON to `out`.
ChromeExportStats write_chrome_trace(const analyzer::Trace& trace, const std::string& trace_path,
                                     std::ostream& out);

}  // namespace moetrace::exporters
