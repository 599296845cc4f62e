// Paints a prepared draw list: row backgrounds, event rectangles (folded runs
// hatched), labels and counters. The timeline widget, the headless
// screenshot and the frame-time benchmark all paint through this one class,
// so the benchmark measures what the user sees.
#pragma once

#include <QColor>
#include <QImage>
#include <QPen>
#include <QPainter>
#include <QRect>
#include <QStaticText>
#include <array>
#include <string>
#include <unordered_map>

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

// Laid-out text by content: names repeat from frame to frame, and drawing
// a QStaticText skips the shaping that dominates drawText.
class TextCache {
 public:
  const QStaticText& get(const std::string& text, int max_chars, const QFont& font);
  const QStaticText& get(const QString& text, const QFont& font);

 private:
  static constexpr std::size_t kMaxEntries = 8192;
  std::unordered_map<std::string, QStaticText> cache_;
};

class TimelinePainter {
 public:
  TimelinePainter();
  // The whole canvas: backgrounds of the visible rows (white below the last
  // one) and the list's contents.
  void paint(QPainter& p, const PaintInput& in);
  TextCache& text_cache() { return text_; }

 private:
  struct ClassColours {
    QRgb fill = 0, folded = 0, edge = 0;
  };
  std::array<ClassColours, kNumColourClasses> colours_;
  std::array<QPen, kNumColourClasses> text_pens_;
  QRgb memory_ = 0, memory_band_ = 0;
  QRgb queue_ = 0, queue_band_ = 0;
  QImage layer_;  // the canvas, rasterized here and drawn in one blit
  TextCache text_;
};

}  // namespace moetrace::gui
