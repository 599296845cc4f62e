#include "moetrace/analyzer/analyses.h"

#include <utility>
#include <vector>

#include "parallel.h"

namespace moetrace::analyzer {

Analyses analyze(const Trace& trace,
                 const std::function<void(std::string_view stage, double fraction)>& progress,
                 const BreakdownOptions& breakdown, int threads) {
  Analyses a;
  const bool several_ranks = trace.rank_ids().size() > 1;
  // Longest first (measured on 128 imported PyTorch-profiler ranks: the
  // path across ranks 2.3 s, the ranks' paths 1.6 s, NVTX 0.8 s, the rest
  // 0.2-0.3 s each), so that the last to start are short.
  std::vector<std::pair<std::string_view, std::function<void()>>> work;
  if (several_ranks)
    work.emplace_back("critical path across ranks",
                      [&] { a.critical_path_across_ranks = critical_path_across_ranks(trace); });
  work.emplace_back("critical path", [&] {
    CriticalPathOptions o;
    o.threads = threads;
    a.critical_path = critical_paths(trace, o);
  });
  work.emplace_back("nvtx ranges", [&] { a.nvtx = analyze_nvtx(trace); });
  work.emplace_back("launch queues", [&] {
    LaunchQueueOptions launch_queue;
    launch_queue.window = breakdown.rank_window;
    a.launch_queue = analyze_launch_queue(trace, launch_queue);
  });
  work.emplace_back("fitting models", [&] { a.cost_model = fit_cost_model(trace); });
  work.emplace_back("breakdown", [&] {
    a.breakdown = compute_breakdown(trace, breakdown);
    a.expert_load = analyze_expert_load(trace, a.breakdown);
  });
  work.emplace_back("memory", [&] { a.memory = analyze_memory(trace); });
  work.emplace_back("locality", [&] { a.locality = analyze_locality(trace); });
  if (several_ranks) work.emplace_back("collective waits", [&] { a.rank_waits = compute_rank_waits(trace); });

  if (progress) progress("analysing", 0.0);
  std::size_t ended = 0;
  detail::parallel_for(
      work.size(), threads, [&](std::size_t i) { work[i].second(); },
      [&](std::size_t i) {
        ++ended;
        if (progress) progress(work[i].first, static_cast<double>(ended) / static_cast<double>(work.size()));
      });
  return a;
}

}  // namespace moetrace::analyzer
