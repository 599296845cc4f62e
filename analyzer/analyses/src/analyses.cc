#include "moetrace/analyzer/analyses.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "moetrace/analyzer/heap.h"
#include "parallel.h"

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace moetrace::analyzer {

namespace {

enum class Scope { kWhole, kFilePart };

// The trace's collective_calls(), read by several analyses that may run side
// by side: found once, by the first reader to run, and freed when the last
// reader is done with them.
class SharedCollectiveCalls {
 public:
  explicit SharedCollectiveCalls(const Trace& trace) : trace_(trace) {}
  // A piece of work that calls f(calls, done_reading); counted as a reader
  // here, when the work is listed, so every reader is counted before any
  // runs. It is done reading when it returns, or earlier where it calls
  // done_reading().
  template <class F>
  std::function<void()> reader(F f) {
    ++readers_;
    return [this, f = std::move(f)] {
      bool read = false;
      const std::function<void()> done_reading = [&] {
        if (read) return;
        read = true;
        if (readers_.fetch_sub(1) == 1) std::vector<CollectiveCall>().swap(calls_);
      };
      struct Done {
        const std::function<void()>& done;
        ~Done() { done(); }
      } at_return{done_reading};
      std::call_once(once_, [&] { calls_ = collective_calls(trace_); });
      f(calls_, done_reading);
    };
  }

 private:
  const Trace& trace_;
  std::atomic<int> readers_{0};
  std::once_flag once_;
  std::vector<CollectiveCall> calls_;
};

Analyses run_analyses(const Trace& trace, const std::function<void(std::string_view stage, double fraction)>& progress,
                      const BreakdownOptions& breakdown, int threads, Scope scope, CostSamples* samples = nullptr) {
  Analyses a;
  const bool whole = scope == Scope::kWhole;
  const bool several_ranks = whole && trace.rank_ids().size() > 1;
  // Longest first (measured on 128 imported PyTorch-profiler ranks: the
  // path across ranks 2.3 s, the ranks' paths 1.6 s, NVTX 0.8 s, the rest
  // 0.2-0.3 s each; the two paths are now one graph), so that the last to
  // start are short. After the critical paths, the fits (the most memory
  // while they run: gui_bench --stages on a 10 M-event trace, 218 MiB),
  // then the collective calls' other readers, efficiency (80 MiB) and the
  // collective waits (short), so that the calls (74 MiB; the critical path
  // copies what it reads of them first) are given back before the graph
  // grows, then the breakdown (125 MiB), the rest 45 MiB or less: on few
  // threads they run beside the critical path's graph while it is still
  // being built, not beside its search, when it is largest.
  std::vector<std::pair<std::string_view, std::function<void()>>> work;
  // Read by the path across ranks, efficiency and the collective waits.
  SharedCollectiveCalls calls(trace);
  if (several_ranks) {
    // Each rank's path and the one across ranks from one graph.
    // The calls given back once the graph has copied what it reads of them:
    // on two threads or more the other readers (listed right after the
    // fits) are done with them soon after, and the graph is built and
    // searched without them (74 MiB on a 10 M-event trace).
    work.emplace_back("critical paths", calls.reader([&](const std::vector<CollectiveCall>& c,
                                                         const std::function<void()>& done_reading) {
      auto paths = critical_paths_and_across(trace, c, 20, threads, done_reading);
      a.critical_path = std::move(paths.ranks);
      a.critical_path_across_ranks = std::move(paths.across);
    }));
  } else {
    work.emplace_back("critical path", [&] {
      CriticalPathOptions o;
      o.threads = threads;
      a.critical_path = critical_paths(trace, o);
    });
  }
  if (whole) work.emplace_back("fitting models", [&] { a.cost_model = fit_cost_model(trace); });
  else if (samples) work.emplace_back("sampling ops for the fits", [&] { *samples = cost_samples(trace); });
  if (whole)
    work.emplace_back("efficiency", calls.reader([&](const std::vector<CollectiveCall>& c, const auto&) {
      a.efficiency = analyze_efficiency(trace, c);
    }));
  if (several_ranks)
    work.emplace_back("collective waits", calls.reader([&](const std::vector<CollectiveCall>& c, const auto&) {
      a.rank_waits = compute_rank_waits(c);
    }));
  work.emplace_back("breakdown", [&] {
    a.breakdown = compute_breakdown(trace, breakdown);
    if (whole) a.expert_load = analyze_expert_load(trace, a.breakdown);
  });
  work.emplace_back("nvtx ranges", [&] { a.nvtx = analyze_nvtx(trace); });
  work.emplace_back("launch queues", [&] {
    LaunchQueueOptions launch_queue;
    launch_queue.window = breakdown.rank_window;
    a.launch_queue = analyze_launch_queue(trace, launch_queue);
  });
  work.emplace_back("memory", [&] { a.memory = analyze_memory(trace); });
  if (whole) work.emplace_back("locality", [&] { a.locality = analyze_locality(trace); });
  if (whole)
    work.emplace_back("kernel sequences", [&] {
      KernelSequenceOptions o;
      o.window = breakdown.rank_window;
      a.kernel_sequences = frequent_kernel_sequences(trace, o);
    });
  if (trace.recognition.ran)
    work.emplace_back("unclassified kernels", [&] {
      a.unclassified_kernels = largest_unclassified_kernels(trace, whole ? kUnclassifiedKernelsShown : SIZE_MAX);
    });

  if (progress) progress("analysing", 0.0);
  std::size_t ended = 0;
  detail::parallel_for(
      work.size(), threads,
      [&](std::size_t i) {
        work[i].second();
        // What the analysis freed, given back before the next one starts
        // (heap.h): its blocks under the mmap threshold stay in the heap,
        // where the critical path's large arrays, mapped apart, cannot use
        // them. 10 M-event trace, `report --threads 2`, 2 alternated pairs:
        // peak 1,638-1,672 against 1,698-1,785 MiB, each trim 5-16 ms.
        release_free_memory();
      },
      [&](std::size_t i) {
        ++ended;
        if (progress) progress(work[i].first, static_cast<double>(ended) / static_cast<double>(work.size()));
      });
  return a;
}

}  // namespace

Analyses analyze(const Trace& trace,
                 const std::function<void(std::string_view stage, double fraction)>& progress,
                 const BreakdownOptions& breakdown, int threads) {
  return run_analyses(trace, progress, breakdown, threads, Scope::kWhole);
}

FilePart analyze_file_part(const Trace& trace, const BreakdownOptions& breakdown, int threads) {
  FilePart part;
  part.analyses = run_analyses(trace, {}, breakdown, threads, Scope::kFilePart, &part.cost_samples);
  return part;
}

BackgroundAnalyses::BackgroundAnalyses() : previous_(detail::background_workers) { detail::background_workers = true; }
BackgroundAnalyses::~BackgroundAnalyses() { detail::background_workers = previous_; }

namespace detail {

void lower_thread_priority() {
#ifdef __linux__
  // Linux's nice value is each thread's own (setpriority with a thread id).
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0) (void)::setpriority(PRIO_PROCESS, tid, std::min(nice + 10, 19));
#endif
}

}  // namespace detail

}  // namespace moetrace::analyzer
