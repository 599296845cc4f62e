#include "moetrace/gui/draw_list.h"

#include <algorithm>

namespace moetrace::gui {
namespace {

class RowPreparer {
 public:
  RowPreparer(const TimelineModel& m, const TimeAxis& a, const DrawOptions& o, DrawList& out)
      : m_(m), axis_(a), opt_(o), out_(out) {}

  void row(int row_index) {
    const Row& row = m_.rows()[static_cast<std::size_t>(row_index)];
    row_ = row_index;
    first_rect_ = out_.rects.size();
    const double t0 = axis_.t0_ns, t1 = axis_.t1_ns();
    if (const LodLevel* level = row.lod.level_for(opt_.fold_px * axis_.ns_per_px)) {
      const auto& b = level->blocks;
      std::size_t p = first_visible(
          b.size(), t0, level->monotone, level->max_extent, [&](std::size_t i) { return b[i].start; },
          [&](std::size_t i) { return b[i].end; });
      for (; p < b.size() && static_cast<double>(b[p].start) <= t1; ++p) {
        ++out_.items_visited;
        if (static_cast<double>(b[p].end) < t0) continue;  // overlapping rows only
        emit(row, b[p].start, b[p].end, b[p].count, b[p].rep);
      }
    } else {
      auto [first, last] = m_.visible_range(row, t0, t1);
      for (std::size_t p = first; p < last; ++p) {
        ++out_.items_visited;
        const ItemRef r = m_.row_item(row, p);
        const auto e = m_.item_end(r);
        if (static_cast<double>(e) < t0) continue;
        emit(row, m_.item_start(r), e, 1, static_cast<std::uint32_t>(p));
      }
    }
  }

 private:
  void emit(const Row& row, std::int64_t start, std::int64_t end, std::uint32_t count, std::uint32_t rep) {
    const float w = static_cast<float>(axis_.width_px);
    float x0 = static_cast<float>(std::max(-2.0, axis_.x(static_cast<double>(start))));
    float x1 = static_cast<float>(std::min(w + 2.0, axis_.x(static_cast<double>(end))));
    if (x1 - x0 < 1.0f) x1 = x0 + 1.0f;
    const ItemRef item = m_.row_item(row, rep);
    const ColourClass colour = m_.item_colour(item);
    const auto narrow = static_cast<float>(opt_.fold_px);
    if (out_.rects.size() > first_rect_) {
      DrawRect& last = out_.rects.back();
      // Neighbours in the same pixel run fold further (one rect, not many).
      if (last.colour == colour && x0 <= last.x1 + 0.5f && (x1 - x0 < narrow || count > 1) &&
          (last.x1 - last.x0 < narrow || last.count > 1)) {
        last.x1 = std::max(last.x1, x1);
        last.count += count;
        return;
      }
    }
    out_.rects.push_back({x0, x1, row_, count, colour});
    if (count == 1 && x1 - x0 >= opt_.min_label_px)
      out_.labels.push_back({std::max(x0, 0.0f), std::min(x1, w), row_, colour, m_.item_label(item)});
  }

  const TimelineModel& m_;
  const TimeAxis& axis_;
  const DrawOptions& opt_;
  DrawList& out_;
  std::int32_t row_ = 0;
  std::size_t first_rect_ = 0;
};

}  // namespace

DrawList prepare_draw_list(const TimelineModel& model, const RowLayout& layout, const TimeAxis& axis, int y0,
                           int y1, const DrawOptions& options, const QueueTracks* queues) {
  DrawList out;
  out.axis = axis;
  out.y0 = y0;
  out.y1 = y1;
  if (layout.size() != model.rows().size()) return out;
  RowPreparer prep(model, axis, options, out);
  for (int r : layout.rows_in(y0, y1)) {
    const Row& row = model.rows()[static_cast<std::size_t>(r)];
    if (row.kind == RowKind::kRankHeader) continue;
    if (row.kind == RowKind::kMemory) {
      if (row.counter < 0) continue;
      const auto& c = model.counters()[static_cast<std::size_t>(row.counter)];
      out.counters.push_back({r, RowKind::kMemory, c.max_value(), c.columns(axis)});
      continue;
    }
    if (row.kind == RowKind::kQueue) {
      // Max (and min) per pixel column from the track's pyramid: a zoomed-out
      // frame reads one bucket per column, not every change.
      const CounterTrack* c = queues ? queues->for_stream(row.stream) : nullptr;
      if (c) out.counters.push_back({r, RowKind::kQueue, c->max_value(), c->columns(axis)});
      continue;
    }
    prep.row(r);
  }
  return out;
}

}  // namespace moetrace::gui
