#include "panel_models.h"

#include <QFont>
#include <algorithm>

#include "moetrace/gui/format.h"
#include "moetrace/gui/palette.h"
#include "qt_text.h"

namespace moetrace::gui {
namespace {

QString duration(std::int64_t ns) { return qs(format_duration(static_cast<double>(ns))); }
QString percent(double f) { return qs(format_percent(f)); }
using analyzer::ratio;

// "all-to-all", "expert compute": the breakdown's category names as headers.
QString category_title(int c) {
  QString n = qs(std::string(category_name(static_cast<Category>(c))));
  if (n.startsWith(QStringLiteral("all_"))) return n.replace(QLatin1Char('_'), QLatin1Char('-'));
  return n.replace(QLatin1Char('_'), QLatin1Char(' '));
}

}  // namespace

// --- DetailsModel ------------------------------------------------------------------

void DetailsModel::set_fields(std::vector<DetailField> fields) {
  beginResetModel();
  fields_ = std::move(fields);
  endResetModel();
}

bool DetailsModel::is_heading(int row) const {
  return row >= 0 && static_cast<std::size_t>(row) < fields_.size() && fields_[static_cast<std::size_t>(row)].heading;
}

int DetailsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(fields_.size());
}

int DetailsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : 2; }

QVariant DetailsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto& f = fields_[static_cast<std::size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
    case Qt::ToolTipRole: return qs(index.column() == 0 ? f.key : f.value);
    case Qt::FontRole:
      if (f.heading || index.column() == 0) {
        QFont font;
        font.setBold(f.heading);
        return font;
      }
      return {};
    default: return {};
  }
}

QVariant DetailsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == 0 ? tr("Field") : tr("Value");
}

// --- BreakdownModel ------------------------------------------------------------------

void BreakdownModel::set_breakdown(std::shared_ptr<const analyzer::Breakdown> b) {
  beginResetModel();
  b_ = std::move(b);
  endResetModel();
}

int BreakdownModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !b_ ? 0 : static_cast<int>(b_->layers.size());
}

int BreakdownModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

QVariant BreakdownModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto& l = b_->layers[static_cast<std::size_t>(index.row())];
  const auto& t = l.total;
  auto share = [&](Category c) { return t.share(c); };
  if (role == kLayerRole) return l.layer;
  if (role == kSplitRole) {
    QVariantList seg;
    std::int64_t exclusive = 0;
    for (int c = 0; c < kNumCategories; ++c) {
      const auto e = t.exclusive_ns[static_cast<std::size_t>(c)];
      exclusive += e;
      seg << ratio(e, t.window_ns);
    }
    seg << ratio(std::max<std::int64_t>(0, t.busy_ns - exclusive), t.window_ns);
    seg << ratio(t.idle_ns, t.window_ns);
    return seg;
  }
  if (role == kSortRole || (role == Qt::DisplayRole && index.column() != kSplit) || role == Qt::ToolTipRole) {
    const bool sort = role == kSortRole;
    switch (index.column()) {
      case kLayer: return sort ? QVariant(l.layer) : QVariant(QStringLiteral("L%1").arg(l.layer));
      case kMeanTime: return sort ? QVariant(qlonglong(l.mean_window_ns)) : QVariant(duration(l.mean_window_ns));
      case kAllToAll: return sort ? QVariant(share(Category::kAllToAll)) : QVariant(percent(share(Category::kAllToAll)));
      case kAllReduce: return sort ? QVariant(share(Category::kAllReduce)) : QVariant(percent(share(Category::kAllReduce)));
      case kExpert:
        return sort ? QVariant(share(Category::kExpertCompute)) : QVariant(percent(share(Category::kExpertCompute)));
      case kGating: return sort ? QVariant(share(Category::kGating)) : QVariant(percent(share(Category::kGating)));
      case kHidden: return sort ? QVariant(t.hidden_fraction()) : QVariant(percent(t.hidden_fraction()));
      case kSlowestRank: return l.slowest_rank;
      case kSplit: {
        if (role != Qt::ToolTipRole) return sort ? QVariant(ratio(t.idle_ns, t.window_ns)) : QVariant();
        QString tip = tr("<b>Layer %1</b>, %2 ranks x %3 iterations, window %4<br>")
                          .arg(l.layer)
                          .arg(l.ranks)
                          .arg(l.iterations)
                          .arg(duration(t.window_ns));
        for (int c = 0; c < kNumCategories; ++c)
          tip += tr("%1: %2 (alone %3)<br>")
                     .arg(category_title(c),
                          percent(t.share(static_cast<Category>(c))),
                          percent(ratio(t.exclusive_ns[static_cast<std::size_t>(c)], t.window_ns)));
        tip += tr("idle: %1; communication hidden: %2").arg(percent(ratio(t.idle_ns, t.window_ns)), percent(t.hidden_fraction()));
        return tip;
      }
      default: return {};
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() != kLayer)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  return {};
}

QVariant BreakdownModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kMeanTime: return tr("MoE-layer time per rank and iteration, forward + backward");
      case kSplit: return tr("Where the layer's time went: each category alone, several at once (grey), idle (white)");
      case kHidden: return tr("Share of communication that overlapped computation");
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case kLayer: return tr("Layer");
    case kMeanTime: return tr("Time / iter");
    case kSplit: return tr("Split");
    case kAllToAll: return tr("All-to-all");
    case kAllReduce: return tr("All-reduce");
    case kExpert: return tr("Expert");
    case kGating: return tr("Gating");
    case kHidden: return tr("Comm. hidden");
    case kSlowestRank: return tr("Slowest rank");
    default: return {};
  }
}

// --- RangeModel ---------------------------------------------------------------------

void RangeModel::set_summary(std::optional<analyzer::WindowBreakdown> s) {
  beginResetModel();
  s_ = std::move(s);
  endResetModel();
}

int RangeModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !s_ ? 0 : static_cast<int>(s_->ranks.size()) + 1;
}

int RangeModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

const analyzer::RankSummary& RangeModel::row_data(int row) const {
  return static_cast<std::size_t>(row) < s_->ranks.size() ? s_->ranks[static_cast<std::size_t>(row)] : s_->total;
}

QVariant RangeModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto& r = row_data(index.row());
  const bool total = static_cast<std::size_t>(index.row()) >= s_->ranks.size();
  const std::int64_t window = s_->length() * (total ? std::max<std::int64_t>(1, static_cast<std::int64_t>(s_->ranks.size())) : 1);
  const int col = index.column();
  std::int64_t ns = -1;
  if (col == kBusy) ns = r.t.busy_ns;
  else if (col == kIdle) ns = r.t.idle_ns;
  else if (col == kHidden) ns = r.t.comm_hidden_ns;
  else if (col >= kFirstCategory && col < kFirstCategory + kNumCategories)
    ns = r.t.category_ns[static_cast<std::size_t>(col - kFirstCategory)];
  switch (role) {
    case Qt::DisplayRole:
      if (col == kRank) return total ? tr("all ranks") : QStringLiteral("%1").arg(r.rank);
      if (col == kEvents) return qs(format_count(r.events));
      return duration(ns);
    case Qt::ToolTipRole:
      if (col == kRank || col == kEvents) return {};
      if (col == kHidden) return tr("%1 of the communication overlapped computation").arg(percent(r.t.hidden_fraction()));
      return tr("%1 of the selected range").arg(percent(ratio(ns, window)));
    case kSortRole:
      if (col == kRank) return total ? 1 << 30 : r.rank;
      if (col == kEvents) return qlonglong(r.events);
      return qlonglong(ns);
    case Qt::TextAlignmentRole:
      if (col != kRank) return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
      return {};
    case Qt::FontRole:
      if (total) {
        QFont f;
        f.setBold(true);
        return f;
      }
      return {};
    default: return {};
  }
}

QVariant RangeModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  if (section >= kFirstCategory && section < kFirstCategory + kNumCategories)
    return category_title(section - kFirstCategory);
  switch (section) {
    case kRank: return tr("Rank");
    case kBusy: return tr("Busy");
    case kIdle: return tr("Idle");
    case kHidden: return tr("Comm. hidden");
    case kEvents: return tr("Events");
    default: return {};
  }
}

// --- ExpertLoadModel -----------------------------------------------------------------

void ExpertLoadModel::set_index(std::shared_ptr<const analyzer::Trace> trace,
                                std::shared_ptr<const ExpertLoadIndex> index) {
  beginResetModel();
  trace_ = std::move(trace);
  index_ = std::move(index);
  pos_ = 0;
  grid_ = trace_ && index_ ? index_->grid(*trace_, 0) : ExpertLoadGrid{};
  endResetModel();
}

void ExpertLoadModel::set_iteration_position(int pos) {
  if (!index_ || pos < 0 || pos >= iteration_count() || pos == pos_) return;
  pos_ = pos;
  grid_ = index_->grid(*trace_, static_cast<std::size_t>(pos));
  // Same shape, new values.
  if (rowCount() > 0 && columnCount() > 0) emit dataChanged(index(0, 0), index(rowCount() - 1, columnCount() - 1));
}

int ExpertLoadModel::iteration_count() const { return index_ ? static_cast<int>(index_->iterations().size()) : 0; }

int ExpertLoadModel::iteration_at(int pos) const {
  return index_ && pos >= 0 && pos < iteration_count() ? index_->iterations()[static_cast<std::size_t>(pos)] : -1;
}

QColor ExpertLoadModel::heat_colour(double f) {
  // White to deep orange-red: light cells are idle experts, dark ones hot.
  f = std::clamp(f, 0.0, 1.0);
  const auto mix = [f](int a, int b) { return static_cast<int>(a + (b - a) * f); };
  return QColor(mix(0xFF, 0xB1), mix(0xF7, 0x1E), mix(0xEC, 0x0B));
}

int ExpertLoadModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(grid_.layers.size());
}

int ExpertLoadModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : grid_.experts; }

QVariant ExpertLoadModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto lp = static_cast<std::size_t>(index.row());
  const std::int64_t tokens = grid_.at(lp, index.column());
  const std::int64_t max = index_ ? index_->max_tokens() : 0;
  switch (role) {
    case kTokensRole: return qlonglong(tokens);
    case kLayerRole: return grid_.layers[lp];
    case Qt::DisplayRole: return tokens < 0 ? QString() : QString::number(tokens);
    case Qt::BackgroundRole:
      if (tokens < 0) return QColor(0xE0, 0xE0, 0xE0);
      return heat_colour(max > 0 ? static_cast<double>(tokens) / static_cast<double>(max) : 0.0);
    case Qt::ToolTipRole: {
      const QString column = by_rank() ? tr("rank %1").arg(index.column()) : tr("expert %1").arg(index.column());
      if (tokens < 0)
        return tr("Layer %1, %2: no record in iteration %3").arg(grid_.layers[lp]).arg(column).arg(grid_.iteration);
      const std::int64_t total = grid_.layer_total(lp);
      const QString what = by_rank() ? tr("%1 elements sent to it (%2 of the layer's)")
                                     : tr("%1 tokens (%2 of the layer's tokens)");
      return tr("Layer %1, %2, iteration %3: %4")
          .arg(grid_.layers[lp])
          .arg(column)
          .arg(grid_.iteration)
          .arg(what.arg(qs(format_count(tokens)), percent(ratio(tokens, total))));
    }
    default: return {};
  }
}

QVariant ExpertLoadModel::headerData(int section, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (o == Qt::Horizontal) return (by_rank() ? QStringLiteral("R%1") : QStringLiteral("E%1")).arg(section);
  if (section >= 0 && static_cast<std::size_t>(section) < grid_.layers.size())
    return QStringLiteral("L%1").arg(grid_.layers[static_cast<std::size_t>(section)]);
  return {};
}

// --- RecommendationsModel --------------------------------------------------------------

void RecommendationsModel::set_data(std::optional<analyzer::Recommendations> d) {
  beginResetModel();
  d_ = std::move(d);
  endResetModel();
}

int RecommendationsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !d_ ? 0 : static_cast<int>(d_->items.size());
}

int RecommendationsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

QVariant RecommendationsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const auto& r = d_->items[static_cast<std::size_t>(index.row())];
  if (role == kLayerRole) return r.layer;
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (index.column()) {
    case kLayer: return r.layer >= 0 ? QStringLiteral("L%1").arg(r.layer) : tr("model");
    case kSubject: return qs(r.subject);
    case kAction: return qs(r.action);
    case kGain:
      // A change that buys memory with time (memory reuse) shows its cost.
      if (!r.gain_known) return QStringLiteral("\u2014");
      {
        QString s = r.predicted_gain >= 0 ? percent(r.predicted_gain) : tr("cost %1").arg(percent(-r.predicted_gain));
        if (r.gain_interval) s += tr(" (%1 to %2)").arg(percent(r.gain_low), percent(r.gain_high));
        return s;
      }
    case kReplay: {
      // The layer's replay of the trace's own configuration beside the
      // measured time: the advice stands on it (off by > 20 %: unreliable).
      for (const auto& L : d_->layers) {
        if (L.layer != r.layer || !L.replay.computed) continue;
        const auto& p = L.replay;
        QString s = tr("%1 ms replayed vs %2 ms measured (%3%4 %)")
                        .arg(p.simulated_s * 1e3, 0, 'f', 3)
                        .arg(p.measured_s * 1e3, 0, 'f', 3)
                        .arg(p.error >= 0 ? QStringLiteral("+") : QString())
                        .arg(p.error * 100, 0, 'f', 1);
        if (p.unreliable) s += tr(": unreliable, the %1 term is off").arg(qs(p.off_term));
        return s;
      }
      return QStringLiteral("\u2014");
    }
    case kEvidence: return qs(r.evidence);
    default: return {};
  }
}

QVariant RecommendationsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kLayer: return tr("Layer");
    case kSubject: return tr("Subject");
    case kAction: return tr("Recommendation");
    case kGain: return tr("Predicted gain");
    case kReplay: return tr("Replay");
    case kEvidence: return tr("Evidence");
    default: return {};
  }
}

}  // namespace moetrace::gui
