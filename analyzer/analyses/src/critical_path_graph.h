// The graph of critical_path.h, shared by its two files: critical_path.cc
// builds it (call stacks, the runtime lock, GPU edges, synchronisation,
// collectives across ranks) and finds its longest path;
// critical_path_input.cc chooses the events (window, threads).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/critical_path.h"

namespace moetrace::analyzer::detail {

enum class CpSync : std::uint8_t { kNone, kDevice, kOne };

// An event of the graph: host events first, then GPU events.
struct CpEvent {
  std::int64_t start = 0, end = 0;
  std::int64_t thread = -1;   // host: the call stack it is on (the backward thread merged, see critical_path.h)
  std::int32_t rank = 0;
  std::int32_t stream = -1;   // index into Trace::streams (GPU)
  std::uint32_t source = 0;   // index into nvtx, api_calls or activities
  PathEvent::Kind kind = PathEvent::Kind::kNvtx;
  // Flags in one byte: 40 bytes an event, not 48 (the graph across ranks of
  // a 10 M-event trace holds 7.8 M of them).
  bool blocking : 1 = false;  // HTA's BLOCKING_SYNC_CALLS
  bool node : 1 = true;       // host: an operator or runtime call (else only structure: an annotation)
  bool lock : 1 = false;      // a call that takes the CUDA runtime's lock
  CpSync sync : 2 = CpSync::kNone;
};
static_assert(sizeof(CpEvent) <= 40);

// The events of one graph: host events (nodes and annotations) of the
// window, and the stream tracks whose activities may join it.
struct CpRankInput {
  std::vector<CpEvent> host;
  std::vector<std::uint32_t> streams;
};

struct CpInput {
  std::map<std::int32_t, CpRankInput> ranks;  // by rank (-1: every rank in one graph)
  // api_calls[i]'s place in its graph's host events, -1: not in the window.
  std::vector<std::int32_t> api_event;
  // Per activity: in the window (its launching call is; or, on a rank with no
  // API calls at all, its own start is).
  std::vector<std::uint8_t> in_window;
  // Per activity: HTA's queue lengths on its stream at its launching call
  // (after the call's +1) and at its start (after its -1); -1: not counted.
  std::vector<std::int32_t> queue_at_call, queue_at_start;
  bool infer_sync = false;
};

// The window's events (CriticalPathOptions: the annotation instances or the
// whole trace). Throws moetrace::Error where an instance is missing on a rank
// asked for by name.
CpInput cp_input(const Trace& t, const CriticalPathOptions& o, bool all_in_one);

bool cp_locks_runtime(std::string_view base_name);

}  // namespace moetrace::analyzer::detail
