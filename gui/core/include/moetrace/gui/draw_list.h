// The draw list of one frame (Tracy's preprocessing pass): for the visible
// time window and the visible rows, the rectangles, labels and counter
// columns to paint, already folded by level of detail. Prepared off the GUI
// thread; painting only walks it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetrace/gui/palette.h"
#include "moetrace/gui/time_axis.h"
#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

struct DrawRect {
  float x0 = 0, x1 = 0;       // pixels; x1 - x0 >= 1
  std::int32_t row = 0;
  std::uint32_t count = 1;    // items folded into it
  ColourClass colour = ColourClass::kOtherCompute;
  bool folded() const { return count > 1; }
};

struct DrawLabel {
  float x0 = 0, x1 = 0;
  std::int32_t row = 0;
  ColourClass colour = ColourClass::kOtherCompute;  // of the item under it
  std::string text;
};

struct DrawCounter {
  std::int32_t row = 0;
  RowKind kind = RowKind::kMemory;    // kMemory or kQueue
  std::int64_t max_value = 0;         // scale of the row
  std::vector<CounterColumn> columns;
};

struct DrawOptions {
  double fold_px = 2.0;        // items narrower than this fold (Tracy uses ~3 px)
  double min_label_px = 40.0;  // narrower blocks carry no text
  int margin_rows_px = 200;    // rows prepared beyond the visible band, for smooth scrolling
};

struct DrawList {
  TimeAxis axis;
  int y0 = 0, y1 = 0;                 // band of layout y prepared
  std::vector<DrawRect> rects;        // by row, then x
  std::vector<DrawLabel> labels;
  std::vector<DrawCounter> counters;
  std::size_t items_visited = 0;      // blocks and items read (cost measure)
  std::uint64_t generation = 0;       // the request it answers
};

// Prepares the rows of `layout` intersecting [y0, y1) over `axis`; kQueue
// rows read their values from `queues`.
DrawList prepare_draw_list(const TimelineModel& model, const RowLayout& layout, const TimeAxis& axis, int y0,
                           int y1, const DrawOptions& options = {}, const QueueTracks* queues = nullptr);

}  // namespace moetrace::gui
