#include "moetrace/gui/counter_track.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace moetrace::gui {

CounterTrack::CounterTrack(RankId rank, std::string name, std::vector<CounterSample> samples)
    : rank_(rank), name_(std::move(name)), samples_(std::move(samples)) {
  auto by_time = [](const CounterSample& a, const CounterSample& b) { return a.ts_ns < b.ts_ns; };
  // Series mostly come in order already (queue lengths, memory timelines).
  if (!std::is_sorted(samples_.begin(), samples_.end(), by_time))
    std::stable_sort(samples_.begin(), samples_.end(), by_time);
  for (const auto& s : samples_) max_ = std::max(max_, s.bytes);
  // Bucket pyramid: buckets of 2^k ns aligned on multiples of 2^k.
  std::vector<CounterBucket> cur;
  cur.reserve(samples_.size());
  for (const auto& s : samples_) cur.push_back({s.ts_ns, s.bytes, s.bytes, s.bytes});
  std::size_t stored = cur.size();
  // Each level is built from the one before: the last one stored (moved
  // into levels_, not copied), or the last one built and not stored.
  bool from_stored = false;
  for (int k = 1; k < 62; ++k) {
    const auto& prev = from_stored ? levels_.back().buckets : cur;
    if (prev.size() <= 1) break;
    const std::int64_t w = std::int64_t{1} << k;
    std::vector<CounterBucket> next;
    next.reserve(prev.size() / 2 + 1);
    // floor(t / 2^k), negative times included: an arithmetic shift (C++20),
    // not a division per sample and level.
    auto bucket_of = [k](std::int64_t t) { return t >> k; };
    for (const auto& b : prev) {
      if (!next.empty() && bucket_of(next.back().t_first) == bucket_of(b.t_first)) {
        auto& n = next.back();
        n.min = std::min(n.min, b.min);
        n.max = std::max(n.max, b.max);
        n.last = b.last;
      } else {
        next.push_back(b);
      }
    }
    if (next.size() * 2 <= stored) {
      stored = next.size();
      levels_.push_back({w, std::move(next)});
      from_stored = true;
    } else {
      cur = std::move(next);
      from_stored = false;
    }
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

std::shared_ptr<const QueueTracks> QueueTracks::compute(const analyzer::Trace& trace) {
  return from_queues(trace, analyzer::queue_lengths(trace));
}

std::shared_ptr<const QueueTracks> QueueTracks::from_queues(const analyzer::Trace& trace,
                                                            std::vector<analyzer::StreamQueue> queues) {
  auto out = std::make_shared<QueueTracks>();
  out->by_stream_.assign(trace.streams.size(), -1);
  std::map<std::pair<std::int32_t, std::int32_t>, std::size_t> index;  // (rank, StreamId) -> stream index
  for (std::size_t s = 0; s < trace.streams.size(); ++s)
    index.emplace(std::pair(trace.streams[s].rank.value, trace.streams[s].id.value), s);
  for (auto& q : queues) {
    const auto it = index.find({q.rank, q.stream});
    if (it == index.end() || q.series.empty()) continue;
    std::vector<CounterSample> samples;
    samples.reserve(q.series.size());
    for (const auto& p : q.series) {
      if (!samples.empty() && samples.back().ts_ns == p.ts_ns) samples.back().bytes = p.length;
      else samples.push_back({p.ts_ns, p.length});
    }
    std::vector<analyzer::QueuePoint>().swap(q.series);  // the series' memory goes back as each track is built
    out->by_stream_[it->second] = static_cast<std::int32_t>(out->tracks_.size());
    out->tracks_.emplace_back(RankId(q.rank), "queue length", std::move(samples));
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
