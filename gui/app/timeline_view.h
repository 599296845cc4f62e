// The timeline widget: a gutter of row labels, a time ruler, and the rows of
// the TimelineModel. Pan and zoom as in Perfetto (W/S zoom, A/D pan, Ctrl +
// wheel zooms, drag pans), hover tooltips, click selection, Shift-drag (or a
// drag on the ruler) selects a time range.
//
// Frames never walk the trace: each view change asks a worker for a new draw
// list (prepare_draw_list) and paints the newest one it has, shifted and
// scaled to the current view until the fresh one arrives.
#pragma once

#include <QFutureWatcher>
#include <QPixmap>
#include <QScrollBar>
#include <QWidget>
#include <memory>
#include <optional>

#include "moetrace/gui/draw_list.h"
#include "moetrace/gui/replay_results.h"
#include "moetrace/gui/timeline_model.h"
#include "timeline_painter.h"

namespace moetrace::gui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kGutterWidth = 230;
  static constexpr int kRulerHeight = 28;
  static constexpr double kZoomStep = 1.25;  // per W/S press
  static constexpr double kPanStep = 0.125;  // of the window, per A/D press

  explicit TimelineView(QWidget* parent = nullptr);
  ~TimelineView() override;

  void set_model(std::shared_ptr<const TimelineModel> model);
  const std::shared_ptr<const TimelineModel>& model() const { return model_; }
  // Queue length per stream (RowKind::kQueue rows), computed with the
  // analyses after the model: the rows appear when they arrive. They must be
  // of the model's trace; set_model drops them.
  void set_queue_tracks(std::shared_ptr<const QueueTracks> queues);
  const std::shared_ptr<const QueueTracks>& queue_tracks() const { return queues_; }
  // A model of the same trace with other rows (the replayed tracks added or
  // taken away, TimelineModel::with_replay): the time window, the collapsed
  // ranks, the range, the queue rows and the selection (where the new model
  // still shows it) stay. A model of another trace is set as set_model does.
  void swap_model(std::shared_ptr<const TimelineModel> model);
  // The replay whose numbers the span tooltips show (null: none).
  void set_replay(std::shared_ptr<const ReplayResults> replay) { replay_ = std::move(replay); }
  const std::shared_ptr<const ReplayResults>& replay() const { return replay_; }
  // View > Queue lengths: hides or shows every kQueue row.
  void set_queue_tracks_visible(bool visible);
  bool queue_tracks_visible() const { return show_queues_; }
  const TimeAxis& axis() const { return axis_; }
  const RowLayout& layout() const { return *layout_; }
  int scroll_y() const { return scroll_y_; }
  QRect canvas_rect() const;
  ItemRef selected() const { return selected_; }
  std::optional<std::pair<double, double>> range() const { return range_; }
  int highlighted_layer() const { return highlighted_layer_; }

  // Prepares the draw list on this thread (screenshots, tests, benchmarks).
  void prepare_now();
  // Whether the shown draw list answers the latest view change (false while
  // a worker prepares a newer one).
  bool draw_list_current() const { return shown_model_ == model_.get() && shown_.generation == generation_; }
  const DrawList& shown_draw_list() const { return shown_; }
  // Whether rank group g shows its header row only.
  bool group_collapsed(std::size_t g) const { return g < collapsed_.size() && collapsed_[g]; }
  // Paint time of the last frame, ms.
  double last_paint_ms() const { return last_paint_ms_; }

  // Time of the ruler origin (the trace start).
  double origin_ns() const;

 public slots:
  void zoom_in();
  void zoom_out();
  void pan_left();
  void pan_right();
  void fit_all();
  void fit_selection();
  void zoom_to(double t0_ns, double t1_ns);
  void set_axis(const TimeAxis& axis);
  void select_item(moetrace::gui::ItemRef item, bool reveal = true);
  void clear_selection();
  void select_range(double t0_ns, double t1_ns);
  // Outlines the spans of a MoE layer and zooms to its first pass.
  void select_layer(int layer);
  void set_all_collapsed(bool collapsed);

 signals:
  void item_selected(moetrace::gui::ItemRef item);
  void range_selected(double t0_ns, double t1_ns);
  void range_cleared();
  void axis_changed();

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void mouseDoubleClickEvent(QMouseEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void keyPressEvent(QKeyEvent*) override;
  void leaveEvent(QEvent*) override;

 private:
  struct Hit {
    int row = -1;
    ItemRef item;
    std::uint32_t folded = 0;  // events folded under the cursor at this zoom
  };
  AxisLimits limits() const;
  void axis_updated();
  void relayout();
  void request_draw_list();
  void start_job();
  void update_scrollbar();
  void set_scroll(int y);
  double anchor_x() const;
  std::optional<Hit> hit_at(QPoint pos) const;
  QString tooltip_for(const Hit& hit) const;
  void reveal_row(int row);
  void paint_gutter(QPainter& p, const QRect& canvas);
  void render_gutter(QPainter& p, const QRect& canvas);
  void paint_ruler(QPainter& p, const QRect& canvas);
  void paint_overlays(QPainter& p, const QRect& canvas);
  QRect item_rect(int row, ItemRef item, const QRect& canvas) const;

  std::shared_ptr<const TimelineModel> model_;
  std::shared_ptr<const QueueTracks> queues_;
  std::shared_ptr<const ReplayResults> replay_;
  bool show_queues_ = true;
  std::shared_ptr<const RowLayout> layout_;
  std::uint64_t layout_generation_ = 0;
  std::vector<bool> collapsed_;
  TimeAxis axis_;
  int scroll_y_ = 0;
  QScrollBar* vbar_ = nullptr;
  TimelinePainter painter_;
  DrawOptions draw_options_;

  // Draw lists: the newest finished one, and the job preparing the next.
  DrawList shown_;
  const TimelineModel* shown_model_ = nullptr;
  std::shared_ptr<const RowLayout> shown_layout_;
  QFutureWatcher<DrawList>* watcher_ = nullptr;
  bool dirty_ = false;
  std::uint64_t generation_ = 0;

  ItemRef selected_;
  int selected_row_ = -1;
  std::optional<std::pair<double, double>> range_;
  int highlighted_layer_ = -1;

  enum class Drag { kNone, kPending, kPan, kRange };
  Drag drag_ = Drag::kNone;
  QPoint press_pos_, last_pos_;
  double range_anchor_ns_ = 0;
  std::optional<QPoint> mouse_;
  double last_paint_ms_ = 0;

  // The gutter changes only with scrolling and collapsing, not with pan or
  // zoom: it is painted once into a pixmap and reused.
  QPixmap gutter_cache_;
  struct GutterKey {
    int scroll_y = -1, height = -1;
    std::uint64_t layout = 0;
    bool operator==(const GutterKey&) const = default;
  } gutter_key_;
};

}  // namespace moetrace::gui

Q_DECLARE_METATYPE(moetrace::gui::ItemRef)
