// Where the time of each rank went inside a selected time range: per
// breakdown category the union of its GPU activity clipped to the range
// (ops with no attributed activity count with their own range, as in
// analyzer::compute_breakdown), busy and idle time, and how much of the
// communication overlapped computation.
//
// This is the breakdown's arithmetic applied to an arbitrary window; it
// belongs in the analyzer (a `breakdown_in_window`) and moves there once the
// analyzer offers one.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

struct RangeRankSummary {
  RankId rank;  // invalid: all ranks summed
  std::array<std::int64_t, kNumCategories> category_ns{};
  std::int64_t busy_ns = 0;  // anything ran
  std::int64_t idle_ns = 0;  // range minus busy
  std::int64_t comm_ns = 0, comm_hidden_ns = 0;
  std::int64_t events = 0;   // activities and ops touching the range
};

struct RangeSummary {
  std::int64_t t0_ns = 0, t1_ns = 0;
  std::vector<RangeRankSummary> ranks;  // by rank
  RangeRankSummary total;               // sums over ranks
  std::int64_t length() const { return t1_ns - t0_ns; }
};

RangeSummary summarize_range(const TimelineModel& model, std::int64_t t0_ns, std::int64_t t1_ns);

}  // namespace moetrace::gui
