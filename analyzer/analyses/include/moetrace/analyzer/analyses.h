// Every analysis of a trace, run once and shared by the reports, `diff` and
// the GUI. Each member is a plain struct documented in its own header.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/critical_path.h"
#include "moetrace/analyzer/efficiency.h"
#include "moetrace/analyzer/expert_load.h"
#include "moetrace/analyzer/kernel_sequences.h"
#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/locality.h"
#include "moetrace/analyzer/memory.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/nvtx_projection.h"
#include "moetrace/analyzer/rank_waits.h"
#include "moetrace/analyzer/recommendations.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct Analyses {
  Breakdown breakdown;             // breakdown.h (GPU time after the projection, projection.h)
  MemoryAnalysis memory;           // memory.h
  ExpertLoadAnalysis expert_load;  // expert_load.h
  LocalityAnalysis locality;       // locality.h
  CostModel cost_model;            // cost_model.h
  NvtxAnalysis nvtx;               // nvtx_projection.h (NVTX ranges from outside moetrace)
  RankWaitAnalysis rank_waits;     // rank_waits.h (runs of several ranks)
  LaunchQueueAnalysis launch_queue;  // launch_queue.h (HTA: idle time, queue length, kernel launches)
  EfficiencyAnalysis efficiency;   // efficiency.h (TFLOP/s, bandwidths and collective waits against datasheet peaks)
  // kernel_sequences.h (HTA's frequent CUDA kernel sequences): analyze()
  // takes KernelSequenceOptions' defaults in the breakdown's window; `report
  // --kernel-sequences-*` asks for others.
  KernelSequenceAnalysis kernel_sequences;
  std::vector<RankCriticalPath> critical_path;  // critical_path.h (HTA's critical path, per rank)
  // The window of critical_path where not the whole trace: "ProfilerStep#N
  // instance I" (report --critical-path-step); empty: the whole trace.
  std::string critical_path_window;
  // critical_path.h: one path over every rank, joined at collectives (runs
  // of several ranks only).
  std::optional<CrossRankCriticalPath> critical_path_across_ranks;
  // moe_recognition.h: where MoE recognition ran, the largest kernels no
  // rule classifies (at most kUnclassifiedKernelsShown).
  std::vector<UnclassifiedKernel> unclassified_kernels;
  // Why the critical path across ranks and the recommendations are absent
  // where the run's files were analysed one at a time (run_by_file.h);
  // empty otherwise.
  std::string not_computed_reason;
  // Why the fitted models are absent where the files were analysed one at a
  // time: their ops were too many to keep every op's sample (run_by_file.h's
  // kMaxCostSamples); empty otherwise.
  std::string fits_not_computed_reason;
  // recommendations.h; set by add_recommendations (recommend.h, the target
  // moetrace::recommend: it simulates what-ifs, so analyze() leaves it out);
  // the report's recommendations section.
  std::optional<Recommendations> recommendations;
};

// Runs them all. They are independent of each other (the expert load reads
// the breakdown), so they run side by side on `threads` threads (0: the
// machine's cores; 1: one after the other on the calling thread); the
// results do not depend on the number. `progress(stage, fraction)` is
// called on the calling thread as each analysis ends (stage: its name).
Analyses analyze(const Trace& trace,
                 const std::function<void(std::string_view stage, double fraction)>& progress = {},
                 const BreakdownOptions& breakdown = {}, int threads = 0);

// While one lives on a thread, the analyses that thread starts run their
// worker threads at a lower scheduling priority (Linux: nice + 10), so that
// an interactive front end's own threads (drawing, panning) come first and
// the analyses take every core the front end leaves idle. The results are
// the same; only the threads' priority changes.
class BackgroundAnalyses {
 public:
  BackgroundAnalyses();
  ~BackgroundAnalyses();
  BackgroundAnalyses(const BackgroundAnalyses&) = delete;
  BackgroundAnalyses& operator=(const BackgroundAnalyses&) = delete;

 private:
  bool previous_;
};

inline constexpr std::size_t kUnclassifiedKernelsShown = 10;

// What one file of a run contributes where the files are analysed one at a
// time (run_by_file.h): the analyses of its ranks alone (breakdown without
// expert load, memory, launch queues, NVTX, the ranks' critical paths, every
// unclassified kernel) and the samples the fitted models take from it; none
// that needs every rank at once (collective waits, the path across ranks,
// the fits, expert load, locality), nor efficiency and the kernel sequences,
// which analyze_run_by_file computes on the part with what it knows of the
// other ranks.
struct FilePart {
  Analyses analyses;
  CostSamples cost_samples;
};
FilePart analyze_file_part(const Trace& trace, const BreakdownOptions& breakdown = {}, int threads = 0);

}  // namespace moetrace::analyzer
