// Sorting arrays that come as a few ascending runs one after another (one
// stream's intervals, then another's; a rank's runtime calls on one thread,
// then another's): the interval sweep's edges, the critical path's lock
// nodes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace moetrace::analyzer {

// Sorts v by `less` where it is a few ascending runs one after another:
// adjacent runs merged pairwise, about n log(runs) comparisons instead of
// n log n; many runs (over 64) are sorted as they come. Not stable: callers'
// results do not depend on the order of equal keys.
template <class T, class Less>
void sort_runs(std::vector<T>& v, Less less) {
  constexpr std::size_t kMaxRuns = 64;
  std::vector<std::size_t> at{0};  // where each run starts, then the end
  for (std::size_t i = 1; i < v.size(); ++i)
    if (less(v[i], v[i - 1])) {
      at.push_back(i);
      if (at.size() > kMaxRuns) {
        std::sort(v.begin(), v.end(), less);
        return;
      }
    }
  at.push_back(v.size());
  const auto it = [&v](std::size_t i) { return v.begin() + static_cast<std::ptrdiff_t>(i); };
  while (at.size() > 2) {
    std::vector<std::size_t> next{0};
    std::size_t r = 0;
    for (; r + 2 < at.size(); r += 2) {
      std::inplace_merge(it(at[r]), it(at[r + 1]), it(at[r + 2]), less);
      next.push_back(at[r + 2]);
    }
    if (r + 1 < at.size()) next.push_back(at.back());  // an odd run out, carried to the next round
    at = std::move(next);
  }
}

}  // namespace moetrace::analyzer
