// Clock alignment across the ranks of a run recorded on several hosts.
//
// Participants of an all-to-all or an all-reduce leave it nearly together
// (nobody finishes before the last one has sent), whatever their clocks say.
// Each collective instance is identified on every rank by, first that holds:
// - its MoE coordinates (op kind, layer, iteration, micro-batch, chunk,
//   phase, and its occurrence among equals) where the trace has op ranges;
// - its process group and sequence number, where the trace records them
//   (Kineto's "Process Group Name" and "Seq" of the NCCL call);
// - else its group (recorded ranks or process group), collective name and
//   element count, and its order among the rank's calls of that key; a
//   kernel without a collectives row by its kernel name and order.
// For every rank r the differences
//   d_k = end_r(k) - end_ref(k)
// against the reference rank (the lowest) are fitted by least squares as
//   d = offset + drift * (t_ref - t0)
// with outliers (stragglers, an uneven all-to-allv's early finishers,
// mis-paired calls) rejected beyond 4 robust standard deviations of the
// median. The drift is kept where it is significant (|drift| > 2 standard
// errors, at least 3 collectives). The rank's correction is applied only
// when the pairing is consistent (RankClock::refused says why not):
// - at least kMinClockCollectives instances kept, and more than half of
//   those matched (else the matched instances do not tell one story): with
//   two, one straggler among them cannot be told from the offset;
// - the kept residuals' spread (their RMS about the fit) at most
//   kMaxClockSpreadNs: the spread, unlike the standard error, does not
//   shrink with the count of instances;
// - where instances are paired by order, pairing each with the next (or
//   previous) one of its key must not fit as well with another offset:
//   periodic collectives paired one off fit with a small spread too, and the
//   two offsets cannot be told apart;
// - the correction (its largest value over the instances fitted) at least
//   its own uncertainty (standard error): a smaller one is consistent with
//   no offset at all, and applying it would move the rank by noise. (On two
//   sampled ranks of HTA's test data, +24 us from 4 of 7 instances has an
//   uncertainty of 111 us: not applied.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// One rank's part in one collective instance.
struct CollectiveCall {
  std::uint64_t key = 0;  // the same on every rank for one instance
  std::int32_t rank = 0, layer = -1, iteration = -1;
  OpKind kind = OpKind::kOtherOp;  // the op's kind; kOtherOp for a kernel without op range
  // How `key` identifies the instance; for kOrder, `base` is the key
  // without the order and `order` the call's place among its rank's calls
  // of that base.
  enum class Pairing : std::uint8_t { kCoordinates, kSequence, kOrder } pairing = Pairing::kCoordinates;
  std::uint64_t base = 0;
  std::int64_t order = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  // When the rank was ready for it: the latest end of its dependencies on
  // the same rank (op deps) where that is before its start, else its start.
  std::int64_t ready_ns = 0;
  // What the call is in the trace: its op range (index into Trace::ops;
  // -1 where paired by kernel) or its NCCL kernel (index into
  // Trace::activities; -1 where paired by op range).
  std::int32_t op = -1;
  std::int64_t activity = -1;
};

// Every all-to-all and all-reduce of the trace (op ranges; NCCL kernels
// where the trace has no op ranges, with their collectives row where the
// trace has one), sorted by (key, rank).
std::vector<CollectiveCall> collective_calls(const Trace& trace);

inline constexpr double kMaxClockSpreadNs = 500e3;
inline constexpr int kMinClockCollectives = 3;

struct RankClock {
  std::int32_t rank = 0;
  bool estimated = false;      // false: no collective shared with the reference (not corrected)
  int collectives = 0;         // matched instances the fit used
  int rejected = 0;            // matched instances left out as outliers
  double offset_ns = 0;        // rank clock - reference clock at t0
  double drift_ppm = 0;        // rank clock rate - reference rate, parts per million
  double uncertainty_ns = -1;  // standard error of the correction; -1: unknown (one instance)
  double spread_ns = -1;       // RMS of the kept residuals about the fit; -1: unknown (one instance)
  std::string pairing;         // "coordinates", "sequence", "order", or a mix ("sequence+order")
  std::string refused;         // why the offset is not applied (one line); empty: consistent
  // Estimated and consistent enough to correct the rank's times with.
  bool usable() const { return estimated && refused.empty(); }
};

struct ClockAlignment {
  std::int32_t reference_rank = -1;
  std::int64_t t0_ns = 0;       // reference time the offsets are given at
  bool applied = false;         // the trace's times were corrected
  std::vector<RankClock> ranks; // sorted by rank
};

// Estimates every rank's clock against the reference rank.
ClockAlignment estimate_clock_alignment(const Trace& trace);
// The same from the calls of every rank (collective_calls() of each file of
// a run, joined and sorted by (key, rank)), the run's ranks (sorted) and its
// start (the reference time where the reference rank has no call).
ClockAlignment estimate_clock_alignment(const std::vector<CollectiveCall>& calls, const std::vector<RankId>& ranks,
                                        std::int64_t run_start_ns);

// Moves every timestamp of each usable() rank onto the reference clock
// (activities, ops, API calls, NVTX ranges, memory events, buffers,
// collectives) and marks `a` applied. Track orders are kept (the correction
// is monotonic within a rank).
void apply_clock_alignment(Trace& trace, ClockAlignment& a);
// The same for calls (collective_calls()): their start, end and ready times.
void apply_clock_alignment(std::vector<CollectiveCall>& calls, const ClockAlignment& a);

}  // namespace moetrace::analyzer
