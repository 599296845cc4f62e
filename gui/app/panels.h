// The panels docked around the timeline. Each shows a plain message when it
// has nothing to show: still computing, nothing in this trace, or the error
// of a failed analysis. They draw the analyzer's results (analysis_results.h)
// and compute none of their own.
#pragma once

#include <QFutureWatcher>
#include <QLabel>
#include <QScrollArea>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QStackedWidget>
#include <QStyledItemDelegate>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QVBoxLayout>
#include <memory>
#include <optional>

#include "moetrace/gui/analysis_results.h"
#include "moetrace/gui/time_axis.h"
#include "moetrace/gui/timeline_model.h"
#include "panel_models.h"
#include "recommendations_model.h"

namespace moetrace::gui {

// A read-only table of whole-row selection, as every panel shows them.
QTableView* make_table(QWidget* parent);
// A vertical box over `w` with the 4-pixel margins of the panels' content.
QVBoxLayout* padded_box(QWidget* w);
// `view` shows `model` through `proxy`, sorted by kSortRole when a header is
// clicked, and first by `column` (-1: the model's own order).
void show_sorted(QTableView* view, QSortFilterProxyModel* proxy, QAbstractItemModel* model, int column);
// A tab of `tabs` with a table of `model` that sorts by kSortRole when a
// header is clicked (the model's own order until then).
QTableView* add_sorted_table(QTabWidget* tabs, QAbstractItemModel* model, const QString& title);

// A message page and a content page.
class PanelFrame : public QStackedWidget {
  Q_OBJECT
 public:
  explicit PanelFrame(QWidget* parent = nullptr);
  void set_content(QWidget* content);
  void show_message(const QString& text);
  void show_content();
  bool showing_message() const { return currentIndex() == 0; }
  QString message() const { return message_->text(); }

 private:
  QLabel* message_;
};

class DetailsPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit DetailsPanel(QWidget* parent = nullptr);
  void show_item(const TimelineModel* model, ItemRef item);
  DetailsModel* model() const { return model_; }

 private:
  DetailsModel* model_;
  QTableView* view_;
};

// Paints kSplitRole as a stacked bar in the breakdown's colours.
class SplitBarDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

class BreakdownPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit BreakdownPanel(QWidget* parent = nullptr);
  void set_computing();
  // null breakdown with an error: the analysis failed; the message says why.
  void set_breakdown(std::shared_ptr<const analyzer::Breakdown> b, const QString& error = {});
  BreakdownModel* model() const { return model_; }
  QTableView* view() const { return view_; }

 signals:
  void layer_activated(int layer);

 private:
  BreakdownModel* model_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  QLabel* summary_;
};

class RangePanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit RangePanel(QWidget* parent = nullptr);
  void set_model(std::shared_ptr<const TimelineModel> model);
  void set_range(double t0_ns, double t1_ns);
  void clear_range();
  RangeModel* model() const { return model_; }
  // Waits for a pending computation (tests).
  void wait();

 private:
  std::shared_ptr<const TimelineModel> timeline_;
  RangeModel* model_;
  QSortFilterProxyModel* proxy_;
  QTableView* view_;
  QLabel* title_;
  QFutureWatcher<analyzer::WindowBreakdown>* watcher_;
};

class ExpertLoadPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit ExpertLoadPanel(QWidget* parent = nullptr);
  void set_computing();
  void set_index(std::shared_ptr<const analyzer::Trace> trace, std::shared_ptr<const ExpertLoadIndex> index);
  void set_iteration(int iteration);  // selects it on the slider where present
  ExpertLoadModel* model() const { return model_; }
  QSlider* slider() const { return slider_; }

 signals:
  void layer_activated(int layer);

 private:
  void update_label();
  ExpertLoadModel* model_;
  QTableView* view_;
  QSlider* slider_;
  QLabel* label_;
  QLabel* scale_;
};

// A report section (report.h) as the report prints it: its paragraphs and
// captioned tables, one under the other.
class SectionView : public QScrollArea {
  Q_OBJECT
 public:
  explicit SectionView(QWidget* parent = nullptr);
  void set_section(const analyzer::ReportSection* s);  // null: empty
  int table_count() const { return static_cast<int>(tables_.size()); }
  QTableWidget* table(int i) const { return tables_[static_cast<std::size_t>(i)]; }

 private:
  QWidget* body_ = nullptr;
  std::vector<QTableWidget*> tables_;
};

class RecommendationsPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit RecommendationsPanel(QWidget* parent = nullptr);
  void set_computing();
  // The recommendations of `r`, or why they failed; null: none computed.
  void set_results(const std::shared_ptr<const AnalysisResults>& r);
  RecommendationsModel* model() const { return model_; }
  QTableView* view() const { return view_; }

 signals:
  void layer_activated(int layer);

 private:
  RecommendationsModel* model_;
  QTableView* view_;
};

// GPU idle time, launch queues and kernel launches as Holistic Trace Analysis
// defines them (analyzer::LaunchQueueAnalysis, launch_queue.h): a tab per
// table, each row one stream (idle time, queue length) or rank (launches).
class GpuQueuesPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit GpuQueuesPanel(QWidget* parent = nullptr);
  void set_computing();
  void set_results(const std::shared_ptr<const AnalysisResults>& r);
  LaunchQueueModel* idle_model() const { return idle_; }
  LaunchQueueModel* queue_model() const { return queues_; }
  LaunchQueueModel* launch_model() const { return launches_; }
  QTabWidget* tabs() const { return tabs_; }

 private:
  LaunchQueueModel* idle_;
  LaunchQueueModel* queues_;
  LaunchQueueModel* launches_;
  QTabWidget* tabs_;
};

// A chart drawn from the analyses' results on a white ground, repainted
// when they change.
class ResultsChart : public QWidget {
 public:
  using QWidget::QWidget;
  void set_results(std::shared_ptr<const AnalysisResults> r);

 protected:
  void paintEvent(QPaintEvent*) final;
  // Draws the chart over the white ground.
  virtual void paint(QPainter& p) = 0;

  std::shared_ptr<const AnalysisResults> r_;
};

// Locality of expert load across iterations (analyzer::analyze_locality):
// the mean cosine similarity of the load of iterations d apart, one curve
// over all layers (bold) and one per layer.
class LocalityChart : public ResultsChart {
  Q_OBJECT
 public:
  using ResultsChart::ResultsChart;
  QSize sizeHint() const override { return {400, 220}; }

 protected:
  void paint(QPainter& p) override;
};

// The chart, and the report's locality tables (per layer and distance).
class LocalityPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit LocalityPanel(QWidget* parent = nullptr);
  void set_computing();
  void set_results(const std::shared_ptr<const AnalysisResults>& r);
  SectionView* tables() const { return tables_; }

 private:
  LocalityChart* chart_;
  SectionView* tables_;
};

// Memory in use per rank (the analyzer's memory timeline) over the
// timeline's visible window, its peak in view, and the memory bubbles of
// the memory analysis hatched.
class MemoryChart : public ResultsChart {
  Q_OBJECT
 public:
  using ResultsChart::ResultsChart;
  void set_model(std::shared_ptr<const TimelineModel> model);
  void set_axis(const TimeAxis& axis);
  QSize sizeHint() const override { return {500, 240}; }

 protected:
  void paint(QPainter& p) override;

 private:
  std::shared_ptr<const TimelineModel> model_;
  TimeAxis axis_;
};

// The chart, and the report's memory section: peak and its composition per
// rank, bubbles per tag and per buffer, the mpipemoe Eq. 1-6 model per layer
// (the memory of no reuse and of S1-S4 by the equations, beside what the
// trace's buffers show).
class MemoryPanel : public PanelFrame {
  Q_OBJECT
 public:
  explicit MemoryPanel(QWidget* parent = nullptr);
  void set_model(std::shared_ptr<const TimelineModel> model);
  void set_axis(const TimeAxis& axis);
  void set_computing();
  void set_results(const std::shared_ptr<const AnalysisResults>& r);
  QString note() const { return note_->text(); }
  SectionView* tables() const { return tables_; }

 private:
  MemoryChart* chart_;
  QLabel* note_;
  SectionView* tables_;
  bool has_counters_ = false;
};

// The colour legend, laid out in one wrapping line of swatches.
class LegendWidget : public QWidget {
  Q_OBJECT
 public:
  explicit LegendWidget(QWidget* parent = nullptr);
  QSize sizeHint() const override;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int w) const override;

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  int layout_items(int width, QPainter* p) const;
};

}  // namespace moetrace::gui
