// A counter drawn as a step function (memory in use on a rank: the
// analyzer's memory timeline, memory.h), with a min/max pyramid so a
// zoomed-out frame reads one bucket per pixel column instead of every sample.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/memory.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/time_axis.h"

namespace moetrace::gui {

using CounterSample = analyzer::MemoryPoint;  // bytes hold from ts_ns until the next point

struct CounterBucket {
  std::int64_t t_first = 0;           // time of its first sample
  std::int64_t min = 0, max = 0, last = 0;
};

// One column run of a drawn counter: over [x0, x1) the value ranged over [lo, hi].
struct CounterColumn {
  float x0 = 0, x1 = 0;
  std::int64_t lo = 0, hi = 0;
};

class CounterTrack {
 public:
  CounterTrack() = default;
  CounterTrack(RankId rank, std::string name, std::vector<CounterSample> samples);

  RankId rank() const { return rank_; }
  const std::string& name() const { return name_; }
  std::span<const CounterSample> samples() const { return samples_; }
  std::int64_t max_value() const { return max_; }
  // The value in force at time t (0 before the first sample).
  std::int64_t value_at(std::int64_t t_ns) const;
  // Column runs across the axis; equal neighbouring columns are merged.
  std::vector<CounterColumn> columns(const TimeAxis& axis) const;
  std::size_t memory_bytes() const;

 private:
  struct Level {
    std::int64_t bucket_ns = 0;
    std::vector<CounterBucket> buckets;
  };
  void build_levels();
  RankId rank_;
  std::string name_;
  std::vector<CounterSample> samples_;
  std::vector<Level> levels_;  // bucket_ns increasing; each at most half the previous
  std::int64_t max_ = 0;
};

// Memory in use per rank: analyzer::memory_timeline (its rule for
// allocations, frees and device memory). Ranks with no memory information
// get no track.
std::vector<CounterTrack> memory_counters(const analyzer::Trace& trace);

// Queue length per GPU stream, drawn under the stream's kernels (RowKind::
// kQueue): the analyzer's series (analyzer::queue_lengths, launch_queue.h,
// Holistic Trace Analysis's definition: +1 when a launch call of a kernel,
// memcpy or memset starts, -1 when that GPU event starts), with every change
// point, not the bounded series of Analyses::launch_queue, so that a
// zoomed-in view is exact. Points at one time keep the last value only: a
// length that holds for no time is never in force. Computed after the
// analyses, beside the recommendations (compute_analysis_results), from
// analyzer::for_each_queue_series, and only read afterwards.
class QueueTracks {
 public:
  // On `threads` threads (0: the machine's cores).
  static std::shared_ptr<const QueueTracks> compute(const analyzer::Trace& trace, int threads = 1);
  // The track of stream `stream` (index into Trace::streams), or null: the
  // stream launched nothing through HTA's launch calls.
  const CounterTrack* for_stream(std::int32_t stream) const;
  std::span<const CounterTrack> tracks() const { return tracks_; }
  bool empty() const { return tracks_.empty(); }
  std::size_t memory_bytes() const;

 private:
  std::vector<CounterTrack> tracks_;
  std::vector<std::int32_t> by_stream_;  // stream index -> index into tracks_, -1: none
};

}  // namespace moetrace::gui
