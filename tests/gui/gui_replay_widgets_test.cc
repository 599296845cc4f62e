// Headless tests of the replay in the Qt front end (QT_QPA_PLATFORM=offscreen):
// the Replay panel's and the Recommendations panel's models under
// QAbstractItemModelTester, View > Show replay computing off the GUI thread,
// the replayed lanes in a screenshot checked pixel by pixel, tooltips,
// details and the pipeline-degree what-if.
//
// The fixture (fixture_trace.h) launches every kernel with a cudaLaunchKernel
// call 4 us before it starts and 2 us long, so the launch latency of every
// rank is 4 us from the call's start and 2 us from its end (exec_graph.h:
// the medians; every sample is the same). Layer 0's forward pass on either
// rank (gate [0, 10), dispatch [10, 30), experts [30, 45) and [45, 60),
// combine [60, 80) us) starts each kernel exactly there, and its stream is
// free by then (a kernel launched while the previous one ran starts at that
// one's end: a queue gap of 0), so the replay draws layer 0 where the trace
// does.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QMouseEvent>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>
#include <QToolTip>
#include <cmath>
#include <fstream>

#include "fixture_trace.h"
#include "main_window.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/gui/palette.h"
#include "moetrace/sim/cost_model.h"
#include "recommendations_model.h"
#include "replay_panel.h"
#include "timeline_painter.h"
#include "widget_helpers.h"

using namespace moetrace;
using namespace moetrace::gui;
using namespace moetrace::gui::testing;

namespace {

// The first replayed row of a stream of `role` on `rank` showing activities
// (kActivities) or op ranges (kOps), or -1.
int replayed_row(const TimelineModel& m, RankId rank, ItemSource source, const char* role) {
  for (std::size_t i = 0; i < m.rows().size(); ++i) {
    const auto& r = m.rows()[i];
    if (r.replayed() && r.rank == rank && r.items.source() == source && r.sub_row == 0 && r.stream >= 0 &&
        m.trace().streams[static_cast<std::size_t>(r.stream)].role == role)
      return static_cast<int>(i);
  }
  return -1;
}

int count_replayed(const TimelineModel& m) {
  return static_cast<int>(std::count_if(m.rows().begin(), m.rows().end(), [](const Row& r) { return r.replayed(); }));
}

// A replay summary made by hand: two ranks' iteration 0 and one layer.
std::shared_ptr<ReplayResults> hand_made_results(bool predicted) {
  auto r = std::make_shared<ReplayResults>();
  r->summary.iterations = {{0, 0, 2'000'000, 1'800'000, predicted ? 1'000'000 : -1},
                           {1, 0, 2'000'000, 1'990'000, predicted ? 1'500'000 : -1}};
  r->summary.layers = {{3, 2, 400'000, 400'000, predicted ? 300'000 : -1}};
  r->summary.max_iteration_error = 0.1;
  r->predicted = predicted;
  if (predicted) r->what_ifs.pipeline_degree = 4;
  return r;
}

}  // namespace

class GuiReplayWidgetsTest : public QObject {
  Q_OBJECT

  // The fixture with its replay shown, tall enough for both ranks' replayed
  // lanes, zoomed to layer 0's forward pass [0, 100) us.
  static std::unique_ptr<MainWindow> replay_window() {
    auto w = loaded_window();
    if (!w) return nullptr;
    w->resize(1400, 1600);
    if (!w->show_replay_blocking()) return nullptr;
    w->timeline()->zoom_to(static_cast<double>(us(0)), static_cast<double>(us(100)));
    QCoreApplication::processEvents();
    w->timeline()->prepare_now();
    return w;
  }

 private slots:
  void replay_models_pass_the_model_tester() {
    ReplayModel its(ReplayModel::Table::kIterations);
    ReplayModel layers(ReplayModel::Table::kLayers);
    QAbstractItemModelTester t1(&its, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester t2(&layers, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(its.rowCount(), 0);
    its.set_results(hand_made_results(false));
    layers.set_results(hand_made_results(false));
    QCOMPARE(its.rowCount(), 2);
    QCOMPARE(its.columnCount(), int(ReplayModel::kColumns));
    // 1.8 / 2.0 - 1 = -10 %: past the 5 % the recommendations hold a replay
    // to, so it is drawn in red; 1.99 / 2.0 - 1 = -0.5 % is not.
    QCOMPARE(its.index(0, ReplayModel::kMeasured).data().toString(), QStringLiteral("2.00 ms"));
    QCOMPARE(its.index(0, ReplayModel::kReplayed).data().toString(), QStringLiteral("1.80 ms"));
    QCOMPARE(its.index(0, ReplayModel::kError).data().toString(), QStringLiteral("-10.00 %"));
    QCOMPARE(its.index(0, ReplayModel::kError).data(Qt::ForegroundRole).value<QColor>(), QColor(0xB0, 0x1E, 0x1E));
    QCOMPARE(its.index(1, ReplayModel::kError).data().toString(), QStringLiteral("-0.50 %"));
    QVERIFY(!its.index(1, ReplayModel::kError).data(Qt::ForegroundRole).isValid());
    QCOMPARE(its.index(0, ReplayModel::kPredicted).data().toString(), QStringLiteral("\u2014"));
    QCOMPARE(its.index(1, ReplayModel::kKey).data(kRankRole).toInt(), 1);
    QCOMPARE(its.index(1, ReplayModel::kKey).data(kIterationRole).toInt(), 0);
    QCOMPARE(its.index(1, ReplayModel::kMeasured).data(kSortRole).toLongLong(), 2'000'000LL);
    QCOMPARE(its.headerData(ReplayModel::kKey, Qt::Horizontal, Qt::DisplayRole).toString(), QStringLiteral("Rank"));
    QCOMPARE(layers.rowCount(), 1);
    QCOMPARE(layers.index(0, ReplayModel::kKey).data().toString(), QStringLiteral("L3"));
    QCOMPARE(layers.index(0, ReplayModel::kKey).data(kLayerRole).toInt(), 3);
    QCOMPARE(layers.index(0, ReplayModel::kCount).data().toInt(), 2);
    QCOMPARE(layers.headerData(ReplayModel::kCount, Qt::Horizontal, Qt::DisplayRole).toString(), QStringLiteral("Windows"));

    // With a prediction: its time and its change against the replay
    // (1.0 / 1.8 - 1 = -44.44 %, 0.3 / 0.4 - 1 = -25 %).
    its.set_results(hand_made_results(true));
    layers.set_results(hand_made_results(true));
    QCOMPARE(its.index(0, ReplayModel::kPredicted).data().toString(), QStringLiteral("1.00 ms"));
    QCOMPARE(its.index(0, ReplayModel::kChange).data().toString(), QStringLiteral("-44.44 %"));
    QCOMPARE(layers.index(0, ReplayModel::kChange).data().toString(), QStringLiteral("-25.00 %"));
    QCOMPARE(its.index(0, ReplayModel::kChange).data(Qt::ToolTipRole).toString(),
             QStringLiteral("measured 2.00 ms, replayed 1.80 ms (-10.00 %), predicted 1.00 ms (-44.44 %)"));
    its.set_results(nullptr);
    QCOMPARE(its.rowCount(), 0);
  }

  // Where the trace ran on hardware the layer's replay is its own execution
  // graph: measured, replayed, predicted per pipeline degree.
  void recommendations_show_the_traces_own_replay() {
    RecommendationsModel recs;
    QAbstractItemModelTester tester(&recs, QAbstractItemModelTester::FailureReportingMode::QtTest);
    analyzer::Recommendations d;
    d.items.push_back({0, "pipeline degree", "keep r = 1", "", 0.0, true});
    d.items.push_back({0, "memory reuse", "keep none", "", 0.0, true});
    d.items.push_back({-1, "layout", "keep", "", 0.0, false});
    analyzer::LayerRecommendation L;
    L.layer = 0;
    L.replay.computed = true;  // the preset's replay, shown only without the trace's own
    L.replay.measured_s = 0.0013;
    L.replay.simulated_s = 0.0011;
    auto& t = L.trace_replay;
    t.computed = true;
    t.measured_s = 0.001383;
    t.replayed_s = 0.001357;
    t.error = -0.0188;
    t.within = true;
    t.cost_source = "cost model fitted:calibration_p1.db";
    t.predictions = {{2, 0.00191, 0.00180, 0.00200}, {4, 0.00338, -1, -1}};
    t.best_r = 1;
    d.layers.push_back(L);
    recs.set_data(d);
    QCOMPARE(recs.rowCount(), 3);
    for (int row : {0, 1}) {
      QCOMPARE(recs.index(row, RecommendationsModel::kMeasured).data().toString(), QStringLiteral("1.38 ms"));
      QCOMPARE(recs.index(row, RecommendationsModel::kReplayed).data().toString(), QStringLiteral("1.36 ms (-1.88 %)"));
      QCOMPARE(recs.index(row, RecommendationsModel::kPredicted).data().toString(),
               QStringLiteral("r = 2: 1.91 ms, r = 4: 3.38 ms; best r = 1"));
    }
    const QString tip = recs.index(0, RecommendationsModel::kPredicted).data(Qt::ToolTipRole).toString();
    QVERIFY2(tip.contains(QStringLiteral("r = 2: 1.91 ms (1.80 ms to 2.00 ms")), qPrintable(tip));
    QVERIFY2(tip.contains(QStringLiteral("cost model fitted:calibration_p1.db")), qPrintable(tip));
    QCOMPARE(recs.index(0, RecommendationsModel::kReplayed).data(Qt::ToolTipRole).toString(),
             QString::fromStdString(analyzer::trace_replay_text(t)));
    QCOMPARE(recs.index(2, RecommendationsModel::kMeasured).data().toString(), QStringLiteral("\u2014"));
    // A replay off by more than the tolerance says so.
    d.layers[0].trace_replay.within = false;
    recs.set_data(d);
    QCOMPARE(recs.index(0, RecommendationsModel::kReplayed).data().toString(),
             QStringLiteral("1.36 ms (-1.88 %): off by more than 5.0 %"));
    QCOMPARE(recs.headerData(RecommendationsModel::kPredicted, Qt::Horizontal, Qt::DisplayRole).toString(),
             QStringLiteral("Predicted"));
  }

  // View > Show replay: computed off the GUI thread, then the replayed
  // tracks appear under each rank's streams; the view keeps its window and
  // selection; hiding the replay restores the trace's own rows.
  void show_replay_adds_the_replayed_tracks() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* v = w->timeline();
    const auto base = v->model();
    v->select_item({ItemSource::kActivity, 0});
    v->zoom_to(static_cast<double>(us(0)), static_cast<double>(us(100)));
    const double t0 = v->axis().t0_ns;
    QSignalSpy ready(w->session(), &TraceSession::replay_ready);
    w->replay_action()->setChecked(true);
    QVERIFY(w->replay_panel()->body()->showing_message());  // computing
    QVERIFY(ready.wait(20000));
    QVERIFY(w->replay_results() && w->replay_results()->error.empty());
    const auto& m = *v->model();
    QVERIFY(v->model() != base);
    QCOMPARE(m.trace_ptr(), base->trace_ptr());
    QCOMPARE(static_cast<int>(m.rows().size()), static_cast<int>(base->rows().size()) + count_replayed(m));
    QVERIFY(count_replayed(m) >= 2 * 4);  // per rank: iterations, layers, two streams' op ranges and kernels at least
    // Each rank's replayed rows come after its last queue row and before its memory row.
    for (const auto& g : m.groups()) {
      int last_stream = -1, first_replayed = -1, first_memory = -1;
      for (int r = g.first_row; r < g.end_row; ++r) {
        const auto kind = m.rows()[static_cast<std::size_t>(r)].kind;
        if (kind == RowKind::kQueue || kind == RowKind::kActivities) last_stream = r;
        if (kind == RowKind::kReplayed && first_replayed < 0) first_replayed = r;
        if (kind == RowKind::kMemory && first_memory < 0) first_memory = r;
      }
      QVERIFY(first_replayed > last_stream);
      if (first_memory >= 0) QVERIFY(first_memory > first_replayed);
    }
    QCOMPARE(v->axis().t0_ns, t0);
    QCOMPARE(v->selected(), (ItemRef{ItemSource::kActivity, 0}));
    QVERIFY(!w->replay_panel()->body()->showing_message());
    QCOMPARE(w->replay_panel()->iterations()->rowCount(), 2);  // iteration 0 (the only one with ops) of 2 ranks
    QVERIFY(w->replay_panel()->summary().contains(QStringLiteral("Shown under each rank's streams: replayed")));

    w->replay_action()->setChecked(false);
    QCOMPARE(v->model(), base);
    QCOMPARE(v->axis().t0_ns, t0);
    // Shown again: the same results, not computed again.
    ready.clear();
    w->replay_action()->setChecked(true);
    QCOMPARE(ready.count(), 0);
    QCOMPARE(v->model(), w->replay_results()->model);
  }

  // The screenshot: layer 0 on the replayed lanes where the trace has it
  // (see the top of this file), on the replayed rows' tint.
  void screenshot_shows_the_replayed_lanes() {
    auto w = replay_window();
    QVERIFY(w);
    auto* v = w->timeline();
    const QString png = QDir::tempPath() + QStringLiteral("/moetrace_gui_replay_screenshot.png");
    QVERIFY(w->save_screenshot(png));
    const QImage img = v->grab().toImage();
    const auto& m = *v->model();
    const QColor a2a = to_qcolor(ColourClass::kAllToAll), expert = to_qcolor(ColourClass::kExpertCompute);
    const QColor gating = to_qcolor(ColourClass::kGating), tint(0xFB, 0xF3, 0xE4);
    auto pixel = [&](int row, double t_us) { return block_colour(v, img, row, t_us); };
    for (int rank = 0; rank < 2; ++rank) {
      const int compute = replayed_row(m, RankId(rank), ItemSource::kReplayedActivity, "compute");
      const int comm = replayed_row(m, RankId(rank), ItemSource::kReplayedActivity, "comm");
      QVERIFY(compute >= 0 && comm >= 0);
      QVERIFY(v->layout().visible(compute) && v->layout().visible(comm));
      QVERIFY(point_of(v, comm, 0).y() < v->height());
      QCOMPARE(pixel(compute, 5), gating);   // gate [0, 10)
      QCOMPARE(pixel(comm, 20), a2a);        // dispatch [10, 30)
      QCOMPARE(pixel(compute, 40), expert);  // expert_gemm1 [30, 45)
      QCOMPARE(pixel(compute, 55), expert);  // expert_gemm2 [45, 60)
      QCOMPARE(pixel(comm, 70), a2a);        // combine [60, 80)
      QCOMPARE(pixel(comm, 90), tint);       // idle between the layers
      QCOMPARE(pixel(compute, 20), tint);    // the compute lane waits for the dispatch
    }
  }

  // Hovering a replayed iteration span shows the summary's numbers; a click
  // on a replayed kernel shows its details beside its measured time.
  void tooltips_and_details_of_the_replayed_tracks() {
    auto w = replay_window();
    QVERIFY(w);
    auto* v = w->timeline();
    const auto& m = *v->model();
    int spans = -1;
    for (std::size_t i = 0; i < m.rows().size() && spans < 0; ++i)
      if (m.rows()[i].replayed() && m.rows()[i].items.source() == ItemSource::kReplayedSpan) spans = static_cast<int>(i);
    QVERIFY(spans >= 0);  // rank 0's replayed iterations
    const auto* it0 = w->replay_results()->iteration(RankId(0), 0);
    QVERIFY(it0);
    QPoint p = point_of(v, spans, static_cast<double>(us(50)));
    QMouseEvent move(QEvent::MouseMove, p, v->mapToGlobal(p), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
    QCoreApplication::sendEvent(v, &move);
    const QString numbers = QString::fromStdString(replay_numbers_text(it0->measured_ns, it0->replayed_ns));
    QTRY_VERIFY(QToolTip::text().contains(numbers));
    QVERIFY(QToolTip::text().contains(QStringLiteral("<i>replayed</i>")));

    const int compute = replayed_row(m, RankId(0), ItemSource::kReplayedActivity, "compute");
    p = point_of(v, compute, static_cast<double>(us(50)));
    QTest::mouseClick(v, Qt::LeftButton, Qt::NoModifier, p);
    QCOMPARE(v->selected().source, ItemSource::kReplayedActivity);
    auto* details = w->details_panel()->model();
    QStringList keys, values;
    for (int r = 0; r < details->rowCount(); ++r) {
      keys << details->index(r, 0).data().toString();
      values << details->index(r, 1).data().toString();
    }
    QVERIFY(values.contains(QStringLiteral("expert_gemm2")));
    const auto at = keys.indexOf(QStringLiteral("Measured start"));
    QVERIFY(at >= 0);
    QCOMPARE(values[at], values[keys.indexOf(QStringLiteral("Start"))]);  // layer 0 replays in place
    // Another replay drops a selection on the tracks of the previous one,
    // and so does hiding the replay.
    const auto again = std::make_shared<const ReplayResults>(compute_replay(w->session()->current()->model, {}));
    v->swap_model(again->model);
    QVERIFY(!v->selected().valid());
    const auto& m2 = *v->model();
    v->select_item(m2.row_item(m2.rows()[static_cast<std::size_t>(compute)], 0));
    QCOMPARE(v->selected().source, ItemSource::kReplayedActivity);
    w->replay_action()->setChecked(false);
    QVERIFY(!v->selected().valid());
  }

  // The what-if field: pipeline degree 2 splits layer 0's forward pass (one
  // dispatch, experts and one combine) on each rank; the tracks then show the
  // prediction and the tables its times.
  void the_what_if_shows_the_predicted_tracks() {
    auto w = loaded_window();
    QVERIFY(w);
    auto* panel = w->replay_panel();
    QCOMPARE(panel->pipeline_degree(), 0);
    panel->set_pipeline_degree(2);
    QSignalSpy ready(w->session(), &TraceSession::replay_ready);
    panel->apply_button()->click();
    QVERIFY(w->replay_action()->isChecked());
    QVERIFY(ready.wait(20000));
    const auto r = w->replay_results();
    QVERIFY(r && r->error.empty());
    QVERIFY(r->predicted);
    QCOMPARE(r->what_ifs.pipeline_degree, 2);
    QVERIFY(r->applied.instances_changed >= 2);
    QVERIFY(panel->summary().contains(QStringLiteral("predicted (pipeline_degree=2)")));
    const auto& m = *w->timeline()->model();
    int predicted = 0;
    for (const auto& row : m.rows())
      if (row.replayed()) {
        QVERIFY2(row.label.empty() || row.label.rfind("predicted \xC2\xB7 ", 0) == 0, row.label.c_str());
        ++predicted;
      }
    QVERIFY(predicted > 0);
    QVERIFY(panel->iterations()->index(0, ReplayModel::kPredicted).data().toString() != QStringLiteral("\u2014"));
    QVERIFY(panel->cost_model_text().contains(QStringLiteral("trace's own fit")));
    // Costs from a file: the prediction is made again with them, and says so.
    QString error = w->set_replay_cost_model(QStringLiteral("/nonexistent/cost.json"));
    QVERIFY2(error.contains(QStringLiteral("nonexistent")), qPrintable(error));
    const QString fitted = QString::fromStdString(moetrace::gui::testing::temp_path("replay_cost_model.json"));
    {
      std::ofstream out(fitted.toStdString());
      out << sim::to_json(sim::cost_model_preset("h100-nvlink-ib"));
    }
    QVERIFY(w->set_replay_cost_model(fitted).isEmpty());
    QVERIFY(panel->cost_model_text().contains(fitted));
    QVERIFY(!w->replay_results());
    ready.clear();
    panel->apply_button()->click();
    QVERIFY(ready.wait(20000));
    QVERIFY(w->replay_results()->predicted);
    QVERIFY(panel->summary().contains(fitted));
    // The replay alone again.
    panel->set_pipeline_degree(0);
    ready.clear();
    panel->apply_button()->click();
    QVERIFY(ready.wait(20000));
    QVERIFY(!w->replay_results()->predicted);
  }

  // A double-click on an iteration's row zooms the timeline to it.
  void the_panel_leads_to_the_iteration() {
    auto w = loaded_window();
    QVERIFY(w);
    QVERIFY(w->show_replay_blocking());
    auto* table = w->replay_panel()->iterations_view();
    QVERIFY(table);
    const QModelIndex first = table->model()->index(0, 0);
    QCOMPARE(first.data(kRankRole).toInt(), 0);
    emit table->doubleClicked(first);
    // Rank 0's iteration 0: the envelope of its op ranges, [0, 260) us (the
    // unclaimed kernel at 300 us has no op), zoomed to with a 2 % margin.
    const auto& axis = w->timeline()->axis();
    QVERIFY(axis.t0_ns <= static_cast<double>(us(0)));
    QVERIFY(axis.t1_ns() >= static_cast<double>(us(260)));
    QVERIFY(axis.window_ns() < static_cast<double>(us(400) - us(0)));
  }

  void a_failed_replay_shows_its_error() {
    ReplayPanel panel;
    auto r = std::make_shared<ReplayResults>();
    r->error = "trace.db: the replay ran out of memory";
    panel.set_results(r);
    QVERIFY(panel.body()->showing_message());
    QVERIFY(panel.body()->message().contains(QStringLiteral("trace.db: the replay ran out of memory")));
    QCOMPARE(panel.iterations()->rowCount(), 0);
    panel.set_results(nullptr);
    QVERIFY(panel.body()->message().contains(QStringLiteral("Show replay")));
  }

  // `moetrace-gui --model`: the fixture records E = 4 and k = 2 but not M and
  // H, so no layer gets advice and the panel says why; with the model's
  // sizes (Qwen2-MoE's config.json names) the next trace opened gets advice
  // for both layers, read with M = 64 and H = 128. A model that disagrees
  // with the trace (8 experts) is the recommenders' error, shown in the
  // panel; a missing file and a bad token count are one line each.
  void the_model_gives_the_sizes_the_trace_lacks() {
    auto w = loaded_window();
    QVERIFY(w);
    const auto* before = w->session()->analyses()->results->analyses.get();
    QVERIFY(before && before->recommendations && before->recommendations->items.empty());
    QVERIFY(w->recommendations_panel()->showing_message());
    QVERIFY2(w->recommendations_panel()->message().contains(QStringLiteral("hidden size unknown")),
             qPrintable(w->recommendations_panel()->message()));
    auto write = [](const char* name, const char* text) {
      const auto path = temp_path(name);
      std::ofstream(path) << text;
      return QString::fromStdString(path);
    };
    const QString qwen = write("qwen_config.json", R"({"model_type": "qwen2_moe", "hidden_size": 64,
        "moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"})");
    QVERIFY(w->set_model_shapes(qwen, -1).isEmpty());
    QVERIFY(w->replay_request().model && w->replay_request().options.model == w->replay_request().model.get());
    QVERIFY(w->open_blocking(fixture_path()));
    const auto& recs = w->session()->analyses()->results->analyses->recommendations;
    QVERIFY(recs);
    QCOMPARE(recs->layers.size(), std::size_t{2});
    for (const auto& L : recs->layers) {
      QCOMPARE(L.workload.model_dim, std::int64_t{64});
      QCOMPARE(L.workload.hidden, std::int64_t{128});
    }
    QVERIFY(!w->recommendations_panel()->showing_message());
    QVERIFY(w->recommendations_panel()->model()->rowCount() > 0);

    const QString eight = write("eight_experts.json", R"({"model_type": "qwen2_moe", "hidden_size": 64,
        "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2})");
    QVERIFY(w->set_model_shapes(eight, -1).isEmpty());
    QVERIFY(w->open_blocking(fixture_path()));
    QVERIFY(w->recommendations_panel()->showing_message());
    QVERIFY2(w->recommendations_panel()->message().contains(
                 QStringLiteral("the number of routed experts is 4 in the trace (its layers table) but 8 in")),
             qPrintable(w->recommendations_panel()->message()));

    QVERIFY(w->set_model_shapes(QStringLiteral("/nonexistent/config.json"), -1).contains(QStringLiteral("nonexistent")));
    QVERIFY(w->set_model_shapes({}, 0).contains(QStringLiteral("positive")));
  }

  // Another trace opened while the replay is shown is replayed in its turn.
  void a_new_trace_is_replayed_when_the_replay_is_shown() {
    auto w = loaded_window();
    QVERIFY(w);
    QVERIFY(w->show_replay_blocking());
    const auto first = w->replay_results();
    QSignalSpy ready(w->session(), &TraceSession::replay_ready);
    QVERIFY(w->open_blocking(fixture_path()));
    QVERIFY(!w->replay_results());
    QVERIFY(ready.wait(20000));
    QVERIFY(w->replay_results() && w->replay_results() != first);
    QCOMPARE(w->replay_results()->model->trace_ptr(), w->session()->current()->trace);
    QCOMPARE(w->timeline()->model(), w->replay_results()->model);
  }
};

QTEST_MAIN(GuiReplayWidgetsTest)
#include "gui_replay_widgets_test.moc"
