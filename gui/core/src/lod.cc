#include "moetrace/gui/lod.h"

#include <limits>

namespace moetrace::gui {
namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

std::int64_t extent(const LodBlock& b) { return b.end - b.start; }

// The smallest threshold r at which fold_blocks(in, r) folds something is
// one more than the smallest max(extent_i, extent_i+1, gap_i) over neighbours.
std::int64_t min_fold_value(std::span<const LodBlock> in) {
  std::int64_t m = kNever;
  for (std::size_t i = 1; i < in.size(); ++i) {
    const std::int64_t gap = std::max<std::int64_t>(0, in[i].start - in[i - 1].end);
    m = std::min(m, std::max({extent(in[i - 1]), extent(in[i]), gap}));
  }
  return m;
}

void finish_level(LodLevel& level) {
  level.max_extent = 0;
  level.monotone = true;
  std::int64_t prev_end = std::numeric_limits<std::int64_t>::min();
  for (const auto& b : level.blocks) {
    level.max_extent = std::max(level.max_extent, extent(b));
    if (b.end < prev_end || b.start < prev_end) level.monotone = false;
    prev_end = std::max(prev_end, b.end);
  }
}

}  // namespace

std::vector<LodBlock> fold_blocks(std::span<const LodBlock> in, std::int64_t r) {
  std::vector<LodBlock> out;
  out.reserve(in.size() / 2 + 1);
  std::int64_t rep_len = -1;
  bool run_small = false;  // every member of the current run is narrower than r
  for (const auto& b : in) {
    const bool small = extent(b) < r;
    if (!out.empty() && run_small && small && b.start - out.back().end < r) {
      auto& run = out.back();
      run.end = std::max(run.end, b.end);
      run.count += b.count;
      if (extent(b) > rep_len) {
        rep_len = extent(b);
        run.rep = b.rep;
      }
      continue;
    }
    out.push_back(b);
    rep_len = extent(b);
    run_small = small;
  }
  return out;
}

LodPyramid LodPyramid::build(std::span<const ItemExtent> items) {
  LodPyramid p;
  if (items.size() < 2) return p;
  std::vector<LodBlock> cur(items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
    cur[i] = {items[i].start, std::max(items[i].start, items[i].end), 1, static_cast<std::uint32_t>(i)};
  std::size_t stored = cur.size();
  while (cur.size() > 1) {
    const std::int64_t m = min_fold_value(cur);
    if (m == kNever || m >= (std::int64_t{1} << 61)) break;
    std::int64_t r = 2;
    while (r <= m) r <<= 1;  // the first power of two that folds something
    auto next = fold_blocks(cur, r);
    if (next.size() * 2 <= stored) {
      LodLevel level;
      level.threshold_ns = r;
      level.blocks = next;
      finish_level(level);
      p.levels_.push_back(std::move(level));
      stored = next.size();
    }
    cur = std::move(next);
  }
  return p;
}

const LodLevel* LodPyramid::level_for(double fold_ns) const {
  const LodLevel* best = nullptr;
  for (const auto& l : levels_) {
    if (static_cast<double>(l.threshold_ns) > fold_ns) break;
    best = &l;
  }
  return best;
}

std::size_t LodPyramid::memory_bytes() const {
  std::size_t b = sizeof(*this);
  for (const auto& l : levels_) b += sizeof(l) + l.blocks.capacity() * sizeof(LodBlock);
  return b;
}

}  // namespace moetrace::gui
