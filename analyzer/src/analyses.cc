#include "moetrace/analyzer/analyses.h"

namespace moetrace::analyzer {

Analyses analyze(const Trace& trace,
                 const std::function<void(std::string_view stage, double fraction)>& progress,
                 const BreakdownOptions& breakdown) {
  auto step = [&](std::string_view stage, double f) {
    if (progress) progress(stage, f);
  };
  Analyses a;
  step("breakdown", 0.0);
  a.breakdown = compute_breakdown(trace, breakdown);
  step("memory", 0.4);
  a.memory = analyze_memory(trace);
  step("expert load", 0.55);
  a.expert_load = analyze_expert_load(trace, a.breakdown);
  step("locality", 0.6);
  a.locality = analyze_locality(trace);
  step("fitting models", 0.65);
  a.cost_model = fit_cost_model(trace);
  step("nvtx ranges", 0.9);
  a.nvtx = analyze_nvtx(trace);
  step("launch queues", 0.92);
  LaunchQueueOptions launch_queue;
  launch_queue.window = breakdown.rank_window;
  a.launch_queue = analyze_launch_queue(trace, launch_queue);
  step("critical path", 0.93);
  a.critical_path = critical_paths(trace);
  if (trace.rank_ids().size() > 1) {
    step("critical path across ranks", 0.94);
    a.critical_path_across_ranks = critical_path_across_ranks(trace);
    step("collective waits", 0.95);
    a.rank_waits = compute_rank_waits(trace);
  }
  step("done", 1.0);
  return a;
}

}  // namespace moetrace::analyzer
