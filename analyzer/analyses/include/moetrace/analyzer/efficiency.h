// Efficiency figures per MoE layer and rank, as HTA and TraceLens users
// look for them: the expert GEMMs' achieved TFLOP/s against the GPU's dense
// peak, the all-to-alls' and all-reduces' algorithm and bus bandwidths
// against the link's peak, and the collectives' time split into waiting for
// the slowest participant and transferring.
//
//   achieved TFLOP/s = sum of the expert ops' FLOPs (OpRange::flops) / the
//                      union of their GPU activities' time (ops without
//                      FLOPs are counted apart and left out of both)
//   algbw            = bytes / the union of the collective ops' GPU time
//                      (OpRange::bytes, else recv_bytes; imported traces:
//                      the Collective record's in_nelems x dtype size)
//   busbw            = algbw x 2(n-1)/n for an all-reduce, x (n-1)/n for an
//                      all-to-all, n the group size (nccl-tests,
//                      doc/PERFORMANCE.md); summed op by op where n differs
//   % of peak        = achieved / gpu_peaks.h's dense peak for the dtype,
//                      busbw / the link's bandwidth per direction (not
//                      where ranks share one GPU)
// Ops that took no GPU time (an op range of zero length, no kernels) count
// among the ops but add no FLOPs or bytes.
// The dtype: the run config's torch_dtype / dtype / params_dtype, else the
// expert kernels' framework ops' recorded input types (the most common),
// else the run config's elem_bytes, else BF16, assumed and said so.
//
// Collectives: each instance (clock_align.h's collective_calls, paired
// across ranks) waits until its last participant is ready (rank_waits.h:
// ready = the end of its dependencies on its rank, else its start); on
// each participant, the part of its call before that moment is waiting,
// the rest transferring:
//   wait_r = clamp(last_ready - start_r, 0, duration_r), transfer_r = duration_r - wait_r
// A call no other rank's call pairs with (one rank recorded) cannot be
// split: its whole duration counts as transfer and the bucket says so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/gpu_peaks.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct RankDevice {
  std::int32_t rank = 0;
  std::string device;               // the trace's device name; empty: none recorded
  const GpuPeaks* peaks = nullptr;  // gpu_peaks.h; nullptr: not in the table
  // Another rank runs on the same GPU (its UUID, else host and device id):
  // an emulated communicator's copies within one GPU, which the link does
  // not bound: no % of link.
  bool shared = false;
};

struct GemmFigures {
  std::int64_t ops = 0;             // expert-compute ops (expert FFN, recompute)
  std::int64_t ops_with_flops = 0;  // of them, with FLOPs recorded
  double flops = -1;                // summed over ops_with_flops; -1: none recorded
  std::int64_t time_ns = 0;         // union of the GPU time of the ops with FLOPs (of all where none has)
  double achieved_tflops = -1;      // -1: no FLOPs or no time
  double peak_tflops = -1;          // -1: GPU or dtype not in the table
  double percent_of_peak = -1;      // -1: unknown
};

struct CommFigures {
  std::int64_t ops = 0;
  std::int64_t ops_with_bytes = 0;
  std::int64_t bytes = -1;          // summed over ops_with_bytes; -1: none recorded
  std::int64_t time_ns = 0;         // union of the GPU time of the ops with bytes
  std::int32_t group_size = -1;     // the largest n seen; -1: unknown
  double algbw_gbps = -1;           // GB/s (10^9 bytes); -1: unknown
  double busbw_gbps = -1;
  double link_gbps = -1;            // the GPU's link per direction; -1: not in the table
  double percent_of_link = -1;
};

struct EfficiencyRow {
  std::int32_t rank = 0;
  std::int32_t layer = -1;  // by-rank rows: -1 (every op of the rank, in MoE layers or not)
  GemmFigures expert;
  CommFigures all_to_all, all_reduce;
};

struct CollectiveBucket {
  std::string kind;                // "all_to_all" or "all_reduce"
  std::int64_t min_bytes = -1;     // the bucket [min_bytes, 2 min_bytes) of the instance's largest call; -1: size unknown
  std::int64_t instances = 0;
  std::int64_t calls = 0;          // participant calls
  std::int64_t unpaired_calls = 0; // calls of instances with one participant: wait not separated
  std::int64_t bytes = 0;          // summed over the calls with bytes
  std::int64_t wait_total_ns = 0, wait_median_ns = 0;          // over calls
  std::int64_t transfer_total_ns = 0, transfer_median_ns = 0;  // over calls
  // rank_waits.h's wait, summed over calls: last_ready - ready, the skew
  // between the participants, part of which can lie before a call started
  // (a rank that was ready but launched the call late).
  std::int64_t skew_total_ns = 0;
  std::int32_t group_size = -1;
  double busbw_gbps = -1;          // of the transfer part; -1: no bytes or no transfer time
  double percent_of_link = -1;     // where every rank's GPU is the same entry of the table
};

struct EfficiencyAnalysis {
  PeakDtype dtype = PeakDtype::kBf16;
  bool dtype_assumed = true;       // no dtype recorded: BF16 assumed
  std::string dtype_source;        // where it comes from ("run config torch_dtype=bfloat16"), or why assumed
  std::vector<RankDevice> devices;  // sorted by rank
  std::vector<std::string> unmatched_devices;  // device names not in the table (sorted, distinct)
  std::vector<EfficiencyRow> layers;  // per (rank, MoE layer), sorted
  std::vector<EfficiencyRow> ranks;   // per rank, sorted
  std::vector<CollectiveBucket> collectives;  // by kind, then size
  bool wait_separated = false;     // some instance had 2+ participants
};

// `participants`: where the trace holds some of a run's ranks (one file of
// a run analysed one at a time), each collective instance's participants
// in the whole run, by CollectiveCall::key; the rows only then, the
// collectives being the run's (collective_efficiency).
EfficiencyAnalysis analyze_efficiency(const Trace& trace,
                                      const std::unordered_map<std::uint64_t, int>* participants = nullptr);
// The same with the trace's collective_calls() given (computed once where
// several analyses read them).
EfficiencyAnalysis analyze_efficiency(const Trace& trace, const std::vector<CollectiveCall>& calls,
                                      const std::unordered_map<std::uint64_t, int>* participants = nullptr);

// Where a run's files are analysed one at a time (run_by_file.h): each
// file's analyze_efficiency() with the run's participants gives its ranks'
// rows; the collectives need every rank's calls, which the first pass over
// the files gathers, each with what its own file says of it.
struct CollectiveCallSize {
  std::string_view kind;              // "all_to_all", "all_reduce"; empty: neither
  std::int64_t bytes = -1;            // -1: not recorded
  std::int32_t recorded_group = -1;   // the collectives row's group size; -1: none
};
// Of each of `calls` (collective_calls(trace)), in their order.
std::vector<CollectiveCallSize> collective_call_sizes(const Trace& trace, const std::vector<CollectiveCall>& calls);
// The collectives' figures (EfficiencyAnalysis::collectives and
// wait_separated) of every rank's calls (sorted by key, then rank, on one
// clock) with their sizes; the link's share where every rank of `run` has a
// GPU of its own, all of one entry of the table.
void collective_efficiency(const Trace& run, const std::vector<CollectiveCall>& calls,
                           const std::vector<CollectiveCallSize>& sizes, EfficiencyAnalysis& e);
// The run's rows: the parts', their peaks from the run's devices (which
// ranks share a GPU shows only in the union), for the dtype most parts
// found; the collectives are collective_efficiency()'s.
EfficiencyAnalysis merge_efficiency(std::vector<EfficiencyAnalysis> parts, const Trace& run);

// nccl-tests' bus-bandwidth factor: 2(n-1)/n (all-reduce), (n-1)/n (all-to-all); -1 for n < 1.
double busbw_factor(std::string_view kind, int n);

}  // namespace moetrace::analyzer
