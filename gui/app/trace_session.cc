#include "trace_session.h"

#include <QCoreApplication>
#include <QPointer>
#include <QtConcurrent/QtConcurrentRun>
#include <chrono>
#include <cstdlib>

#include "moetrace/analyzer/run_loader.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/stopwatch.h"

namespace moetrace::gui {
namespace {

// Every failure becomes one line. moetrace::Error already is one ("<path>:
// an empty folder, so no trace to read"), exactly as the CLI prints it.
QString message_of(const QString& path, const std::exception& e) {
  if (dynamic_cast<const Error*>(&e)) return QString::fromStdString(e.what());
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return path + QStringLiteral(": not enough memory to load this trace");
  return path + QStringLiteral(": ") + QString::fromStdString(e.what());
}

}  // namespace

TraceSession::TraceSession(QObject* parent)
    : QObject(parent),
      generation_(std::make_shared<std::atomic<std::uint64_t>>(0)),
      replay_generation_(std::make_shared<std::atomic<std::uint64_t>>(0)) {
  qRegisterMetaType<std::shared_ptr<const LoadedTrace>>();
  qRegisterMetaType<std::shared_ptr<const TraceAnalyses>>();
  qRegisterMetaType<std::shared_ptr<const ReplayResults>>();
}

TraceSession::~TraceSession() {
  // Late results of running jobs find a newer generation and are dropped.
  generation_->fetch_add(1);
  replay_generation_->fetch_add(1);
}

std::shared_ptr<const LoadedTrace> TraceSession::load(const QStringList& paths,
                                                      const std::function<void(std::string_view, double)>& progress) {
  auto out = std::make_shared<LoadedTrace>();
  std::vector<std::string> args;
  for (const auto& p : paths) args.push_back(p.toStdString());
  const auto files = analyzer::expand_trace_paths(args);
  out->path = QString::fromStdString(analyzer::describe_paths(files));
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  analyzer::RunLoadOptions ro;
  // MoE recognition rules of the user for traces of other tools (as
  // `moetrace report --moe-rules FILE`).
  if (const char* rules = std::getenv("MOETRACE_MOE_RULES"); rules && *rules) ro.load.moe_rules = rules;
  // Loading is most of the time; model building the rest.
  auto loading = [&](std::string_view stage, double f) {
    if (progress) progress(stage, 0.85 * f);
  };
  ro.load.progress = loading;  // one file
  ro.progress = loading;       // several: files done
  out->trace = std::make_shared<const analyzer::Trace>(analyzer::load_run(files, ro));
  if (out->trace->files)
    for (const auto& w : out->trace->files->warnings()) out->warnings.push_back(QString::fromStdString(w));
  out->load_seconds = seconds_since(t0);
  const double c1 = process_cpu_seconds();
  out->load_cpu_seconds = c1 - c0;
  const auto t1 = std::chrono::steady_clock::now();
  BuildOptions bo;
  bo.progress = [&](std::string_view stage, double f) {
    if (progress) progress(stage, 0.85 + 0.15 * f);
  };
  out->model = TimelineModel::build(out->trace, bo);
  out->model_seconds = seconds_since(t1);
  out->model_cpu_seconds = process_cpu_seconds() - c1;
  return out;
}

void TraceSession::set_model_shapes(std::shared_ptr<const analyzer::ModelSpec> model, std::int64_t tokens_per_rank) {
  model_ = std::move(model);
  tokens_per_rank_ = tokens_per_rank;
}

std::shared_ptr<const TraceAnalyses> TraceSession::analyse(const LoadedTrace& loaded,
                                                           const std::shared_ptr<const analyzer::ModelSpec>& model,
                                                           std::int64_t tokens_per_rank) {
  auto out = std::make_shared<TraceAnalyses>();
  // The queue rows (every change point of every stream's queue) beside
  // the recommendations, on every core: they ran after them, on one
  // thread (gui_bench's 10 M-event trace: 1.3 s on one thread, 0.5-0.7 s
  // on two).
  const auto queues = [&] {
    try {
      out->queues = QueueTracks::compute(*loaded.trace, 0);
    } catch (const std::exception&) {
      // The timeline keeps its other rows; the GPU queues panel says why.
    }
  };
  analyzer::RecommendOptions advice;
  advice.model = model.get();
  advice.tokens_per_rank = tokens_per_rank;
  out->results = std::make_shared<const AnalysisResults>(compute_analysis_results(*loaded.trace, queues, advice));
  if (const auto& a = out->results->analyses)
    out->breakdown = std::shared_ptr<const analyzer::Breakdown>(a, &a->breakdown);
  else
    out->breakdown_error = QString::fromStdString(out->results->error);
  out->expert_load = std::make_shared<const ExpertLoadIndex>(ExpertLoadIndex::from_trace(*loaded.trace));
  return out;
}

void TraceSession::open(const QStringList& paths) {
  const QString path = paths.join(QLatin1Char(' '));
  const std::uint64_t gen = generation_->fetch_add(1) + 1;
  loading_ = true;
  emit loading_started(path);
  QPointer<TraceSession> self(this);
  auto generation = generation_;
  // The callbacks run on the loader thread: post to the GUI thread (the
  // application object outlives any window) and check `self` there.
  auto report = [self, generation, gen](std::string_view stage, double f) {
    if (generation->load() != gen) return;
    const QString s = QString::fromUtf8(stage.data(), static_cast<qsizetype>(stage.size()));
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [self, gen, generation, s, f] {
          if (self && generation->load() == gen) emit self->progress(s, f);
        },
        Qt::QueuedConnection);
  };
  (void)QtConcurrent::run([self, generation, gen, path, paths, report] {
    std::shared_ptr<const LoadedTrace> result;
    QString error;
    try {
      result = load(paths, report);
    } catch (const std::exception& e) {
      error = message_of(path, e);
    } catch (...) {
      error = path + QStringLiteral(": unexpected failure while loading");
    }
    if (generation->load() != gen) return;
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [self, gen, result, error, path] {
          if (!self) return;
          if (result) self->deliver_loaded(gen, result, true);
          else self->deliver_failed(gen, path, error);
        },
        Qt::QueuedConnection);
  });
}

bool TraceSession::open_blocking(const QStringList& paths) {
  const QString path = paths.join(QLatin1Char(' '));
  const std::uint64_t gen = generation_->fetch_add(1) + 1;
  loading_ = true;
  emit loading_started(path);
  try {
    deliver_loaded(gen, load(paths, {}), false);
  } catch (const std::exception& e) {
    deliver_failed(gen, path, message_of(path, e));
    return false;
  }
  auto a = analyse(*current_, model_, tokens_per_rank_);
  analyses_ = a;
  emit analyses_ready(a);
  return true;
}

void TraceSession::replay(const ReplayRequest& request) {
  if (!current_) return;
  const std::uint64_t gen = generation_->load();
  const std::uint64_t rgen = replay_generation_->fetch_add(1) + 1;
  replaying_ = true;
  emit replay_started();
  QPointer<TraceSession> self(this);
  auto generation = generation_;
  auto replay_generation = replay_generation_;
  auto model = current_->model;
  (void)QtConcurrent::run([self, generation, replay_generation, gen, rgen, model, request] {
    auto r = std::make_shared<const ReplayResults>(compute_replay(model, request));
    if (generation->load() != gen || replay_generation->load() != rgen) return;
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [self, generation, replay_generation, gen, rgen, r] {
          if (!self || generation->load() != gen || replay_generation->load() != rgen) return;
          self->replaying_ = false;
          emit self->replay_ready(r);
        },
        Qt::QueuedConnection);
  });
}

std::shared_ptr<const ReplayResults> TraceSession::replay_blocking(const ReplayRequest& request) {
  if (!current_) return nullptr;
  replay_generation_->fetch_add(1);  // drops a replay still running
  emit replay_started();
  auto r = std::make_shared<const ReplayResults>(compute_replay(current_->model, request));
  replaying_ = false;
  emit replay_ready(r);
  return r;
}

void TraceSession::deliver_loaded(std::uint64_t gen, std::shared_ptr<const LoadedTrace> t, bool analyse_async) {
  if (generation_->load() != gen) return;
  loading_ = false;
  current_ = std::move(t);
  analyses_.reset();
  replay_generation_->fetch_add(1);  // a replay of the previous trace is dropped
  replaying_ = false;
  emit loaded(current_);
  if (analyse_async) start_analyses(gen);
}

void TraceSession::deliver_failed(std::uint64_t gen, const QString& path, const QString& message) {
  if (generation_->load() != gen) return;
  loading_ = false;
  emit failed(path, message);
}

void TraceSession::start_analyses(std::uint64_t gen) {
  QPointer<TraceSession> self(this);
  auto generation = generation_;
  auto loaded = current_;
  (void)QtConcurrent::run([self, generation, gen, loaded, model = model_, tokens = tokens_per_rank_] {
    auto a = analyse(*loaded, model, tokens);
    if (generation->load() != gen) return;
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [self, gen, generation, a] {
          if (!self || generation->load() != gen) return;
          self->analyses_ = a;
          emit self->analyses_ready(a);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace moetrace::gui
