#include "timeline_painter.h"

#include <QFontMetrics>
#include <algorithm>
#include <cmath>

namespace moetrace::gui {

QColor to_qcolor(ColourClass c) {
  const Rgb rgb = colour_of(c);
  return QColor(rgb.r, rgb.g, rgb.b);
}

TimelinePainter::TimelinePainter() {
  for (int i = 0; i < kNumColourClasses; ++i) {
    const QColor c = to_qcolor(static_cast<ColourClass>(i));
    auto& cc = colours_[static_cast<std::size_t>(i)];
    cc.fill = c;
    cc.folded = c.lighter(135);
    cc.edge = c.darker(150);
    // Dark text on light fills, light text on dark ones.
    const double luminance = 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue();
    cc.text = luminance > 150 ? QColor(20, 20, 20) : QColor(255, 255, 255);
  }
}

void TimelinePainter::paint(QPainter& p, const PaintInput& in) const {
  if (!in.model || !in.layout || !in.list || in.layout->size() != in.model->rows().size()) return;
  const auto& model = *in.model;
  const auto& layout = *in.layout;
  const auto& list = *in.list;
  p.save();
  p.setClipRect(in.canvas);
  p.setRenderHint(QPainter::Antialiasing, false);

  // Rows: backgrounds alternate per group so ranks read as blocks.
  const auto rows = layout.rows_in(in.scroll_y, in.scroll_y + in.canvas.height());
  const QColor header_bg(0xE3, 0xE6, 0xEA), even_bg(0xFB, 0xFB, 0xFC), odd_bg(0xF2, 0xF4, 0xF7);
  for (int r : rows) {
    const auto& row = model.rows()[static_cast<std::size_t>(r)];
    const QRect band(in.canvas.left(), in.canvas.top() + layout.y(r) - in.scroll_y, in.canvas.width(), layout.height(r));
    p.fillRect(band, row.kind == RowKind::kRankHeader ? header_bg : (row.group % 2 ? odd_bg : even_bg));
  }

  // The list's x is in its own axis; map to the current one (they differ
  // while a newer list is being prepared after a pan or zoom).
  const double s = list.axis.ns_per_px / in.axis.ns_per_px;
  const double o = (list.axis.t0_ns - in.axis.t0_ns) / in.axis.ns_per_px;
  const bool exact = std::fabs(s - 1) < 1e-9 && std::fabs(o) < 1e-6;
  const int left = in.canvas.left();
  auto row_top = [&](int r) { return in.canvas.top() + layout.y(r) - in.scroll_y; };

  for (const auto& rect : list.rects) {
    if (!layout.visible(rect.row)) continue;
    const int h = layout.height(rect.row);
    const int inset = h >= 20 ? 2 : 1;
    const int y = row_top(rect.row) + inset;
    const double fx0 = exact ? rect.x0 : rect.x0 * s + o;
    const double fx1 = exact ? rect.x1 : rect.x1 * s + o;
    if (fx1 < -1 || fx0 > in.canvas.width() + 1) continue;
    const int x0 = left + static_cast<int>(std::floor(fx0));
    const int w = std::max(1, static_cast<int>(std::ceil(fx1)) - static_cast<int>(std::floor(fx0)));
    const auto& cc = colours_[static_cast<std::size_t>(rect.colour)];
    const QRect box(x0, y, w, h - 2 * inset);
    if (rect.folded()) {
      p.fillRect(box, cc.folded);
      if (w >= 8) p.fillRect(box, QBrush(cc.edge, Qt::BDiagPattern));
    } else {
      p.fillRect(box, cc.fill);
      if (w >= 4) p.fillRect(QRect(x0, y, 1, box.height()), cc.edge);
    }
  }

  if (!list.labels.empty()) {
    const QFontMetrics fm(p.font());
    const double char_w = std::max(1, fm.averageCharWidth());
    for (const auto& label : list.labels) {
      if (!layout.visible(label.row)) continue;
      const double fx0 = std::max(0.0, exact ? label.x0 : label.x0 * s + o);
      const double fx1 = std::min<double>(in.canvas.width(), exact ? label.x1 : label.x1 * s + o);
      const double w = fx1 - fx0 - 6;
      if (w < 3 * char_w) continue;
      // Eliding by character count keeps text layout out of the frame budget.
      const auto max_chars = static_cast<std::size_t>(w / char_w);
      QString text = QString::fromStdString(label.text);
      if (static_cast<std::size_t>(text.size()) > max_chars)
        text = text.left(static_cast<qsizetype>(max_chars > 1 ? max_chars - 1 : 0)) + QChar(0x2026);
      const int r = label.row;
      const int h = layout.height(r);
      p.setPen(colours_[static_cast<std::size_t>(label.colour)].text);
      p.drawText(QRectF(left + fx0 + 3, row_top(r), w, h), Qt::AlignVCenter | Qt::AlignLeft, text);
    }
  }

  const QColor mem = to_qcolor(ColourClass::kMemory);
  const QColor mem_band = mem.lighter(150);
  for (const auto& c : list.counters) {
    if (!layout.visible(c.row) || c.max_value <= 0) continue;
    const int h = layout.height(c.row) - 4;
    const int bottom = row_top(c.row) + 2 + h;
    for (const auto& col : c.columns) {
      const double fx0 = exact ? col.x0 : col.x0 * s + o;
      const double fx1 = exact ? col.x1 : col.x1 * s + o;
      const int x0 = left + static_cast<int>(std::floor(fx0));
      const int w = std::max(1, static_cast<int>(std::ceil(fx1)) - static_cast<int>(std::floor(fx0)));
      const int hi = static_cast<int>(std::lround(static_cast<double>(col.hi) / static_cast<double>(c.max_value) * h));
      const int lo = static_cast<int>(std::lround(static_cast<double>(col.lo) / static_cast<double>(c.max_value) * h));
      if (hi > lo) p.fillRect(QRect(x0, bottom - hi, w, hi - lo), mem_band);
      if (lo > 0) p.fillRect(QRect(x0, bottom - lo, w, lo), mem);
    }
  }
  p.restore();
}

}  // namespace moetrace::gui
