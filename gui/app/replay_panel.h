// The Replay panel: the trace replayed from its execution graph (the
// analyzer's exec_graph.h and replay.h, as `moetrace replay` prints it),
// measured against replayed per rank and iteration and per MoE layer, and
// with a pipeline-degree what-if (graph_whatif.h) the prediction beside
// them. The timeline shows the replayed (or predicted) tracks under each
// rank's stream tracks while View > Show replay is on.
#pragma once

#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <memory>

#include "moetrace/gui/replay_results.h"
#include "panels.h"

namespace moetrace::gui {

// One table of a replay: per (rank, iteration) or per MoE layer.
class ReplayModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum class Table { kIterations, kLayers };
  // kKey: rank or layer; kCount: iteration or windows.
  enum Column { kKey, kCount, kMeasured, kReplayed, kError, kPredicted, kChange, kColumns };
  explicit ReplayModel(Table table, QObject* parent = nullptr) : QAbstractTableModel(parent), table_(table) {}
  Table table() const { return table_; }
  // null, or results without a summary: no rows.
  void set_results(std::shared_ptr<const ReplayResults> r);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  struct Times {
    std::int64_t measured = 0, replayed = 0, predicted = -1;
  };
  Times times(int row) const;
  Table table_;
  std::shared_ptr<const ReplayResults> r_;
};

class ReplayPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ReplayPanel(QWidget* parent = nullptr);
  // Nothing replayed yet (a trace just opened, or the replay hidden).
  void set_idle();
  void set_computing();
  void set_results(std::shared_ptr<const ReplayResults> r);
  // The pipeline degree the what-if field holds (0: none).
  int pipeline_degree() const;
  void set_pipeline_degree(int r);
  ReplayModel* iterations() const { return iterations_; }
  ReplayModel* layers() const { return layers_; }
  QTableView* iterations_view() const { return iterations_view_; }
  PanelFrame* body() const { return body_; }
  QString summary() const { return summary_->text(); }
  QPushButton* apply_button() const { return apply_; }
  // Where the what-ifs' new durations come from, as shown beside the field.
  void set_cost_model_text(const QString& text);
  QString cost_model_text() const { return cost_model_->text(); }

 signals:
  // The user asked for the replay with this pipeline degree (0: the replay alone).
  void replay_requested(int pipeline_degree);
  // The user chose a cost-model file (moetrace fit's JSON) for the what-ifs.
  void cost_model_chosen(const QString& path);
  void layer_activated(int layer);
  void iteration_activated(int rank, int iteration);

 private:
  QSpinBox* degree_;
  QPushButton* apply_;
  QLabel* cost_model_;
  QLabel* summary_;
  PanelFrame* body_;
  QTabWidget* tabs_;
  ReplayModel* iterations_;
  ReplayModel* layers_;
  QTableView* iterations_view_ = nullptr;
};

}  // namespace moetrace::gui
