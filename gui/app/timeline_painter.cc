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
    cc.fill = c.rgb();
    // Folded runs keep the hue (pale span colours must stay visible) and are
    // told apart by their dark base line.
    cc.folded = c.lighter(112).rgb();
    cc.edge = c.darker(150).rgb();
    // Dark text on light fills, light text on dark ones.
    const double luminance = 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue();
    text_pens_[static_cast<std::size_t>(i)] = QPen(luminance > 150 ? QColor(20, 20, 20) : QColor(255, 255, 255));
  }
  memory_ = to_qcolor(ColourClass::kMemory).rgb();
  memory_band_ = to_qcolor(ColourClass::kMemory).lighter(150).rgb();
  // Queue length: a hue of its own, so that it never reads as memory.
  queue_ = QColor(0x7B, 0x4F, 0xB0).rgb();
  queue_band_ = QColor(0x7B, 0x4F, 0xB0).lighter(160).rgb();
}

const QStaticText& TextCache::get(const std::string& text, int max_chars, const QFont& font) {
  // Truncation lengths come in a few steps so that zooming, which changes
  // every block's width every frame, mostly hits the cache.
  if (static_cast<std::size_t>(max_chars) < text.size()) {
    static constexpr int kSteps[] = {96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2};
    int step = 1;
    for (int st : kSteps)
      if (st <= max_chars) {
        step = st;
        break;
      }
    max_chars = step;
  } else {
    max_chars = 1 << 20;
  }
  std::string key = text;
  key += '\x1f';
  key += std::to_string(max_chars);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() >= kMaxEntries) cache_.clear();
  QString s = QString::fromStdString(text);
  if (s.size() > max_chars) s = s.left(std::max(0, max_chars - 1)) + QChar(0x2026);
  QStaticText st(s);
  st.setTextFormat(Qt::PlainText);
  st.prepare(QTransform(), font);
  return cache_.emplace(std::move(key), std::move(st)).first->second;
}

const QStaticText& TextCache::get(const QString& text, const QFont& font) {
  return get(text.toStdString(), 1 << 20, font);
}

namespace {

// Solid rectangles written straight into the layer's pixels: a frame holds
// thousands of them, and QPainter::fillRect costs ~0.3 us of state handling
// each before a single pixel is written. Coordinates are logical (canvas)
// pixels, scaled by the device pixel ratio and clipped here.
class Raster {
 public:
  Raster(QImage& img, qreal dpr) : img_(img), dpr_(dpr), w_(img.width()), h_(img.height()) {}
  void fill(double x, double y, double w, double h, QRgb c) {
    // Clamp in double first: a list drawn under a much deeper zoom maps to
    // coordinates far outside int.
    auto dev = [this](double v, int limit) { return std::clamp(v * dpr_, -1.0, limit + 1.0); };
    const int x0 = std::max(0, static_cast<int>(std::floor(dev(x, w_))));
    const int x1 = std::min(w_, static_cast<int>(std::ceil(dev(x + w, w_))));
    const int y0 = std::max(0, static_cast<int>(std::floor(dev(y, h_))));
    const int y1 = std::min(h_, static_cast<int>(std::ceil(dev(y + h, h_))));
    if (x1 <= x0 || y1 <= y0) return;
    for (int yy = y0; yy < y1; ++yy) {
      auto* line = reinterpret_cast<QRgb*>(img_.scanLine(yy));
      std::fill(line + x0, line + x1, c);
    }
  }

 private:
  QImage& img_;
  qreal dpr_;
  int w_, h_;
};

}  // namespace

void TimelinePainter::paint(QPainter& p, const PaintInput& in) {
  if (!in.model || !in.layout || in.layout->size() != in.model->rows().size()) {
    p.fillRect(in.canvas, Qt::white);
    return;
  }
  static const DrawList kNothingYet;
  const auto& model = *in.model;
  const auto& layout = *in.layout;
  const auto& list = in.list ? *in.list : kNothingYet;
  const qreal dpr = p.device() ? p.device()->devicePixelRatioF() : 1.0;
  const QSize size = in.canvas.size() * dpr;
  if (layer_.size() != size) layer_ = QImage(size, QImage::Format_ARGB32_Premultiplied);
  layer_.setDevicePixelRatio(1);
  Raster raster(layer_, dpr);
  const double cw = in.canvas.width();
  auto row_top = [&](int r) { return static_cast<double>(layout.y(r) - in.scroll_y); };

  // Rows: backgrounds alternate per group so ranks read as blocks.
  const auto rows = layout.rows_in(in.scroll_y, in.scroll_y + in.canvas.height());
  const QRgb header_bg = qRgb(0xE3, 0xE6, 0xEA), even_bg = qRgb(0xFB, 0xFB, 0xFC), odd_bg = qRgb(0xF2, 0xF4, 0xF7);
  // Replayed (or predicted) tracks on a warm tint, so they never pass for measured ones.
  const QRgb replayed_bg = qRgb(0xFB, 0xF3, 0xE4);
  double bottom = 0;
  for (int r : rows) {
    const auto& row = model.rows()[static_cast<std::size_t>(r)];
    raster.fill(0, row_top(r), cw, layout.height(r),
                row.kind == RowKind::kRankHeader ? header_bg
                : row.replayed()                 ? replayed_bg
                                                 : (row.group % 2 ? odd_bg : even_bg));
    bottom = std::max(bottom, row_top(r) + layout.height(r));
  }
  if (bottom < in.canvas.height()) raster.fill(0, bottom, cw, in.canvas.height() - bottom, qRgb(0xFF, 0xFF, 0xFF));

  // The list's x is in its own axis; map to the current one (they differ
  // while a newer list is being prepared after a pan or zoom).
  const double s = list.axis.ns_per_px / in.axis.ns_per_px;
  const double o = (list.axis.t0_ns - in.axis.t0_ns) / in.axis.ns_per_px;
  const bool exact = std::fabs(s - 1) < 1e-9 && std::fabs(o) < 1e-6;

  for (const auto& rect : list.rects) {
    if (!layout.visible(rect.row)) continue;
    const int h = layout.height(rect.row);
    const int inset = h >= 20 ? 2 : 1;
    const double y = row_top(rect.row) + inset;
    const double fx0 = std::floor(exact ? rect.x0 : rect.x0 * s + o);
    const double fx1 = std::ceil(exact ? rect.x1 : rect.x1 * s + o);
    if (fx1 < -1 || fx0 > cw + 1) continue;
    const double w = std::max(1.0, fx1 - fx0);
    const auto& cc = colours_[static_cast<std::size_t>(rect.colour)];
    const int bh = h - 2 * inset;
    if (rect.folded()) {
      // A folded run: on a dark base line.
      raster.fill(fx0, y, w, bh - 2, cc.folded);
      raster.fill(fx0, y + bh - 2, w, 2, cc.edge);
    } else {
      raster.fill(fx0, y, w, bh, cc.fill);
      if (w >= 4) raster.fill(fx0, y, 1, bh, cc.edge);
    }
  }

  for (const auto& c : list.counters) {
    if (!layout.visible(c.row) || c.max_value <= 0) continue;
    const int h = layout.height(c.row) - 4;
    const double base = row_top(c.row) + 2 + h;
    const bool queue = c.kind == RowKind::kQueue;
    for (const auto& col : c.columns) {
      const double fx0 = std::floor(exact ? col.x0 : col.x0 * s + o);
      const double fx1 = std::ceil(exact ? col.x1 : col.x1 * s + o);
      const double w = std::max(1.0, fx1 - fx0);
      const double hi = std::round(static_cast<double>(col.hi) / static_cast<double>(c.max_value) * h);
      const double lo = std::round(static_cast<double>(col.lo) / static_cast<double>(c.max_value) * h);
      // The band up to the column's max: a zoomed-out column shows the
      // largest value in it (and the solid part, the smallest).
      if (hi > lo) raster.fill(fx0, base - hi, w, hi - lo, queue ? queue_band_ : memory_band_);
      if (lo > 0) raster.fill(fx0, base - lo, w, lo, queue ? queue_ : memory_);
    }
  }

  layer_.setDevicePixelRatio(dpr);
  if (!list.labels.empty()) {
    QPainter lp(&layer_);
    const QFont font = p.font();
    lp.setFont(font);
    const QFontMetrics fm(font);
    const double char_w = std::max(1, fm.averageCharWidth());
    const int text_h = fm.height();
    for (const auto& label : list.labels) {
      if (!layout.visible(label.row)) continue;
      const double fx0 = std::max(0.0, exact ? label.x0 : label.x0 * s + o);
      const double fx1 = std::min<double>(cw, exact ? label.x1 : label.x1 * s + o);
      const double w = fx1 - fx0 - 6;
      if (w < 3 * char_w) continue;
      // Eliding by character count keeps text layout out of the frame budget.
      const int max_chars = static_cast<int>(w / char_w);
      const int r = label.row;
      lp.setPen(text_pens_[static_cast<std::size_t>(label.colour)]);
      lp.drawStaticText(QPointF(fx0 + 3, row_top(r) + (layout.height(r) - text_h) / 2.0),
                        text_.get(label.text, max_chars, font));
    }
  }
  p.drawImage(in.canvas.topLeft(), layer_);
}

}  // namespace moetrace::gui
