// moetrace-gui [trace.db ...]: the timeline viewer (several rank files, a
// folder or a glob pattern: one run). With --screenshot it renders
// the window headless to a PNG and exits (the README's screenshot, CI).
#include <QApplication>
#include <QCommandLineParser>
#include <QRegularExpression>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "main_window.h"
#include "moetrace/analyzer/heap.h"
#include "moetrace/gui/format.h"

namespace {

using moetrace::gui::MainWindow;

bool has_arg(int argc, char** argv, std::initializer_list<const char*> names) {
  for (int i = 1; i < argc; ++i)
    for (const char* n : names)
      if (std::strcmp(argv[i], n) == 0 || (std::strncmp(argv[i], n, std::strlen(n)) == 0 && argv[i][std::strlen(n)] == '='))
        return true;
  return false;
}

void fail(const QString& message) { std::fprintf(stderr, "moetrace-gui: %s\n", message.toLocal8Bit().constData()); }

// "START:END" with units, relative to the trace start.
bool parse_window(const QString& text, double& t0, double& t1) {
  const auto parts = text.split(QLatin1Char(':'));
  if (parts.size() != 2) return false;
  const auto a = moetrace::gui::parse_duration(parts[0].toStdString());
  const auto b = moetrace::gui::parse_duration(parts[1].toStdString());
  if (!a || !b || *b <= *a) return false;
  t0 = *a;
  t1 = *b;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Huge pages for the trace's big blocks and the heap's growth, in glibc's
  // arenas as they are (heap.h: one arena, as the CLI has, stalled frames).
  moetrace::analyzer::huge_pages_for_new_blocks();
  const bool info_only = has_arg(argc, argv, {"-h", "--help", "--help-all", "-v", "--version"});
  const bool screenshot = has_arg(argc, argv, {"--screenshot"});
  // Headless rendering needs no display server.
  if (screenshot && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  if (!info_only && !screenshot && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") &&
      qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")) {
    fail(QStringLiteral("no display (DISPLAY and WAYLAND_DISPLAY are not set). To render a trace headless use "
                        "--screenshot out.png; to run anyway set QT_QPA_PLATFORM=offscreen."));
    return 2;
  }
  std::unique_ptr<QCoreApplication> app;
  if (info_only) app = std::make_unique<QCoreApplication>(argc, argv);
  else app = std::make_unique<QApplication>(argc, argv);
  QCoreApplication::setApplicationName(QStringLiteral("moetrace-gui"));
  QCoreApplication::setApplicationVersion(QStringLiteral(MOETRACE_VERSION));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral(
      "Timeline viewer of moetrace traces (MoE training on NVIDIA GPUs): a group per rank with a lane per stream, "
      "MoE op ranges by layer / iteration / chunk, memory, and the breakdown, expert-load, locality, memory and "
      "recommendation panels. Keyboard shortcuts: Help > Keyboard shortcuts (F1)."));
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(QStringLiteral("trace"),
                               QStringLiteral("A moetrace trace database to open; several files, a folder or a quoted "
                                              "glob pattern are opened as one run (one file per rank)."),
                               QStringLiteral("[trace.db ...]"));
  QCommandLineOption shot(QStringLiteral("screenshot"),
                          QStringLiteral("Render the window headless to <png> and exit (non-zero if the trace could "
                                         "not be opened; the PNG then shows the error)."),
                          QStringLiteral("png"));
  QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Window size for --screenshot (default 1600x1000)."),
                          QStringLiteral("WxH"), QStringLiteral("1600x1000"));
  QCommandLineOption window(QStringLiteral("window"),
                            QStringLiteral("Show this time window, relative to the trace start, e.g. 2ms:3.5ms "
                                           "(units ns, us, ms, s; default ns)."),
                            QStringLiteral("start:end"));
  QCommandLineOption range(QStringLiteral("range"),
                           QStringLiteral("Select this time range (its breakdown shows in Range breakdown)."),
                           QStringLiteral("start:end"));
  QCommandLineOption layer(QStringLiteral("layer"), QStringLiteral("Outline this MoE layer and zoom to its first pass."),
                           QStringLiteral("n"));
  QCommandLineOption find(QStringLiteral("find"),
                          QStringLiteral("Search names for <text> and select the first match (its details show)."),
                          QStringLiteral("text"));
  QCommandLineOption replay(QStringLiteral("replay"),
                            QStringLiteral("Show the replayed tracks under each rank's streams (View > Show replay): "
                                           "the trace replayed from its execution graph, as moetrace replay does."));
  QCommandLineOption what_if(QStringLiteral("what-if"),
                             QStringLiteral("Change the execution graph and show the predicted tracks instead of "
                                            "the replayed ones (implies --replay; repeatable): pipeline_degree=R, overlap=off|on."),
                             QStringLiteral("key=value"));
  QCommandLineOption cost_model(QStringLiteral("cost-model"),
                                QStringLiteral("Where a what-if's new durations come from: a cost-model JSON file "
                                               "(moetrace fit), a simulator preset, or 'fitted' (default: the trace's "
                                               "own fit, else a preset)."),
                                QStringLiteral("file"));
  QCommandLineOption model(QStringLiteral("model"),
                           QStringLiteral("The model's sizes where the trace lacks them, for the recommendations and "
                                          "the what-ifs: a Hugging Face config.json of an MoE model or a file of "
                                          "Megatron-Core arguments, as moetrace recommend --model takes it."),
                           QStringLiteral("file"));
  QCommandLineOption tokens(QStringLiteral("tokens"),
                            QStringLiteral("Tokens a rank holds per MoE layer, where the trace has no expert load "
                                           "and no dispatch all-to-all (routing is then assumed balanced)."),
                            QStringLiteral("n"));
  parser.addOptions({shot, size, window, range, layer, find, replay, what_if, cost_model, model, tokens});
  parser.process(*app);
  if (info_only) return 0;  // process() has printed and exited already

  const QStringList trace = parser.positionalArguments();
  double w0 = 0, w1 = 0, r0 = 0, r1 = 0;
  if (parser.isSet(window) && !parse_window(parser.value(window), w0, w1)) {
    fail(QStringLiteral("--window wants start:end with start < end, e.g. 2ms:3.5ms; got \"%1\"").arg(parser.value(window)));
    return 2;
  }
  if (parser.isSet(range) && !parse_window(parser.value(range), r0, r1)) {
    fail(QStringLiteral("--range wants start:end with start < end, e.g. 2ms:3.5ms; got \"%1\"").arg(parser.value(range)));
    return 2;
  }
  bool layer_ok = true;
  const int layer_value = parser.isSet(layer) ? parser.value(layer).toInt(&layer_ok) : -1;
  if (!layer_ok) {
    fail(QStringLiteral("--layer wants a layer number; got \"%1\"").arg(parser.value(layer)));
    return 2;
  }

  moetrace::analyzer::GraphWhatIfs what_ifs;
  for (const auto& kv : parser.values(what_if)) {
    try {
      moetrace::analyzer::parse_graph_what_if(kv.toStdString(), what_ifs);
    } catch (const std::exception& e) {
      fail(QString::fromStdString(e.what()));  // names the option and the value
      return 2;
    }
  }

  const bool show_replay = parser.isSet(replay) || parser.isSet(what_if);

  MainWindow w;
  w.set_replay_what_ifs(what_ifs);
  if (parser.isSet(cost_model)) {
    if (const QString error = w.set_replay_cost_model(parser.value(cost_model)); !error.isEmpty()) {
      fail(QStringLiteral("--cost-model: %1").arg(error));
      return 2;
    }
  }
  bool tokens_ok = true;
  const qlonglong tokens_value = parser.isSet(tokens) ? parser.value(tokens).toLongLong(&tokens_ok) : -1;
  if (!tokens_ok || (parser.isSet(tokens) && tokens_value <= 0)) {
    fail(QStringLiteral("--tokens wants a positive number of tokens; got \"%1\"").arg(parser.value(tokens)));
    return 2;
  }
  if (parser.isSet(model) || parser.isSet(tokens)) {
    if (const QString error = w.set_model_shapes(parser.value(model), tokens_value); !error.isEmpty()) {
      fail(QStringLiteral("--model: %1").arg(error));
      return 2;
    }
  }
  auto apply_view_options = [&] {
    auto* v = w.timeline();
    if (!v->model()) return;
    const double origin = v->origin_ns();
    if (layer_value >= 0) v->select_layer(layer_value);
    if (parser.isSet(find) && w.search_now(parser.value(find)) == 0)
      fail(QStringLiteral("--find: no name matches \"%1\"").arg(parser.value(find)));
    if (parser.isSet(window)) v->zoom_to(origin + w0, origin + w1);
    if (parser.isSet(range)) v->select_range(origin + r0, origin + r1);
  };

  if (parser.isSet(shot)) {
    const QRegularExpression re(QStringLiteral("^(\\d+)x(\\d+)$"));
    const auto m = re.match(parser.value(size));
    if (!m.hasMatch() || m.captured(1).toInt() < 200 || m.captured(2).toInt() < 150) {
      fail(QStringLiteral("--size wants WxH of at least 200x150, e.g. 1600x1000; got \"%1\"").arg(parser.value(size)));
      return 2;
    }
    w.resize(m.captured(1).toInt(), m.captured(2).toInt());
    w.show();
    QCoreApplication::processEvents();
    const bool ok = trace.isEmpty() || w.open_blocking(trace);
    QCoreApplication::processEvents();
    if (ok && show_replay && !trace.isEmpty() && !w.show_replay_blocking())
      fail(QStringLiteral("--replay: %1").arg(QString::fromStdString(w.replay_results()->error)));
    QCoreApplication::processEvents();
    apply_view_options();
    w.range_panel()->wait();
    QCoreApplication::processEvents();
    if (!w.save_screenshot(parser.value(shot))) {
      fail(QStringLiteral("could not write %1").arg(parser.value(shot)));
      return 1;
    }
    if (!ok) {
      fail(w.error_text());
      return 1;
    }
    return 0;
  }

  w.show();
  if (!trace.isEmpty()) {
    // Apply the view options once, after this trace has loaded.
    auto conn = std::make_shared<QMetaObject::Connection>();
    *conn = QObject::connect(w.session(), &moetrace::gui::TraceSession::loaded, &w, [&, conn] {
      QObject::disconnect(*conn);
      apply_view_options();
    });
    if (show_replay) w.replay_action()->setChecked(true);
    w.open(trace);
  }
  return app->exec();
}
