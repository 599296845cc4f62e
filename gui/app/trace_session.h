// Loading a trace off the GUI thread. Stage one loads the trace and builds
// the timeline model (the window can draw as soon as it is done); stage two
// runs the analyzer's analyses (the breakdown among them) and builds the
// expert-load index, and fills the panels when it finishes.
// Opening another file while one loads discards the older result. The
// trace's replay (replay_results.h) runs on request, off the GUI thread too.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <atomic>
#include <functional>
#include <memory>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/model_spec.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/analysis_results.h"
#include "moetrace/gui/expert_load_matrix.h"
#include "moetrace/gui/replay_results.h"
#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

struct LoadedTrace {
  QString path;               // the file, or "a.db ... z.db (N files)" for a run of several
  QStringList warnings;       // a run of several files: files left out, missing ranks, clocks
  std::shared_ptr<const analyzer::Trace> trace;
  std::shared_ptr<const TimelineModel> model;
  double load_seconds = 0;    // load_trace
  double model_seconds = 0;   // timeline model and pyramids
  // CPU time of the process over each stage (every thread's: both stages
  // may use several).
  double load_cpu_seconds = 0, model_cpu_seconds = 0;
};

struct TraceAnalyses {
  std::shared_ptr<const analyzer::Breakdown> breakdown;  // results->analyses->breakdown
  std::shared_ptr<const ExpertLoadIndex> expert_load;
  std::shared_ptr<const AnalysisResults> results;
  // Queue length per stream for the timeline's kQueue rows (every change
  // point); null where it failed.
  std::shared_ptr<const QueueTracks> queues;
  QString breakdown_error;    // a failed analysis leaves the timeline usable
};

class TraceSession : public QObject {
  Q_OBJECT
 public:
  explicit TraceSession(QObject* parent = nullptr);
  ~TraceSession() override;

  // Starts loading; returns at once. Several files, a directory or a glob
  // pattern are one run of several rank files (analyzer/run_loader.h), as
  // the command-line tools read them.
  void open(const QStringList& paths);
  void open(const QString& path) { open(QStringList{path}); }
  // Loads on the calling thread (headless screenshots, tests); true on success.
  bool open_blocking(const QStringList& paths);
  bool open_blocking(const QString& path) { return open_blocking(QStringList{path}); }
  bool loading() const { return loading_; }
  const std::shared_ptr<const LoadedTrace>& current() const { return current_; }
  const std::shared_ptr<const TraceAnalyses>& analyses() const { return analyses_; }

  // Replays the current trace (compute_replay) on the thread pool;
  // replay_ready follows, unless another trace or a newer request came first.
  void replay(const ReplayRequest& request);
  // The same on the calling thread (screenshots, tests); null without a trace.
  std::shared_ptr<const ReplayResults> replay_blocking(const ReplayRequest& request);
  bool replaying() const { return replaying_; }

  // The user's model and tokens (`moetrace-gui --model --tokens`) for the
  // recommendations of the traces opened after; null / -1: none.
  void set_model_shapes(std::shared_ptr<const analyzer::ModelSpec> model, std::int64_t tokens_per_rank);

  // The two stages as plain functions; they throw moetrace::Error.
  static std::shared_ptr<const LoadedTrace> load(const QStringList& paths,
                                                 const std::function<void(std::string_view, double)>& progress);
  static std::shared_ptr<const TraceAnalyses> analyse(const LoadedTrace& loaded,
                                                      const std::shared_ptr<const analyzer::ModelSpec>& model = {},
                                                      std::int64_t tokens_per_rank = -1);

 signals:
  void loading_started(const QString& path);
  void progress(const QString& stage, double fraction);
  void loaded(std::shared_ptr<const moetrace::gui::LoadedTrace> trace);
  void failed(const QString& path, const QString& message);
  void analyses_ready(std::shared_ptr<const moetrace::gui::TraceAnalyses> analyses);
  void replay_started();
  // Results of the current trace (a failure carries its error).
  void replay_ready(std::shared_ptr<const moetrace::gui::ReplayResults> results);

 private:
  void deliver_loaded(std::uint64_t generation, std::shared_ptr<const LoadedTrace> t, bool analyse_async);
  void deliver_failed(std::uint64_t generation, const QString& path, const QString& message);
  void start_analyses(std::uint64_t generation);

  std::shared_ptr<std::atomic<std::uint64_t>> generation_;
  std::shared_ptr<const LoadedTrace> current_;
  std::shared_ptr<const TraceAnalyses> analyses_;
  bool loading_ = false;
  std::shared_ptr<std::atomic<std::uint64_t>> replay_generation_;
  bool replaying_ = false;
  std::shared_ptr<const analyzer::ModelSpec> model_;
  std::int64_t tokens_per_rank_ = -1;
};

}  // namespace moetrace::gui

Q_DECLARE_METATYPE(std::shared_ptr<const moetrace::gui::LoadedTrace>)
Q_DECLARE_METATYPE(std::shared_ptr<const moetrace::gui::TraceAnalyses>)
Q_DECLARE_METATYPE(std::shared_ptr<const moetrace::gui::ReplayResults>)
