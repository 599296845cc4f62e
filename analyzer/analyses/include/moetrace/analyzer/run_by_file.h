// A run of many rank files analysed one file at a time: memory bounded by
// the few files read at once and by what each rank adds to the report, not
// by the run's events. `report` reads a run this way where its traces would
// not fit in memory together (load_run() merges every rank's events into one
// Trace first).
//
// Two passes over the files, `threads` files at a time:
// 1. Each file is loaded and checked to be of the run (as load_run() does),
//    and what crosses ranks is kept: its collective calls
//    (clock_align.h's collective_calls), its streams, devices, ranks and
//    buffers (for the ids of the union), its layers, expert load and
//    placement tables and its import statistics. The ranks' clocks are
//    estimated from the calls of every rank, and the collective waits
//    computed from them.
// 2. Each file is loaded again, its ranks' clocks aligned and the run's
//    information (start, end, world size) set as the union's, and
//    analyze_file_part() run on it; its stream and buffer ids are renamed
//    as in the union, and the trace freed.
// The parts' analyses are merged (merge_breakdowns, merge_memory,
// merge_launch_queues, merge_nvtx, the ranks' critical paths and
// unclassified kernels joined, merge_efficiency of the parts' rows beside
// collective_efficiency of every rank's calls, computed after pass 1 so
// that the calls go before pass 2; the kernel sequences are the one rank's
// whose file holds it), the models fitted from every part's op
// samples (merge_cost_samples; one per op, so only up to kMaxCostSamples
// ops in all: beyond, the fits are not computed and the report says why),
// and the expert load and locality computed
// from the union's tables. Every result equals analyze() of load_run()'s
// merged trace, but for what needs every rank's events at once, which is
// not computed: the critical path across ranks (one graph of every rank's
// events) and the recommendations (their workloads read the ops and
// recorded shapes). RunFiles::by_file says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/run_loader.h"

namespace moetrace::analyzer {

// The most op samples (cost_model.h's CostSamples::Op, 64 bytes, and about
// as much again while fitting) a run read file by file keeps for its fits:
// about 150 MB.
inline constexpr std::size_t kMaxCostSamples = std::size_t{1} << 20;

struct RunAnalysis {
  // The run without its events: run information, files (by_file set),
  // devices, ranks, streams, buffers, layers, expert load and placement,
  // the import statistics; what the report reads beside the analyses.
  Trace trace;
  Analyses analyses;
};

// Throws moetrace::Error as load_run() does; also where a file changed
// between the two passes.
// The kernel sequences follow `sequences` (its window set to the
// breakdown's), on the rank it names: found in the file that holds it.
RunAnalysis analyze_run_by_file(const std::vector<std::string>& paths, const RunLoadOptions& options = {},
                                const BreakdownOptions& breakdown = {},
                                std::size_t max_cost_samples = kMaxCostSamples,
                                KernelSequenceOptions sequences = {});

// What `info` shows of a run: pass 1 alone, so in the memory of the few
// files read at once. The trace is the run without its events (as
// RunAnalysis::trace, with Trace::files: the files, ranks left out or
// missing, and the ranks' clocks, estimated from every rank's collectives;
// `applied` where options.align, as load_run() would apply them); events
// counts the events its files hold. One file: load_run() of it.
struct RunOverview {
  Trace trace;
  std::int64_t events = 0;
};
RunOverview overview_run(const std::vector<std::string>& paths, const RunLoadOptions& options = {});

// Memory (peak resident bytes) that load_run(), analyze() and the
// recommendations of the files would take together, estimated from what
// the files hold, not from the machine (run_memory_estimate.cc):
// - a moetrace trace (.db): its rows, from the writer's integrity record
//   (count(*) per table where it has none): kMergedBytesPerEventRow for each
//   row of the event tables (kernels, copies, memsets, API calls, NVTX and
//   autograd ranges, op ranges and their received bytes, memory events,
//   buffers, collectives, input shapes), kMergedBytesPerLoadRow for each
//   expert-load and placement row, kMergedBytesPerRank for each rank;
// - a PyTorch-profiler file (.json, .json.gz): its JSON (a gzipped file's
//   content, from its gzip trailer) x kMergedBytesPerJsonByte, its rows
//   being unknown until it is parsed;
// - another file (an Nsight Systems export): its size x
//   kMergedBytesPerFileByte;
// plus kMergedBaseBytes for the process. The constants are measured: the
// peak RSS of `report --merged` (recommendations included) on six runs of 2
// to 1024 rank files (BENCHMARKS.md, "Memory of a run read together"), the
// base that of the smallest (16 MB, two imported ranks), the others a least
// squares fit of the relative error; the estimate was 0.66-1.17 of the
// measured peak on them, and a test holds it within 2x on two more.
inline constexpr double kMergedBaseBytes = 12.5e6;
inline constexpr double kMergedBytesPerEventRow = 280;
inline constexpr double kMergedBytesPerLoadRow = 250;
inline constexpr double kMergedBytesPerRank = 64e3;
// The JSON of PyTorch-profiler files read into memory: measured at 0.91 on
// 32 rank files of 17 MB (`report --merged`, 2026-12-02) and 0.98 on one
// file of 1.08 GB (BENCHMARKS.md).
inline constexpr double kMergedBytesPerJsonByte = 1.0;
// Nsight Systems exports: their SQLite size (BENCHMARKS.md, 4.46 on 128
// imported PyTorch-profiler ranks and 4.97 on 1024, of the traces' size).
inline constexpr double kMergedBytesPerFileByte = 5.0;
std::int64_t estimated_merged_bytes(const std::vector<std::string>& paths);

// What `report` reads together by default: runs estimated at up to this
// many bytes; larger runs are read one file at a time (analyze_run_by_file).
// A fixed bound, not the memory free at the moment, so that the same files
// always give a report with the same sections.
inline constexpr std::int64_t kMergedMemoryBudgetBytes = std::int64_t{2} << 30;

}  // namespace moetrace::analyzer
