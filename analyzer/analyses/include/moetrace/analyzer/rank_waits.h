// Waiting at collectives and the ranks that hold up each MoE layer.
//
// An all-to-all or all-reduce cannot finish before its slowest participant
// joins it. For each collective instance (clock_align.h's collective_calls,
// on clocks aligned across hosts where the run came from several files) a
// rank is ready when its dependencies on that rank have ended (else at the
// collective's start); the instance waits for the last ready rank:
//   wait_r     = last_ready - ready_r              (time rank r waits)
//   held_up    = last_ready - second-last ready    (charged to the last rank)
// Per MoE layer, the rank charged the most held-up time is the one that
// holds the layer up: the critical path of the layer runs through it.
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct RankWait {
  std::int32_t rank = 0;
  std::int64_t instances = 0;    // collective instances it took part in
  std::int64_t wait_ns = 0;      // summed waits for slower participants
  std::int64_t last = 0;         // instances at which it was the last ready
  std::int64_t held_up_ns = 0;   // summed delay it alone caused
};

struct LayerWaits {
  std::int32_t layer = -1;       // -1: collectives outside MoE layers
  std::int64_t instances = 0;    // collective instances with 2+ participants
  std::int64_t wait_ns = 0;      // over every rank
  std::int32_t holding_rank = -1;  // most held-up time; -1: nobody late
  std::int64_t holding_ns = 0;
  std::int64_t holding_last = 0;   // instances at which it was last
  std::vector<RankWait> ranks;   // sorted by rank
};

struct RankWaitAnalysis {
  bool has_collectives = false;  // some instance had 2+ participants
  std::vector<LayerWaits> layers;  // sorted by layer (-1 first)
  std::vector<RankWait> ranks;     // over all layers, sorted by rank
};

RankWaitAnalysis compute_rank_waits(const Trace& trace);
// The same from the calls of every rank (collective_calls() of each file of
// a run, joined and sorted by (key, rank)).
RankWaitAnalysis compute_rank_waits(const std::vector<CollectiveCall>& calls);

}  // namespace moetrace::analyzer
