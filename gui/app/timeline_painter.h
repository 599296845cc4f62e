// Paints a prepared draw list: row backgrounds, event rectangles (folded runs
// hatched), labels and counters. The timeline widget, the headless
// screenshot and the frame-time benchmark all paint through this one class,
// so the benchmark measures what the user sees.
#pragma once

#include <QColor>
#include <QPainter>
#include <QRect>
#include <array>

#include "moetrace/gui/draw_list.h"
#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

QColor to_qcolor(ColourClass c);

struct PaintInput {
  const TimelineModel* model = nullptr;
  const RowLayout* layout = nullptr;
  const DrawList* list = nullptr;
  TimeAxis axis;        // the axis to show (the list may be from a slightly older one)
  int scroll_y = 0;     // layout y at the top of the canvas
  QRect canvas;         // widget pixels of the event area
};

class TimelinePainter {
 public:
  TimelinePainter();
  // Backgrounds of the visible rows and the list's contents, clipped to the canvas.
  void paint(QPainter& p, const PaintInput& in) const;

 private:
  struct ClassColours {
    QColor fill, folded, edge, text;
  };
  std::array<ClassColours, kNumColourClasses> colours_;
};

}  // namespace moetrace::gui
