#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPushButton>
#include <QStatusBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "cost_model_arg.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/gui/format.h"
#include "qt_text.h"

namespace moetrace::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("moetrace-gui"));
  setAcceptDrops(true);
  resize(1500, 950);
  session_ = new TraceSession(this);
  search_watcher_ = new QFutureWatcher<SearchResult>(this);
  build_pages();
  build_docks();
  build_menus();
  status_trace_ = new QLabel(this);
  statusBar()->addPermanentWidget(status_trace_);

  connect(session_, &TraceSession::loading_started, this, &MainWindow::on_loading_started);
  connect(session_, &TraceSession::progress, this, &MainWindow::on_progress);
  connect(session_, &TraceSession::loaded, this, &MainWindow::on_loaded);
  connect(session_, &TraceSession::failed, this, &MainWindow::on_failed);
  connect(session_, &TraceSession::analyses_ready, this, &MainWindow::on_analyses);
  connect(session_, &TraceSession::replay_started, this, [this] { replay_->set_computing(); });
  connect(session_, &TraceSession::replay_ready, this, &MainWindow::on_replay);
  connect(replay_, &ReplayPanel::replay_requested, this, [this](int degree) {
    analyzer::GraphWhatIfs w = replay_request_.what_ifs;
    w.pipeline_degree = degree;
    set_replay_what_ifs(w);
    replay_dock_->raise();
    if (replay_action_->isChecked()) show_replay(true);
    else replay_action_->setChecked(true);  // toggled: show_replay
  });
  connect(replay_, &ReplayPanel::cost_model_chosen, this, [this](const QString& path) {
    if (const QString error = set_replay_cost_model(path); !error.isEmpty())
      QMessageBox::warning(this, tr("Cost model"), error);
  });
  connect(replay_, &ReplayPanel::iteration_activated, this, [this](int rank, int iteration) {
    if (!view_->model()) return;
    for (const auto& s : view_->model()->spans())
      if (s.level == SpanLevel::kIteration && s.rank == RankId(rank) && s.iteration == iteration)
        view_->zoom_to(static_cast<double>(s.start_ns), static_cast<double>(s.end_ns));
  });

  connect(view_, &TimelineView::item_selected, this, [this](ItemRef item) {
    details_->show_item(view_->model().get(), item);
    // Follow the selection's iteration on the expert-load slider.
    if (!view_->model() || !item.valid()) return;
    const auto& t = view_->model()->trace();
    int iteration = -1;
    if (item.source == ItemSource::kOp) iteration = t.ops[item.index].iteration;
    if (item.source == ItemSource::kSpan) iteration = view_->model()->spans()[item.index].iteration;
    if (item.source == ItemSource::kActivity && t.activities[item.index].op >= 0)
      iteration = t.ops[static_cast<std::size_t>(t.activities[item.index].op)].iteration;
    if (iteration >= 0) expert_->set_iteration(iteration);
  });
  connect(view_, &TimelineView::range_selected, this, [this](double t0, double t1) {
    range_->set_range(t0, t1);
    range_dock_->raise();
  });
  connect(view_, &TimelineView::range_cleared, this, [this] { range_->clear_range(); });
  connect(view_, &TimelineView::axis_changed, this, [this] { memory_->set_axis(view_->axis()); });
  auto select_layer = [this](int layer) {
    view_->select_layer(layer);
    statusBar()->showMessage(tr("Layer %1 outlined on the timeline").arg(layer), 4000);
  };
  connect(breakdown_, &BreakdownPanel::layer_activated, this, select_layer);
  connect(recommendations_, &RecommendationsPanel::layer_activated, this, select_layer);
  connect(expert_, &ExpertLoadPanel::layer_activated, this, select_layer);
  connect(replay_, &ReplayPanel::layer_activated, this, select_layer);
  connect(search_watcher_, &QFutureWatcher<SearchResult>::finished, this, [this] {
    if (search_watcher_->future().resultCount() == 0) return;
    hits_ = search_watcher_->result();
    if (hits_.hits.empty()) {
      search_status_->setText(tr("no match"));
      return;
    }
    // Start from the first match at or after the view's start.
    const double t0 = view_->axis().t0_ns;
    std::size_t i = 0;
    while (i < hits_.hits.size() && static_cast<double>(hits_.hits[i].start_ns) < t0) ++i;
    if (i == hits_.hits.size()) i = 0;
    if (!search_forward_) i = i == 0 ? hits_.hits.size() - 1 : i - 1;
    go_to_hit(i);
  });
}

MainWindow::~MainWindow() {
  if (search_watcher_->isRunning()) search_watcher_->waitForFinished();
  range_->wait();
}

void MainWindow::add_column_page(QWidget* page, std::initializer_list<std::pair<QWidget*, Qt::Alignment>> widgets) {
  auto* box = new QVBoxLayout(page);
  box->addStretch(1);
  for (const auto& [w, alignment] : widgets) box->addWidget(w, 0, alignment);
  box->addStretch(2);
  pages_->addWidget(page);
}

void MainWindow::build_pages() {
  pages_ = new QStackedWidget(this);
  welcome_ = new QLabel(tr("<h2>moetrace-gui</h2><p>Open a moetrace trace: <b>File \u25B8 Open</b> (Ctrl+O), "
                           "or drop a trace file here.</p><p>Keyboard and mouse: <b>Help \u25B8 Keyboard shortcuts</b> (F1).</p>"),
                        pages_);
  welcome_->setAlignment(Qt::AlignCenter);
  pages_->addWidget(welcome_);

  loading_page_ = new QWidget(pages_);
  loading_label_ = new QLabel(loading_page_);
  loading_label_->setAlignment(Qt::AlignCenter);
  loading_bar_ = new QProgressBar(loading_page_);
  loading_bar_->setRange(0, 1000);
  loading_bar_->setMaximumWidth(520);
  add_column_page(loading_page_, {{loading_label_, {}}, {loading_bar_, Qt::AlignHCenter}});

  error_page_ = new QWidget(pages_);
  auto* etitle = new QLabel(tr("<h3>Could not open the trace</h3>"), error_page_);
  etitle->setAlignment(Qt::AlignCenter);
  error_label_ = new QLabel(error_page_);
  error_label_->setObjectName(QStringLiteral("error_message"));
  error_label_->setAlignment(Qt::AlignCenter);
  error_label_->setWordWrap(true);
  error_label_->setTextFormat(Qt::PlainText);
  error_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* again = new QPushButton(tr("Open another trace\u2026"), error_page_);
  connect(again, &QPushButton::clicked, this, &MainWindow::open_dialog);
  add_column_page(error_page_, {{etitle, {}}, {error_label_, {}}, {again, Qt::AlignHCenter}});

  timeline_page_ = new QWidget(pages_);
  auto* tbox = new QVBoxLayout(timeline_page_);
  tbox->setContentsMargins(0, 0, 0, 0);
  tbox->setSpacing(0);
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(4, 2, 4, 2);
  legend_ = new LegendWidget(timeline_page_);
  search_ = new QLineEdit(timeline_page_);
  search_->setPlaceholderText(tr("Search names (Ctrl+F)"));
  search_->setClearButtonEnabled(true);
  search_->setMaximumWidth(260);
  search_status_ = new QLabel(timeline_page_);
  search_status_->setMinimumWidth(90);
  auto* prev = new QToolButton(timeline_page_);
  prev->setText(QStringLiteral("\u25B2"));
  prev->setToolTip(tr("Previous match (Shift+F3)"));
  auto* next = new QToolButton(timeline_page_);
  next->setText(QStringLiteral("\u25BC"));
  next->setToolTip(tr("Next match (Enter, F3)"));
  connect(prev, &QToolButton::clicked, this, &MainWindow::find_previous);
  connect(next, &QToolButton::clicked, this, &MainWindow::find_next);
  connect(search_, &QLineEdit::returnPressed, this, &MainWindow::find_next);
  bar->addWidget(legend_, 1);
  bar->addWidget(search_);
  bar->addWidget(prev);
  bar->addWidget(next);
  bar->addWidget(search_status_);
  view_ = new TimelineView(timeline_page_);
  tbox->addLayout(bar);
  tbox->addWidget(view_, 1);
  pages_->addWidget(timeline_page_);
  setCentralWidget(pages_);
}

QDockWidget* MainWindow::add_dock(const QString& title, QWidget* w, Qt::DockWidgetArea area) {
  auto* d = new QDockWidget(title, this);
  d->setObjectName(title);
  d->setWidget(w);
  d->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable | QDockWidget::DockWidgetClosable);
  addDockWidget(area, d);
  return d;
}

void MainWindow::build_docks() {
  details_ = new DetailsPanel(this);
  breakdown_ = new BreakdownPanel(this);
  range_ = new RangePanel(this);
  expert_ = new ExpertLoadPanel(this);
  locality_ = new LocalityPanel(this);
  memory_ = new MemoryPanel(this);
  recommendations_ = new RecommendationsPanel(this);
  gpu_queues_ = new GpuQueuesPanel(this);
  efficiency_ = new EfficiencyPanel(this);
  replay_ = new ReplayPanel(this);
  auto* details = add_dock(tr("Details"), details_, Qt::RightDockWidgetArea);
  breakdown_dock_ = add_dock(tr("Breakdown per layer"), breakdown_, Qt::BottomDockWidgetArea);
  range_dock_ = add_dock(tr("Range breakdown"), range_, Qt::BottomDockWidgetArea);
  auto* expert = add_dock(tr("Expert load"), expert_, Qt::RightDockWidgetArea);
  auto* memory = add_dock(tr("Memory"), memory_, Qt::BottomDockWidgetArea);
  auto* locality = add_dock(tr("Locality"), locality_, Qt::BottomDockWidgetArea);
  auto* recs = add_dock(tr("Recommendations"), recommendations_, Qt::BottomDockWidgetArea);
  auto* queues = add_dock(tr("GPU queues"), gpu_queues_, Qt::BottomDockWidgetArea);
  auto* efficiency = add_dock(tr("Efficiency"), efficiency_, Qt::BottomDockWidgetArea);
  replay_dock_ = add_dock(tr("Replay"), replay_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(breakdown_dock_, range_dock_);
  tabifyDockWidget(range_dock_, memory);
  tabifyDockWidget(memory, locality);
  tabifyDockWidget(locality, recs);
  tabifyDockWidget(recs, queues);
  tabifyDockWidget(queues, efficiency);
  tabifyDockWidget(efficiency, replay_dock_);
  breakdown_dock_->raise();
  splitDockWidget(details, expert, Qt::Vertical);
  resizeDocks({details}, {360}, Qt::Horizontal);
  resizeDocks({breakdown_dock_}, {260}, Qt::Vertical);
  panels_menu_ = new QMenu(tr("Panels"), this);
  for (auto* d : {details, expert, breakdown_dock_, range_dock_, memory, locality, recs, queues, efficiency, replay_dock_})
    panels_menu_->addAction(d->toggleViewAction());
}

void MainWindow::build_menus() {
  auto* file = menuBar()->addMenu(tr("&File"));
  auto* open = file->addAction(tr("&Open\u2026"), this, &MainWindow::open_dialog);
  open->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open &folder of rank files…"), this, &MainWindow::open_folder_dialog);
  auto* shot = file->addAction(tr("Save &screenshot\u2026"), this, &MainWindow::save_screenshot_dialog);
  shot->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
  file->addSeparator();
  auto* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  auto* view = menuBar()->addMenu(tr("&View"));
  // Timeline keys act while the timeline page has focus, so typing in the
  // search field or a panel is never taken for navigation.
  auto timeline_action = [&](const QString& text, QKeySequence key, auto slot) {
    auto* a = view->addAction(text);
    a->setShortcut(key);
    a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    timeline_page_->addAction(a);
    connect(a, &QAction::triggered, view_, slot);
    return a;
  };
  timeline_action(tr("Zoom &in"), QKeySequence(Qt::Key_W), &TimelineView::zoom_in);
  timeline_action(tr("Zoom &out"), QKeySequence(Qt::Key_S), &TimelineView::zoom_out);
  timeline_action(tr("Pan &left"), QKeySequence(Qt::Key_A), &TimelineView::pan_left);
  timeline_action(tr("Pan &right"), QKeySequence(Qt::Key_D), &TimelineView::pan_right);
  timeline_action(tr("&Fit selection"), QKeySequence(Qt::Key_F), &TimelineView::fit_selection);
  timeline_action(tr("&Whole trace"), QKeySequence(Qt::Key_Home), &TimelineView::fit_all);
  timeline_action(tr("&Clear selection"), QKeySequence(Qt::Key_Escape), &TimelineView::clear_selection);
  view->addSeparator();
  auto* queues = view->addAction(tr("GPU &queue lengths"));
  queues->setCheckable(true);
  queues->setChecked(view_->queue_tracks_visible());
  queues->setToolTip(tr("A row under each stream's kernels: operations launched and not yet started"));
  connect(queues, &QAction::toggled, view_, &TimelineView::set_queue_tracks_visible);
  queue_tracks_action_ = queues;
  replay_action_ = view->addAction(tr("Show &replay"));
  replay_action_->setCheckable(true);
  replay_action_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  replay_action_->setToolTip(tr("Under each rank's streams, the same tracks replayed from the trace's execution graph"));
  connect(replay_action_, &QAction::toggled, this, &MainWindow::show_replay);
  view->addAction(tr("Collapse all ranks"), this, [this] { view_->set_all_collapsed(true); });
  view->addAction(tr("Expand all ranks"), this, [this] { view_->set_all_collapsed(false); });
  view->addSeparator();
  auto* find = view->addAction(tr("&Search\u2026"), this, [this] {
    search_->setFocus();
    search_->selectAll();
  });
  find->setShortcut(QKeySequence::Find);
  auto* next = view->addAction(tr("Next match"), this, &MainWindow::find_next);
  next->setShortcut(QKeySequence(Qt::Key_F3));
  auto* prev = view->addAction(tr("Previous match"), this, &MainWindow::find_previous);
  prev->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F3));
  view->addSeparator();
  view->addMenu(panels_menu_);

  auto* help = menuBar()->addMenu(tr("&Help"));
  auto* keys = help->addAction(tr("&Keyboard shortcuts"), this, &MainWindow::show_shortcuts);
  keys->setShortcut(QKeySequence::HelpContents);
  help->addAction(tr("&About moetrace-gui"), this, [this] {
    QMessageBox::about(this, tr("About moetrace-gui"),
                       tr("<b>moetrace-gui</b> %1<br>Timeline viewer of moetrace traces: MoE training on NVIDIA GPUs.")
                           .arg(QCoreApplication::applicationVersion()));
  });
}

QString MainWindow::shortcuts_html() {
  const char* rows[][2] = {
      {"W / S", "zoom in / out (at the mouse)"},
      {"A / D", "pan left / right"},
      {"Ctrl + wheel", "zoom at the mouse"},
      {"Shift + wheel", "pan"},
      {"Wheel, Up / Down, PgUp / PgDn", "scroll the rows"},
      {"Drag", "pan and scroll"},
      {"Click", "select an event; its details show in Details"},
      {"Double-click", "zoom to the event"},
      {"Shift + drag, or drag on the ruler", "select a time range; its breakdown shows in Range breakdown"},
      {"F", "fit the selected event or range"},
      {"Home", "show the whole trace"},
      {"Esc", "clear the selection and the range"},
      {"Click a rank header", "collapse or expand the rank"},
      {"Ctrl + F", "search names"},
      {"Enter, F3 / Shift + F3", "next / previous match"},
      {"Click a layer (breakdown, expert load, recommendations)", "outline the layer on the timeline"},
      {"Ctrl + R", "show or hide the replayed tracks (View > Show replay)"},
      {"Ctrl + O", "open a trace (or drop a file on the window)"},
      {"Ctrl + Shift + S", "save a screenshot"},
      {"F1", "this list"},
      {"Ctrl + Q", "quit"},
  };
  QString html = QStringLiteral("<table cellspacing=4>");
  for (const auto& r : rows)
    html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(QString::fromUtf8(r[0]), QString::fromUtf8(r[1]));
  return html + QStringLiteral("</table>");
}

void MainWindow::show_shortcuts() {
  QMessageBox box(this);
  box.setWindowTitle(tr("Keyboard and mouse"));
  box.setTextFormat(Qt::RichText);
  box.setText(shortcuts_html());
  box.exec();
}

void MainWindow::open_dialog() {
  // Several files selected together are one run (one trace file per rank).
  const QStringList paths = QFileDialog::getOpenFileNames(
      this, tr("Open a trace (select every rank file of a run to open them as one run)"), QString(),
      tr("Traces: moetrace, PyTorch profiler, Nsight Systems SQLite (*.db *.json *.json.gz *.sqlite *.sqlite3);;"
         "All files (*)"));
  if (!paths.isEmpty()) open(paths);
}

void MainWindow::open_folder_dialog() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a folder of rank files as one run"));
  if (!dir.isEmpty()) open(QStringList{dir});
}

void MainWindow::open(const QStringList& paths) { session_->open(paths); }

bool MainWindow::open_blocking(const QStringList& paths) { return session_->open_blocking(paths); }

bool MainWindow::save_screenshot(const QString& png_path) {
  view_->prepare_now();
  return grab().save(png_path, "PNG");
}

void MainWindow::save_screenshot_dialog() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save screenshot"), QStringLiteral("moetrace.png"),
                                                    tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  if (!save_screenshot(path)) QMessageBox::warning(this, tr("Save screenshot"), tr("Could not write %1").arg(path));
}

QString MainWindow::error_text() const { return pages_->currentWidget() == error_page_ ? error_label_->text() : QString(); }

bool MainWindow::showing_timeline() const { return pages_->currentWidget() == timeline_page_; }

void MainWindow::on_loading_started(const QString& path) {
  loading_label_->setText(tr("Loading %1\u2026").arg(QFileInfo(path).fileName()));
  loading_bar_->setValue(0);
  pages_->setCurrentWidget(loading_page_);
  statusBar()->showMessage(tr("Loading %1").arg(path));
}

void MainWindow::on_progress(const QString& stage, double fraction) {
  loading_label_->setText(tr("Loading: %1").arg(stage));
  loading_bar_->setValue(static_cast<int>(fraction * 1000));
}

void MainWindow::on_loaded(std::shared_ptr<const LoadedTrace> t) {
  hits_ = {};
  search_status_->clear();
  view_->set_model(t->model);
  details_->show_item(nullptr, {});
  range_->set_model(t->model);
  memory_->set_model(t->model);
  memory_->set_axis(view_->axis());
  breakdown_->set_computing();
  expert_->set_computing();
  locality_->set_computing();
  memory_->set_computing();
  recommendations_->set_computing();
  gpu_queues_->set_computing();
  efficiency_->set_trace(t->trace);
  efficiency_->set_computing();
  replay_results_.reset();
  replay_->set_idle();
  if (replay_action_->isChecked()) session_->replay(replay_request_);
  pages_->setCurrentWidget(timeline_page_);
  view_->setFocus();
  const auto& tr_ = *t->trace;
  const QString name =
      tr_.files ? tr("%1 and %2 more rank files")
                      .arg(QFileInfo(QString::fromStdString(tr_.files->files.front().path)).fileName())
                      .arg(tr_.files->files.size() - 1)
                : QFileInfo(t->path).fileName();
  setWindowTitle(QStringLiteral("%1 \u2014 moetrace-gui").arg(name));
  QString info = tr("%1: %2 events, %3 ranks").arg(name, qs(format_count(tr_.event_count()))).arg(t->model->groups().size());
  if (!tr_.run.variant.empty()) info += QStringLiteral(", ") + qs(tr_.run.variant);
  if (tr_.run.simulated) info += tr(" (simulated)");
  if (!tr_.run.finalized) info += tr(" \u2014 unfinished trace (the run did not close it)");
  status_trace_->setText(info);
  statusBar()->showMessage(tr("Loaded in %1 s (trace %2 s, timeline %3 s)")
                               .arg(t->load_seconds + t->model_seconds, 0, 'f', 2)
                               .arg(t->load_seconds, 0, 'f', 2)
                               .arg(t->model_seconds, 0, 'f', 2),
                           10000);
  // A run of several files: what was left out or is missing, and the clocks.
  if (!t->warnings.isEmpty()) {
    status_trace_->setToolTip(t->warnings.join(QLatin1Char('\n')));
    statusBar()->showMessage(tr("Warning: %1").arg(t->warnings.join(QStringLiteral("; "))), 30000);
  } else {
    status_trace_->setToolTip({});
  }
}

void MainWindow::on_failed(const QString& path, const QString& message) {
  error_label_->setText(message);
  pages_->setCurrentWidget(error_page_);
  setWindowTitle(QStringLiteral("moetrace-gui"));
  status_trace_->clear();
  statusBar()->showMessage(tr("Could not open %1").arg(path));
}

void MainWindow::on_analyses(std::shared_ptr<const TraceAnalyses> a) {
  const auto current = session_->current();
  if (!current) return;
  breakdown_->set_breakdown(a->breakdown, a->breakdown_error);
  expert_->set_index(current->trace, a->expert_load);
  locality_->set_results(a->results);
  memory_->set_results(a->results);
  recommendations_->set_results(a->results);
  gpu_queues_->set_results(a->results);
  efficiency_->set_results(a->results);
  // The queue-length rows appear under each stream now (the model was
  // drawn before the analyses); only on the trace they were computed for.
  if (view_->model() && view_->model()->trace_ptr() == current->trace) view_->set_queue_tracks(a->queues);
}

// --- replay ----------------------------------------------------------------------------

void MainWindow::set_replay_what_ifs(const analyzer::GraphWhatIfs& w) {
  replay_request_.what_ifs = w;
  replay_->set_pipeline_degree(w.pipeline_degree);
}

QString MainWindow::set_replay_cost_model(const QString& arg) {
  analyzer::RecommendOptions o;
  try {
    cli::apply_cost_model_arg(arg.toStdString(), o);
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  o.model = replay_request_.options.model;
  o.tokens_per_rank = replay_request_.options.tokens_per_rank;
  replay_request_.options = std::move(o);
  // A prediction made with the other costs is computed again when asked for.
  if (replay_results_ && replay_results_->predicted) replay_results_.reset();
  replay_->set_cost_model_text(tr("costs: %1").arg(qs(replay_request_.options.cost_model_source.empty()
                                                          ? std::string("the trace's own fit")
                                                          : replay_request_.options.cost_model_source)));
  return {};
}

QString MainWindow::set_model_shapes(const QString& model_file, std::int64_t tokens_per_rank) {
  std::shared_ptr<const analyzer::ModelSpec> model;
  try {
    model = cli::apply_model_shape_arg(model_file.toStdString(), tokens_per_rank, replay_request_.options);
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  session_->set_model_shapes(model, tokens_per_rank);
  replay_request_.model = model;
  if (replay_results_ && replay_results_->predicted) replay_results_.reset();
  return {};
}

bool MainWindow::replay_current() const {
  const auto current = session_->current();
  if (!replay_results_ || !current || !replay_results_->model) return false;
  const auto& w = replay_results_->what_ifs;
  return replay_results_->model->trace_ptr() == current->trace &&
         w.pipeline_degree == replay_request_.what_ifs.pipeline_degree && w.overlap == replay_request_.what_ifs.overlap;
}

void MainWindow::show_replay(bool on) {
  const auto current = session_->current();
  if (!current) return;
  if (!on) {
    view_->set_replay(nullptr);
    view_->swap_model(current->model);
    return;
  }
  replay_dock_->raise();
  if (replay_current()) {
    view_->swap_model(replay_results_->model);
    view_->set_replay(replay_results_);
    return;
  }
  statusBar()->showMessage(tr("Replaying the trace's execution graph…"));
  session_->replay(replay_request_);
}

bool MainWindow::show_replay_blocking() {
  if (!session_->current()) return false;
  {
    const QSignalBlocker block(replay_action_);
    replay_action_->setChecked(true);
  }
  replay_dock_->raise();
  const auto r = session_->replay_blocking(replay_request_);
  return r && r->error.empty();
}

void MainWindow::on_replay(std::shared_ptr<const ReplayResults> r) {
  replay_results_ = r;
  replay_->set_results(r);
  if (!r->error.empty()) {
    statusBar()->showMessage(tr("The replay failed: %1").arg(qs(r->error)), 10000);
    return;
  }
  statusBar()->showMessage(tr("Replayed in %1 s").arg(r->seconds, 0, 'f', 2), 5000);
  if (replay_action_->isChecked() && view_->model() && r->model->trace_ptr() == view_->model()->trace_ptr()) {
    view_->swap_model(r->model);
    view_->set_replay(r);
  }
}

// --- search ---------------------------------------------------------------------------

void MainWindow::find_next() { run_search(true); }
void MainWindow::find_previous() { run_search(false); }

void MainWindow::run_search(bool forward) {
  const QString q = search_->text().trimmed();
  if (q.isEmpty() || !view_->model()) return;
  if (q.toStdString() == hits_.query && !search_watcher_->isRunning()) {
    if (hits_.hits.empty()) return;
    const std::size_t n = hits_.hits.size();
    go_to_hit(forward ? (hit_pos_ + 1) % n : (hit_pos_ + n - 1) % n);
    return;
  }
  if (search_watcher_->isRunning()) return;
  search_forward_ = forward;
  search_status_->setText(tr("searching\u2026"));
  auto model = view_->model();
  const std::string query = q.toStdString();
  search_watcher_->setFuture(QtConcurrent::run([model, query] { return search_items(*model, query); }));
}

std::size_t MainWindow::search_now(const QString& query) {
  search_->setText(query);
  run_search(true);
  search_watcher_->waitForFinished();
  QCoreApplication::processEvents();
  return hits_.hits.size();
}

void MainWindow::go_to_hit(std::size_t i) {
  if (i >= hits_.hits.size()) return;
  hit_pos_ = i;
  view_->select_item(hits_.hits[i].item, true);
  search_status_->setText(tr("%1 / %2%3")
                              .arg(qs(format_count(static_cast<std::int64_t>(i + 1))),
                                   qs(format_count(static_cast<std::int64_t>(hits_.hits.size()))),
                                   hits_.truncated ? QStringLiteral("+") : QString()));
}

// --- drag and drop ---------------------------------------------------------------------

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (!urls.isEmpty() && urls.first().isLocalFile()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  // Several files dropped together are one run (one file per rank).
  QStringList paths;
  for (const auto& u : urls)
    if (u.isLocalFile()) paths.push_back(u.toLocalFile());
  if (paths.isEmpty()) return;
  open(paths);
  e->acceptProposedAction();
}

}  // namespace moetrace::gui
