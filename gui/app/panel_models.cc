#include "panel_models.h"

#include <QFont>
#include <algorithm>
#include <cmath>

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

// --- Launch queues (HTA's idle time, queue length, kernel launches) ----------------------

namespace {

// The CUDA stream as recorded where known, else moetrace's stream id.
QString stream_label(std::int64_t native, std::int32_t id) {
  return native >= 0 ? QString::number(native) : QStringLiteral("#%1").arg(id);
}

QString number(double v) { return QString::number(v, 'f', 2); }

}  // namespace

void LaunchQueueModel::set_analysis(std::shared_ptr<const analyzer::Analyses> a) {
  beginResetModel();
  a_ = std::move(a);
  endResetModel();
}

const analyzer::LaunchQueueOptions& LaunchQueueModel::options() const {
  static const analyzer::LaunchQueueOptions defaults;
  return a_ ? a_->launch_queue.options : defaults;
}

int LaunchQueueModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !a_) return 0;
  const auto& L = a_->launch_queue;
  switch (table_) {
    case Table::kIdle: return static_cast<int>(L.idle.size());
    case Table::kQueues: return static_cast<int>(L.queues.size());
    case Table::kLaunches: return static_cast<int>(L.launches.size());
  }
  return 0;
}

int LaunchQueueModel::columnCount(const QModelIndex& parent) const {
  if (parent.isValid()) return 0;
  switch (table_) {
    case Table::kIdle: return IdleColumn::kColumns;
    case Table::kQueues: return QueueColumn::kColumns;
    case Table::kLaunches: return LaunchColumn::kColumns;
  }
  return 0;
}

LaunchQueueModel::Cell LaunchQueueModel::cell(int row, int column) const {
  switch (table_) {
    case Table::kIdle: return idle_cell(row, column);
    case Table::kQueues: return queue_cell(row, column);
    case Table::kLaunches: return launch_cell(row, column);
  }
  return {};
}

QVariant LaunchQueueModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  switch (role) {
    case Qt::DisplayRole: return cell(index.row(), index.column()).text;
    case kSortRole: return cell(index.row(), index.column()).sort;
    case Qt::ToolTipRole: {
      const QString tip = cell(index.row(), index.column()).tip;
      return tip.isEmpty() ? QVariant() : QVariant(tip);
    }
    case Qt::TextAlignmentRole:
      // Rank and stream (or rank alone) left, the numbers right.
      if (index.column() > (table_ == Table::kLaunches ? 0 : 1))
        return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
      return {};
    default: return {};
  }
}

QVariant LaunchQueueModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || section < 0 || section >= columnCount()) return {};
  const bool tip = role == Qt::ToolTipRole;
  if (role != Qt::DisplayRole && !tip) return {};
  QString s;
  switch (table_) {
    case Table::kIdle: s = tip ? idle_header_tip(section) : idle_header(section); break;
    case Table::kQueues: s = tip ? queue_header_tip(section) : queue_header(section); break;
    case Table::kLaunches: s = tip ? launch_header_tip(section) : launch_header(section); break;
  }
  return s.isEmpty() ? QVariant() : QVariant(s);
}

// --- LaunchQueueModel: idle time per stream ------------------------------------------------

LaunchQueueModel::Cell LaunchQueueModel::idle_cell(int row, int column) const {
  using enum IdleColumn::Column;
  const auto& s = a_->launch_queue.idle[static_cast<std::size_t>(row)];
  auto category = [&](analyzer::IdleCategory c) {
    const auto i = static_cast<std::size_t>(c);
    return Cell{duration(s.at(c)), qlonglong(s.at(c)),
                tr("%1 of the stream's idle time, in %n gap(s)", nullptr, static_cast<int>(s.gaps[i]))
                    .arg(percent(s.ratio(c)))};
  };
  switch (column) {
    case kRank: return {QString::number(s.rank), s.rank, {}};
    case kStream:
      return {stream_label(s.native_stream, s.stream), qlonglong(s.native_stream >= 0 ? s.native_stream : s.stream), {}};
    case kEvents: return {qs(format_count(s.events)), qlonglong(s.events), {}};
    case kWindow: return {duration(s.window_ns), qlonglong(s.window_ns), tr("From the stream's first event to its last")};
    case kHostWait: return category(analyzer::IdleCategory::kHostWait);
    case kKernelWait: return category(analyzer::IdleCategory::kKernelWait);
    case kOther: return category(analyzer::IdleCategory::kOther);
    case kIdle: return {duration(s.idle_total_ns()), qlonglong(s.idle_total_ns()), {}};
    case kIdleRatio: {
      const double r = ratio(s.idle_total_ns(), s.window_ns);
      return {percent(r), r, tr("Idle time / the stream's window")};
    }
    default: return {};
  }
}

QString LaunchQueueModel::idle_header(int column) const {
  using enum IdleColumn::Column;
  switch (column) {
    case kRank: return tr("Rank");
    case kStream: return tr("Stream");
    case kEvents: return tr("Events");
    case kWindow: return tr("Window");
    case kHostWait: return tr("Host wait");
    case kKernelWait: return tr("Kernel wait");
    case kOther: return tr("Other");
    case kIdle: return tr("Idle");
    case kIdleRatio: return tr("Idle / window");
    default: return {};
  }
}

QString LaunchQueueModel::idle_header_tip(int column) const {
  using enum IdleColumn::Column;
  switch (column) {
    case kStream: return tr("The CUDA stream as recorded (#: moetrace's stream id where the trace has none)");
    case kEvents: return tr("Kernels, copies and memsets");
    case kHostWait: return tr("Gaps before an event whose launching call started after the previous event ended: the CPU did not launch in time");
    case kKernelWait:
      return tr("Gaps shorter than %1 between kernels launched in time: the overhead of back-to-back launches")
          .arg(duration(options().consecutive_kernel_delay_ns));
    case kOther: return tr("Other gaps: no launching call, or a longer gap behind a call made in time (waiting on another stream, for example)");
    default: return {};
  }
}

// --- LaunchQueueModel: queue length per stream ---------------------------------------------

LaunchQueueModel::Cell LaunchQueueModel::queue_cell(int row, int column) const {
  using enum QueueColumn::Column;
  const auto& q = a_->launch_queue.queues[static_cast<std::size_t>(row)];
  switch (column) {
    case kRank: return {QString::number(q.rank), q.rank, {}};
    case kStream:
      return {stream_label(q.native_stream, q.stream), qlonglong(q.native_stream >= 0 ? q.native_stream : q.stream), {}};
    case kPoints: return {qs(format_count(q.count)), qlonglong(q.count), {}};
    case kMean: return {number(q.mean), q.mean, {}};
    case kStddev: return {number(q.stddev), q.stddev, {}};
    case kMin: return {QString::number(q.min), q.min, {}};
    case kP25: return {number(q.p25), q.p25, {}};
    case kP50: return {number(q.p50), q.p50, {}};
    case kP75: return {number(q.p75), q.p75, {}};
    case kMax: return {QString::number(q.max), q.max, {}};
    case kAtMax: return {duration(q.at_max_ns), qlonglong(q.at_max_ns), tr("Time the queue spent at its maximum")};
    case kFull:
      return {duration(q.full_ns), qlonglong(q.full_ns),
              tr("%1 of the rank's trace at the launch-queue limit (%2)")
                  .arg(percent(q.full_fraction))
                  .arg(options().max_queue_length)};
    default: return {};
  }
}

QString LaunchQueueModel::queue_header(int column) const {
  using enum QueueColumn::Column;
  switch (column) {
    case kRank: return tr("Rank");
    case kStream: return tr("Stream");
    case kPoints: return tr("Points");
    case kMean: return tr("Mean");
    case kStddev: return tr("Std. dev.");
    case kMin: return tr("Min");
    case kP25: return tr("25 %");
    case kP50: return tr("Median");
    case kP75: return tr("75 %");
    case kMax: return tr("Max");
    case kAtMax: return tr("At max");
    case kFull: return tr("Full");
    default: return {};
  }
}

QString LaunchQueueModel::queue_header_tip(int column) const {
  using enum QueueColumn::Column;
  switch (column) {
    case kPoints: return tr("Changes of the queue length; the summary is over these points, not weighted by time (as HTA's)");
    case kFull: return tr("Time with the stream's launch queue full (HTA's limit of %1 operations)")
                           .arg(options().max_queue_length);
    default: return {};
  }
}

// --- LaunchQueueModel: kernel launches per rank --------------------------------------------

LaunchQueueModel::Cell LaunchQueueModel::launch_cell(int row, int column) const {
  using enum LaunchColumn::Column;
  const auto& r = a_->launch_queue.launches[static_cast<std::size_t>(row)];
  auto time = [](double ns) { return Cell{duration(static_cast<std::int64_t>(std::llround(ns))), ns, {}}; };
  auto count = [&](std::int64_t n, const QString& tip = {}) {
    return Cell{qs(format_count(n)), qlonglong(n), n > 0 && !tip.isEmpty() ? tip.arg(percent(ratio(n, r.launches))) : QString()};
  };
  switch (column) {
    case kRank: return {QString::number(r.rank), r.rank, {}};
    case kLaunches: return count(r.launches);
    case kCpuMean: return time(r.cpu_duration_ns.mean);
    case kCpuP95: return time(r.cpu_duration_ns.p95);
    case kDelayMean: return time(r.launch_delay_ns.mean);
    case kDelayP95: return time(r.launch_delay_ns.p95);
    case kDelayMax: return time(static_cast<double>(r.launch_delay_ns.max));
    case kGpuMean: return time(r.gpu_duration_ns.mean);
    case kShortKernels: return count(r.short_kernels, tr("%1 of the launches"));
    case kRuntimeOutliers: return count(r.runtime_outliers, tr("%1 of the launches"));
    case kDelayOutliers: return count(r.launch_delay_outliers, tr("%1 of the launches"));
    case kOtherCalls: return count(r.other_launch_calls);
    case kNoCall: return count(r.no_launch_call);
    default: return {};
  }
}

QString LaunchQueueModel::launch_header(int column) const {
  using enum LaunchColumn::Column;
  switch (column) {
    case kRank: return tr("Rank");
    case kLaunches: return tr("Launches");
    case kCpuMean: return tr("CPU mean");
    case kCpuP95: return tr("CPU p95");
    case kDelayMean: return tr("Delay mean");
    case kDelayP95: return tr("Delay p95");
    case kDelayMax: return tr("Delay max");
    case kGpuMean: return tr("GPU mean");
    case kShortKernels: return tr("Short kernels");
    case kRuntimeOutliers: return tr("Runtime outliers");
    case kDelayOutliers: return tr("Delay outliers");
    case kOtherCalls: return tr("Other calls");
    case kNoCall: return tr("No call");
    default: return {};
  }
}

QString LaunchQueueModel::launch_header_tip(int column) const {
  using enum LaunchColumn::Column;
  const QString runtime = duration(options().runtime_cutoff_ns);
  const QString delay = duration(options().launch_delay_cutoff_ns);
  switch (column) {
    case kLaunches: return tr("GPU events launched by cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync or cudaMemsetAsync");
    case kCpuMean:
    case kCpuP95: return tr("The launching call's duration on the CPU");
    case kDelayMean:
    case kDelayP95:
    case kDelayMax: return tr("From the launching call's end to the GPU event's start (0 where it started earlier)");
    case kGpuMean: return tr("The GPU event's duration");
    case kShortKernels: return tr("GPU time shorter than the call's CPU time, with the call at most %1").arg(runtime);
    case kRuntimeOutliers: return tr("Launching calls longer than %1").arg(runtime);
    case kDelayOutliers: return tr("Launch delays longer than %1").arg(delay);
    case kOtherCalls: return tr("GPU events launched by other calls (cuLaunchKernel, cudaGraphLaunch, ...): not in the statistics");
    case kNoCall: return tr("GPU events without a launching call in the trace");
    default: return {};
  }
}

}  // namespace moetrace::gui
