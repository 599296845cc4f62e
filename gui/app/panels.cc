#include "panels.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QPainter>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "moetrace/gui/format.h"
#include "moetrace/gui/item_details.h"
#include "moetrace/gui/palette.h"
#include "qt_text.h"
#include "timeline_painter.h"

namespace moetrace::gui {

QTableView* make_table(QWidget* parent) {
  auto* v = new QTableView(parent);
  v->setSelectionBehavior(QAbstractItemView::SelectRows);
  v->setSelectionMode(QAbstractItemView::SingleSelection);
  v->setEditTriggers(QAbstractItemView::NoEditTriggers);
  v->verticalHeader()->setVisible(false);
  v->verticalHeader()->setDefaultSectionSize(v->fontMetrics().height() + 6);
  v->horizontalHeader()->setStretchLastSection(true);
  v->setAlternatingRowColors(true);
  return v;
}

QVBoxLayout* padded_box(QWidget* w) {
  auto* box = new QVBoxLayout(w);
  box->setContentsMargins(4, 4, 4, 4);
  return box;
}

void show_sorted(QTableView* view, QSortFilterProxyModel* proxy, QAbstractItemModel* model, int column) {
  proxy->setSourceModel(model);
  proxy->setSortRole(kSortRole);
  view->setModel(proxy);
  view->setSortingEnabled(true);
  view->sortByColumn(column, Qt::AscendingOrder);
}

QTableView* add_sorted_table(QTabWidget* tabs, QAbstractItemModel* model, const QString& title) {
  auto* proxy = new QSortFilterProxyModel(tabs);
  auto* view = make_table(tabs);
  show_sorted(view, proxy, model, -1);
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  tabs->addTab(view, title);
  return view;
}

// --- PanelFrame -------------------------------------------------------------------

PanelFrame::PanelFrame(QWidget* parent) : QStackedWidget(parent) {
  message_ = new QLabel(this);
  message_->setAlignment(Qt::AlignCenter);
  message_->setWordWrap(true);
  message_->setMargin(12);
  message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QPalette pal = message_->palette();
  pal.setColor(QPalette::WindowText, QColor(0x60, 0x60, 0x60));
  message_->setPalette(pal);
  addWidget(message_);
}

void PanelFrame::set_content(QWidget* content) { addWidget(content); }

void PanelFrame::show_message(const QString& text) {
  message_->setText(text);
  setCurrentIndex(0);
}

void PanelFrame::show_content() {
  if (count() > 1) setCurrentIndex(1);
}

// --- DetailsPanel -------------------------------------------------------------------

DetailsPanel::DetailsPanel(QWidget* parent) : PanelFrame(parent) {
  model_ = new DetailsModel(this);
  view_ = make_table(this);
  view_->setModel(model_);
  view_->setAlternatingRowColors(false);
  view_->setSelectionMode(QAbstractItemView::ContiguousSelection);
  view_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  view_->setWordWrap(false);
  set_content(view_);
  show_message(tr("Click an event on the timeline to see its details."));
}

void DetailsPanel::show_item(const TimelineModel* model, ItemRef item) {
  if (!model || !item.valid()) {
    model_->set_fields({});
    show_message(tr("Click an event on the timeline to see its details."));
    return;
  }
  model_->set_fields(describe_item(*model, item));
  view_->clearSpans();
  for (int r = 0; r < model_->rowCount(); ++r)
    if (model_->is_heading(r)) view_->setSpan(r, 0, 1, 2);
  show_content();
}

// --- SplitBarDelegate ---------------------------------------------------------------

void SplitBarDelegate::paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const {
  const QVariantList seg = index.data(kSplitRole).toList();
  if (seg.isEmpty()) {
    QStyledItemDelegate::paint(p, option, index);
    return;
  }
  p->save();
  const QRect r = option.rect.adjusted(3, 3, -3, -3);
  p->fillRect(r, Qt::white);
  double x = r.left();
  for (int i = 0; i < seg.size(); ++i) {
    const double w = std::max(0.0, seg[i].toDouble()) * r.width();
    const QRectF box(x, r.top(), w, r.height());
    if (i < kNumCategories) {
      p->fillRect(box, to_qcolor(colour_class(static_cast<Category>(i))));
    } else if (i == BreakdownModel::kOverlapSegment) {
      p->fillRect(box, QColor(0xB8, 0xBC, 0xC2));
      p->fillRect(box, QBrush(QColor(0x80, 0x84, 0x8A), Qt::BDiagPattern));
    }  // idle stays white
    x += w;
  }
  p->setPen(QColor(0x90, 0x90, 0x90));
  p->drawRect(r.adjusted(0, 0, -1, -1));
  p->restore();
}

// --- BreakdownPanel -------------------------------------------------------------------

BreakdownPanel::BreakdownPanel(QWidget* parent) : PanelFrame(parent) {
  auto* content = new QWidget(this);
  auto* box = padded_box(content);
  summary_ = new QLabel(content);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  model_ = new BreakdownModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  view_ = make_table(content);
  show_sorted(view_, proxy_, model_, BreakdownModel::kLayer);
  view_->setItemDelegateForColumn(BreakdownModel::kSplit, new SplitBarDelegate(view_));
  view_->horizontalHeader()->setStretchLastSection(false);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setSectionResizeMode(BreakdownModel::kSplit, QHeaderView::Stretch);
  box->addWidget(summary_);
  box->addWidget(view_, 1);
  set_content(content);
  connect(view_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    const QVariant layer = i.data(kLayerRole);
    if (layer.isValid()) emit layer_activated(layer.toInt());
  });
  set_computing();
}

void BreakdownPanel::set_computing() {
  model_->set_breakdown(nullptr);
  show_message(tr("Computing the per-layer breakdown\u2026"));
}

void BreakdownPanel::set_breakdown(std::shared_ptr<const analyzer::Breakdown> b, const QString& error) {
  if (!b) {
    model_->set_breakdown(nullptr);
    show_message(error.isEmpty() ? tr("No trace loaded.") : tr("The breakdown failed: %1").arg(error));
    return;
  }
  if (b->layers.empty()) {
    model_->set_breakdown(nullptr);
    show_message(b->has_op_ranges ? tr("No MoE layer in this trace, so no per-layer breakdown.")
                                  : tr("This trace has no MoE op ranges, so there is no per-layer breakdown."));
    return;
  }
  model_->set_breakdown(b);
  summary_->setText(tr("Of the iteration time: all-to-all %1, all-reduce %2, MoE layers %3. "
                       "Click a layer to show it on the timeline.")
                        .arg(qs(format_percent(b->all_to_all_share_of_iteration())),
                             qs(format_percent(b->all_reduce_share_of_iteration())),
                             qs(format_percent(b->moe_share_of_iteration()))));
  show_content();
}

// --- RangePanel --------------------------------------------------------------------------

RangePanel::RangePanel(QWidget* parent) : PanelFrame(parent) {
  auto* content = new QWidget(this);
  auto* box = padded_box(content);
  title_ = new QLabel(content);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  model_ = new RangeModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  view_ = make_table(content);
  show_sorted(view_, proxy_, model_, RangeModel::kRank);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  box->addWidget(title_);
  box->addWidget(view_, 1);
  set_content(content);
  watcher_ = new QFutureWatcher<analyzer::WindowBreakdown>(this);
  connect(watcher_, &QFutureWatcher<analyzer::WindowBreakdown>::finished, this, [this] {
    if (watcher_->future().resultCount() == 0) return;
    const analyzer::WindowBreakdown s = watcher_->result();
    model_->set_summary(s);
    const double origin = timeline_ ? static_cast<double>(timeline_->start_ns()) : 0.0;
    title_->setText(tr("Range %1 \u2013 %2 (%3): time per rank and category; categories overlap, idle is time with nothing running.")
                        .arg(qs(format_timestamp(static_cast<double>(s.t0_ns) - origin)),
                             qs(format_timestamp(static_cast<double>(s.t1_ns) - origin)),
                             qs(format_duration(static_cast<double>(s.length())))));
    show_content();
  });
  clear_range();
}

void RangePanel::set_model(std::shared_ptr<const TimelineModel> model) {
  wait();
  timeline_ = std::move(model);
  clear_range();
}

void RangePanel::set_range(double t0, double t1) {
  if (!timeline_) return;
  wait();
  show_message(tr("Computing the breakdown of the range\u2026"));
  auto m = timeline_;
  const auto a = static_cast<std::int64_t>(std::floor(std::min(t0, t1)));
  const auto b = static_cast<std::int64_t>(std::ceil(std::max(t0, t1)));
  watcher_->setFuture(QtConcurrent::run([m, a, b] { return analyzer::breakdown_in_window(m->trace(), a, b); }));
}

void RangePanel::clear_range() {
  model_->set_summary(std::nullopt);
  show_message(tr("Select a time range to see its breakdown: Shift-drag on the timeline, or drag on the time ruler."));
}

void RangePanel::wait() {
  if (watcher_->isRunning()) watcher_->waitForFinished();
}

// --- ExpertLoadPanel ----------------------------------------------------------------------

namespace {

// Heat cells: the background colour, with the count where it fits.
class HeatDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* p, const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    const QColor c = index.data(Qt::BackgroundRole).value<QColor>();
    p->fillRect(option.rect.adjusted(0, 0, -1, -1), c);
    if (option.state & QStyle::State_Selected) {
      p->setPen(QPen(QColor(0x10, 0x10, 0x10), 1.5));
      p->drawRect(option.rect.adjusted(1, 1, -2, -2));
    }
    const QString text = index.data(Qt::DisplayRole).toString();
    if (!text.isEmpty() && option.fontMetrics.horizontalAdvance(text) + 4 <= option.rect.width()) {
      const double luminance = 0.299 * c.red() + 0.587 * c.green() + 0.114 * c.blue();
      p->setPen(luminance > 140 ? QColor(0x20, 0x20, 0x20) : QColor(0xFF, 0xFF, 0xFF));
      p->drawText(option.rect, Qt::AlignCenter, text);
    }
  }
};

}  // namespace

ExpertLoadPanel::ExpertLoadPanel(QWidget* parent) : PanelFrame(parent) {
  auto* content = new QWidget(this);
  auto* box = padded_box(content);
  auto* top = new QHBoxLayout;
  label_ = new QLabel(content);
  slider_ = new QSlider(Qt::Horizontal, content);
  slider_->setPageStep(1);
  top->addWidget(label_);
  top->addWidget(slider_, 1);
  model_ = new ExpertLoadModel(this);
  view_ = make_table(content);
  view_->setModel(model_);
  view_->setAlternatingRowColors(false);
  view_->setSelectionBehavior(QAbstractItemView::SelectItems);
  view_->setShowGrid(false);
  view_->setItemDelegate(new HeatDelegate(view_));
  view_->verticalHeader()->setVisible(true);
  view_->verticalHeader()->setDefaultSectionSize(20);
  view_->horizontalHeader()->setDefaultSectionSize(34);
  view_->horizontalHeader()->setStretchLastSection(false);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  scale_ = new QLabel(content);
  box->addLayout(top);
  box->addWidget(view_, 1);
  box->addWidget(scale_);
  set_content(content);
  connect(slider_, &QSlider::valueChanged, this, [this](int v) {
    model_->set_iteration_position(v);
    update_label();
  });
  connect(view_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    const QVariant layer = i.data(kLayerRole);
    if (layer.isValid()) emit layer_activated(layer.toInt());
  });
  set_computing();
}

void ExpertLoadPanel::set_computing() {
  model_->set_index(nullptr, nullptr);
  show_message(tr("Reading the expert load\u2026"));
}

void ExpertLoadPanel::set_index(std::shared_ptr<const analyzer::Trace> trace,
                                std::shared_ptr<const ExpertLoadIndex> index) {
  if (!trace || !index || index->empty() || index->experts() == 0) {
    model_->set_index(nullptr, nullptr);
    show_message(tr("This trace has no expert-load records (tokens per layer and expert)."));
    return;
  }
  const QSignalBlocker block(slider_);
  model_->set_index(trace, index);
  slider_->setRange(0, std::max(0, model_->iteration_count() - 1));
  slider_->setValue(0);
  slider_->setEnabled(model_->iteration_count() > 1);
  const QString unit = model_->by_rank()
                           ? tr("elements the forward all-to-alls sent to the rank (their split sizes: the load of "
                                "ranks, not of single experts)")
                           : tr("tokens routed to the expert");
  scale_->setText(tr("Colour: %1, summed over source ranks; white 0, darkest %2 (the largest cell of any iteration); grey: no record.")
                      .arg(unit, qs(format_count(index->max_tokens()))));
  scale_->setWordWrap(true);
  update_label();
  show_content();
}

void ExpertLoadPanel::set_iteration(int iteration) {
  for (int p = 0; p < model_->iteration_count(); ++p)
    if (model_->iteration_at(p) == iteration) slider_->setValue(p);
}

void ExpertLoadPanel::update_label() {
  label_->setText(tr("Iteration %1 (%2 of %3)")
                      .arg(model_->iteration_at(model_->iteration_position()))
                      .arg(model_->iteration_position() + 1)
                      .arg(model_->iteration_count()));
}

// --- SectionView ------------------------------------------------------------------------------

SectionView::SectionView(QWidget* parent) : QScrollArea(parent) {
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  set_section(nullptr);
}

void SectionView::set_section(const analyzer::ReportSection* s) {
  tables_.clear();
  body_ = new QWidget;
  auto* box = padded_box(body_);
  if (s)
    for (const auto& b : s->blocks) {
      auto* text = new QLabel(qs(b.text), body_);
      text->setWordWrap(true);
      text->setTextInteractionFlags(Qt::TextSelectableByMouse);
      box->addWidget(text);
      if (!b.has_table) continue;
      const auto& t = b.table;
      auto* table = new QTableWidget(static_cast<int>(t.rows.size()), static_cast<int>(t.header.size()), body_);
      for (std::size_t c = 0; c < t.header.size(); ++c)
        table->setHorizontalHeaderItem(static_cast<int>(c), new QTableWidgetItem(qs(t.header[c])));
      for (std::size_t r = 0; r < t.rows.size(); ++r)
        for (std::size_t c = 0; c < t.rows[r].size() && c < t.header.size(); ++c)
          table->setItem(static_cast<int>(r), static_cast<int>(c), new QTableWidgetItem(qs(t.rows[r][c])));
      table->setEditTriggers(QAbstractItemView::NoEditTriggers);
      table->verticalHeader()->setVisible(false);
      table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
      table->setAlternatingRowColors(true);
      // Every row visible; the scroll area scrolls.
      table->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
      table->setMinimumHeight(table->horizontalHeader()->sizeHint().height() +
                              table->rowCount() * (table->fontMetrics().height() + 8) + 4);
      box->addWidget(table);
      tables_.push_back(table);
    }
  box->addStretch(1);
  setWidget(body_);  // deletes the previous body
}

// --- RecommendationsPanel -------------------------------------------------------------------

RecommendationsPanel::RecommendationsPanel(QWidget* parent) : PanelFrame(parent) {
  model_ = new RecommendationsModel(this);
  view_ = make_table(this);
  view_->setModel(model_);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(true);
  set_content(view_);
  connect(view_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    const QVariant layer = i.data(kLayerRole);
    if (layer.isValid() && layer.toInt() >= 0) emit layer_activated(layer.toInt());
  });
  set_results(nullptr);
}

void RecommendationsPanel::set_computing() { show_message(tr("Computing recommendations\u2026")); }

void RecommendationsPanel::set_results(const std::shared_ptr<const AnalysisResults>& r) {
  const auto* a = r ? r->analyses.get() : nullptr;
  model_->set_data(a ? a->recommendations : std::nullopt);
  if (!a || !a->recommendations) {
    show_message(r && !r->recommendations_error.empty()
                     ? tr("The recommenders failed: %1").arg(qs(r->recommendations_error))
                     : tr("No recommendations were computed for this trace."));
    return;
  }
  if (a->recommendations->items.empty()) {
    QString notes;
    for (const auto& n : a->recommendations->notes) notes += QStringLiteral(" ") + qs(n);
    show_message(tr("The analysis made no recommendation for this trace.") + notes);
    return;
  }
  show_content();
}

// --- GPU queues ---------------------------------------------------------------------------------

GpuQueuesPanel::GpuQueuesPanel(QWidget* parent) : PanelFrame(parent) {
  idle_ = new LaunchQueueModel(LaunchQueueModel::Table::kIdle, this);
  queues_ = new LaunchQueueModel(LaunchQueueModel::Table::kQueues, this);
  launches_ = new LaunchQueueModel(LaunchQueueModel::Table::kLaunches, this);
  tabs_ = new QTabWidget(this);
  // In the analysis's order (rank, stream) until a header is clicked.
  add_sorted_table(tabs_, idle_, tr("Idle time per stream"));
  add_sorted_table(tabs_, queues_, tr("Queue length per stream"));
  add_sorted_table(tabs_, launches_, tr("Kernel launches per rank"));
  set_content(tabs_);
  set_results(nullptr);
}

void GpuQueuesPanel::set_computing() { show_message(tr("Computing GPU idle time and launch queues\u2026")); }

void GpuQueuesPanel::set_results(const std::shared_ptr<const AnalysisResults>& r) {
  const auto analyses = r ? r->analyses : nullptr;
  idle_->set_analysis(analyses);
  queues_->set_analysis(analyses);
  launches_->set_analysis(analyses);
  if (!analyses) {
    show_message(r && !r->error.empty() ? tr("The analyses failed: %1").arg(qs(r->error))
                                        : tr("No trace analysed yet."));
    return;
  }
  if (analyses->launch_queue.empty()) {
    show_message(tr("No kernels, copies or memsets in this trace: no GPU idle time, launch queue or kernel "
                    "launch to measure."));
    return;
  }
  show_content();
}

// --- Locality ----------------------------------------------------------------------------------

void ResultsChart::set_results(std::shared_ptr<const AnalysisResults> r) {
  r_ = std::move(r);
  update();
}

void ResultsChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  paint(p);
}

void LocalityChart::paint(QPainter& p) {
  if (!r_ || !r_->analyses) return;
  const auto& a = r_->analyses->locality;
  // One curve over all layers (-1), then one per layer; distances with pairs only.
  std::vector<std::pair<int, const std::vector<analyzer::LocalityPoint>*>> curves{{-1, &a.curve}};
  for (const auto& l : a.layers) curves.push_back({l.layer, &l.curve});
  int max_d = 1;
  double lo = 1.0;
  for (const auto& [layer, pts] : curves)
    for (const auto& pt : *pts)
      if (pt.pairs > 0) {
        max_d = std::max(max_d, pt.distance);
        lo = std::min(lo, pt.cosine_similarity);
      }
  lo = std::max(0.0, lo - 0.05);
  const double hi = 1.0;
  p.setRenderHint(QPainter::Antialiasing, true);
  const QRect plot = rect().adjusted(48, 12, -12, -32);
  auto map = [&](int dist, double v) {
    return QPointF(plot.left() + (dist - 1.0) / std::max(1, max_d - 1) * plot.width(),
                   plot.bottom() - (v - lo) / (hi - lo) * plot.height());
  };
  p.setPen(QColor(0x80, 0x80, 0x80));
  p.drawRect(plot);
  p.drawText(QRect(plot.left(), plot.bottom() + 4, plot.width(), 24), Qt::AlignCenter,
             tr("iterations apart (1 \u2013 %1)").arg(max_d));
  p.save();
  p.translate(12, plot.center().y());
  p.rotate(-90);
  p.drawText(QRect(-plot.height() / 2, -10, plot.height(), 20), Qt::AlignCenter,
             tr("cosine similarity of the expert load"));
  p.restore();
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const auto& [layer, pts] = curves[i];
    QColor col = QColor::fromHsv(static_cast<int>((i * 47) % 360), 200, 200);
    p.setPen(QPen(col, layer < 0 ? 2.5 : 1.2));
    const analyzer::LocalityPoint* prev = nullptr;
    for (const auto& pt : *pts) {
      if (pt.pairs == 0) continue;
      if (prev) p.drawLine(map(prev->distance, prev->cosine_similarity), map(pt.distance, pt.cosine_similarity));
      prev = &pt;
    }
  }
}

LocalityPanel::LocalityPanel(QWidget* parent) : PanelFrame(parent) {
  auto* content = new QWidget(this);
  auto* box = new QVBoxLayout(content);
  box->setContentsMargins(0, 0, 0, 0);
  chart_ = new LocalityChart(content);
  tables_ = new SectionView(content);
  box->addWidget(chart_, 1);
  box->addWidget(tables_, 1);
  set_content(content);
  set_results(nullptr);
}

void LocalityPanel::set_computing() { show_message(tr("Computing locality\u2026")); }

void LocalityPanel::set_results(const std::shared_ptr<const AnalysisResults>& r) {
  chart_->set_results(r);
  tables_->set_section(r ? r->section("locality") : nullptr);
  if (!r || !r->analyses) {
    show_message(r && !r->error.empty() ? tr("The analyses failed: %1").arg(qs(r->error))
                                        : tr("No trace analysed yet."));
    return;
  }
  const auto& a = r->analyses->locality;
  if (!a.has_load) {
    show_message(tr("No expert load in this trace, so no locality of it across iterations. (moetrace's own "
                    "runs record it; traces of other tools give the load of ranks where the dispatch's "
                    "all-to-all split sizes were recorded.)"));
    return;
  }
  const bool any = std::any_of(a.curve.begin(), a.curve.end(), [](const auto& p) { return p.pairs > 0; });
  if (!any) {
    show_message(tr("The locality analysis found too few iterations to compare."));
    return;
  }
  show_content();
}

// --- Memory ------------------------------------------------------------------------------------

void MemoryChart::set_model(std::shared_ptr<const TimelineModel> model) {
  model_ = std::move(model);
  update();
}

void MemoryChart::set_axis(const TimeAxis& axis) {
  axis_ = axis;
  update();
}

void MemoryChart::paint(QPainter& p) {
  if (!model_ || model_->counters().empty()) return;
  constexpr int kLabel = 110;
  const auto counters = model_->counters();
  const int n = static_cast<int>(counters.size());
  const int strip = std::max(24, (height() - 4) / n);
  TimeAxis a = axis_;
  // Same time window as the timeline, across this chart's width.
  a.width_px = std::max(1, width() - kLabel - 4);
  a.ns_per_px = axis_.window_ns() / a.width_px;
  const QColor mem = to_qcolor(ColourClass::kMemory);
  const analyzer::MemoryAnalysis* m = r_ && r_->analyses ? &r_->analyses->memory : nullptr;
  for (int i = 0; i < n; ++i) {
    const auto& c = counters[static_cast<std::size_t>(i)];
    const int top = 2 + i * strip;
    const int h = strip - 6;
    const int bottom = top + h;
    const auto in_view = analyzer::memory_in_window(c.samples(), static_cast<std::int64_t>(a.t0_ns),
                                                    static_cast<std::int64_t>(a.t1_ns()));
    p.setPen(QColor(0x30, 0x30, 0x30));
    p.drawText(QRect(4, top, kLabel - 8, h), Qt::AlignVCenter | Qt::AlignLeft,
               tr("Rank %1\npeak %2\nin view %3")
                   .arg(c.rank().value)
                   .arg(qs(format_bytes(static_cast<double>(c.max_value()))),
                        qs(format_bytes(static_cast<double>(in_view.peak_bytes)))));
    p.fillRect(QRect(kLabel, top, a.width_px, h), QColor(0xF6, 0xF7, 0xF9));
    if (c.max_value() <= 0) continue;
    for (const auto& col : c.columns(a)) {
      const int x0 = kLabel + static_cast<int>(col.x0);
      const int w = std::max(1, static_cast<int>(col.x1 - col.x0));
      const int hi = static_cast<int>(std::lround(static_cast<double>(col.hi) / static_cast<double>(c.max_value()) * h));
      p.fillRect(QRect(x0, bottom - hi, w, hi), mem);
    }
    if (!m) continue;
    p.setPen(Qt::NoPen);
    for (const auto& b : m->bubbles) {
      if (b.rank != c.rank()) continue;
      const double x0 = a.x(static_cast<double>(b.start_ns)), x1 = a.x(static_cast<double>(b.end_ns));
      if (x1 < 0 || x0 > a.width_px) continue;
      const double bh = static_cast<double>(b.bytes) / static_cast<double>(c.max_value()) * h;
      const QRectF box(kLabel + std::max(0.0, x0), bottom - bh, std::min<double>(a.width_px, x1) - std::max(0.0, x0), bh);
      p.fillRect(box, QColor(0xE6, 0x55, 0x0D, 90));
      p.fillRect(box, QBrush(QColor(0xE6, 0x55, 0x0D), Qt::BDiagPattern));
    }
  }
}

MemoryPanel::MemoryPanel(QWidget* parent) : PanelFrame(parent) {
  auto* content = new QWidget(this);
  auto* box = padded_box(content);
  note_ = new QLabel(content);
  note_->setWordWrap(true);
  chart_ = new MemoryChart(content);
  tables_ = new SectionView(content);
  box->addWidget(note_);
  box->addWidget(chart_, 1);
  box->addWidget(tables_, 1);
  set_content(content);
  show_message(tr("No trace loaded."));
}

void MemoryPanel::set_model(std::shared_ptr<const TimelineModel> model) {
  has_counters_ = model && !model->counters().empty();
  chart_->set_model(model);
  tables_->set_section(nullptr);
  if (!has_counters_) {
    show_message(model ? tr("This trace records no memory allocations.") : tr("No trace loaded."));
    return;
  }
  note_->setText(tr("Memory in use per rank over the timeline's visible window."));
  show_content();
}

void MemoryPanel::set_axis(const TimeAxis& axis) { chart_->set_axis(axis); }

void MemoryPanel::set_computing() {
  if (has_counters_) note_->setText(tr("Memory in use per rank over the timeline's visible window. Memory bubbles: computing\u2026"));
}

void MemoryPanel::set_results(const std::shared_ptr<const AnalysisResults>& r) {
  chart_->set_results(r);
  tables_->set_section(r ? r->section("memory") : nullptr);
  if (!has_counters_) return;
  const QString base = tr("Memory in use per rank over the timeline's visible window");
  if (!r || !r->analyses)
    note_->setText(r && !r->error.empty() ? base + tr(". The memory analysis failed: %1").arg(qs(r->error)) : base + ".");
  else if (!r->analyses->memory.has_buffer_usage)
    note_->setText(base + tr(". Memory bubbles (allocated but idle) need buffers linked to the ops that use "
                             "them, which this trace does not have."));
  else
    note_->setText(base + tr("; memory bubbles (allocated but idle) hatched: %1.").arg(r->analyses->memory.bubbles.size()));
}

// --- LegendWidget --------------------------------------------------------------------------------

LegendWidget::LegendWidget(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
}

int LegendWidget::layout_items(int width, QPainter* p) const {
  const QFontMetrics fm = fontMetrics();
  const int line = fm.height() + 6;
  int x = 6, y = 3;
  for (const auto& e : legend()) {
    const QString text = QString::fromUtf8(e.label.data(), static_cast<qsizetype>(e.label.size()));
    const int w = 14 + 4 + fm.horizontalAdvance(text) + 14;
    if (x + w > width && x > 6) {
      x = 6;
      y += line;
    }
    if (p) {
      const QRect swatch(x, y + (line - 12) / 2 - 2, 14, 12);
      p->fillRect(swatch, to_qcolor(e.colour));
      p->setPen(QColor(0x70, 0x70, 0x70));
      p->drawRect(swatch.adjusted(0, 0, -1, -1));
      p->setPen(QColor(0x20, 0x20, 0x20));
      p->drawText(QRect(x + 18, y, w, line - 4), Qt::AlignVCenter | Qt::AlignLeft, text);
    }
    x += w;
  }
  return y + line;
}

QSize LegendWidget::sizeHint() const { return {900, heightForWidth(900)}; }

int LegendWidget::heightForWidth(int w) const { return layout_items(w, nullptr); }

void LegendWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  layout_items(width(), &p);
}

}  // namespace moetrace::gui
