#include "moetrace/analyzer/interval.h"

#include <algorithm>
#include <map>

#include "moetrace/analyzer/sort_runs.h"

namespace moetrace::analyzer {

namespace {

// `v`, sorted by start, merged in place: overlapping and touching intervals
// joined (no second array beside it, grown push by push).
void coalesce(std::vector<Interval>& v) {
  std::size_t kept = 0;
  for (const auto& i : v) {
    if (kept > 0 && i.start <= v[kept - 1].end)
      v[kept - 1].end = std::max(v[kept - 1].end, i.end);
    else
      v[kept++] = i;
  }
  v.resize(kept);
}

}  // namespace

IntervalSet IntervalSet::from(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return i.end <= i.start; });
  // Mostly runs in order already (one stream's work after another's); the
  // union does not depend on the order of intervals that start together.
  sort_runs(intervals, [](const Interval& a, const Interval& b) { return a.start < b.start; });
  coalesce(intervals);
  // A set that merged to under half its intervals keeps only its own room
  // (a rank's sets live while its rows are split).
  if (intervals.size() < intervals.capacity() / 2) intervals.shrink_to_fit();
  return from_sorted_disjoint(std::move(intervals));
}

IntervalSet IntervalSet::from_sorted_disjoint(std::vector<Interval> intervals) {
  IntervalSet s;
  s.v_ = std::move(intervals);
  return s;
}

std::int64_t IntervalSet::length() const {
  std::int64_t total = 0;
  for (const auto& i : v_) total += i.length();
  return total;
}

IntervalSet IntervalSet::unite(const IntervalSet& other) const {
  std::vector<Interval> all;
  all.reserve(v_.size() + other.v_.size());
  std::merge(v_.begin(), v_.end(), other.v_.begin(), other.v_.end(), std::back_inserter(all),
             [](const Interval& a, const Interval& b) { return a.start < b.start; });
  coalesce(all);
  return from_sorted_disjoint(std::move(all));
}

namespace {

// The first interval at or after `from` that ends after t (binary search, so
// that a small set against a large one costs its size times a log).
std::size_t first_ending_after(const std::vector<Interval>& v, std::size_t from, std::int64_t t) {
  return static_cast<std::size_t>(
      std::lower_bound(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), t,
                       [](const Interval& x, std::int64_t u) { return x.end <= u; }) -
      v.begin());
}

}  // namespace

IntervalSet IntervalSet::intersect(const IntervalSet& other) const {
  IntervalSet s;
  std::size_t i = 0, j = 0;
  while (i < v_.size() && j < other.v_.size()) {
    if (other.v_[j].end <= v_[i].start) {
      j = first_ending_after(other.v_, j, v_[i].start);
      continue;
    }
    if (v_[i].end <= other.v_[j].start) {
      i = first_ending_after(v_, i, other.v_[j].start);
      continue;
    }
    const auto lo = std::max(v_[i].start, other.v_[j].start);
    const auto hi = std::min(v_[i].end, other.v_[j].end);
    if (lo < hi) s.v_.push_back({lo, hi});
    if (v_[i].end < other.v_[j].end) ++i; else ++j;
  }
  return s;
}

IntervalSet IntervalSet::subtract(const IntervalSet& other) const {
  IntervalSet s;
  std::size_t j = 0;
  for (auto cur : v_) {
    j = first_ending_after(other.v_, j, cur.start);
    std::size_t k = j;
    while (k < other.v_.size() && other.v_[k].start < cur.end) {
      if (other.v_[k].start > cur.start) s.v_.push_back({cur.start, other.v_[k].start});
      cur.start = std::max(cur.start, other.v_[k].end);
      if (cur.start >= cur.end) break;
      ++k;
    }
    if (cur.start < cur.end) s.v_.push_back(cur);
  }
  return s;
}

IntervalSet IntervalSet::clip(Interval w) const {
  IntervalSet s;
  auto it = std::lower_bound(v_.begin(), v_.end(), w.start,
                             [](const Interval& i, std::int64_t t) { return i.end <= t; });
  for (; it != v_.end() && it->start < w.end; ++it) {
    Interval c{std::max(it->start, w.start), std::min(it->end, w.end)};
    if (c.start < c.end) s.v_.push_back(c);
  }
  return s;
}

std::int64_t IntervalSet::length_within(Interval w) const {
  std::int64_t total = 0;
  auto it = std::lower_bound(v_.begin(), v_.end(), w.start,
                             [](const Interval& i, std::int64_t t) { return i.end <= t; });
  for (; it != v_.end() && it->start < w.end; ++it)
    total += std::max<std::int64_t>(0, std::min(it->end, w.end) - std::max(it->start, w.start));
  return total;
}

IntervalSet IntervalSet::depth_at_least(const std::vector<Interval>& intervals, int k) {
  std::vector<std::pair<std::int64_t, int>> edges;
  edges.reserve(intervals.size() * 2);
  for (const auto& i : intervals) {
    edges.push_back({i.start, +1});
    edges.push_back({i.end, -1});
  }
  std::sort(edges.begin(), edges.end());
  std::vector<Interval> out;
  int depth = 0;
  std::int64_t since = 0;
  for (const auto& [t, d] : edges) {
    const int before = depth;
    depth += d;
    if (before < k && depth >= k) since = t;
    if (before >= k && depth < k && t > since) out.push_back({since, t});
  }
  return IntervalSet::from(std::move(out));
}

Coverage Coverage::sweep(std::vector<LabelledInterval> intervals) {
  struct Edge {
    std::int64_t t;
    std::uint32_t label;
  };
  // The starts and the ends each sorted (mostly runs in order already: one
  // stream's ops, then another's), then read as one merged order, the
  // intervals given back first (no array of the merged edges: 32 bytes an
  // interval fewer beside them). The order among edges of one time does not
  // matter: time is added only between distinct times, and the mask after
  // the last edge of a time is that of every edge of it applied.
  std::vector<Edge> starts, ends;
  starts.reserve(intervals.size());
  ends.reserve(intervals.size());
  for (const auto& i : intervals) {
    if (i.end <= i.start || i.label >= 32) continue;
    starts.push_back({i.start, i.label});
    ends.push_back({i.end, i.label});
  }
  std::vector<LabelledInterval>().swap(intervals);
  const auto by_time = [](const Edge& a, const Edge& b) { return a.t < b.t; };
  sort_runs(starts, by_time);
  sort_runs(ends, by_time);
  std::array<int, 32> count{};
  std::uint32_t mask = 0;
  std::map<std::uint32_t, std::int64_t> acc;
  std::int64_t prev = starts.empty() ? 0 : starts.front().t;  // every end follows its start
  std::size_t i = 0, j = 0;
  while (i < starts.size() || j < ends.size()) {
    const bool start = j == ends.size() || (i < starts.size() && !(ends[j].t < starts[i].t));
    const Edge& e = start ? starts[i++] : ends[j++];
    if (e.t > prev && mask != 0) acc[mask] += e.t - prev;
    prev = e.t;
    count[e.label] += start ? 1 : -1;
    if (count[e.label] > 0) mask |= 1u << e.label; else mask &= ~(1u << e.label);
  }
  Coverage c;
  for (const auto& [m, ns] : acc) c.entries_.push_back({m, ns});
  return c;
}

std::int64_t Coverage::time_with_mask(std::uint32_t mask) const {
  for (const auto& e : entries_)
    if (e.mask == mask) return e.ns;
  return 0;
}

std::int64_t Coverage::active(std::uint32_t l) const { return any(1u << l); }

std::int64_t Coverage::exclusive(std::uint32_t l) const { return time_with_mask(1u << l); }

std::int64_t Coverage::overlap(std::uint32_t a, std::uint32_t b) const {
  std::int64_t t = 0;
  for (const auto& e : entries_)
    if ((e.mask & a) && (e.mask & b)) t += e.ns;
  return t;
}

std::int64_t Coverage::any(std::uint32_t mask) const {
  std::int64_t t = 0;
  for (const auto& e : entries_)
    if (e.mask & mask) t += e.ns;
  return t;
}

}  // namespace moetrace::analyzer
