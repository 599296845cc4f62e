// The Recommendations panel's rows: one per piece of advice
// (analyzer::RecommendationItem), with its layer's replay beside it. Where
// the trace ran on hardware the layer's replay is the trace's own execution
// graph (LayerRecommendation::trace_replay): measured, replayed with the
// measured durations, and predicted at other pipeline degrees by the graph's
// what-if; otherwise the replay of the trace's configuration on the hardware
// model (LayerRecommendation::replay, simulated). The numbers are the
// recommenders'; the model only lays them out.
#pragma once

#include <QAbstractTableModel>
#include <optional>

#include "moetrace/analyzer/recommend.h"

namespace moetrace::gui {

class RecommendationsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kLayer, kSubject, kAction, kGain, kMeasured, kReplayed, kPredicted, kEvidence, kColumns };
  using QAbstractTableModel::QAbstractTableModel;
  void set_data(std::optional<analyzer::Recommendations> d);
  bool available() const { return d_.has_value(); }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  const analyzer::LayerRecommendation* layer(int layer) const;
  QString replay_cell(const analyzer::LayerRecommendation* L, int column, bool tooltip) const;
  std::optional<analyzer::Recommendations> d_;
};

}  // namespace moetrace::gui
