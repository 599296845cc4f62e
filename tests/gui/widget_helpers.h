// What the Qt tests of the viewer share: the fixture trace (fixture_trace.h)
// written once per process, a window that has opened it, and where an item
// lies on the timeline in widget pixels.
#pragma once

#include <QColor>
#include <QCoreApplication>
#include <QImage>
#include <QPoint>
#include <QString>
#include <memory>

#include "fixture_trace.h"
#include "main_window.h"

namespace moetrace::gui::testing {

inline QString fixture_path() {
  static const QString path = [] {
    const auto p = temp_path("widgets_fixture.db");
    write_fixture_trace(p);
    return QString::fromStdString(p);
  }();
  return path;
}

// A shown window with the fixture opened and its first frame prepared.
inline std::unique_ptr<MainWindow> loaded_window() {
  auto w = std::make_unique<MainWindow>();
  w->resize(1400, 900);
  w->show();
  QCoreApplication::processEvents();
  if (!w->open_blocking(fixture_path())) return nullptr;
  QCoreApplication::processEvents();
  w->timeline()->prepare_now();
  return w;
}

// Centre of the item at time t in a row, in timeline widget pixels.
inline QPoint point_of(TimelineView* v, int row, double t_ns) {
  const QRect c = v->canvas_rect();
  const int x = c.left() + static_cast<int>(v->axis().x(t_ns));
  const int y = c.top() + v->layout().y(row) - v->scroll_y() + v->layout().height(row) / 2;
  return {x, y};
}

// The colour of `img` (the timeline widget grabbed) just inside the top of
// the block at fixture time `t_us` in a row, above any label text.
inline QColor block_colour(TimelineView* v, const QImage& img, int row, double t_us) {
  const QPoint p = point_of(v, row, static_cast<double>(us(t_us)));
  return img.pixelColor(p.x(), p.y() - v->layout().height(row) / 2 + 3);
}

// The first row of `kind` of a stream of `role` on `rank`, or -1.
inline int find_row(const TimelineModel& m, RankId rank, RowKind kind, const char* role) {
  for (std::size_t i = 0; i < m.rows().size(); ++i) {
    const auto& r = m.rows()[i];
    if (r.rank == rank && r.kind == kind && r.sub_row == 0 && r.stream >= 0 &&
        m.trace().streams[static_cast<std::size_t>(r.stream)].role == role)
      return static_cast<int>(i);
  }
  return -1;
}

}  // namespace moetrace::gui::testing
