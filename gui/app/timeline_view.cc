#include "timeline_view.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "moetrace/analyzer/report.h"
#include "moetrace/gui/format.h"
#include "moetrace/gui/item_details.h"

namespace moetrace::gui {

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  qRegisterMetaType<ItemRef>();
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setMinimumSize(400, 200);
  vbar_ = new QScrollBar(Qt::Vertical, this);
  connect(vbar_, &QScrollBar::valueChanged, this, [this](int v) {
    if (v != scroll_y_) set_scroll(v);
  });
  watcher_ = new QFutureWatcher<DrawList>(this);
  connect(watcher_, &QFutureWatcher<DrawList>::finished, this, [this] {
    if (watcher_->future().resultCount() > 0) {
      DrawList list = watcher_->result();
      if (list.generation <= generation_) {
        shown_ = std::move(list);
        shown_model_ = model_.get();
        update();
      }
    }
    if (dirty_) start_job();
  });
  layout_ = std::make_shared<RowLayout>();
}

TimelineView::~TimelineView() {
  if (watcher_->isRunning()) watcher_->waitForFinished();
}

QRect TimelineView::canvas_rect() const {
  const int sb = vbar_ ? vbar_->sizeHint().width() : 0;
  return QRect(kGutterWidth, kRulerHeight, std::max(1, width() - kGutterWidth - sb),
               std::max(1, height() - kRulerHeight));
}

double TimelineView::origin_ns() const { return model_ ? static_cast<double>(model_->start_ns()) : 0.0; }

AxisLimits TimelineView::limits() const {
  AxisLimits l;
  if (model_) {
    l.trace_start_ns = static_cast<double>(model_->start_ns());
    l.trace_end_ns = static_cast<double>(model_->end_ns());
  }
  return l;
}

void TimelineView::set_model(std::shared_ptr<const TimelineModel> model) {
  if (watcher_->isRunning()) watcher_->waitForFinished();
  model_ = std::move(model);
  queues_.reset();
  replay_.reset();
  shown_ = {};
  shown_model_ = nullptr;
  selected_ = {};
  selected_row_ = -1;
  range_.reset();
  highlighted_layer_ = -1;
  // A large run opens with its ranks folded to their header rows; a click on
  // a header (or View > Expand all ranks) opens them.
  const std::size_t groups = model_ ? model_->groups().size() : 0;
  collapsed_.assign(groups, groups > analyzer::kRanksShownInFull);
  scroll_y_ = 0;
  relayout();
  if (model_) fit_all();
  update();
}

void TimelineView::swap_model(std::shared_ptr<const TimelineModel> model) {
  if (!model_ || !model || model->trace_ptr() != model_->trace_ptr() ||
      model->groups().size() != model_->groups().size()) {
    set_model(std::move(model));
    return;
  }
  if (watcher_->isRunning()) watcher_->waitForFinished();
  // An item of a replayed trace means nothing in another one.
  const bool same_replay = model->replayed_trace() == model_->replayed_trace();
  model_ = std::move(model);
  const bool keep = selected_.valid() && (same_replay || !is_replayed(selected_.source));
  const auto place = keep ? model_->place_of(selected_) : std::nullopt;
  if (place) {
    selected_row_ = place->row;
  } else if (selected_.valid()) {
    selected_ = {};
    selected_row_ = -1;
    emit item_selected({});
  }
  relayout();
  axis_updated();  // a prediction may end past the trace: the limits moved
  prepare_now();   // no frame without the rows
}

void TimelineView::set_queue_tracks(std::shared_ptr<const QueueTracks> queues) {
  queues_ = std::move(queues);
  relayout();
}

void TimelineView::set_queue_tracks_visible(bool visible) {
  if (visible == show_queues_) return;
  show_queues_ = visible;
  relayout();
}

void TimelineView::relayout() {
  ++layout_generation_;
  const QueueTracks* queues = show_queues_ ? queues_.get() : nullptr;
  layout_ = model_ ? std::make_shared<const RowLayout>(RowLayout::compute(*model_, collapsed_, queues))
                   : std::make_shared<const RowLayout>();
  update_scrollbar();
  request_draw_list();
  update();
}

void TimelineView::update_scrollbar() {
  const int page = canvas_rect().height();
  const int max = std::max(0, layout_->total_height() - page);
  const QSignalBlocker block(vbar_);
  vbar_->setRange(0, max);
  vbar_->setPageStep(page);
  vbar_->setSingleStep(20);
  scroll_y_ = std::clamp(scroll_y_, 0, max);
  vbar_->setValue(scroll_y_);
}

void TimelineView::set_scroll(int y) {
  const int clamped = std::clamp(y, 0, vbar_->maximum());
  if (clamped == scroll_y_) return;
  scroll_y_ = clamped;
  {
    const QSignalBlocker block(vbar_);
    vbar_->setValue(scroll_y_);
  }
  // Rows just scrolled in may be outside the prepared band.
  if (scroll_y_ < shown_.y0 || scroll_y_ + canvas_rect().height() > shown_.y1) request_draw_list();
  update();
}

void TimelineView::axis_updated() {
  axis_.width_px = canvas_rect().width();
  axis_ = clamp_axis(axis_, limits());
  request_draw_list();
  update();
  emit axis_changed();
}

void TimelineView::request_draw_list() {
  if (!model_) return;
  ++generation_;
  if (watcher_->isRunning()) {
    dirty_ = true;
    return;
  }
  start_job();
}

void TimelineView::start_job() {
  dirty_ = false;
  if (!model_) return;
  const int margin = draw_options_.margin_rows_px;
  const int y0 = scroll_y_ - margin;
  const int y1 = scroll_y_ + canvas_rect().height() + margin;
  auto model = model_;
  auto layout = layout_;
  const TimeAxis axis = axis_;
  const DrawOptions opts = draw_options_;
  const std::uint64_t gen = generation_;
  auto queues = queues_;
  watcher_->setFuture(QtConcurrent::run([model, layout, queues, axis, y0, y1, opts, gen] {
    DrawList l = prepare_draw_list(*model, *layout, axis, y0, y1, opts, queues.get());
    l.generation = gen;
    return l;
  }));
}

void TimelineView::prepare_now() {
  if (!model_) return;
  if (watcher_->isRunning()) watcher_->waitForFinished();
  dirty_ = false;
  axis_.width_px = canvas_rect().width();
  shown_ = prepare_draw_list(*model_, *layout_, axis_, scroll_y_ - draw_options_.margin_rows_px,
                             scroll_y_ + canvas_rect().height() + draw_options_.margin_rows_px, draw_options_,
                             queues_.get());
  shown_.generation = generation_;
  shown_model_ = model_.get();
  update();
}

double TimelineView::anchor_x() const {
  const QRect c = canvas_rect();
  if (mouse_ && c.contains(*mouse_)) return mouse_->x() - c.left();
  return c.width() / 2.0;
}

void TimelineView::zoom_in() {
  axis_ = zoom_axis(axis_, kZoomStep, anchor_x(), limits());
  axis_updated();
}

void TimelineView::zoom_out() {
  axis_ = zoom_axis(axis_, 1 / kZoomStep, anchor_x(), limits());
  axis_updated();
}

void TimelineView::pan_left() {
  axis_ = pan_axis(axis_, -kPanStep * axis_.width_px, limits());
  axis_updated();
}

void TimelineView::pan_right() {
  axis_ = pan_axis(axis_, kPanStep * axis_.width_px, limits());
  axis_updated();
}

void TimelineView::zoom_to(double t0, double t1) {
  if (t1 < t0) std::swap(t0, t1);
  const double margin = std::max((t1 - t0) * 0.02, 1.0);
  axis_ = TimeAxis::fit(t0 - margin, t1 + margin, canvas_rect().width());
  axis_updated();
}

void TimelineView::set_axis(const TimeAxis& axis) {
  axis_ = axis;
  axis_updated();
}

void TimelineView::fit_all() {
  if (model_) zoom_to(static_cast<double>(model_->start_ns()), static_cast<double>(model_->end_ns()));
}

void TimelineView::fit_selection() {
  if (!model_) return;
  if (selected_.valid())
    zoom_to(static_cast<double>(model_->item_start(selected_)), static_cast<double>(model_->item_end(selected_)));
  else if (range_)
    zoom_to(range_->first, range_->second);
  else
    fit_all();
}

void TimelineView::reveal_row(int row) {
  if (row < 0 || static_cast<std::size_t>(row) >= layout_->size()) return;
  if (!layout_->visible(row)) {
    const auto g = static_cast<std::size_t>(model_->rows()[static_cast<std::size_t>(row)].group);
    if (g < collapsed_.size()) collapsed_[g] = false;
    relayout();
  }
  const int y = layout_->y(row), h = layout_->height(row), page = canvas_rect().height();
  if (y < scroll_y_ || y + h > scroll_y_ + page) set_scroll(y - page / 3);
}

void TimelineView::select_item(ItemRef item, bool reveal) {
  if (!model_) return;
  const auto place = model_->place_of(item);
  if (!place) return;
  selected_ = item;
  selected_row_ = place->row;
  if (reveal) {
    reveal_row(place->row);
    const double s = static_cast<double>(model_->item_start(item));
    const double e = static_cast<double>(model_->item_end(item));
    if (e - s > 0.9 * axis_.window_ns()) {
      zoom_to(s, e);
    } else if (s < axis_.t0_ns || e > axis_.t1_ns()) {
      axis_.t0_ns = (s + e) / 2 - axis_.window_ns() / 2;
      axis_updated();
    }
  }
  update();
  emit item_selected(item);
}

void TimelineView::clear_selection() {
  const bool had = selected_.valid();
  selected_ = {};
  selected_row_ = -1;
  update();
  if (had) emit item_selected({});
}

void TimelineView::select_range(double t0, double t1) {
  if (t1 < t0) std::swap(t0, t1);
  range_ = {t0, t1};
  update();
  emit range_selected(t0, t1);
}

void TimelineView::select_layer(int layer) {
  highlighted_layer_ = layer;
  if (!model_) return;
  // The layer's first pass: the earliest span of it, joined over ranks.
  const Span* first = nullptr;
  for (const auto& s : model_->spans())
    if (s.level == SpanLevel::kLayer && s.layer == layer && (!first || s.start_ns < first->start_ns)) first = &s;
  if (first) {
    double t0 = static_cast<double>(first->start_ns), t1 = static_cast<double>(first->end_ns);
    for (const auto& s : model_->spans())
      if (s.level == SpanLevel::kLayer && s.layer == layer && s.iteration == first->iteration &&
          s.phase == first->phase && s.micro_batch == first->micro_batch) {
        t0 = std::min(t0, static_cast<double>(s.start_ns));
        t1 = std::max(t1, static_cast<double>(s.end_ns));
      }
    zoom_to(t0 - 0.1 * (t1 - t0), t1 + 0.1 * (t1 - t0));
  }
  update();
}

void TimelineView::set_all_collapsed(bool collapsed) {
  std::fill(collapsed_.begin(), collapsed_.end(), collapsed);
  relayout();
}

// --- painting -------------------------------------------------------------------

void TimelineView::paintEvent(QPaintEvent*) {
  QElapsedTimer timer;
  timer.start();
  QPainter p(this);
  const QRect canvas = canvas_rect();
  if (!model_) {
    p.fillRect(rect(), QColor(0xFF, 0xFF, 0xFF));
    p.setPen(QColor(0x60, 0x60, 0x60));
    p.drawText(rect(), Qt::AlignCenter, tr("No trace"));
    return;
  }
  PaintInput in;
  in.model = model_.get();
  in.layout = layout_.get();
  in.list = shown_model_ == model_.get() ? &shown_ : nullptr;
  in.axis = axis_;
  in.scroll_y = scroll_y_;
  in.canvas = canvas;
  painter_.paint(p, in);
  paint_overlays(p, canvas);
  paint_gutter(p, canvas);
  paint_ruler(p, canvas);
  last_paint_ms_ = static_cast<double>(timer.nsecsElapsed()) / 1e6;
}

QRect TimelineView::item_rect(int row, ItemRef item, const QRect& canvas) const {
  if (row < 0 || !layout_->visible(row)) return {};
  const double x0 = axis_.x(static_cast<double>(model_->item_start(item)));
  const double x1 = axis_.x(static_cast<double>(model_->item_end(item)));
  const int l = canvas.left() + static_cast<int>(std::floor(std::clamp(x0, -10.0, canvas.width() + 10.0)));
  const int r = canvas.left() + static_cast<int>(std::ceil(std::clamp(x1, -10.0, canvas.width() + 10.0)));
  const int y = canvas.top() + layout_->y(row) - scroll_y_;
  return QRect(l, y, std::max(3, r - l), layout_->height(row));
}

void TimelineView::paint_overlays(QPainter& p, const QRect& canvas) {
  p.save();
  p.setClipRect(canvas);
  // The highlighted layer's spans.
  if (highlighted_layer_ >= 0) {
    p.setPen(QPen(QColor(0xC2, 0x18, 0x5B), 2));
    p.setBrush(Qt::NoBrush);
    for (int r : layout_->rows_in(scroll_y_, scroll_y_ + canvas.height())) {
      const auto& row = model_->rows()[static_cast<std::size_t>(r)];
      const bool layers = row.kind == RowKind::kLayers || row.items.source() == ItemSource::kReplayedSpan;
      if (!layers) continue;
      auto [first, last] = model_->visible_range(row, axis_.t0_ns, axis_.t1_ns());
      for (std::size_t k = first; k < last && k < first + 10000; ++k) {
        const ItemRef item = model_->row_item(row, k);
        const Span& span = model_->span(item);
        if (span.level == SpanLevel::kLayer && span.layer == highlighted_layer_)
          p.drawRect(item_rect(r, item, canvas).adjusted(1, 1, -1, -1));
      }
    }
  }
  if (selected_.valid()) {
    const QRect box = item_rect(selected_row_, selected_, canvas);
    if (!box.isNull()) {
      p.setBrush(Qt::NoBrush);
      p.setPen(QPen(QColor(0xFF, 0xFF, 0xFF), 3));
      p.drawRect(box.adjusted(0, 1, 0, -1));
      p.setPen(QPen(QColor(0x10, 0x10, 0x10), 1.5));
      p.drawRect(box.adjusted(0, 1, 0, -1));
    }
  }
  if (range_) {
    const double x0 = canvas.left() + std::clamp(axis_.x(range_->first), -2.0, canvas.width() + 2.0);
    const double x1 = canvas.left() + std::clamp(axis_.x(range_->second), -2.0, canvas.width() + 2.0);
    const QRectF band(QPointF(std::max<double>(x0, canvas.left() - 1), canvas.top()),
                      QPointF(std::min<double>(x1, canvas.right() + 1), canvas.bottom()));
    p.fillRect(band, QColor(0x1E, 0x78, 0xFF, 40));
    p.setPen(QPen(QColor(0x1E, 0x78, 0xFF), 1));
    p.drawLine(QPointF(x0, canvas.top()), QPointF(x0, canvas.bottom()));
    p.drawLine(QPointF(x1, canvas.top()), QPointF(x1, canvas.bottom()));
  }
  if (mouse_ && canvas.contains(*mouse_)) {
    p.setPen(QPen(QColor(0, 0, 0, 70), 1));
    p.drawLine(mouse_->x(), canvas.top(), mouse_->x(), canvas.bottom());
  }
  p.restore();
}

void TimelineView::paint_gutter(QPainter& p, const QRect& canvas) {
  const GutterKey key{scroll_y_, canvas.height(), layout_generation_};
  const qreal dpr = devicePixelRatioF();
  if (!(key == gutter_key_) || gutter_cache_.isNull() || gutter_cache_.devicePixelRatio() != dpr) {
    gutter_cache_ = QPixmap(QSize(kGutterWidth, canvas.height()) * dpr);
    gutter_cache_.setDevicePixelRatio(dpr);
    QPainter gp(&gutter_cache_);
    gp.setFont(p.font());
    gp.translate(0, -canvas.top());
    render_gutter(gp, canvas);
    gutter_key_ = key;
  }
  p.drawPixmap(0, canvas.top(), gutter_cache_);
}

void TimelineView::render_gutter(QPainter& p, const QRect& canvas) {
  const QRect gutter(0, canvas.top(), kGutterWidth, canvas.height());
  p.save();
  p.setClipRect(gutter);
  p.fillRect(gutter, QColor(0xF7, 0xF8, 0xFA));
  QFont normal = p.font();
  QFont bold = normal;
  bold.setBold(true);
  QFont small = normal;
  small.setPointSizeF(normal.pointSizeF() * 0.9);
  const QFontMetrics fm_small(small);
  for (int r : layout_->rows_in(scroll_y_, scroll_y_ + canvas.height())) {
    const auto& row = model_->rows()[static_cast<std::size_t>(r)];
    const int y = canvas.top() + layout_->y(r) - scroll_y_;
    const int h = layout_->height(r);
    if (row.kind == RowKind::kRankHeader) {
      p.fillRect(QRect(0, y, kGutterWidth, h), QColor(0xDD, 0xE1, 0xE6));
      p.setPen(QColor(0x20, 0x20, 0x20));
      p.setFont(bold);
      const bool collapsed = static_cast<std::size_t>(row.group) < collapsed_.size() && collapsed_[static_cast<std::size_t>(row.group)];
      const QString arrow = collapsed ? QString(QChar(0x25B8)) : QString(QChar(0x25BE));
      p.drawText(QRect(6, y, kGutterWidth - 8, h), Qt::AlignVCenter | Qt::AlignLeft,
                 arrow + QStringLiteral(" ") + QString::fromStdString(row.label));
      p.setPen(QColor(0xB0, 0xB6, 0xBE));
      p.drawLine(0, y, kGutterWidth, y);
      continue;
    }
    if (row.label.empty()) continue;
    p.setFont(small);
    // Replayed tracks read apart from the measured ones (their rows are tinted too).
    p.setPen(row.replayed() ? QColor(0x8A, 0x4B, 0x08) : QColor(0x30, 0x30, 0x30));
    QString text = QString::fromStdString(row.label);
    if (row.kind == RowKind::kMemory && row.counter >= 0)
      text += QStringLiteral(" (max ") +
              QString::fromStdString(format_bytes(static_cast<double>(model_->counters()[static_cast<std::size_t>(row.counter)].max_value()))) +
              QStringLiteral(")");
    if (row.kind == RowKind::kQueue && queues_)
      if (const CounterTrack* c = queues_->for_stream(row.stream))
        text += QStringLiteral(" (max %1)").arg(c->max_value());
    const int indent = row.kind == RowKind::kActivities || row.is_counter() ||
                               (row.replayed() && measured_source(row.items.source()) == ItemSource::kActivity)
                           ? 16
                           : 24;
    p.drawText(QRect(indent, y, kGutterWidth - indent - 4, h), Qt::AlignVCenter | Qt::AlignLeft,
               fm_small.elidedText(text, Qt::ElideMiddle, kGutterWidth - indent - 4));
  }
  p.setPen(QColor(0xC8, 0xCC, 0xD2));
  p.drawLine(kGutterWidth - 1, canvas.top(), kGutterWidth - 1, canvas.bottom());
  p.restore();
}

void TimelineView::paint_ruler(QPainter& p, const QRect& canvas) {
  const QRect ruler(0, 0, width(), kRulerHeight);
  p.save();
  p.fillRect(ruler, QColor(0xF0, 0xF2, 0xF5));
  p.setPen(QColor(0x50, 0x50, 0x50));
  p.drawText(QRect(6, 0, kGutterWidth - 12, kRulerHeight), Qt::AlignVCenter | Qt::AlignLeft,
             tr("time from trace start"));
  p.setClipRect(QRect(canvas.left(), 0, canvas.width(), kRulerHeight));
  for (const auto& tick : ruler_ticks(axis_, origin_ns())) {
    const int x = canvas.left() + static_cast<int>(std::lround(tick.x));
    if (tick.major) {
      p.setPen(QColor(0x40, 0x40, 0x40));
      p.drawLine(x, kRulerHeight - 12, x, kRulerHeight);
      const QStaticText& text = painter_.text_cache().get(tick.label, 64, p.font());
      p.drawStaticText(QPointF(x + 3, kRulerHeight - 6 - text.size().height()), text);
    } else {
      p.setPen(QColor(0x90, 0x90, 0x90));
      p.drawLine(x, kRulerHeight - 5, x, kRulerHeight);
    }
  }
  if (range_) {
    const double x0 = canvas.left() + std::clamp(axis_.x(range_->first), -2.0, canvas.width() + 2.0);
    const double x1 = canvas.left() + std::clamp(axis_.x(range_->second), -2.0, canvas.width() + 2.0);
    p.fillRect(QRectF(QPointF(x0, 0), QPointF(x1, kRulerHeight)), QColor(0x1E, 0x78, 0xFF, 60));
    const QString d = QString::fromStdString(format_duration(range_->second - range_->first));
    p.setPen(QColor(0x0B, 0x3D, 0x91));
    p.drawText(QRectF(QPointF(std::max<double>(x0, canvas.left()), 0),
                      QPointF(std::min<double>(std::max(x1, x0 + 80), canvas.right()), kRulerHeight / 2.0 + 2)),
               Qt::AlignCenter, d);
  }
  p.setClipping(false);
  p.setPen(QColor(0xC8, 0xCC, 0xD2));
  p.drawLine(0, kRulerHeight - 1, width(), kRulerHeight - 1);
  p.restore();
}

// --- interaction ----------------------------------------------------------------

void TimelineView::resizeEvent(QResizeEvent*) {
  const int sb = vbar_->sizeHint().width();
  vbar_->setGeometry(width() - sb, kRulerHeight, sb, std::max(0, height() - kRulerHeight));
  // Keep the visible time window; the pixels per ns follow the width.
  const double window = axis_.window_ns();
  axis_.width_px = canvas_rect().width();
  if (window > 0 && model_) axis_.ns_per_px = window / axis_.width_px;
  update_scrollbar();
  if (model_) axis_updated();
}

std::optional<TimelineView::Hit> TimelineView::hit_at(QPoint pos) const {
  const QRect canvas = canvas_rect();
  if (!model_ || !canvas.contains(pos)) return std::nullopt;
  const int row = layout_->row_at(pos.y() - canvas.top() + scroll_y_);
  if (row < 0) return std::nullopt;
  const auto& r = model_->rows()[static_cast<std::size_t>(row)];
  if (r.kind == RowKind::kRankHeader) return std::nullopt;
  Hit hit;
  hit.row = row;
  if (r.is_counter()) return hit;
  const double x = pos.x() - canvas.left();
  const auto p = model_->hit_test(row, axis_.t(x), 3 * axis_.ns_per_px);
  if (!p) return std::nullopt;
  hit.item = model_->row_item(r, *p);
  if (shown_model_ == model_.get()) {
    const double xl = shown_.axis.t(0) == axis_.t(0) && shown_.axis.ns_per_px == axis_.ns_per_px
                          ? x
                          : shown_.axis.x(axis_.t(x));
    for (const auto& rect : shown_.rects)
      if (rect.row == row && rect.x0 <= xl && xl < rect.x1 && rect.count > 1) hit.folded = rect.count;
  }
  return hit;
}

QString TimelineView::tooltip_for(const Hit& hit) const {
  const auto& row = model_->rows()[static_cast<std::size_t>(hit.row)];
  if (row.kind == RowKind::kMemory) {
    if (row.counter < 0 || !mouse_) return {};
    const double t = axis_.t(mouse_->x() - canvas_rect().left());
    const auto& c = model_->counters()[static_cast<std::size_t>(row.counter)];
    return QStringLiteral("<b>%1</b>: %2<br>at %3")
        .arg(QString::fromStdString(c.name()).toHtmlEscaped(),
             QString::fromStdString(format_bytes(static_cast<double>(c.value_at(static_cast<std::int64_t>(t))))),
             QString::fromStdString(format_timestamp(t - origin_ns())));
  }
  if (row.kind == RowKind::kQueue) {
    const CounterTrack* c = queues_ ? queues_->for_stream(row.stream) : nullptr;
    if (c == nullptr || !mouse_) return {};
    const double t = axis_.t(mouse_->x() - canvas_rect().left());
    return tr("<b>queue length</b>: %1<br>at %2<br>launched, not yet started on the GPU")
        .arg(c->value_at(static_cast<std::int64_t>(std::floor(t))))
        .arg(QString::fromStdString(format_timestamp(t - origin_ns())));
  }
  const ItemRef item = hit.item;
  QString html = QStringLiteral("<b>%1</b><br>%2")
                     .arg(QString::fromStdString(model_->item_label(item)).toHtmlEscaped(),
                          QString::fromStdString(
                              format_duration(static_cast<double>(model_->item_end(item) - model_->item_start(item)))));
  html += QStringLiteral(" &middot; ") + QString::fromStdString(std::string(colour_class_name(model_->item_colour(item))));
  const ItemSource source = measured_source(item.source);
  if (source == ItemSource::kActivity) {
    const auto& t = model_->trace_of(item);
    const auto& a = t.activities[item.index];
    if (a.type != analyzer::ActivityType::kKernel)
      html += QStringLiteral("<br>") + QString::fromStdString(format_bytes(static_cast<double>(a.bytes)));
    if (a.op >= 0) {
      const auto& o = t.ops[static_cast<std::size_t>(a.op)];
      html += QStringLiteral("<br>%1 &middot; layer %2 &middot; iteration %3")
                  .arg(QString::fromStdString(std::string(op_kind_name(o.kind))))
                  .arg(o.layer)
                  .arg(o.iteration);
      if (o.chunk >= 0) html += QStringLiteral(" &middot; chunk %1").arg(o.chunk);
    }
  }
  if (is_replayed(item.source) && replay_)
    html += QStringLiteral("<br><i>%1</i>").arg(QString::fromStdString(replay_->label()).toHtmlEscaped());
  if (source == ItemSource::kSpan && replay_)
    if (const auto text = replay_->span_text(model_->span(item)); !text.empty())
      html += QStringLiteral("<br>") + QString::fromStdString(text).toHtmlEscaped();
  if (hit.folded > 1)
    html += QStringLiteral("<br><i>%1 events folded here; zoom in (W) to separate them</i>").arg(hit.folded);
  return html;
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  if (!model_ || e->button() != Qt::LeftButton) return;
  setFocus();
  const QPoint pos = e->position().toPoint();
  const QRect canvas = canvas_rect();
  press_pos_ = last_pos_ = pos;
  if (pos.x() < kGutterWidth && pos.y() >= kRulerHeight) {
    const int row = layout_->row_at(pos.y() - canvas.top() + scroll_y_);
    if (row >= 0 && model_->rows()[static_cast<std::size_t>(row)].kind == RowKind::kRankHeader) {
      const auto g = static_cast<std::size_t>(model_->rows()[static_cast<std::size_t>(row)].group);
      if (g < collapsed_.size()) collapsed_[g] = !collapsed_[g];
      relayout();
    }
    return;
  }
  if (pos.x() < canvas.left()) return;
  if (pos.y() < kRulerHeight || (e->modifiers() & Qt::ShiftModifier)) {
    drag_ = Drag::kRange;
    range_anchor_ns_ = axis_.t(pos.x() - canvas.left());
    range_ = {range_anchor_ns_, range_anchor_ns_};
    update();
    return;
  }
  drag_ = Drag::kPending;
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  const QPoint pos = e->position().toPoint();
  mouse_ = pos;
  if (!model_) return;
  const QRect canvas = canvas_rect();
  switch (drag_) {
    case Drag::kPending:
      if ((pos - press_pos_).manhattanLength() <= QApplication::startDragDistance()) break;
      drag_ = Drag::kPan;
      setCursor(Qt::ClosedHandCursor);
      [[fallthrough]];
    case Drag::kPan: {
      const QPoint d = pos - last_pos_;
      last_pos_ = pos;
      if (d.x() != 0) {
        axis_ = pan_axis(axis_, -d.x(), limits());
        axis_updated();
      }
      if (d.y() != 0) set_scroll(scroll_y_ - d.y());
      return;
    }
    case Drag::kRange: {
      const double t = axis_.t(std::clamp(pos.x() - canvas.left(), 0, canvas.width()));
      range_ = {std::min(range_anchor_ns_, t), std::max(range_anchor_ns_, t)};
      update();
      return;
    }
    case Drag::kNone: break;
  }
  const auto hit = hit_at(pos);
  if (hit) QToolTip::showText(e->globalPosition().toPoint(), tooltip_for(*hit), this);
  else QToolTip::hideText();
  update();  // the cursor line
}

void TimelineView::mouseReleaseEvent(QMouseEvent* e) {
  if (e->button() != Qt::LeftButton) return;
  const Drag drag = drag_;
  drag_ = Drag::kNone;
  unsetCursor();
  if (!model_) return;
  if (drag == Drag::kPending) {
    const auto hit = hit_at(e->position().toPoint());
    if (hit && hit->item.valid()) select_item(hit->item, false);
    else clear_selection();
  } else if (drag == Drag::kRange && range_) {
    const double px = (range_->second - range_->first) / axis_.ns_per_px;
    if (px >= 3) {
      emit range_selected(range_->first, range_->second);
    } else {
      range_.reset();
      update();
      emit range_cleared();
    }
  }
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent* e) {
  const auto hit = hit_at(e->position().toPoint());
  if (hit && hit->item.valid()) {
    select_item(hit->item, false);
    fit_selection();
  }
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  if (!model_) return;
  const QPoint a = e->angleDelta();
  if (e->modifiers() & Qt::ControlModifier) {
    const double x = e->position().x() - canvas_rect().left();
    axis_ = zoom_axis(axis_, std::pow(1.0015, a.y()), std::clamp<double>(x, 0, axis_.width_px), limits());
    axis_updated();
  } else if ((e->modifiers() & Qt::ShiftModifier) || std::abs(a.x()) > std::abs(a.y())) {
    const int d = std::abs(a.x()) > std::abs(a.y()) ? a.x() : a.y();
    axis_ = pan_axis(axis_, -d / 120.0 * kPanStep * axis_.width_px, limits());
    axis_updated();
  } else {
    set_scroll(scroll_y_ - a.y() / 2);
  }
  e->accept();
}

void TimelineView::keyPressEvent(QKeyEvent* e) {
  switch (e->key()) {
    case Qt::Key_W: zoom_in(); break;
    case Qt::Key_S: zoom_out(); break;
    case Qt::Key_A: pan_left(); break;
    case Qt::Key_D: pan_right(); break;
    case Qt::Key_Up: set_scroll(scroll_y_ - 40); break;
    case Qt::Key_Down: set_scroll(scroll_y_ + 40); break;
    case Qt::Key_PageUp: set_scroll(scroll_y_ - canvas_rect().height()); break;
    case Qt::Key_PageDown: set_scroll(scroll_y_ + canvas_rect().height()); break;
    case Qt::Key_Home: fit_all(); break;
    case Qt::Key_F: fit_selection(); break;
    case Qt::Key_Escape:
      clear_selection();
      if (range_) {
        range_.reset();
        emit range_cleared();
      }
      update();
      break;
    default: QWidget::keyPressEvent(e); return;
  }
  e->accept();
}

void TimelineView::leaveEvent(QEvent*) {
  mouse_.reset();
  update();
}

}  // namespace moetrace::gui
