// Interval algebra on half-open nanosecond intervals [start, end).
// An IntervalSet is sorted and disjoint (touching intervals are merged), so
// union, intersection and difference are linear merges; building one from
// arbitrary intervals is a sort plus a sweep, O(n log n).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <span>
#include <vector>

#include "moetrace/analyzer/sort_runs.h"

namespace moetrace::analyzer {

struct Interval {
  std::int64_t start = 0, end = 0;
  std::int64_t length() const { return end - start; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

class IntervalSet {
 public:
  IntervalSet() = default;
  // Union of arbitrary (unsorted, overlapping, empty) intervals.
  static IntervalSet from(std::vector<Interval> intervals);
  static IntervalSet from_sorted_disjoint(std::vector<Interval> intervals);

  std::span<const Interval> intervals() const { return v_; }
  bool empty() const { return v_.empty(); }
  std::int64_t length() const;  // total covered time

  IntervalSet unite(const IntervalSet& other) const;
  IntervalSet intersect(const IntervalSet& other) const;
  IntervalSet subtract(const IntervalSet& other) const;
  IntervalSet clip(Interval window) const;
  // Covered time inside a window, without building the clipped set.
  std::int64_t length_within(Interval window) const;
  // The spans in which at least `k` of `intervals` (arbitrary, overlapping)
  // are active: a sweep of +1 at every start and -1 at every end.
  static IntervalSet depth_at_least(const std::vector<Interval>& intervals, int k);

  friend bool operator==(const IntervalSet&, const IntervalSet&) = default;

 private:
  std::vector<Interval> v_;
};

// The same sweep for labels of any number, where only the stretches in
// which two or more labels are active matter: f(label, ns) for every label
// active in each such stretch. `starts` and `ends` are the intervals' starts
// and ends, apart (in any order; reordered here); at one time the ends come
// first.
struct LabelEdge {
  std::int64_t t = 0;
  std::int32_t label = 0;
};
template <class F>
void for_each_shared_stretch(std::vector<LabelEdge>& starts, std::vector<LabelEdge>& ends, F&& f);

// Sweep over labelled intervals (label < 32): +1 at every start and -1 at
// every end yields, for every combination of labels active at once, the time
// it was active. From that one table follow the union of each label, its
// exclusive time (no other label active), and pairwise overlaps.
struct LabelledInterval {
  std::int64_t start = 0, end = 0;
  std::uint32_t label = 0;
};

class Coverage {
 public:
  static Coverage sweep(std::vector<LabelledInterval> intervals);

  // Time during which exactly the labels in `mask` were active.
  std::int64_t time_with_mask(std::uint32_t mask) const;
  // Time during which label `l` was active (its union).
  std::int64_t active(std::uint32_t l) const;
  // Time during which `l` was the only active label.
  std::int64_t exclusive(std::uint32_t l) const;
  // Time during which some label of `a` and some label of `b` were both active.
  std::int64_t overlap(std::uint32_t mask_a, std::uint32_t mask_b) const;
  // Time during which any label of `mask` was active.
  std::int64_t any(std::uint32_t mask) const;

  struct Entry {
    std::uint32_t mask;
    std::int64_t ns;
  };
  std::span<const Entry> entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;  // sorted by mask, masks non-zero
};

template <class F>
void for_each_shared_stretch(std::vector<LabelEdge>& starts, std::vector<LabelEdge>& ends, F&& f) {
  // The starts and the ends each sorted (mostly runs in order already: one
  // stream's work, then another's), then read in step, at one time the ends
  // first. f is called only after the last edge of a time, when every edge
  // of it is applied, so the order among edges of one time and kind does not
  // matter.
  const auto by_time = [](const LabelEdge& x, const LabelEdge& y) { return x.t < y.t; };
  sort_runs(starts, by_time);
  sort_runs(ends, by_time);
  std::map<std::int32_t, int> active;  // label -> open intervals
  std::size_t i = 0, j = 0;
  while (i < starts.size() || j < ends.size()) {
    const bool end = j < ends.size() && (i == starts.size() || ends[j].t <= starts[i].t);
    const LabelEdge& e = end ? ends[j++] : starts[i++];
    auto& n = active[e.label];
    n += end ? -1 : 1;
    if (n == 0) active.erase(e.label);
    if ((i == starts.size() && j == ends.size()) || active.size() < 2) continue;
    const auto next = std::min(i < starts.size() ? starts[i].t : INT64_MAX, j < ends.size() ? ends[j].t : INT64_MAX);
    const auto len = next - e.t;
    if (len <= 0) continue;
    for (const auto& [label, count] : active) f(label, len);
  }
}

}  // namespace moetrace::analyzer
