#include "replay_panel.h"

#include <QFileDialog>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <cmath>

#include "moetrace/gui/format.h"
#include "qt_text.h"

namespace moetrace::gui {

// --- ReplayModel ----------------------------------------------------------------

void ReplayModel::set_results(std::shared_ptr<const ReplayResults> r) {
  beginResetModel();
  r_ = std::move(r);
  endResetModel();
}

int ReplayModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !r_) return 0;
  const auto& s = r_->summary;
  return static_cast<int>(table_ == Table::kIterations ? s.iterations.size() : s.layers.size());
}

int ReplayModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

ReplayModel::Times ReplayModel::times(int row) const {
  const auto i = static_cast<std::size_t>(row);
  if (table_ == Table::kIterations) {
    const auto& r = r_->summary.iterations[i];
    return {r.measured_ns, r.replayed_ns, r.predicted_ns};
  }
  const auto& l = r_->summary.layers[i];
  return {l.measured_ns, l.replayed_ns, l.predicted_ns};
}

QVariant ReplayModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto row = static_cast<std::size_t>(index.row());
  const bool iterations = table_ == Table::kIterations;
  const auto& s = r_->summary;
  if (role == kLayerRole) return iterations ? -1 : s.layers[row].layer;
  if (role == kRankRole) return iterations ? s.iterations[row].rank : -1;
  if (role == kIterationRole) return iterations ? s.iterations[row].iteration : -1;
  const Times t = times(index.row());
  const double error = analyzer::relative_error(t.measured, t.replayed);
  const double change = t.predicted >= 0 ? analyzer::relative_error(t.replayed, t.predicted) : 0.0;
  if (role == kSortRole) {
    switch (index.column()) {
      case kKey: return iterations ? s.iterations[row].rank : s.layers[row].layer;
      case kCount: return iterations ? s.iterations[row].iteration : s.layers[row].windows;
      case kMeasured: return qlonglong(t.measured);
      case kReplayed: return qlonglong(t.replayed);
      case kError: return error;
      case kPredicted: return qlonglong(t.predicted);
      case kChange: return change;
      default: return {};
    }
  }
  if (role == Qt::ForegroundRole && index.column() == kError && std::fabs(error) > analyzer::kTraceReplayTolerance)
    return QColor(0xB0, 0x1E, 0x1E);  // past the tolerance the recommendations hold the replay to
  if (role == Qt::ToolTipRole)
    return qs(replay_numbers_text(t.measured, t.replayed, t.predicted));
  if (role != Qt::DisplayRole) return {};
  const QString none = QStringLiteral("\u2014");
  auto duration = [](std::int64_t ns) { return qs(format_duration(static_cast<double>(ns))); };
  switch (index.column()) {
    case kKey: return iterations ? QString::number(s.iterations[row].rank) : QStringLiteral("L%1").arg(s.layers[row].layer);
    case kCount:
      if (!iterations) return s.layers[row].windows;
      return s.iterations[row].iteration < 0 ? tr("span") : QString::number(s.iterations[row].iteration);
    case kMeasured: return duration(t.measured);
    case kReplayed: return duration(t.replayed);
    case kError: return qs(format_change(error));
    case kPredicted: return t.predicted >= 0 ? duration(t.predicted) : none;
    case kChange: return t.predicted >= 0 ? qs(format_change(change)) : none;
    default: return {};
  }
}

QVariant ReplayModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal) return {};
  const bool iterations = table_ == Table::kIterations;
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kMeasured:
        return iterations ? tr("The iteration's window on the rank in the trace")
                          : tr("The layer's mean window (its phases and micro-batches on one rank in one iteration)");
      case kReplayed: return tr("The same window in the trace replayed from its execution graph with the measured durations");
      case kError: return tr("replayed / measured - 1");
      case kPredicted: return tr("The same window after the what-if");
      case kChange: return tr("predicted / replayed - 1");
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case kKey: return iterations ? tr("Rank") : tr("Layer");
    case kCount: return iterations ? tr("Iteration") : tr("Windows");
    case kMeasured: return tr("Measured");
    case kReplayed: return tr("Replayed");
    case kError: return tr("Error");
    case kPredicted: return tr("Predicted");
    case kChange: return tr("Change");
    default: return {};
  }
}

// --- ReplayPanel ----------------------------------------------------------------

ReplayPanel::ReplayPanel(QWidget* parent) : QWidget(parent) {
  auto* box = padded_box(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("What-if: pipeline degree"), this));
  degree_ = new QSpinBox(this);
  degree_->setRange(1, 64);
  degree_->setSpecialValueText(tr("none"));  // 1: the replay alone
  degree_->setToolTip(tr("Split each MoE layer's dispatch, experts and combine into R pipelined chunks "
                         "(moetrace replay --what-if pipeline_degree=R) and show the predicted timeline"));
  apply_ = new QPushButton(tr("Replay"), this);
  apply_->setToolTip(tr("Replay the trace's execution graph (with the what-if, if one is set) and show its tracks"));
  auto* choose = new QPushButton(tr("Cost model\u2026"), this);
  choose->setToolTip(tr("A cost-model JSON file (moetrace fit of a calibration run) for the what-if's new durations "
                        "(moetrace-gui --cost-model)"));
  cost_model_ = new QLabel(this);
  set_cost_model_text({});
  bar->addWidget(degree_);
  bar->addWidget(apply_);
  bar->addWidget(choose);
  bar->addWidget(cost_model_, 1);
  connect(choose, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Cost model for the what-ifs"), QString(),
                                                      tr("Cost models (*.json);;All files (*)"));
    if (!path.isEmpty()) emit cost_model_chosen(path);
  });
  box->addLayout(bar);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  summary_->setTextFormat(Qt::PlainText);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  box->addWidget(summary_);

  body_ = new PanelFrame(this);
  tabs_ = new QTabWidget(body_);
  iterations_ = new ReplayModel(ReplayModel::Table::kIterations, this);
  layers_ = new ReplayModel(ReplayModel::Table::kLayers, this);
  auto add = [this](ReplayModel* m, const QString& title) {
    // In the summary's order until a header is clicked.
    auto* view = add_sorted_table(tabs_, m, title);
    if (m == iterations_) iterations_view_ = view;
    connect(view, &QTableView::doubleClicked, this, [this](const QModelIndex& i) {
      if (const int layer = i.data(kLayerRole).toInt(); layer >= 0) emit layer_activated(layer);
      if (const int rank = i.data(kRankRole).toInt(); rank >= 0) emit iteration_activated(rank, i.data(kIterationRole).toInt());
    });
  };
  add(iterations_, tr("Iterations"));
  add(layers_, tr("MoE layers"));
  body_->set_content(tabs_);
  box->addWidget(body_, 1);
  connect(apply_, &QPushButton::clicked, this, [this] { emit replay_requested(pipeline_degree()); });
  set_idle();
}

void ReplayPanel::set_cost_model_text(const QString& text) {
  cost_model_->setText(text.isEmpty() ? tr("costs: the trace's own fit where it has one, else a preset") : text);
}

int ReplayPanel::pipeline_degree() const { return degree_->value() > 1 ? degree_->value() : 0; }

void ReplayPanel::set_pipeline_degree(int r) { degree_->setValue(r > 1 ? r : 1); }

void ReplayPanel::set_idle() {
  iterations_->set_results(nullptr);
  layers_->set_results(nullptr);
  summary_->clear();
  body_->show_message(tr("View \u25B8 Show replay (Ctrl+R), or Replay above, replays the trace from its execution "
                         "graph (CPU ops per thread, launches, stream order, cross-stream waits, host "
                         "synchronisation, collectives) with the measured durations, and shows the replayed "
                         "tracks under each rank's streams."));
}

void ReplayPanel::set_computing() {
  summary_->clear();
  body_->show_message(tr("Replaying the trace's execution graph\u2026"));
}

void ReplayPanel::set_results(std::shared_ptr<const ReplayResults> r) {
  iterations_->set_results(r && r->error.empty() ? r : nullptr);
  layers_->set_results(r && r->error.empty() ? r : nullptr);
  if (!r) {
    set_idle();
    return;
  }
  if (!r->error.empty()) {
    summary_->clear();
    body_->show_message(tr("The replay failed: %1").arg(qs(r->error)));
    return;
  }
  set_pipeline_degree(r->what_ifs.pipeline_degree);
  const auto& s = r->summary;
  QStringList lines;
  lines << tr("Shown under each rank's streams: %1. Worst iteration error %2, worst layer error %3 (|replayed / "
              "measured - 1|). Execution graph: %4 points, %5 edges; %6 activities it cannot explain, %7 without a "
              "launching call. Computed in %8 s.")
               .arg(qs(r->label()), qs(format_percent(s.max_iteration_error)), qs(format_percent(s.max_layer_error)))
               .arg(s.nodes)
               .arg(s.edges)
               .arg(s.unexplained)
               .arg(s.unlaunched)
               .arg(r->seconds, 0, 'f', 2);
  for (const auto& m : s.missing) lines << QStringLiteral("- ") + qs(m);
  for (const auto& a : r->applied.applied) lines << QStringLiteral("- ") + qs(a);
  for (const auto& n : r->applied.notes) lines << QStringLiteral("- ") + qs(n);
  summary_->setText(lines.join(QLatin1Char('\n')));
  if (s.iterations.empty() && s.layers.empty()) {
    body_->show_message(tr("The trace has no GPU activity to compare."));
    return;
  }
  body_->show_content();
}

}  // namespace moetrace::gui
