#include "moetrace/analyzer/analyses.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "parallel.h"

namespace moetrace::analyzer {

namespace {

enum class Scope { kWhole, kFilePart };

Analyses run_analyses(const Trace& trace, const std::function<void(std::string_view stage, double fraction)>& progress,
                      const BreakdownOptions& breakdown, int threads, Scope scope, CostSamples* samples = nullptr) {
  Analyses a;
  const bool whole = scope == Scope::kWhole;
  const bool several_ranks = whole && trace.rank_ids().size() > 1;
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
  if (whole) work.emplace_back("fitting models", [&] { a.cost_model = fit_cost_model(trace); });
  else if (samples) work.emplace_back("sampling ops for the fits", [&] { *samples = cost_samples(trace); });
  work.emplace_back("breakdown", [&] {
    a.breakdown = compute_breakdown(trace, breakdown);
    if (whole) a.expert_load = analyze_expert_load(trace, a.breakdown);
  });
  work.emplace_back("memory", [&] { a.memory = analyze_memory(trace); });
  if (whole) work.emplace_back("locality", [&] { a.locality = analyze_locality(trace); });
  if (whole) work.emplace_back("efficiency", [&] { a.efficiency = analyze_efficiency(trace); });
  if (whole)
    work.emplace_back("kernel sequences", [&] {
      KernelSequenceOptions o;
      o.window = breakdown.rank_window;
      a.kernel_sequences = frequent_kernel_sequences(trace, o);
    });
  if (several_ranks) work.emplace_back("collective waits", [&] { a.rank_waits = compute_rank_waits(trace); });
  if (trace.recognition.ran)
    work.emplace_back("unclassified kernels", [&] {
      a.unclassified_kernels = largest_unclassified_kernels(trace, whole ? kUnclassifiedKernelsShown : SIZE_MAX);
    });

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

}  // namespace moetrace::analyzer
