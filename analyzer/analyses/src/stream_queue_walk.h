// A stream's launch queue as HTA counts it (queue_length.py): +1 where a
// launch call starts, -1 where the GPU event it launched starts. Read by the
// queue-length analysis (launch_queue.cc: its series) and by the critical
// path (critical_path_input.cc: each activity's queue at its call and at its
// start). Private to the analyses.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "moetrace/analyzer/sort_runs.h"

namespace moetrace::analyzer::detail {

struct QueuePoint {
  std::int64_t ts_ns = 0;
  std::uint32_t activity = 0;  // the GPU event (Trace::activities)
};

// Visits one stream's launches (+1) and GPU starts (-1) in order of time, a
// launch before a GPU start at one time (so the queue never reads -1):
// on_launch(point, length) and on_start(point, length), the length after
// the change. Each list comes nearly in order (a track is in order of
// start; its launches mostly in the order they ran): each is sorted by
// (time, activity) as the runs it comes in, then the two are merged.
template <class OnLaunch, class OnStart>
void walk_stream_queue(std::vector<QueuePoint>& launches, std::vector<QueuePoint>& starts, OnLaunch&& on_launch,
                       OnStart&& on_start) {
  const auto less = [](const QueuePoint& x, const QueuePoint& y) {
    return std::tie(x.ts_ns, x.activity) < std::tie(y.ts_ns, y.activity);
  };
  sort_runs(launches, less);
  sort_runs(starts, less);
  std::int32_t length = 0;
  for (std::size_t l = 0, g = 0; l < launches.size() || g < starts.size();) {
    if (g == starts.size() || (l < launches.size() && launches[l].ts_ns <= starts[g].ts_ns)) {
      const auto& p = launches[l++];
      on_launch(p, ++length);
    } else {
      const auto& p = starts[g++];
      on_start(p, --length);
    }
  }
}

}  // namespace moetrace::analyzer::detail
