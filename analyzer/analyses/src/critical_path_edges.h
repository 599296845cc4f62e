// The edges of a critical path's graph (critical_path.cc), one array a field:
// 9 bytes an edge, and reordered by source node for the longest path (in
// place), so that no array of edge indices is needed beside them
// (the graph across ranks of a 10 M-event trace has 16 M edges). An edge
// holds no weight: it weighs the time from its source node to its
// destination's (at least 0), or nothing (kZero); the few others (a
// collective participant's shortened edge) keep theirs in `explicit_w`. Nor
// the event its time is attributed to: cp_edge_event derives it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/move_to_places.h"

namespace moetrace::analyzer::detail {

// Each node's first out edge once the edges are grouped by source (nodes +
// 1 entries, the last the edge count; non-decreasing): 2 bytes an entry, its
// offset from the first entry of its block of 64, and 4 bytes a block, where
// an array of every entry took 4 bytes each (the graph across ranks of a
// 10 M-event trace: 15.6 M nodes, 60 -> 31 MiB while the longest path is
// searched). Where a block's entries span more than 65535 edges (a node with
// that many out edges; none in the traces seen), every entry keeps 4 bytes.
class CpOutIndex {
 public:
  CpOutIndex() = default;
  explicit CpOutIndex(std::vector<std::uint32_t> begin) {
    const std::size_t n = begin.size();
    block_.resize((n + kBlock - 1) / kBlock);
    for (std::size_t b = 0; b < block_.size(); ++b) block_[b] = begin[b * kBlock];
    reserve_huge(offset_, n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto offset = begin[i] - block_[i / kBlock];
      if (offset > UINT16_MAX) {
        std::vector<std::uint32_t>().swap(block_);
        std::vector<std::uint16_t>().swap(offset_);
        full_ = std::move(begin);
        return;
      }
      offset_.push_back(static_cast<std::uint16_t>(offset));
    }
  }
  std::size_t size() const { return full_.empty() ? offset_.size() : full_.size(); }
  bool empty() const { return size() == 0; }
  // The entries through plain pointers, for a loop that also writes bytes
  // (which may alias the vectors' own pointers, so that the compiler would
  // read them again at every entry).
  struct View {
    const std::uint32_t* block;
    const std::uint16_t* offset;
    const std::uint32_t* full;
    std::size_t size;
    std::uint32_t operator[](std::size_t i) const { return full ? full[i] : block[i / kBlock] + offset[i]; }
  };
  View view() const { return {block_.data(), offset_.data(), full_.empty() ? nullptr : full_.data(), size()}; }
  std::uint32_t operator[](std::size_t i) const { return view()[i]; }

 private:
  static constexpr std::size_t kBlock = 64;
  std::vector<std::uint32_t> block_;    // each block's first entry
  std::vector<std::uint16_t> offset_;   // each entry less its block's first
  std::vector<std::uint32_t> full_;     // every entry, where offsets do not fit 16 bits
};

struct CpEdges {
  static constexpr std::uint8_t kNoCategory = 7;    // a dependency, attributed to nothing (PathCategory: 0-5)
  static constexpr std::uint8_t kZero = 8;          // flag: weighs nothing
  static constexpr std::uint8_t kExplicit = 16;     // flag: its weight is in explicit_w
  static constexpr std::uint8_t kShortened = 64;    // flag: a collective participant's own edge, its wait taken off
  static constexpr std::uint8_t kCollective = 128;  // flag: between ranks (across-ranks graph)

  std::vector<std::uint32_t> u, v;  // source, destination node; u is emptied by group_by_source
  std::vector<std::uint8_t> flags;  // the category (PathCategory, or kNoCategory) | the flags above
  // The weights of the kExplicit edges (few: one a collective participant):
  // (edge, weight) as set while built, a later one over an earlier (16
  // bytes each; a hash map by edge took 40); then in order of edge once
  // grouped.
  std::vector<std::pair<std::uint32_t, std::int64_t>> set_w;
  std::vector<std::pair<std::uint32_t, std::int64_t>> explicit_w;

  std::size_t size() const { return v.size(); }
  std::uint8_t category(std::size_t k) const { return flags[k] & kNoCategory; }
  bool collective(std::size_t k) const { return (flags[k] & kCollective) != 0; }
  bool shortened(std::size_t k) const { return (flags[k] & kShortened) != 0; }
  bool zero(std::size_t k) const { return (flags[k] & kZero) != 0; }
  bool has_explicit(std::size_t k) const { return (flags[k] & kExplicit) != 0; }
  // Not yet grouped, read by the one thread that builds the edges: an
  // edge's weight is read again only where it is set twice (a participant
  // of two collective instances; none in the traces seen), through an
  // index built at the first such read.
  std::int64_t explicit_weight(std::size_t k) const {
    const auto key = static_cast<std::uint32_t>(k);
    if (u.size() == size()) {  // not yet grouped
      if (set_at_.empty())
        for (std::size_t i = 0; i < set_w.size(); ++i) set_at_[set_w[i].first] = i;
      return set_w[set_at_.at(key)].second;
    }
    const auto it = std::lower_bound(explicit_w.begin(), explicit_w.end(), key,
                                     [](const auto& e, std::uint32_t x) { return e.first < x; });
    return it->second;
  }
  // Edge k (not yet grouped) weighs `weight` from now on, whatever its nodes' times.
  void set_weight(std::size_t k, std::int64_t weight) {
    flags[k] = static_cast<std::uint8_t>((flags[k] & ~kZero) | kExplicit);
    if (!set_at_.empty()) set_at_[static_cast<std::uint32_t>(k)] = set_w.size();
    set_w.emplace_back(static_cast<std::uint32_t>(k), weight);
  }

  // Room for n edges, advised for huge pages; untouched past the last edge.
  void reserve(std::size_t n) {
    reserve_huge(u, n);
    reserve_huge(v, n);
    reserve_huge(flags, n);
  }

  // weighs: the time between the nodes (at least 0), else nothing.
  void push(std::uint32_t from, std::uint32_t to, bool weighs, std::uint8_t category, bool between_ranks = false) {
    u.push_back(from);
    v.push_back(to);
    flags.push_back(static_cast<std::uint8_t>(category | (weighs ? 0 : kZero) | (between_ranks ? kCollective : 0)));
  }

  // Reorders the edges by source node, keeping the order they were added in
  // among one node's (a stable counting sort); returns each node's first
  // edge (nodes + 1 entries) and empties u: the source of edge k is
  // source(begin, k, near).
  //
  // In place but for a small buffer: each edge's new place is written over
  // its source (u), and the edges moved there (move_to_places.h). A second
  // array of the new order beside the edges (their destinations, 4 bytes an
  // edge; 61 MiB on a 10 M-event trace's 16 M edges) is never held.
  CpOutIndex group_by_source(std::size_t nodes) {
    std::vector<std::uint32_t> begin;
    reserve_huge(begin, nodes + 1);
    begin.assign(nodes + 1, 0);
    for (const auto from : u) ++begin[from + 1];
    for (std::size_t i = 0; i < nodes; ++i) begin[i + 1] += begin[i];
    // Each edge's place, over its source; begin[x] moves to the end of x's
    // edges meanwhile, then every entry back by one (the end of x - 1's:
    // x's begin).
    auto& to = u;
    for (auto& from : to) from = begin[from]++;
    for (std::size_t i = nodes; i > 0; --i) begin[i] = begin[i - 1];
    begin[0] = 0;
    // The weights set, the last one of each edge, at its place.
    std::stable_sort(set_w.begin(), set_w.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    explicit_w = std::move(set_w);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < explicit_w.size(); ++i) {
      if (i + 1 < explicit_w.size() && explicit_w[i + 1].first == explicit_w[i].first) continue;
      explicit_w[kept++] = {to[explicit_w[i].first], explicit_w[i].second};
    }
    explicit_w.resize(kept);
    std::sort(explicit_w.begin(), explicit_w.end());
    set_w.clear();
    std::unordered_map<std::uint32_t, std::size_t>().swap(set_at_);
    move_to_places(to, v, flags);
    std::vector<std::uint32_t>().swap(u);
    return CpOutIndex(std::move(begin));
  }

  // The source node of edge k, once grouped (begin: group_by_source's): the
  // last node whose first edge is at most k. Searched from `near` (a node
  // close to it: a path's edges mostly join nearby nodes), galloping out to
  // bracket it, then bisecting the bracket: the node a search of all of
  // `begin` finds, in a few reads near `near` instead of some 25 spread
  // over the array (a walk back along a path of millions of edges).
  static std::uint32_t source(const CpOutIndex& index, std::size_t k, std::size_t near) {
    return source(index.view(), k, near);
  }
  static std::uint32_t source(const CpOutIndex::View& begin, std::size_t k, std::size_t near) {
    const auto key = static_cast<std::uint32_t>(k);
    const std::size_t n = begin.size;
    const std::size_t h = std::min(near, n - 1);
    std::size_t lo = 0, hi = n;  // the first entry over key lies in [lo, hi]
    if (begin[h] <= key) {
      lo = h + 1;
      for (std::size_t step = 1; h + step < n; step *= 2) {
        if (begin[h + step] > key) {
          hi = h + step;
          break;
        }
        lo = h + step + 1;
      }
    } else {
      hi = h;
      for (std::size_t step = 1; step <= h; step *= 2) {
        if (begin[h - step] <= key) {
          lo = h - step + 1;
          break;
        }
        hi = h - step;
      }
    }
    while (lo < hi) {  // the first entry over key in [lo, hi)
      const std::size_t mid = lo + (hi - lo) / 2;
      if (begin[mid] > key) hi = mid;
      else lo = mid + 1;
    }
    return static_cast<std::uint32_t>(lo - 1);
  }

 private:
  mutable std::unordered_map<std::uint32_t, std::size_t> set_at_;  // edge -> its last place in set_w (explicit_weight)
};

}  // namespace moetrace::analyzer::detail
