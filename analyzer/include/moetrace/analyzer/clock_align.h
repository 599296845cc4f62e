// Clock alignment across the ranks of a run recorded on several hosts.
//
// Participants of an all-to-all or an all-reduce leave it nearly together
// (nobody finishes before the last one has sent), whatever their clocks say.
// Each collective instance is identified on every rank by its MoE
// coordinates (op kind, layer, iteration, micro-batch, chunk, phase, and its
// occurrence among equals), or, in a trace without op ranges, by its NCCL
// kernel name and occurrence. For every rank r the differences
//   d_k = end_r(k) - end_ref(k)
// against the reference rank (the lowest) are fitted by least squares as
//   d = offset + drift * (t_ref - t0)
// with outliers (collectives of sub-groups, stragglers) rejected beyond
// 4 robust standard deviations. The drift is kept where it is significant
// (|drift| > 2 standard errors, at least 3 collectives); the uncertainty is
// the standard error of the fitted correction at the ends of the run. A rank
// whose collectives disagree (uncertainty above kMaxClockUncertaintyNs:
// they were not the same instances, or no instance lets its participants
// leave together) is left on its own clock.
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// One rank's part in one collective instance.
struct CollectiveCall {
  std::uint64_t key = 0;  // the same on every rank for one instance
  std::int32_t rank = 0, layer = -1, iteration = -1;
  OpKind kind = OpKind::kOtherOp;  // the op's kind; kOtherOp for a kernel without op range
  std::int64_t start_ns = 0, end_ns = 0;
  // When the rank was ready for it: the latest end of its dependencies on
  // the same rank (op deps) where that is before its start, else its start.
  std::int64_t ready_ns = 0;
};

// Every all-to-all and all-reduce of the trace (op ranges; NCCL kernels by
// name where the trace has no op ranges), sorted by (key, rank).
std::vector<CollectiveCall> collective_calls(const Trace& trace);

inline constexpr double kMaxClockUncertaintyNs = 100e3;

struct RankClock {
  std::int32_t rank = 0;
  bool estimated = false;      // false: no collective shared with the reference (not corrected)
  int collectives = 0;         // matched instances the fit used
  int rejected = 0;            // matched instances left out as outliers
  double offset_ns = 0;        // rank clock - reference clock at t0
  double drift_ppm = 0;        // rank clock rate - reference rate, parts per million
  double uncertainty_ns = -1;  // standard error of the correction; -1: unknown (one instance)
  // Estimated and consistent enough to correct the rank's times with.
  bool usable() const { return estimated && uncertainty_ns <= kMaxClockUncertaintyNs; }
};

struct ClockAlignment {
  std::int32_t reference_rank = -1;
  std::int64_t t0_ns = 0;       // reference time the offsets are given at
  bool applied = false;         // the trace's times were corrected
  std::vector<RankClock> ranks; // sorted by rank
};

// Estimates every rank's clock against the reference rank.
ClockAlignment estimate_clock_alignment(const Trace& trace);

// Moves every timestamp of each usable() rank onto the reference clock
// (activities, ops, API calls, NVTX ranges, memory events, buffers,
// collectives) and marks `a` applied. Track orders are kept (the correction
// is monotonic within a rank).
void apply_clock_alignment(Trace& trace, ClockAlignment& a);

}  // namespace moetrace::analyzer
