// Headless tests of the Qt front end (QT_QPA_PLATFORM=offscreen): every item
// model under QAbstractItemModelTester, the window's handling of good and bad
// files, keyboard and mouse, search, linking between panels and timeline,
// and a screenshot of the fixture trace checked pixel by pixel.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QDropEvent>
#include <QFile>
#include <QFileInfo>
#include <QMimeData>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>
#include <QToolTip>
#include <QUrl>
#include <cmath>
#include <fstream>

#include "fixture_trace.h"
#include "widget_helpers.h"
#include "text_trace.h"
#include "main_window.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/gui/palette.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/trace_output.h"
#include "panel_models.h"
#include "panels.h"
#include "timeline_painter.h"

using namespace moetrace;
using namespace moetrace::gui;
using moetrace::gui::testing::us;
using namespace moetrace::gui::testing;

namespace {

// The message the analyzer (and so the CLI) gives for a file.
QString analyzer_message(const QString& path) {
  try {
    analyzer::load_trace(path.toStdString());
  } catch (const Error& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

}  // namespace

class GuiWidgetsTest : public QObject {
  Q_OBJECT

 private slots:
  void item_models_pass_the_model_tester() {
    const auto path = fixture_path().toStdString();
    auto trace = std::make_shared<const analyzer::Trace>(analyzer::load_trace(path));
    auto model = TimelineModel::build(trace);

    DetailsModel details;
    QAbstractItemModelTester t1(&details, QAbstractItemModelTester::FailureReportingMode::QtTest);
    details.set_fields(describe_item(*model, {ItemSource::kActivity, 0}));
    QVERIFY(details.rowCount() > 5);
    details.set_fields({});

    BreakdownModel breakdown;
    QAbstractItemModelTester t2(&breakdown, QAbstractItemModelTester::FailureReportingMode::QtTest);
    breakdown.set_breakdown(std::make_shared<const analyzer::Breakdown>(analyzer::compute_breakdown(*trace)));
    QCOMPARE(breakdown.rowCount(), 2);
    QCOMPARE(breakdown.index(1, BreakdownModel::kLayer).data(kLayerRole).toInt(), 1);
    const QVariantList split = breakdown.index(0, BreakdownModel::kSplit).data(kSplitRole).toList();
    QCOMPARE(split.size(), kNumCategories + 2);
    double sum = 0;
    for (const auto& v : split) sum += v.toDouble();
    QVERIFY(std::abs(sum - 1.0) < 1e-9);  // exclusive + overlap + idle = the window

    RangeModel range;
    QAbstractItemModelTester t3(&range, QAbstractItemModelTester::FailureReportingMode::QtTest);
    range.set_summary(analyzer::breakdown_in_window(*trace, us(100), us(200)));
    QCOMPARE(range.rowCount(), 3);  // two ranks and the total
    QCOMPARE(range.index(2, RangeModel::kRank).data().toString(), QStringLiteral("all ranks"));
    QCOMPARE(range.index(0, RangeModel::kBusy).data(kSortRole).toLongLong(), 70'000LL);
    range.set_summary(std::nullopt);
    QCOMPARE(range.rowCount(), 0);

    ExpertLoadModel load;
    QAbstractItemModelTester t4(&load, QAbstractItemModelTester::FailureReportingMode::QtTest);
    load.set_index(trace, std::make_shared<const ExpertLoadIndex>(ExpertLoadIndex::from_trace(*trace)));
    QCOMPARE(load.rowCount(), 2);
    QCOMPARE(load.columnCount(), 4);
    QCOMPARE(load.index(1, 2).data(kTokensRole).toLongLong(), 103LL);
    QCOMPARE(load.index(1, 2).data(Qt::BackgroundRole).value<QColor>(), ExpertLoadModel::heat_colour(1.0));
    load.set_iteration_position(1);
    QCOMPARE(load.index(0, 0).data().toString(), QStringLiteral("1"));
    QCOMPARE(load.index(1, 0).data(kTokensRole).toLongLong(), -1LL);
    QVERIFY(load.index(1, 0).data(Qt::ToolTipRole).toString().contains(QStringLiteral("no record")));
    QCOMPARE(load.headerData(2, Qt::Horizontal, Qt::DisplayRole).toString(), QStringLiteral("E2"));
    // A load read from all-to-all split sizes is per destination rank.
    auto by_rank = std::make_shared<analyzer::Trace>(*trace);
    by_rank->expert_load_by_rank = true;
    load.set_index(by_rank, std::make_shared<const ExpertLoadIndex>(ExpertLoadIndex::from_trace(*by_rank)));
    QCOMPARE(load.headerData(2, Qt::Horizontal, Qt::DisplayRole).toString(), QStringLiteral("R2"));
    QVERIFY(load.index(1, 2).data(Qt::ToolTipRole).toString().contains(QStringLiteral("rank 2")));
    QVERIFY(load.index(1, 2).data(Qt::ToolTipRole).toString().contains(QStringLiteral("elements")));
    load.set_index(nullptr, nullptr);
    QCOMPARE(load.rowCount(), 0);

    RecommendationsModel recs;
    QAbstractItemModelTester t5(&recs, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(!recs.available());
    analyzer::Recommendations d;
    d.items.push_back({1, "pipeline degree", "r = 4", "all-to-all is 31 % of layer 1", 0.12, true});
    d.items.push_back({2, "pipeline degree", "keep r = 1", "", 0.0, true});
    analyzer::LayerRecommendation layer1;
    layer1.layer = 1;
    layer1.replay.computed = true;
    layer1.replay.measured_s = 0.040;
    layer1.replay.simulated_s = 0.030;
    layer1.replay.error = -0.25;
    layer1.replay.unreliable = true;
    layer1.replay.off_term = "all-to-all";
    d.layers.push_back(layer1);
    recs.set_data(d);
    QCOMPARE(recs.rowCount(), 2);
    QCOMPARE(recs.index(0, RecommendationsModel::kGain).data().toString(), QStringLiteral("12.0 %"));
    // The preset replay (the trace's configuration simulated); the trace's
    // own replay: gui_replay_widgets_test.cc.
    QCOMPARE(recs.index(0, RecommendationsModel::kMeasured).data().toString(), QStringLiteral("40.0 ms"));
    QCOMPARE(recs.index(0, RecommendationsModel::kReplayed).data().toString(),
             QStringLiteral("30.0 ms simulated (-25.00 %): unreliable, the all-to-all term is off"));
    QCOMPARE(recs.index(0, RecommendationsModel::kPredicted).data().toString(), QStringLiteral("\u2014"));
    QCOMPARE(recs.index(1, RecommendationsModel::kReplayed).data().toString(), QStringLiteral("\u2014"));
    QCOMPARE(recs.index(0, 0).data(kLayerRole).toInt(), 1);
    recs.set_data(std::nullopt);
  }

  void bad_files_show_the_analyzer_message_in_the_window() {
    const QString dir = QFileInfo(QString::fromStdString(moetrace::gui::testing::temp_path("x"))).path();
    const QString text = dir + QStringLiteral("/not_a_trace.txt");
    {
      QFile f(text);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("this is not a database\n");
    }
    const QString empty = dir + QStringLiteral("/empty.db");
    QFile(empty).remove();
    QFile(empty).open(QIODevice::WriteOnly);
    const QString foreign = dir + QStringLiteral("/foreign.db");
    QFile(foreign).remove();
    {
      sqlite::Database db(foreign.toStdString(), sqlite::Database::Mode::kCreate);
      db.exec("CREATE TABLE t(x INTEGER)");
    }
    const QString missing = dir + QStringLiteral("/does_not_exist.db");
    // A folder is a run of its *.db files; one without any is refused as the
    // loader refuses a directory.
    const QString folder = dir + QStringLiteral("/no_rank_files");
    QVERIFY(QDir().mkpath(folder));
    for (const QString& path : {text, empty, foreign, missing, folder}) {
      MainWindow w;
      QVERIFY(!w.open_blocking(path));
      const QString expected = analyzer_message(path);
      QVERIFY2(!expected.isEmpty(), qPrintable(path));
      QCOMPARE(w.error_text(), expected);
      QVERIFY(!w.showing_timeline());
    }
  }

  // Two rank files of one run (rank 1's clock 5 ms ahead), opened as a
  // folder: one run of two ranks, aligned, as `moetrace report DIR` reads it.
  void a_folder_of_rank_files_opens_as_one_run() {
    const QString dir = QFileInfo(QString::fromStdString(moetrace::gui::testing::temp_path("x"))).path() +
                        QStringLiteral("/two_rank_run");
    QDir(dir).removeRecursively();
    QVERIFY(QDir().mkpath(dir));
    for (int rank = 0; rank < 2; ++rank) {
      const std::int64_t t0 = 1'000'000'000 + (rank == 1 ? 5'000'000 : 0);
      std::string t = "run world_size=2 backend=test variant=dpmoe\n";
      t += "stream id=0 rank=" + std::to_string(rank) + " role=comm\n";
      for (int i = 0; i < 3; ++i) {
        // Every all-to-all starts 100 ns apart on the ranks and ends together.
        const std::int64_t s = t0 + 1000 * i + 100 * rank;
        t += "op id=" + std::to_string(i + 1) + " rank=" + std::to_string(rank) +
             " stream=0 kind=dispatch_all_to_all layer=0 iteration=" + std::to_string(i) +
             " phase=fwd start=" + std::to_string(s) + " end=" + std::to_string(t0 + 1000 * i + 300) + "\n";
      }
      moetrace::testing::write_text_trace((dir + QStringLiteral("/run.rank%1.db").arg(rank)).toStdString(), t);
    }
    MainWindow w;
    QVERIFY2(w.open_blocking(dir), qPrintable(w.error_text()));
    QVERIFY(w.showing_timeline());
    const auto& loaded = *w.session()->current();
    QVERIFY(loaded.trace->files);
    QCOMPARE(loaded.trace->files->files.size(), std::size_t{2});
    QCOMPARE(w.timeline()->model()->groups().size(), std::size_t{2});
    QVERIFY(!w.timeline()->group_collapsed(0) && !w.timeline()->group_collapsed(1));
    QVERIFY(w.windowTitle().contains(QStringLiteral("run.rank0.db and 1 more rank files")));
    // Aligned: rank 1's all-to-alls end where rank 0's do, not 5 ms later.
    std::int64_t end0 = -1, end1 = -1;
    for (const auto& op : loaded.trace->ops)
      if (op.iteration == 0) (op.rank.value == 0 ? end0 : end1) = op.end_ns;
    QVERIFY(end0 > 0 && end1 > 0);
    QVERIFY2(std::llabs(end1 - end0) < 1000, qPrintable(QString::number(end1 - end0)));
  }

  // A run of 33 ranks (one more than the report shows rank by rank) opens
  // with every rank folded to its header; a click on a header opens it.
  void a_large_run_opens_with_its_ranks_folded() {
    std::string t = "run world_size=33 backend=test variant=dpmoe\n";
    for (int r = 0; r < 33; ++r) {
      const std::string rank = std::to_string(r);
      t += "stream id=" + rank + " rank=" + rank + " role=compute\n";
      t += "op id=" + std::to_string(r + 1) + " rank=" + rank + " stream=" + rank +
           " kind=expert_ffn layer=0 iteration=0 phase=fwd start=" + std::to_string(1000 * r) +
           " end=" + std::to_string(1000 * r + 500) + "\n";
    }
    const std::string path = moetrace::gui::testing::temp_path("ranks33.db");
    moetrace::testing::write_text_trace(path, t);
    MainWindow w;
    w.resize(1000, 700);
    QVERIFY2(w.open_blocking(QString::fromStdString(path)), qPrintable(w.error_text()));
    TimelineView* v = w.timeline();
    QCOMPARE(v->model()->groups().size(), std::size_t{33});
    for (std::size_t g = 0; g < 33; ++g) QVERIFY(v->group_collapsed(g));
    v->set_all_collapsed(false);
    for (std::size_t g = 0; g < 33; ++g) QVERIFY(!v->group_collapsed(g));
  }

  void loads_off_the_gui_thread_with_progress() {
    MainWindow w;
    QSignalSpy loaded(w.session(), &TraceSession::loaded);
    QSignalSpy analysed(w.session(), &TraceSession::analyses_ready);
    QSignalSpy progress(w.session(), &TraceSession::progress);
    w.open(fixture_path());
    QVERIFY(w.session()->loading());
    QVERIFY(loaded.wait(10000));
    QVERIFY(analysed.count() > 0 || analysed.wait(10000));
    QVERIFY(progress.count() > 0);
    QVERIFY(w.showing_timeline());
    QVERIFY(!w.breakdown_panel()->showing_message());
    QVERIFY(!w.expert_load_panel()->showing_message());
    QVERIFY(!w.gpu_queues_panel()->showing_message());  // the fixture's kernels have launch calls
    // The locality, memory and recommendation panels show the analyzer's
    // results or say what the trace lacks; none promises a later version.
    for (const QString& text : {w.locality_panel()->message(), w.recommendations_panel()->message(),
                                w.memory_panel()->note()}) {
      QVERIFY(!text.contains(QLatin1String("not available yet")));
      QVERIFY(!text.contains(QLatin1String("issue")));
    }
    // An async failure lands on the error page.
    QSignalSpy failed(w.session(), &TraceSession::failed);
    w.open(QStringLiteral("/nonexistent/trace.db"));
    QVERIFY(failed.wait(10000));
    QCOMPARE(w.error_text(), analyzer_message(QStringLiteral("/nonexistent/trace.db")));
  }

  void opens_a_pytorch_profiler_trace() {
    // A trace of another tool opens as it is, read by its importer.
    const std::string path = moetrace::gui::testing::temp_path("worker0.pt.trace.json");
    std::ofstream(path) << R"({"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll", "pid": 0, "tid": 7, "ts": 20, "dur": 30,
         "args": {"correlation": 7, "stream": 7, "device": 0}}]})";
    MainWindow w;
    w.resize(1000, 700);
    QVERIFY2(w.open_blocking(QString::fromStdString(path)), qPrintable(w.error_text()));
    QCOMPARE(w.timeline()->model()->groups().size(), std::size_t{1});
    QCOMPARE(w.session()->current()->trace->run.backend, std::string("kineto"));
  }

  void opens_a_dropped_file() {
    MainWindow w;
    w.show();
    QSignalSpy loaded(w.session(), &TraceSession::loaded);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(fixture_path())});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(&w, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QCoreApplication::sendEvent(&w, &drop);
    QVERIFY(loaded.wait(10000));
    QVERIFY(w.showing_timeline());
  }

  void keyboard_zooms_and_pans_like_perfetto() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    v->setFocus();
    const TimeAxis a0 = v->axis();
    QTest::keyClick(v, Qt::Key_W);
    QVERIFY(std::abs(v->axis().ns_per_px - a0.ns_per_px / TimelineView::kZoomStep) < 1e-9);
    QTest::keyClick(v, Qt::Key_S);
    QVERIFY(std::abs(v->axis().ns_per_px - a0.ns_per_px) < 1e-9);
    QTest::keyClick(v, Qt::Key_W);
    QTest::keyClick(v, Qt::Key_W);
    const double t0 = v->axis().t0_ns;
    QTest::keyClick(v, Qt::Key_D);
    QVERIFY(v->axis().t0_ns > t0);
    QTest::keyClick(v, Qt::Key_A);
    QTest::keyClick(v, Qt::Key_A);
    QVERIFY(v->axis().t0_ns < t0);
    QTest::keyClick(v, Qt::Key_Home);
    QVERIFY(v->axis().t0_ns <= static_cast<double>(us(0)));
    QVERIFY(v->axis().t1_ns() >= static_cast<double>(us(310)));
  }

  void draw_lists_are_prepared_off_the_gui_thread() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    QVERIFY(v->draw_list_current());
    const TimeAxis before = v->shown_draw_list().axis;
    v->zoom_in();
    v->pan_right();
    // The request returns at once; the worker's list arrives through the event loop.
    QTRY_VERIFY(v->draw_list_current());
    QCOMPARE(v->shown_draw_list().axis, v->axis());
    QVERIFY(!(v->shown_draw_list().axis == before));
    QVERIFY(!v->shown_draw_list().rects.empty());
  }

  void click_selects_and_details_show_the_kernel() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    const auto& m = *v->model();
    const int row = find_row(m, RankId(0), RowKind::kActivities, "compute");
    QVERIFY(row >= 0);
    QSignalSpy selected(v, &TimelineView::item_selected);
    QTest::mouseClick(v, Qt::LeftButton, Qt::NoModifier, point_of(v, row, static_cast<double>(us(50))));
    QCOMPARE(selected.count(), 1);
    QCOMPARE(m.item_name(v->selected()), std::string("expert_gemm2"));
    auto* details = w->details_panel()->model();
    QVERIFY(details->rowCount() > 0);
    QCOMPARE(details->index(0, 1).data().toString(), QStringLiteral("expert_gemm2"));
    bool api = false;
    for (int r = 0; r < details->rowCount(); ++r)
      api |= details->index(r, 1).data().toString() == QStringLiteral("cudaLaunchKernel");
    QVERIFY(api);
    // A click on empty space clears the selection.
    QTest::mouseClick(v, Qt::LeftButton, Qt::NoModifier, point_of(v, row, static_cast<double>(us(280))));
    QVERIFY(!v->selected().valid());
  }

  void shift_drag_selects_a_range_and_shows_its_breakdown() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    const int row = find_row(*v->model(), RankId(0), RowKind::kActivities, "compute");
    QSignalSpy ranged(v, &TimelineView::range_selected);
    const QPoint a = point_of(v, row, static_cast<double>(us(100)));
    const QPoint b = point_of(v, row, static_cast<double>(us(200)));
    QTest::mousePress(v, Qt::LeftButton, Qt::ShiftModifier, a);
    QMouseEvent move(QEvent::MouseMove, b, v->mapToGlobal(b), Qt::NoButton, Qt::LeftButton, Qt::ShiftModifier);
    QCoreApplication::sendEvent(v, &move);
    QTest::mouseRelease(v, Qt::LeftButton, Qt::ShiftModifier, b);
    QCOMPARE(ranged.count(), 1);
    w->range_panel()->wait();
    QCoreApplication::processEvents();
    const auto& s = w->range_panel()->model()->summary();
    QVERIFY(s.has_value());
    QCOMPARE(s->ranks.size(), std::size_t{2});
    // Pixel-rounded ends: within one pixel of the hand-derived 70 us busy.
    QVERIFY(std::abs(s->ranks[0].t.busy_ns - 70'000) <= 2 * v->axis().ns_per_px);
  }

  void search_steps_through_matches() {
    auto w = loaded_window();
    QVERIFY(w);
    QCOMPARE(w->search_now(QStringLiteral("expert_gemm")), std::size_t{10});
    auto* v = w->timeline();
    QVERIFY(v->selected().valid());
    const auto first = v->selected();
    w->find_next();
    QVERIFY(!(v->selected() == first));
    w->find_previous();
    QVERIFY(v->selected() == first);
    QCOMPARE(w->search_now(QStringLiteral("no such kernel")), std::size_t{0});
  }

  void panels_select_their_layer_on_the_timeline() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* view = w->breakdown_panel()->view();
    const QModelIndex l1 = view->model()->index(1, BreakdownModel::kLayer);
    QCOMPARE(l1.data(kLayerRole).toInt(), 1);
    emit view->clicked(l1);
    auto* v = w->timeline();
    QCOMPARE(v->highlighted_layer(), 1);
    // Zoomed onto layer 1's forward pass [100, 170) us on both ranks.
    QVERIFY(v->axis().t0_ns < static_cast<double>(us(100)));
    QVERIFY(v->axis().t1_ns() > static_cast<double>(us(170)));
    QVERIFY(v->axis().t1_ns() < static_cast<double>(us(200)));
  }

  // The screenshot: the fixture rendered headless, and the colours where the
  // description puts them.
  void screenshot_shows_each_op_kind_in_its_lane() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    // Tall enough for rank 1's lanes below the queue-length rows.
    w->resize(1400, 1150);
    QCoreApplication::processEvents();
    v->prepare_now();
    const QString png = QDir::tempPath() + QStringLiteral("/moetrace_gui_fixture_screenshot.png");
    QVERIFY(w->save_screenshot(png));
    QVERIFY(QFile(png).size() > 10000);
    const QImage img = v->grab().toImage();
    const auto& m = *v->model();
    const QColor a2a = to_qcolor(ColourClass::kAllToAll), expert = to_qcolor(ColourClass::kExpertCompute);
    const QColor offload = to_qcolor(ColourClass::kOffloadPrefetch), allreduce = to_qcolor(ColourClass::kAllReduce);
    auto pixel = [&](int row, double t_us) { return block_colour(v, img, row, t_us); };
    for (int rank = 0; rank < 2; ++rank) {
      const int compute = find_row(m, RankId(rank), RowKind::kActivities, "compute");
      const int comm = find_row(m, RankId(rank), RowKind::kActivities, "comm");
      const int copy = find_row(m, RankId(rank), RowKind::kActivities, "copy");
      QCOMPARE(pixel(comm, 20), a2a);         // dispatch [10, 30)
      QCOMPARE(pixel(comm, 70), a2a);         // combine [60, 80)
      QCOMPARE(pixel(comm, 215), allreduce);  // moe_all_reduce [200, 230)
      QCOMPARE(pixel(compute, 40), expert);   // expert_gemm1 [30, 45)
      QCOMPARE(pixel(copy, 75), offload);     // offload [60, 90)
      QVERIFY(pixel(comm, 90) != a2a);        // idle between layers
      // No all-to-all anywhere in the compute lane.
      const QRect c = v->canvas_rect();
      const int y = point_of(v, compute, 0).y();
      for (int x = c.left(); x < c.right(); ++x) QVERIFY(img.pixelColor(x, y) != a2a);
    }
  }

  void hover_shows_a_tooltip() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    const int row = find_row(*v->model(), RankId(0), RowKind::kActivities, "compute");
    const QPoint p = point_of(v, row, static_cast<double>(us(50)));
    QMouseEvent move(QEvent::MouseMove, p, v->mapToGlobal(p), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
    QCoreApplication::sendEvent(v, &move);
    QTRY_VERIFY(QToolTip::text().contains(QStringLiteral("expert_gemm2")));
    QVERIFY(QToolTip::text().contains(QStringLiteral("layer 0")));
  }

  void memory_panel_draws_memory_in_use() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* panel = w->memory_panel();
    QVERIFY(!panel->showing_message());
    panel->resize(600, 200);
    const QImage img = panel->grab().toImage();
    const QColor mem = to_qcolor(ColourClass::kMemory);
    int count = 0;
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) count += img.pixelColor(x, y) == mem;
    QVERIFY(count > 100);
  }

  // Analyzer results injected: the panels show them, a recommendation's
  // layer is outlined on the timeline, and failures show their error.
  void analysis_panels_show_the_analyzers_results() {
    auto w = loaded_window();
    QVERIFY(w);
    auto a = std::make_shared<analyzer::Analyses>();
    a->recommendations.emplace();
    a->recommendations->items.push_back({1, "pipeline degree", "r = 4", "all-to-all is 31 % of layer 1", 0.12, true});
    a->locality.has_load = true;
    a->locality.curve = {{1, 2, 0.9}, {2, 1, 0.8}, {3, 1, 0.75}};
    a->memory.has_buffer_usage = true;
    a->memory.bubbles.push_back({RankId(0), BufferId(1), "T_DI", 1, 0, 2 << 20, us(100), us(200)});
    auto r = std::make_shared<AnalysisResults>();
    r->analyses = a;
    r->sections = analyzer::report_sections(*w->session()->current()->trace, *a);
    w->recommendations_panel()->set_results(r);
    QVERIFY(!w->recommendations_panel()->showing_message());
    auto* view = w->recommendations_panel()->view();
    emit view->clicked(view->model()->index(0, RecommendationsModel::kAction));
    QCOMPARE(w->timeline()->highlighted_layer(), 1);
    w->locality_panel()->set_results(r);
    QVERIFY(!w->locality_panel()->showing_message());
    w->memory_panel()->set_results(r);
    QVERIFY(w->memory_panel()->note().contains(QStringLiteral("hatched: 1")));

    a->recommendations->items.clear();
    w->recommendations_panel()->set_results(r);
    QVERIFY(w->recommendations_panel()->message().contains(QStringLiteral("no recommendation")));
    auto failed = std::make_shared<AnalysisResults>();
    failed->error = failed->recommendations_error = "trace.db: broken";
    w->recommendations_panel()->set_results(failed);
    QVERIFY(w->recommendations_panel()->message().contains(QStringLiteral("trace.db: broken")));
    w->locality_panel()->set_results(failed);
    QVERIFY(w->locality_panel()->message().contains(QStringLiteral("trace.db: broken")));
    w->memory_panel()->set_results(failed);
    QVERIFY(w->memory_panel()->note().contains(QStringLiteral("trace.db: broken")));
  }

  // The GPU queues panel's three tables on a hand-made trace (HTA's
  // definitions, launch_queue.h; cutoffs: kernel wait < 30 us, runtime
  // outlier > 50 us, launch-delay outlier > 100 us). Neither stream has a
  // recorded CUDA stream id, so the tables name moetrace's ids (#0, #1).
  //
  // Rank 0, stream 0, every call 100 ns long:
  //   K1 [1000, 2000)       call [500, 600)
  //   K2 [2020, 3000)       call [700, 800)    gap 20 < 30000, call in time: kernel_wait 20
  //   K3 [4000, 5000)       call [3500, 3600)  gap 1000, call 3500 > 3000: host_wait 1000
  //   K4 [200000, 200500)   call [2500, 2600)  gap 195000 >= 30000, call in time: other 195000
  //   idle 196020 of the window 200500 - 1000 = 199500 (98.3 %).
  //   Queue (+1 at a call's start, -1 at its kernel's start): (500,1) (700,2)
  //   (1000,1) (2020,0) (2500,1) (3500,2) (4000,1) (200000,0): 8 points, mean 1,
  //   std sqrt(4 / 7), sorted 0 0 1 1 1 1 2 2 -> 25 % 0.75, median 1, 75 % 1.25,
  //   max 2 for 300 + 500 = 800 ns.
  //   Launch delays (kernel start - call end): 400, 1220, 400, 197400 -> mean
  //   49855, max 197400, one delay outlier; GPU time >= CPU time: no short kernel.
  // Rank 1, stream 1:
  //   K5 [100000, 100010)   call [0, 60000)       cpu 60000 > 50 us: runtime outlier
  //                         (so not short); delay 40000
  //   K6 [100020, 100030)   call [60000, 60100)   gap 10, call in time: kernel_wait 10;
  //                         gpu 10 < cpu 100: short; delay 39920
  //   Queue: (0,1) (60000,2) (100000,1) (100020,0): max 2 for 40000 ns.
  void gpu_queues_panel_shows_idle_time_queues_and_launches() {
    const std::string path = moetrace::gui::testing::temp_path("gpu_queues.db");
    moetrace::testing::write_text_trace(path, R"(
      stream id=0 rank=0 role=compute
      stream id=1 rank=1 role=compute
      api rank=0 start=500 end=600 corr=1
      api rank=0 start=700 end=800 corr=2
      api rank=0 start=3500 end=3600 corr=3
      api rank=0 start=2500 end=2600 corr=4
      kernel rank=0 stream=0 start=1000 end=2000 corr=1
      kernel rank=0 stream=0 start=2020 end=3000 corr=2
      kernel rank=0 stream=0 start=4000 end=5000 corr=3
      kernel rank=0 stream=0 start=200000 end=200500 corr=4
      api rank=1 start=0 end=60000 corr=5
      api rank=1 start=60000 end=60100 corr=6
      kernel rank=1 stream=1 start=100000 end=100010 corr=5
      kernel rank=1 stream=1 start=100020 end=100030 corr=6
    )");
    const auto trace = analyzer::load_trace(path);
    auto results = std::make_shared<const AnalysisResults>(compute_analysis_results(trace));
    QVERIFY2(results->analyses, results->error.c_str());

    GpuQueuesPanel panel;
    QAbstractItemModelTester t1(panel.idle_model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t2(panel.queue_model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t3(panel.launch_model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(panel.showing_message());
    panel.set_results(results);
    QVERIFY(!panel.showing_message());
    QCOMPARE(panel.tabs()->count(), 3);

    auto sort = [](const QAbstractItemModel* m, int row, int col) { return m->index(row, col).data(kSortRole); };
    auto text = [](const QAbstractItemModel* m, int row, int col) { return m->index(row, col).data().toString(); };

    using I = LaunchQueueModel::IdleColumn;
    const auto* idle = panel.idle_model();
    QCOMPARE(idle->rowCount(), 2);
    QCOMPARE(idle->headerData(I::kHostWait, Qt::Horizontal, Qt::DisplayRole).toString(), QStringLiteral("Host wait"));
    QCOMPARE(text(idle, 0, I::kRank), QStringLiteral("0"));
    QCOMPARE(text(idle, 0, I::kStream), QStringLiteral("#0"));
    QCOMPARE(sort(idle, 0, I::kEvents).toLongLong(), 4LL);
    QCOMPARE(sort(idle, 0, I::kWindow).toLongLong(), 199'500LL);
    QCOMPARE(sort(idle, 0, I::kHostWait).toLongLong(), 1000LL);
    QCOMPARE(sort(idle, 0, I::kKernelWait).toLongLong(), 20LL);
    QCOMPARE(sort(idle, 0, I::kOther).toLongLong(), 195'000LL);
    QCOMPARE(sort(idle, 0, I::kIdle).toLongLong(), 196'020LL);
    QCOMPARE(text(idle, 0, I::kKernelWait), QStringLiteral("20 ns"));
    QCOMPARE(text(idle, 0, I::kIdleRatio), QStringLiteral("98.3 %"));
    QVERIFY(idle->index(0, I::kHostWait).data(Qt::ToolTipRole).toString().startsWith(QStringLiteral("0.5 %")));
    QCOMPARE(text(idle, 1, I::kRank), QStringLiteral("1"));
    QCOMPARE(text(idle, 1, I::kStream), QStringLiteral("#1"));
    QCOMPARE(sort(idle, 1, I::kHostWait).toLongLong(), 0LL);
    QCOMPARE(sort(idle, 1, I::kKernelWait).toLongLong(), 10LL);
    QCOMPARE(sort(idle, 1, I::kOther).toLongLong(), 0LL);
    QCOMPARE(text(idle, 1, I::kIdleRatio), QStringLiteral("33.3 %"));  // 10 of 30 ns

    using Q = LaunchQueueModel::QueueColumn;
    const auto* q = panel.queue_model();
    QCOMPARE(q->rowCount(), 2);
    QCOMPARE(sort(q, 0, Q::kPoints).toLongLong(), 8LL);
    QCOMPARE(sort(q, 0, Q::kMean).toDouble(), 1.0);
    QVERIFY(std::abs(sort(q, 0, Q::kStddev).toDouble() - std::sqrt(4.0 / 7.0)) < 1e-12);
    QCOMPARE(text(q, 0, Q::kStddev), QStringLiteral("0.76"));
    QCOMPARE(sort(q, 0, Q::kMin).toInt(), 0);
    QCOMPARE(sort(q, 0, Q::kP25).toDouble(), 0.75);
    QCOMPARE(sort(q, 0, Q::kP50).toDouble(), 1.0);
    QCOMPARE(sort(q, 0, Q::kP75).toDouble(), 1.25);
    QCOMPARE(sort(q, 0, Q::kMax).toInt(), 2);
    QCOMPARE(sort(q, 0, Q::kAtMax).toLongLong(), 800LL);
    QCOMPARE(sort(q, 0, Q::kFull).toLongLong(), 0LL);
    QCOMPARE(sort(q, 1, Q::kPoints).toLongLong(), 4LL);
    QCOMPARE(sort(q, 1, Q::kMax).toInt(), 2);
    QCOMPARE(sort(q, 1, Q::kAtMax).toLongLong(), 40'000LL);

    using L = LaunchQueueModel::LaunchColumn;
    const auto* l = panel.launch_model();
    QCOMPARE(l->rowCount(), 2);
    QCOMPARE(sort(l, 0, L::kLaunches).toLongLong(), 4LL);
    QCOMPARE(sort(l, 0, L::kCpuMean).toDouble(), 100.0);
    QCOMPARE(sort(l, 0, L::kDelayMean).toDouble(), 49'855.0);
    QCOMPARE(sort(l, 0, L::kDelayMax).toDouble(), 197'400.0);
    QCOMPARE(sort(l, 0, L::kShortKernels).toLongLong(), 0LL);
    QCOMPARE(sort(l, 0, L::kRuntimeOutliers).toLongLong(), 0LL);
    QCOMPARE(sort(l, 0, L::kDelayOutliers).toLongLong(), 1LL);
    QVERIFY(l->index(0, L::kDelayOutliers).data(Qt::ToolTipRole).toString().startsWith(QStringLiteral("25.0 %")));
    QCOMPARE(text(l, 1, L::kRank), QStringLiteral("1"));
    QCOMPARE(sort(l, 1, L::kLaunches).toLongLong(), 2LL);
    QCOMPARE(sort(l, 1, L::kShortKernels).toLongLong(), 1LL);
    QCOMPARE(sort(l, 1, L::kRuntimeOutliers).toLongLong(), 1LL);
    QCOMPARE(sort(l, 1, L::kDelayOutliers).toLongLong(), 0LL);
    QCOMPARE(sort(l, 1, L::kDelayMax).toDouble(), 40'000.0);

    // No GPU events: the panel says so; a failed analysis: its error.
    const std::string ops_only = moetrace::gui::testing::temp_path("gpu_queues_ops.db");
    moetrace::testing::write_text_trace(ops_only, moetrace::testing::kFortyPercentLayer);
    panel.set_results(std::make_shared<const AnalysisResults>(compute_analysis_results(analyzer::load_trace(ops_only))));
    QVERIFY(panel.message().contains(QStringLiteral("No kernels")));
    QCOMPARE(panel.idle_model()->rowCount(), 0);
    auto failed = std::make_shared<AnalysisResults>();
    failed->error = "trace.db: broken";
    panel.set_results(failed);
    QVERIFY(panel.message().contains(QStringLiteral("trace.db: broken")));
    QCOMPARE(panel.launch_model()->rowCount(), 0);
  }

  // A trace with buffers linked to ops and a layer shape: the memory panel
  // shows the report's bubbles per tag and the mpipemoe Eq. 1-6 table.
  // The queue-length row under a stream's kernels (HTA's definition,
  // launch_queue.h: +1 when a launch call starts, -1 when the GPU event it
  // launched starts). The timeline is drawn before the analyses; the row
  // appears when they arrive. Rank 0, stream 0, calls 100 ns long:
  //   calls   [0, 100)     [1000, 1100)  [2000, 2100)
  //   kernels [5000, 6000) [6000, 7000)  [7000, 8000)
  //   length: 1 at 0, 2 at 1000, 3 at 2000, 2 at 5000, 1 at 6000, 0 at 7000.
  //   At 2500 ns: 3 (nothing has started). At 6500 ns: 1 (the third kernel
  //   waits; the second runs, so it no longer counts).
  void queue_length_row_appears_when_the_analyses_arrive() {
    const std::string path = moetrace::gui::testing::temp_path("queue_rows.db");
    moetrace::testing::write_text_trace(path, R"(
      stream id=0 rank=0 role=compute
      api rank=0 start=0 end=100 corr=1
      api rank=0 start=1000 end=1100 corr=2
      api rank=0 start=2000 end=2100 corr=3
      kernel rank=0 stream=0 start=5000 end=6000 corr=1
      kernel rank=0 stream=0 start=6000 end=7000 corr=2
      kernel rank=0 stream=0 start=7000 end=8000 corr=3
    )");
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QSignalSpy loaded(w.session(), &TraceSession::loaded);
    QSignalSpy analysed(w.session(), &TraceSession::analyses_ready);
    auto* v = w.timeline();
    int row = -1;
    bool hidden_when_loaded = false;
    // Connected after the window's own slot: the view has the model, and the
    // analyses have not started yet.
    connect(w.session(), &TraceSession::loaded, &w, [&] {
      row = find_row(*v->model(), RankId(0), RowKind::kQueue, "compute");
      hidden_when_loaded = row >= 0 && !v->layout().visible(row) && !v->queue_tracks();
    });
    w.open(QString::fromStdString(path));
    QVERIFY(loaded.wait(10000));
    QVERIFY(analysed.count() > 0 || analysed.wait(10000));
    QVERIFY(hidden_when_loaded);
    QVERIFY(v->queue_tracks());
    QVERIFY(v->layout().visible(row));
    const CounterTrack* c = v->queue_tracks()->for_stream(v->model()->rows()[static_cast<std::size_t>(row)].stream);
    QVERIFY(c);
    QCOMPARE(c->value_at(2500), std::int64_t{3});
    QCOMPARE(c->value_at(6500), std::int64_t{1});
    QCOMPARE(c->value_at(9000), std::int64_t{0});
    QCOMPARE(c->max_value(), std::int64_t{3});

    v->zoom_to(0, 8000);
    v->prepare_now();
    bool drawn = false;
    for (const auto& dc : v->shown_draw_list().counters) drawn |= dc.row == row && dc.kind == RowKind::kQueue;
    QVERIFY(drawn);
    // Hovering shows the length in force at the cursor's time.
    for (const auto& [t, text] : {std::pair(2500.0, QStringLiteral("queue length</b>: 3")),
                                  std::pair(6500.0, QStringLiteral("queue length</b>: 1"))}) {
      const QPoint p = point_of(v, row, t);
      QMouseEvent move(QEvent::MouseMove, p, v->mapToGlobal(p), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
      QCoreApplication::sendEvent(v, &move);
      QTRY_VERIFY2(QToolTip::text().contains(text), qPrintable(QToolTip::text()));
    }
    // View > GPU queue lengths hides and shows the rows.
    QVERIFY(w.queue_tracks_action()->isChecked());
    w.queue_tracks_action()->setChecked(false);
    QVERIFY(!v->layout().visible(row));
    w.queue_tracks_action()->setChecked(true);
    QVERIFY(v->layout().visible(row));
  }

  void memory_panel_shows_bubbles_per_tag_and_the_mpipemoe_model() {
    const QString path = QString::fromStdString(moetrace::gui::testing::temp_path("mpipemoe_panel.db"));
    sim::RunSpec spec = sim::run_preset("mpipemoe-gpt3-s");
    spec.common.iterations = 1;
    spec.common.ranks = 2;
    spec.common.model.num_experts = 2;
    spec.common.model.num_layers = 1;
    spec.routing.tokens_per_source = 256;
    const auto model = spec.resolved_cost_model();
    const auto plan = sim::build_plan(spec);
    sim::TraceOutputOptions o;
    o.config_json = spec.to_json();
    sim::write_trace(path.toStdString(), plan, model, sim::simulate(plan, model), o);
    MainWindow w;
    QVERIFY(w.open_blocking(path));
    auto* tables = w.memory_panel()->tables();
    QStringList headers;
    for (int i = 0; i < tables->table_count(); ++i)
      for (int c = 0; c < tables->table(i)->columnCount(); ++c)
        headers << tables->table(i)->horizontalHeaderItem(c)->text();
    QVERIFY(headers.contains(QStringLiteral("bubble B*ms")));
    QVERIFY(headers.contains(QStringLiteral("Eq.1 model states")));
    QVERIFY(headers.contains(QStringLiteral("layer: S1-S4")));
    QVERIFY(w.memory_panel()->note().contains(QStringLiteral("hatched")));
  }

  void shortcuts_are_listed() {
    const QString html = MainWindow::shortcuts_html();
    for (const char* key : {"W / S", "A / D", "Ctrl + F", "Shift + drag"}) QVERIFY(html.contains(QLatin1String(key)));
  }
};

QTEST_MAIN(GuiWidgetsTest)
#include "gui_widgets_test.moc"
