// Qt item models over the plain data of the panels (hotspot's pattern: the
// views are stock Qt views, the models are thin adapters, and every model runs
// under QAbstractItemModelTester in the tests).
#pragma once

#include <QAbstractTableModel>
#include <QColor>
#include <memory>
#include <optional>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/gui/analysis_results.h"
#include "moetrace/gui/expert_load_matrix.h"
#include "moetrace/gui/item_details.h"

namespace moetrace::gui {

// Roles beyond Qt's.
enum PanelRole {
  kLayerRole = Qt::UserRole + 1,  // int: the MoE layer of a row (-1: none)
  kSplitRole,                     // QVariantList of doubles: the stacked-bar segments
  kTokensRole,                    // qint64: tokens of a heatmap cell (-1: no record)
  kSortRole,                      // a number to sort by
  kRankRole,                      // int: the rank of a row (-1: none)
  kIterationRole,                 // int: the iteration of a row (-1: none)
};

// Key/value rows of the selected item; section headings are bold.
class DetailsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void set_fields(std::vector<DetailField> fields);
  bool is_heading(int row) const;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  std::vector<DetailField> fields_;
};

// One row per MoE layer (analyzer::LayerSummary, all ranks and iterations).
// The split bar shows where the layer's window went: the time each category
// ran alone, time with several categories at once, and idle time.
class BreakdownModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kLayer, kMeanTime, kSplit, kAllToAll, kAllReduce, kExpert, kGating, kHidden, kSlowestRank, kColumns };
  // Segment order of kSplitRole: the categories' exclusive time, then overlap, then idle.
  static constexpr int kOverlapSegment = kNumCategories;
  static constexpr int kIdleSegment = kNumCategories + 1;

  using QAbstractTableModel::QAbstractTableModel;
  void set_breakdown(std::shared_ptr<const analyzer::Breakdown> b);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  std::shared_ptr<const analyzer::Breakdown> b_;
};

// One row per rank plus "all ranks": where the time of a selected range went
// (analyzer::breakdown_in_window).
class RangeModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kRank, kBusy, kIdle, kFirstCategory, kHidden = kFirstCategory + kNumCategories, kEvents, kColumns };
  using QAbstractTableModel::QAbstractTableModel;
  void set_summary(std::optional<analyzer::WindowBreakdown> s);
  const std::optional<analyzer::WindowBreakdown>& summary() const { return s_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  const analyzer::RankSummary& row_data(int row) const;
  std::optional<analyzer::WindowBreakdown> s_;
};

// Layers x experts of one iteration; the cell colour is the token count on
// one scale for every iteration, so moving the slider compares like with like.
class ExpertLoadModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void set_index(std::shared_ptr<const analyzer::Trace> trace, std::shared_ptr<const ExpertLoadIndex> index);
  void set_iteration_position(int pos);
  int iteration_position() const { return pos_; }
  int iteration_count() const;
  int iteration_at(int pos) const;
  static QColor heat_colour(double fraction);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;
  // Columns are destination ranks and cells elements sent (a load read from
  // all-to-all split sizes), not experts and tokens.
  bool by_rank() const { return trace_ && trace_->expert_load_by_rank; }

 private:
  std::shared_ptr<const analyzer::Trace> trace_;
  std::shared_ptr<const ExpertLoadIndex> index_;
  ExpertLoadGrid grid_;
  int pos_ = 0;
};

// GPU idle time, launch queues and kernel launches (analyzer::LaunchQueueAnalysis,
// Holistic Trace Analysis's definitions; launch_queue.h): one model per table.
// Each cell gives its text, a number for kSortRole and a tooltip.
class LaunchQueueModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum class Table {
    kIdle,      // per rank and stream: idle time as host_wait, kernel_wait, other (StreamIdle)
    kQueues,    // per rank and stream with launches: HTA's queue-length summary (StreamQueue)
    kLaunches,  // per rank: kernel-launch statistics and outlier counts (RankLaunchStats)
  };
  struct IdleColumn {
    enum Column { kRank, kStream, kEvents, kWindow, kHostWait, kKernelWait, kOther, kIdle, kIdleRatio, kColumns };
  };
  struct QueueColumn {
    enum Column { kRank, kStream, kPoints, kMean, kStddev, kMin, kP25, kP50, kP75, kMax, kAtMax, kFull, kColumns };
  };
  struct LaunchColumn {
    enum Column {
      kRank, kLaunches, kCpuMean, kCpuP95, kDelayMean, kDelayP95, kDelayMax, kGpuMean,
      kShortKernels, kRuntimeOutliers, kDelayOutliers, kOtherCalls, kNoCall, kColumns
    };
  };

  explicit LaunchQueueModel(Table table, QObject* parent = nullptr) : QAbstractTableModel(parent), table_(table) {}
  Table table() const { return table_; }
  // null: no rows.
  void set_analysis(std::shared_ptr<const analyzer::Analyses> a);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  struct Cell {
    QString text;
    QVariant sort;
    QString tip;
  };
  // The analysis's options, or the defaults (HTA's) where none is set.
  const analyzer::LaunchQueueOptions& options() const;
  Cell idle_cell(int row, int column) const;
  Cell queue_cell(int row, int column) const;
  Cell launch_cell(int row, int column) const;
  Cell cell(int row, int column) const;
  QString idle_header(int column) const;
  QString queue_header(int column) const;
  QString launch_header(int column) const;
  QString idle_header_tip(int column) const;
  QString queue_header_tip(int column) const;
  QString launch_header_tip(int column) const;

  Table table_;
  std::shared_ptr<const analyzer::Analyses> a_;
};

}  // namespace moetrace::gui
