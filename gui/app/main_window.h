// The viewer's window: the timeline with its legend and search bar in the
// centre, the panels in docks around it, loading with progress, errors
// shown in the window in the same words as the CLI.
#pragma once

#include <QFutureWatcher>
#include <QLabel>
#include <QLineEdit>
#include <QMainWindow>
#include <QProgressBar>
#include <QStackedWidget>
#include <QStringList>
#include <initializer_list>
#include <memory>
#include <utility>

#include "moetrace/gui/search.h"
#include "efficiency_panel.h"
#include "panels.h"
#include "replay_panel.h"
#include "timeline_view.h"
#include "trace_session.h"

namespace moetrace::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // One trace file, or several files / a folder / a glob pattern as one run.
  void open(const QStringList& paths);
  bool open_blocking(const QStringList& paths);
  void open(const QString& path) { open(QStringList{path}); }
  bool open_blocking(const QString& path) { return open_blocking(QStringList{path}); }
  bool save_screenshot(const QString& png_path);

  TraceSession* session() const { return session_; }
  TimelineView* timeline() const { return view_; }
  // View > GPU queue lengths (checkable): shows the kQueue rows.
  QAction* queue_tracks_action() const { return queue_tracks_action_; }
  DetailsPanel* details_panel() const { return details_; }
  BreakdownPanel* breakdown_panel() const { return breakdown_; }
  RangePanel* range_panel() const { return range_; }
  ExpertLoadPanel* expert_load_panel() const { return expert_; }
  LocalityPanel* locality_panel() const { return locality_; }
  MemoryPanel* memory_panel() const { return memory_; }
  RecommendationsPanel* recommendations_panel() const { return recommendations_; }
  GpuQueuesPanel* gpu_queues_panel() const { return gpu_queues_; }
  EfficiencyPanel* efficiency_panel() const { return efficiency_; }
  ReplayPanel* replay_panel() const { return replay_; }
  // View > Show replay (checkable): the replayed tracks under each rank's
  // streams, computed off the GUI thread the first time.
  QAction* replay_action() const { return replay_action_; }
  // The replay asked for: the what-ifs and where their costs come from.
  const ReplayRequest& replay_request() const { return replay_request_; }
  void set_replay_what_ifs(const analyzer::GraphWhatIfs& w);
  // `moetrace-gui --cost-model`: a cost-model JSON file, a simulator preset or
  // "fitted", as `moetrace replay --cost-model` takes it; the error, or "".
  QString set_replay_cost_model(const QString& arg);
  // `moetrace-gui --model FILE --tokens N`: the model's sizes and the tokens
  // a rank holds where the trace lacks them, for the recommendations and
  // the what-ifs, as `moetrace recommend` and `replay` take them (empty /
  // -1: none); the error, or "". For the traces opened after.
  QString set_model_shapes(const QString& model_file, std::int64_t tokens_per_rank);
  // Shows the replay, computed on this thread (screenshots, tests); false if it failed.
  bool show_replay_blocking();
  const std::shared_ptr<const ReplayResults>& replay_results() const { return replay_results_; }
  QLineEdit* search_field() const { return search_; }
  // The text of the error page (empty unless it shows).
  QString error_text() const;
  bool showing_timeline() const;
  // Runs the search synchronously (tests); returns the number of hits.
  std::size_t search_now(const QString& query);
  const SearchResult& search_result() const { return hits_; }

  static QString shortcuts_html();

 public slots:
  void open_dialog();
  void open_folder_dialog();
  void find_next();
  void find_previous();
  void show_shortcuts();
  void save_screenshot_dialog();

 protected:
  void dragEnterEvent(QDragEnterEvent*) override;
  void dropEvent(QDropEvent*) override;

 private:
  void build_pages();
  // Lays `widgets` out in a column of `page` a third of the way down, each
  // with its alignment, and adds the page to pages_.
  void add_column_page(QWidget* page, std::initializer_list<std::pair<QWidget*, Qt::Alignment>> widgets);
  void build_docks();
  void build_menus();
  void on_loading_started(const QString& path);
  void on_progress(const QString& stage, double fraction);
  void on_loaded(std::shared_ptr<const LoadedTrace> t);
  void on_failed(const QString& path, const QString& message);
  void on_analyses(std::shared_ptr<const TraceAnalyses> a);
  void on_replay(std::shared_ptr<const ReplayResults> r);
  // Shows (computing it if needed) or hides the replayed tracks.
  void show_replay(bool on);
  // Whether replay_results_ answer replay_request_ on the trace shown.
  bool replay_current() const;
  void run_search(bool forward);
  void go_to_hit(std::size_t i);
  QDockWidget* add_dock(const QString& title, QWidget* w, Qt::DockWidgetArea area);

  TraceSession* session_;
  QStackedWidget* pages_;
  QLabel* welcome_;
  QWidget* loading_page_;
  QLabel* loading_label_;
  QProgressBar* loading_bar_;
  QWidget* error_page_;
  QLabel* error_label_;
  QWidget* timeline_page_;
  TimelineView* view_;
  LegendWidget* legend_;
  QLineEdit* search_;
  QLabel* search_status_;
  QLabel* status_trace_;

  DetailsPanel* details_;
  BreakdownPanel* breakdown_;
  RangePanel* range_;
  ExpertLoadPanel* expert_;
  LocalityPanel* locality_;
  MemoryPanel* memory_;
  RecommendationsPanel* recommendations_;
  GpuQueuesPanel* gpu_queues_;
  EfficiencyPanel* efficiency_;
  ReplayPanel* replay_;
  QDockWidget* replay_dock_ = nullptr;
  QAction* replay_action_ = nullptr;
  ReplayRequest replay_request_;
  std::shared_ptr<const ReplayResults> replay_results_;
  QDockWidget* range_dock_ = nullptr;
  QDockWidget* breakdown_dock_ = nullptr;
  QMenu* panels_menu_ = nullptr;
  QAction* queue_tracks_action_ = nullptr;

  QFutureWatcher<SearchResult>* search_watcher_;
  SearchResult hits_;
  std::size_t hit_pos_ = 0;
  bool search_forward_ = true;
};

}  // namespace moetrace::gui
