// The efficiency figures and HTA's frequent CUDA kernel sequences, a tab
// each, as `moetrace report` prints them (its efficiency and
// kernel_sequences sections): expert GEMM TFLOP/s and % of peak, all-to-all
// and all-reduce bandwidths and % of link, the collectives' wait apart from
// transfer (analyzer::EfficiencyAnalysis, efficiency.h); the kernel
// sequences of an operator (analyzer::frequent_kernel_sequences,
// kernel_sequences.h), found again off the GUI thread for the operator,
// minimum length, number and rank typed in.
#pragma once

#include <QFutureWatcher>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <cstdint>
#include <memory>

#include "moetrace/analyzer/report.h"
#include "panels.h"

namespace moetrace::gui {

class EfficiencyPanel : public PanelFrame {
  Q_OBJECT
 public:
  // What one search of kernel sequences gave: the report's section, or the
  // one-line error of bad options.
  struct Found {
    analyzer::ReportSection section;
    QString error;
  };

  explicit EfficiencyPanel(QWidget* parent = nullptr);
  ~EfficiencyPanel() override;
  void set_computing();
  // The trace the kernel sequences are searched in (null: none).
  void set_trace(std::shared_ptr<const analyzer::Trace> trace);
  void set_results(const std::shared_ptr<const AnalysisResults>& r);

  QTabWidget* tabs() const { return tabs_; }
  SectionView* efficiency_view() const { return efficiency_; }
  SectionView* sequences_view() const { return sequences_; }
  QLineEdit* operator_field() const { return operator_; }
  QSpinBox* min_length_box() const { return min_len_; }
  QSpinBox* top_k_box() const { return top_k_; }
  QSpinBox* rank_box() const { return rank_; }
  // The line under the options: what was searched, or why it failed.
  QString sequences_status() const { return status_->text(); }
  // Searches with the options shown (the Find button, Enter in the field).
  void find_sequences();
  // Waits for a search in progress (tests).
  void wait();

 private:
  void show_found(const Found& f);

  QTabWidget* tabs_;
  SectionView* efficiency_;
  QLabel* efficiency_note_;
  QLineEdit* operator_;
  QSpinBox* min_len_;
  QSpinBox* top_k_;
  QSpinBox* rank_;
  QPushButton* find_;
  QLabel* status_;
  SectionView* sequences_;
  std::shared_ptr<const analyzer::Trace> trace_;
  analyzer::RankWindow window_ = analyzer::RankWindow::kSpan;
  // A search's result shows only if no other trace or results came since.
  std::uint64_t generation_ = 0, searched_ = 0;
  QFutureWatcher<Found>* watcher_;
};

}  // namespace moetrace::gui
