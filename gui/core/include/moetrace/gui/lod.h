// Level of detail for one timeline row, after Tracy's folding and Perfetto's
// per-track mipmaps: zoomed out, runs of events that are each narrower than
// the fold threshold and separated by gaps narrower than it are drawn as one
// block with a count. The pyramid precomputes those runs for thresholds of
// 2, 4, 8, ... ns, so a frame walks at most about two blocks per fold width of
// every visible row whatever the zoom: cost ~ pixels x log(n), not n.
//
// A level is stored only where it at least halves the previous stored one, so
// the pyramid never holds more than 2n blocks; a zoom between two stored
// levels draws the finer one, which has at most twice the blocks it would
// ideally have.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moetrace::gui {

struct ItemExtent {
  std::int64_t start = 0, end = 0;
};

struct LodBlock {
  std::int64_t start = 0, end = 0;
  std::uint32_t count = 0;  // items folded into this block
  std::uint32_t rep = 0;    // position in the row of its longest item
};

struct LodLevel {
  std::int64_t threshold_ns = 0;  // items and gaps shorter than this are folded
  std::vector<LodBlock> blocks;   // sorted by start
  std::int64_t max_extent = 0;    // longest block (to search rows that overlap)
  bool monotone = true;           // blocks do not overlap, so ends are sorted too
};

class LodPyramid {
 public:
  // `items` sorted by start. Overlapping items are allowed (a row that could
  // not be packed without overlap); such levels are searched by start.
  static LodPyramid build(std::span<const ItemExtent> items);

  // The coarsest stored level whose threshold is at most fold_ns, or nullptr
  // where the row's own items are fine enough.
  const LodLevel* level_for(double fold_ns) const;
  std::span<const LodLevel> levels() const { return levels_; }
  std::size_t memory_bytes() const;

 private:
  std::vector<LodLevel> levels_;  // increasing threshold
};

// Folds `in` at threshold r (exposed for tests): consecutive blocks whose own
// extents are < r and whose gap is < r become one block.
std::vector<LodBlock> fold_blocks(std::span<const LodBlock> in, std::int64_t r);

// First position p in [0, n) whose item may intersect [t0, ...): with
// monotone ends, the first with end >= t0; otherwise the first with
// start >= t0 - max_extent.
template <class StartFn, class EndFn>
std::size_t first_visible(std::size_t n, double t0, bool monotone, std::int64_t max_extent,
                          StartFn start_of, EndFn end_of) {
  std::size_t lo = 0, hi = n;
  if (monotone) {
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (static_cast<double>(end_of(mid)) < t0) lo = mid + 1; else hi = mid;
    }
  } else {
    const double s = t0 - static_cast<double>(max_extent);
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (static_cast<double>(start_of(mid)) < s) lo = mid + 1; else hi = mid;
    }
  }
  return lo;
}

}  // namespace moetrace::gui
