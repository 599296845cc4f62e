#include "efficiency_panel.h"

#include <QHBoxLayout>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <exception>

#include "moetrace/analyzer/kernel_sequences.h"
#include "qt_text.h"

namespace moetrace::gui {

namespace {

QSpinBox* spin_box(QWidget* parent, int min, int max, const QString& special, const QString& tip) {
  auto* b = new QSpinBox(parent);
  b->setRange(min, max);
  if (!special.isEmpty()) b->setSpecialValueText(special);
  b->setToolTip(tip);
  return b;
}

}  // namespace

EfficiencyPanel::EfficiencyPanel(QWidget* parent) : PanelFrame(parent) {
  tabs_ = new QTabWidget(this);
  efficiency_ = new SectionView(tabs_);
  tabs_->addTab(efficiency_, tr("Efficiency"));

  auto* seq = new QWidget(tabs_);
  auto* box = padded_box(seq);
  auto* form = new QHBoxLayout;
  operator_ = new QLineEdit(seq);
  operator_->setToolTip(tr("The CPU ops whose names contain this (case-sensitive): HTA's operator_name"));
  min_len_ = spin_box(seq, 0, 100000, {}, tr("The fewest GPU events an op must launch to count (HTA's min_pattern_len)"));
  top_k_ = spin_box(seq, 0, 100000, tr("all"), tr("The most frequent patterns listed (HTA's top_k)"));
  rank_ = spin_box(seq, -1, 1 << 24, tr("default"), tr("The rank searched: default 0, else the trace's lowest"));
  find_ = new QPushButton(tr("Find"), seq);
  form->addWidget(new QLabel(tr("Operator"), seq));
  form->addWidget(operator_, 1);
  form->addWidget(new QLabel(tr("min length"), seq));
  form->addWidget(min_len_);
  form->addWidget(new QLabel(tr("top"), seq));
  form->addWidget(top_k_);
  form->addWidget(new QLabel(tr("rank"), seq));
  form->addWidget(rank_);
  form->addWidget(find_);
  status_ = new QLabel(seq);
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  sequences_ = new SectionView(seq);
  box->addLayout(form);
  box->addWidget(status_);
  box->addWidget(sequences_, 1);
  tabs_->addTab(seq, tr("Kernel sequences"));
  set_content(tabs_);

  watcher_ = new QFutureWatcher<Found>(this);
  connect(watcher_, &QFutureWatcher<Found>::finished, this, [this] {
    if (watcher_->future().resultCount() > 0 && searched_ == generation_) show_found(watcher_->result());
    find_->setEnabled(true);
  });
  connect(find_, &QPushButton::clicked, this, &EfficiencyPanel::find_sequences);
  connect(operator_, &QLineEdit::returnPressed, this, &EfficiencyPanel::find_sequences);
  set_results(nullptr);
}

EfficiencyPanel::~EfficiencyPanel() { wait(); }

void EfficiencyPanel::set_computing() { show_message(tr("Computing the efficiency figures\u2026")); }

void EfficiencyPanel::set_trace(std::shared_ptr<const analyzer::Trace> trace) {
  wait();
  ++generation_;
  trace_ = std::move(trace);
}

void EfficiencyPanel::set_results(const std::shared_ptr<const AnalysisResults>& r) {
  ++generation_;
  efficiency_->set_section(r ? r->section("efficiency") : nullptr);
  sequences_->set_section(r ? r->section("kernel_sequences") : nullptr);
  status_->clear();
  if (!r || !r->analyses) {
    show_message(r && !r->error.empty() ? tr("The analyses failed: %1").arg(qs(r->error))
                                        : tr("No trace analysed yet."));
    return;
  }
  // The options the analyses used, to start from.
  const auto& o = r->analyses->kernel_sequences.options;
  window_ = o.window;
  operator_->setText(qs(o.operator_name));
  min_len_->setValue(o.min_pattern_len);
  top_k_->setValue(static_cast<int>(o.top_k));
  rank_->setValue(o.rank ? *o.rank : -1);
  show_content();
}

void EfficiencyPanel::find_sequences() {
  if (!trace_) {
    status_->setText(tr("No trace loaded."));
    return;
  }
  wait();
  analyzer::KernelSequenceOptions o;
  o.operator_name = operator_->text().toStdString();
  o.min_pattern_len = min_len_->value();
  o.top_k = static_cast<std::size_t>(top_k_->value());
  if (rank_->value() >= 0) o.rank = rank_->value();
  o.window = window_;
  searched_ = generation_;
  status_->setText(tr("Searching\u2026"));
  find_->setEnabled(false);
  auto trace = trace_;
  watcher_->setFuture(QtConcurrent::run([trace, o] {
    Found f;
    try {
      f.section = analyzer::kernel_sequences_section(analyzer::frequent_kernel_sequences(*trace, o));
    } catch (const std::exception& e) {
      f.error = QString::fromStdString(e.what());
    }
    return f;
  }));
}

void EfficiencyPanel::show_found(const Found& f) {
  if (!f.error.isEmpty()) {
    status_->setText(f.error);
    sequences_->set_section(nullptr);
    return;
  }
  status_->clear();
  sequences_->set_section(&f.section);
}

void EfficiencyPanel::wait() {
  if (watcher_->isRunning()) watcher_->waitForFinished();
}

}  // namespace moetrace::gui
