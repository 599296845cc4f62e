// What building a timeline model's rows needs, shared by the model's builder
// (timeline_model.cc) and the replayed tracks (timeline_replay.cc).
// Internal to moetrace_gui_core.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui::detail {

// Streams of a rank: compute, communication, copy, then the rest.
int role_order(std::string_view role);
std::string stream_label(const analyzer::Stream& s);
std::string activity_row_label(const analyzer::Stream& s);
// The streams of `rank` (indices into trace.streams) in the order of their rows.
std::vector<std::int32_t> rank_streams(const analyzer::Trace& trace, RankId rank);

// Greedy interval packing: each item (sorted by start, then longest first)
// goes to the first sub-row that is free at its start, so nested op ranges
// land one row deeper than their parent. Past max_rows the last row takes the
// overflow and may overlap.
template <class StartFn, class EndFn>
std::vector<std::vector<std::uint32_t>> pack_rows(std::span<const std::uint32_t> order, StartFn start_of,
                                                  EndFn end_of, int max_rows) {
  std::vector<std::vector<std::uint32_t>> rows;
  std::vector<std::int64_t> last_end;
  for (auto i : order) {
    const auto s = start_of(i);
    std::size_t r = 0;
    while (r < rows.size() && last_end[r] > s) ++r;
    if (r == rows.size()) {
      if (static_cast<int>(rows.size()) >= std::max(1, max_rows)) {
        r = rows.size() - 1;
      } else {
        rows.emplace_back();
        last_end.push_back(std::numeric_limits<std::int64_t>::min());
      }
    }
    rows[r].push_back(i);
    last_end[r] = std::max(last_end[r], end_of(i));
  }
  return rows;
}

// Calls f(start_of, end_of) with the functions of an item index of `source`
// to its start and end (TimelineModel::item_start and item_end), reading
// activities, ops and API calls straight from their arrays.
template <class F>
void with_item_extents(const TimelineModel& m, ItemSource source, F&& f) {
  const auto& t = m.trace_of({source, 0});
  const auto of = [&f](const auto& events) {
    f([&events](std::uint32_t i) { return events[i].start_ns; }, [&events](std::uint32_t i) { return events[i].end_ns; });
  };
  switch (measured_source(source)) {
    case ItemSource::kActivity: return of(t.activities);
    case ItemSource::kOp: return of(t.ops);
    case ItemSource::kApiCall: return of(t.api_calls);
    default:
      return f([&m, source](std::uint32_t i) { return m.item_start({source, i}); },
               [&m, source](std::uint32_t i) { return m.item_end({source, i}); });
  }
}

// Appends packed rows of `order`'s items (of `source`) to `rows`, the first
// carrying the label; `model` gives the items' extents.
struct RowHead {
  RowKind kind = RowKind::kActivities;
  RankId rank;
  std::int32_t stream = -1;
  std::string label;
  int height_px = 16;
};
void add_packed_rows(const TimelineModel& model, std::vector<Row>& rows, const RowHead& head, ItemSource source,
                     std::span<const std::uint32_t> order, int max_sub_rows);

// The rows of one stream of `trace`: its op ranges (nested ones a sub-row
// deeper), then its kernels or copies (one row where they never overlap,
// else packed). False where the stream has no activity (no rows for them).
struct StreamRows {
  RowKind op_kind = RowKind::kOps, activity_kind = RowKind::kActivities;
  ItemSource op_source = ItemSource::kOp, activity_source = ItemSource::kActivity;
  std::string prefix;  // before each label ("replayed \xC2\xB7 ")
  bool op_rows = true;
  int max_sub_rows = 16;
};
bool add_stream_rows(const TimelineModel& model, std::vector<Row>& rows, const analyzer::Trace& trace, RankId rank,
                     std::int32_t stream, const StreamRows& spec);

// Iteration, layer and chunk spans of a trace's op ranges, sorted by
// (rank, level, start, longest first).
std::vector<Span> derive_spans(const analyzer::Trace& trace);

// Positions in `spans` (sorted as derive_spans sorts them) of one rank's
// spans of one level.
std::vector<std::uint32_t> spans_of(std::span<const Span> spans, RankId rank, SpanLevel level);

// Colour per activity: a kernel no op claims is classified by its name, once
// per distinct name.
std::vector<ColourClass> activity_colours(const analyzer::Trace& trace);

// Whether the activities of one stream's track [b, e) overlap.
bool track_overlaps(const analyzer::Trace& trace, std::uint32_t b, std::uint32_t e);

// The level-of-detail pyramids of rows[i] for i in `todo`, on `threads`
// threads (0: hardware concurrency); `model` gives the items' extents.
void build_pyramids(const TimelineModel& model, std::span<Row> rows, std::vector<std::size_t> todo, unsigned threads,
                    const std::function<void(double fraction)>& progress = {});

}  // namespace moetrace::gui::detail
