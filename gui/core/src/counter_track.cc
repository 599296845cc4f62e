#include "moetrace/gui/counter_track.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <optional>
#include <utility>

namespace moetrace::gui {

CounterTrack::CounterTrack(RankId rank, std::string name, std::vector<CounterSample> samples)
    : rank_(rank), name_(std::move(name)), samples_(std::move(samples)) {
  auto by_time = [](const CounterSample& a, const CounterSample& b) { return a.ts_ns < b.ts_ns; };
  // Series mostly come in order already (queue lengths, memory timelines).
  if (!std::is_sorted(samples_.begin(), samples_.end(), by_time))
    std::stable_sort(samples_.begin(), samples_.end(), by_time);
  for (const auto& s : samples_) max_ = std::max(max_, s.bytes);
  build_levels();
}

// Bucket pyramid: level k has buckets of 2^k ns aligned on multiples of 2^k
// (k >= 1), one per run of samples with equal floor(t / 2^k); a level is
// kept where it has at most half the buckets of the last one kept (the
// samples themselves first). Its bucket count is known before it is built:
// neighbouring samples a, b fall in different buckets of level k exactly
// when k <= the highest bit of a XOR b (floor(t / 2^k) is t >> k, an
// arithmetic shift, negative times included). So one pass counts every
// level, and only the kept levels are built, each from the one kept before
// it (its buckets group whole buckets of that one), with the room it needs.
// Building every level to keep some took 1.4 s of the queue rows of a
// 10 M-event trace (7.8 M samples, gui_bench; perf's share of them), where
// most levels of microsecond-spaced samples were built whole, grown by
// doubling, to be thrown away; this takes 0.4 s, page faults included.
void CounterTrack::build_levels() {
  const std::size_t n = samples_.size();
  if (n <= 1) return;
  constexpr int kLevels = 62;
  std::array<std::size_t, 64> split_at{};  // [d]: neighbours whose highest differing bit is d
  for (std::size_t i = 1; i < n; ++i) {
    const auto x = static_cast<std::uint64_t>(samples_[i - 1].ts_ns ^ samples_[i].ts_ns);
    if (x != 0) ++split_at[static_cast<std::size_t>(63 - std::countl_zero(x))];
  }
  std::array<std::size_t, 64> count{};  // [k]: buckets of level k (k >= 1)
  std::size_t above = 0;
  for (int k = 63; k >= 1; --k) {
    above += split_at[static_cast<std::size_t>(k)];
    count[static_cast<std::size_t>(k)] = 1 + above;
  }
  std::size_t stored = n;
  for (int k = 1; k < kLevels; ++k) {
    // The level before this one (the samples before level 1) has one
    // bucket at most: no coarser level is needed.
    if ((k == 1 ? n : count[static_cast<std::size_t>(k - 1)]) <= 1) break;
    const auto buckets = count[static_cast<std::size_t>(k)];
    if (buckets * 2 > stored) continue;
    std::vector<CounterBucket> next;
    next.reserve(buckets);
    const auto add = [&](const CounterBucket& b) {
      if (!next.empty() && (next.back().t_first >> k) == (b.t_first >> k)) {
        auto& m = next.back();
        m.min = std::min(m.min, b.min);
        m.max = std::max(m.max, b.max);
        m.last = b.last;
      } else {
        next.push_back(b);
      }
    };
    if (levels_.empty())
      for (const auto& s : samples_) add({s.ts_ns, s.bytes, s.bytes, s.bytes});
    else
      for (const auto& b : levels_.back().buckets) add(b);
    stored = buckets;
    levels_.push_back({std::int64_t{1} << k, std::move(next)});
  }
}

std::int64_t CounterTrack::value_at(std::int64_t t_ns) const { return analyzer::memory_at(samples_, t_ns); }

std::vector<CounterColumn> CounterTrack::columns(const TimeAxis& axis) const {
  std::vector<CounterColumn> out;
  if (samples_.empty() || axis.width_px <= 0) return out;
  // The coarsest buckets still no wider than a pixel; raw samples otherwise,
  // seen as one-sample buckets over the visible window only.
  const Level* level = nullptr;
  for (const auto& l : levels_)
    if (static_cast<double>(l.bucket_ns) <= axis.ns_per_px) level = &l;
  std::vector<CounterBucket> raw_view;
  std::span<const CounterBucket> items;
  if (level) {
    items = level->buckets;
  } else {
    auto lo = std::lower_bound(samples_.begin(), samples_.end(), axis.t0_ns,
                               [](const CounterSample& s, double t) { return static_cast<double>(s.ts_ns) < t; });
    if (lo != samples_.begin()) --lo;
    for (auto it = lo; it != samples_.end() && static_cast<double>(it->ts_ns) <= axis.t1_ns(); ++it)
      raw_view.push_back({it->ts_ns, it->bytes, it->bytes, it->bytes});
    items = raw_view;
  }
  auto it = std::lower_bound(items.begin(), items.end(), axis.t0_ns, [](const CounterBucket& b, double t) {
    return static_cast<double>(b.t_first) < t;
  });
  // Before the first sample nothing is allocated.
  std::int64_t carry = it == items.begin() ? 0 : std::prev(it)->last;
  auto column_of = [&](std::int64_t t) {
    const double x = std::floor(axis.x(static_cast<double>(t)));
    return x;
  };
  auto emit = [&](int c0, int c1, std::int64_t lo, std::int64_t hi) {
    if (c1 <= c0) return;
    if (!out.empty() && out.back().lo == lo && out.back().hi == hi &&
        out.back().x1 == static_cast<float>(c0)) {
      out.back().x1 = static_cast<float>(c1);
      return;
    }
    out.push_back({static_cast<float>(c0), static_cast<float>(c1), lo, hi});
  };
  int col = 0;
  while (col < axis.width_px) {
    if (it != items.end() && column_of(it->t_first) <= col) {
      // The carried value shows only where the column starts before its first sample.
      const bool carried = axis.x(static_cast<double>(it->t_first)) > col;
      std::int64_t lo = carried ? carry : it->min, hi = carried ? carry : it->max;
      while (it != items.end() && column_of(it->t_first) <= col) {
        lo = std::min(lo, it->min);
        hi = std::max(hi, it->max);
        carry = it->last;
        ++it;
      }
      emit(col, col + 1, lo, hi);
      ++col;
      continue;
    }
    // No sample in this column: the carried value holds until the next one.
    int next = axis.width_px;
    if (it != items.end()) next = static_cast<int>(std::clamp(column_of(it->t_first), col + 1.0, double(axis.width_px)));
    emit(col, next, carry, carry);
    col = next;
  }
  return out;
}

std::size_t CounterTrack::memory_bytes() const {
  std::size_t b = sizeof(*this) + samples_.capacity() * sizeof(CounterSample);
  for (const auto& l : levels_) b += l.buckets.capacity() * sizeof(CounterBucket);
  return b;
}

std::vector<CounterTrack> memory_counters(const analyzer::Trace& trace) {
  std::vector<CounterTrack> tracks;
  for (auto& r : analyzer::memory_timeline(trace).ranks)
    if (!r.allocated.empty()) tracks.emplace_back(RankId(r.rank), "memory in use", std::move(r.allocated));
  return tracks;
}

std::shared_ptr<const QueueTracks> QueueTracks::compute(const analyzer::Trace& trace, int threads) {
  // Each stream's track built where its series is (on several threads at
  // once, each writing its own stream's slot), then gathered in stream order.
  std::vector<std::optional<CounterTrack>> of_stream(trace.streams.size());
  analyzer::for_each_queue_series(
      trace, {},
      [&](std::size_t s, std::span<const analyzer::QueuePoint> series) {
        std::vector<CounterSample> samples;
        samples.reserve(series.size());
        for (const auto& p : series) {
          if (!samples.empty() && samples.back().ts_ns == p.ts_ns) samples.back().bytes = p.length;
          else samples.push_back({p.ts_ns, p.length});
        }
        of_stream[s].emplace(trace.streams[s].rank, "queue length", std::move(samples));
      },
      threads);
  auto out = std::make_shared<QueueTracks>();
  out->by_stream_.assign(trace.streams.size(), -1);
  for (std::size_t s = 0; s < of_stream.size(); ++s) {
    if (!of_stream[s]) continue;
    out->by_stream_[s] = static_cast<std::int32_t>(out->tracks_.size());
    out->tracks_.push_back(std::move(*of_stream[s]));
  }
  return out;
}

const CounterTrack* QueueTracks::for_stream(std::int32_t stream) const {
  if (stream < 0 || static_cast<std::size_t>(stream) >= by_stream_.size()) return nullptr;
  const auto t = by_stream_[static_cast<std::size_t>(stream)];
  return t < 0 ? nullptr : &tracks_[static_cast<std::size_t>(t)];
}

std::size_t QueueTracks::memory_bytes() const {
  std::size_t b = sizeof(*this) + by_stream_.capacity() * sizeof(std::int32_t);
  for (const auto& t : tracks_) b += t.memory_bytes();
  return b;
}

}  // namespace moetrace::gui
