// The Efficiency panel (offscreen, like gui_widgets): the efficiency figures
// of a hand-written trace with the numbers derived by hand, every cell as
// the report prints it, and HTA's kernel sequences found again for the
// options typed in.
#include <QApplication>
#include <QFile>
#include <QTableWidget>
#include <QTest>
#include <fstream>

#include "fixture_trace.h"
#include "main_window.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "text_trace.h"

using namespace moetrace;
using namespace moetrace::gui;

namespace {

// A PyTorch-profiler trace: aten::linear at [10, 40) and [110, 140) us, each
// launching a memset and two kernels (13 us of GPU time): one pattern, twice.
QString write_kineto(const QString& path) {
  std::string events;
  int corr = 0;
  auto add = [&](const std::string& e) { events += (events.empty() ? "" : ",\n") + e; };
  auto launch = [&](const char* call, const char* cat, const char* name, double at, double start, double dur) {
    ++corr;
    add(R"({"ph":"X","cat":"cuda_runtime","name":")" + std::string(call) + R"(","pid":10,"tid":11,"ts":)" +
        std::to_string(at) + R"(,"dur":1,"args":{"correlation":)" + std::to_string(corr) + "}}");
    add(R"({"ph":"X","cat":")" + std::string(cat) + R"(","name":")" + name + R"(","pid":0,"tid":7,"ts":)" +
        std::to_string(start) + R"(,"dur":)" + std::to_string(dur) + R"(,"args":{"device":0,"stream":7,"correlation":)" +
        std::to_string(corr) + "}}");
  };
  for (const double o : {0.0, 100.0}) {
    add(R"({"ph":"X","cat":"cpu_op","name":"aten::linear","pid":10,"tid":11,"ts":)" + std::to_string(o + 10) +
        R"(,"dur":30})");
    launch("cudaMemsetAsync", "gpu_memset", "Memset (Device)", o + 12, o + 50, 1);
    launch("cudaLaunchKernel", "kernel", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", o + 15, o + 51,
           10);
    launch("cudaLaunchKernel", "kernel", "void at::native::vectorized_elementwise_kernel<4>", o + 20, o + 61, 2);
  }
  std::ofstream(path.toStdString()) << R"({"schemaVersion":1,"traceEvents":[)" << events << "]}";
  return path;
}

// The text of a table widget's cell.
QString cell(const QTableWidget* t, int row, int column) {
  const auto* item = t->item(row, column);
  return item ? item->text() : QString();
}

}  // namespace

class GuiEfficiencyTest : public QObject {
  Q_OBJECT

 private slots:
  // text_trace.h's kTwoGpus (efficiency_test.cc): rank 0 an H100 SXM (989.5
  // dense BF16 TFLOP/s, 450 GB/s NVLink per direction), rank 1 an A100 SXM
  // 80GB (312, 300).
  //   rank 0: expert FLOPs 1e9 over [1000, 3000): 500 TFLOP/s, 50.5 % of peak;
  //           all-to-all 800,000 B over 2000 ns: algbw 400 GB/s, busbw x 1/2 =
  //           200, 44.4 % of link; all-reduce 300,000 B over 1000 ns: algbw 300,
  //           busbw x 2(1)/2 = 300, 66.7 %
  //   rank 1: 2e8 over 2000 ns: 100 TFLOP/s, 32.1 %; all-to-all 800,000 B over
  //           1400 ns: 571.4, 285.7, 95.2 %; all-reduce 300, 300, 100.0 %
  void efficiency_tab_shows_the_reports_figures() {
    const auto path = gui::testing::temp_path("efficiency_two_gpus.db");
    moetrace::testing::write_text_trace(path, moetrace::testing::kTwoGpus);
    MainWindow w;
    QVERIFY2(w.open_blocking(QString::fromStdString(path)), qPrintable(w.error_text()));
    auto* p = w.efficiency_panel();
    QVERIFY(!p->showing_message());
    auto* view = p->efficiency_view();
    QVERIFY(view->table_count() >= 3);  // per rank, per rank and layer, collectives
    const QTableWidget* ranks = view->table(0);
    QCOMPARE(ranks->rowCount(), 2);
    QCOMPARE(ranks->horizontalHeaderItem(1)->text(), QStringLiteral("expert TFLOP/s"));
    const QStringList rank0 = {"0", "500.0", "50.5%", "400.0", "200.0", "44.4%", "300.0", "300.0", "66.7%"};
    const QStringList rank1 = {"1", "100.0", "32.1%", "571.4", "285.7", "95.2%", "300.0", "300.0", "100.0%"};
    for (int c = 0; c < rank0.size(); ++c) {
      QCOMPARE(cell(ranks, 0, c), rank0[c]);
      QCOMPARE(cell(ranks, 1, c), rank1[c]);
    }
    bool waits = false;
    for (int t = 0; t < view->table_count(); ++t)
      for (int c = 0; c < view->table(t)->columnCount(); ++c)
        waits = waits || view->table(t)->horizontalHeaderItem(c)->text() == QStringLiteral("wait median");
    QVERIFY(waits);

    // Every cell is the report's (the same section, computed apart).
    const auto trace = analyzer::load_trace(path);
    const auto sections = analyzer::report_sections(trace, analyzer::analyze(trace, {}, {}, 1));
    const analyzer::ReportSection* eff = nullptr;
    for (const auto& s : sections)
      if (s.id == "efficiency") eff = &s;
    QVERIFY(eff);
    int t = 0;
    for (const auto& b : eff->blocks) {
      if (!b.has_table) continue;
      QVERIFY(t < view->table_count());
      const QTableWidget* shown = view->table(t++);
      QCOMPARE(shown->rowCount(), static_cast<int>(b.table.rows.size()));
      for (std::size_t r = 0; r < b.table.rows.size(); ++r)
        for (std::size_t c = 0; c < b.table.rows[r].size(); ++c)
          QCOMPARE(cell(shown, static_cast<int>(r), static_cast<int>(c)), QString::fromStdString(b.table.rows[r][c]));
    }
    QCOMPARE(t, view->table_count());
  }

  void kernel_sequences_tab_finds_them_for_the_options_typed() {
    const QString path = write_kineto(QString::fromStdString(gui::testing::temp_path("efficiency_sequences.json")));
    MainWindow w;
    QVERIFY2(w.open_blocking(path), qPrintable(w.error_text()));
    auto* p = w.efficiency_panel();
    QVERIFY(!p->showing_message());
    // The analyses' defaults: aten::linear, at least 3 events, the top 5.
    QCOMPARE(p->operator_field()->text(), QStringLiteral("aten::linear"));
    QCOMPARE(p->min_length_box()->value(), 3);
    QCOMPARE(p->top_k_box()->value(), 5);
    auto* view = p->sequences_view();
    QCOMPARE(view->table_count(), 1);
    const QTableWidget* patterns = view->table(0);
    QCOMPARE(patterns->rowCount(), 1);
    QCOMPARE(cell(patterns, 0, 1), QStringLiteral("2"));        // count
    QCOMPARE(cell(patterns, 0, 2), QStringLiteral("3"));        // GPU events
    QCOMPARE(cell(patterns, 0, 3), QStringLiteral("26 us"));    // 2 x (1 + 10 + 2)
    QCOMPARE(cell(patterns, 0, 4), QStringLiteral("60 us"));    // 2 x 30
    QCOMPARE(cell(patterns, 0, 6), QStringLiteral("aten::linear"));

    // Four events or more: none.
    p->min_length_box()->setValue(4);
    p->find_sequences();
    p->wait();
    QTRY_COMPARE(p->sequences_status(), QString());
    QCOMPARE(p->sequences_view()->table_count(), 0);
    // Another operator, typed and entered.
    p->min_length_box()->setValue(3);
    p->operator_field()->setText(QStringLiteral("aten::mm"));
    QTest::keyClick(p->operator_field(), Qt::Key_Return);
    p->wait();
    QTRY_COMPARE(p->sequences_status(), QString());
    QCOMPARE(p->sequences_view()->table_count(), 0);
    // Bad options: the analyzer's one line, as the CLI prints it.
    p->operator_field()->clear();
    p->find_sequences();
    p->wait();
    QTRY_COMPARE(p->sequences_status(), QStringLiteral("kernel sequences: the operator name is empty"));
    p->operator_field()->setText(QStringLiteral("linear"));
    p->rank_box()->setValue(3);
    p->find_sequences();
    p->wait();
    QTRY_COMPARE(p->sequences_status(), QStringLiteral("kernel sequences: rank 3 is not in the trace (its ranks: 0)"));
    p->rank_box()->setValue(-1);  // "default"
    p->find_sequences();
    p->wait();
    QTRY_COMPARE(p->sequences_status(), QString());
    QCOMPARE(p->sequences_view()->table(0)->rowCount(), 1);
  }
};

QTEST_MAIN(GuiEfficiencyTest)
#include "gui_efficiency_widgets_test.moc"
