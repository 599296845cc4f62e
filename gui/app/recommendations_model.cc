#include "recommendations_model.h"

#include "moetrace/gui/format.h"
#include "panel_models.h"
#include "qt_text.h"

namespace moetrace::gui {
namespace {

QString seconds_text(double s) { return qs(format_duration(s * 1e9)); }

}  // namespace

void RecommendationsModel::set_data(std::optional<analyzer::Recommendations> d) {
  beginResetModel();
  d_ = std::move(d);
  endResetModel();
}

int RecommendationsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !d_ ? 0 : static_cast<int>(d_->items.size());
}

int RecommendationsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

const analyzer::LayerRecommendation* RecommendationsModel::layer(int layer) const {
  for (const auto& L : d_->layers)
    if (L.layer == layer) return &L;
  return nullptr;
}

// Measured, replayed and predicted time of the layer: from the trace's own
// execution graph where computed, else the replay of its configuration on
// the hardware model (simulated; no prediction beside it).
QString RecommendationsModel::replay_cell(const analyzer::LayerRecommendation* L, int column, bool tooltip) const {
  static const QString none = QStringLiteral("\u2014");
  if (L && L->trace_replay.computed) {
    const auto& t = L->trace_replay;
    switch (column) {
      case kMeasured:
        return tooltip ? tr("Mean window of the layer over ranks and iterations, as measured") : seconds_text(t.measured_s);
      case kReplayed: {
        if (tooltip) {
          QString tip = qs(analyzer::trace_replay_text(t));
          for (const auto& m : t.missing) tip += QStringLiteral("\n- ") + qs(m);
          return tip;
        }
        QString s = tr("%1 (%2)").arg(seconds_text(t.replayed_s), qs(format_change(t.error)));
        if (!t.within)
          s += tr(": off by more than %1").arg(qs(format_percent(analyzer::kTraceReplayTolerance)));
        return s;
      }
      case kPredicted: {
        if (t.predictions.empty()) return tooltip ? qs(t.skipped) : none;
        QStringList parts;
        for (const auto& p : t.predictions) {
          QString part = QStringLiteral("r = %1: %2").arg(p.r).arg(seconds_text(p.predicted_s));
          if (tooltip && p.low_s >= 0 && p.high_s >= 0)
            part += tr(" (%1 to %2 with the fitted betas at -/+ one residual)")
                        .arg(seconds_text(p.low_s), seconds_text(p.high_s));
          parts << part;
        }
        if (tooltip)
          return tr("The trace's execution graph split into r pipelined chunks (graph what-if):\n%1\nNew durations "
                    "from %2")
              .arg(parts.join(QLatin1Char('\n')), qs(t.cost_source));
        QString s = parts.join(QStringLiteral(", "));
        if (t.best_r > 0) s += tr("; best r = %1").arg(t.best_r);
        return s;
      }
      default: return {};
    }
  }
  if (L && L->replay.computed) {
    const auto& p = L->replay;
    switch (column) {
      case kMeasured: return tooltip ? qs(analyzer::replay_text(p)) : seconds_text(p.measured_s);
      case kReplayed: {
        if (tooltip) return qs(analyzer::replay_text(p));
        QString s = tr("%1 simulated (%2)").arg(seconds_text(p.simulated_s), qs(format_change(p.error)));
        if (p.unreliable) s += tr(": unreliable, %1").arg(qs(analyzer::off_term_text(p)));
        return s;
      }
      case kPredicted: return tooltip ? tr("The trace's own execution graph was not replayed: %1").arg(qs(L->trace_replay.skipped)) : none;
      default: return {};
    }
  }
  return tooltip ? QString() : none;
}

QVariant RecommendationsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto& r = d_->items[static_cast<std::size_t>(index.row())];
  if (role == kLayerRole) return r.layer;
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  const bool tip = role == Qt::ToolTipRole;
  switch (index.column()) {
    case kLayer: return r.layer >= 0 ? QStringLiteral("L%1").arg(r.layer) : tr("model");
    case kSubject: return qs(r.subject);
    case kAction: return qs(r.action);
    case kGain:
      // A change that buys memory with time (memory reuse) shows its cost.
      if (!r.gain_known) return QStringLiteral("\u2014");
      {
        auto pct = [](double f) { return qs(format_percent(f)); };
        QString s = r.predicted_gain >= 0 ? pct(r.predicted_gain) : tr("cost %1").arg(pct(-r.predicted_gain));
        if (r.gain_interval) s += tr(" (%1 to %2)").arg(pct(r.gain_low), pct(r.gain_high));
        return s;
      }
    case kMeasured:
    case kReplayed:
    case kPredicted: return replay_cell(r.layer >= 0 ? layer(r.layer) : nullptr, index.column(), tip);
    case kEvidence: return qs(r.evidence);
    default: return {};
  }
}

QVariant RecommendationsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kMeasured: return tr("The layer's measured time per iteration");
      case kReplayed:
        return tr("The trace's own execution graph replayed with the measured durations (error against the "
                  "measurement); where not computed, the trace's configuration simulated on the hardware model");
      case kPredicted: return tr("The execution graph after the pipeline-degree what-if, per degree r");
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case kLayer: return tr("Layer");
    case kSubject: return tr("Subject");
    case kAction: return tr("Recommendation");
    case kGain: return tr("Predicted gain");
    case kMeasured: return tr("Measured");
    case kReplayed: return tr("Replayed");
    case kPredicted: return tr("Predicted");
    case kEvidence: return tr("Evidence");
    default: return {};
  }
}

}  // namespace moetrace::gui
