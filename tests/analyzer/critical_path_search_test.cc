// The longest-path search of the critical path's graph
// (analyzer/analyses/src/critical_path_search.cc) on graphs written out by
// hand.
#include <gtest/gtest.h>

#include <vector>

#include "critical_path_graph.h"

namespace moetrace::analyzer::detail {
namespace {

// A node with more in-edges than a byte counts (its in-degree's rest kept
// aside) becomes ready only after all of them. 300 links (weight 0) end at
// the start of the last event (1000 to 1005 ns): from the ends of 299 events
// of 1 ns (0 to 1 ns), and from the end of a chain of two (0 to 150 ns, a
// link, 150 to 300 ns). The chain's link comes last in the search's FIFO
// order (after every 1 ns event's end), so were the last start ready after
// 300 mod 256 = 44 links, or after a byte's 255, it would be searched at
// 1 ns. The longest path: 150 + 0 + 150 + 0 + 5 = 305 ns, ending at the last
// event's end, entering its start from the chain's end.
TEST(CriticalPathSearch, NodeWithMoreInEdgesThanAByteCounts) {
  constexpr std::uint32_t kShort = 299, kChainA = 299, kChainB = 300, kLast = 301;
  std::vector<CpEvent> ev(kLast + 1);
  for (std::uint32_t i = 0; i < kShort; ++i) {
    ev[i].start = 0;
    ev[i].end = 1;
  }
  ev[kChainA].start = 0;
  ev[kChainA].end = 150;
  ev[kChainB].start = 150;
  ev[kChainB].end = 300;
  ev[kLast].start = 1000;
  ev[kLast].end = 1005;
  CpEdges edges;
  edges.reserve(2 * ev.size() + kShort + 2);
  const auto cpu = static_cast<std::uint8_t>(PathCategory::kCpuOp);
  for (std::uint32_t i = 0; i <= kLast; ++i) edges.push(2 * i, 2 * i + 1, true, static_cast<std::int32_t>(i), cpu);
  for (std::uint32_t i = 0; i < kShort; ++i) edges.push(2 * i + 1, 2 * kLast, false, -1, CpEdges::kNoCategory);
  edges.push(2 * kChainA + 1, 2 * kChainB, false, -1, CpEdges::kNoCategory);
  edges.push(2 * kChainB + 1, 2 * kLast, false, -1, CpEdges::kNoCategory);
  const auto out_begin = edges.group_by_source(2 * ev.size());
  CpSearch s;
  cp_search(ev, edges, out_begin, nullptr, s);
  ASSERT_EQ(s.best.size(), 1u);
  EXPECT_EQ(s.best[0], 2 * kLast + 1);
  EXPECT_EQ(s.dist[2 * kLast + 1], 305);
  // From any node it starts at, the search finds the same source.
  for (const std::uint32_t near : {0u, 2 * kChainB + 1, 2 * kLast, 2 * kLast + 1, 10000u})
    EXPECT_EQ(CpEdges::source(out_begin, s.pred[2 * kLast], near), 2 * kChainB + 1) << near;
}

// An edge's source, searched from any node, is the node whose edges hold
// it: on first-edge arrays with runs of nodes without edges (equal entries)
// at the start, inside and at the end, every edge k from every start node
// against the node counted out by hand (the one x with begin[x] <= k <
// begin[x + 1]).
TEST(CriticalPathSearch, AnEdgesSourceFromAnyNodeSearchedFrom) {
  // Nodes 0..9; edges: node 0 none, 1 two (0, 1), 2-4 none, 5 three (2-4),
  // 6 one (5), 7 four (6-9), 8 and 9 none.
  const std::vector<std::uint32_t> begin = {0, 0, 2, 2, 2, 2, 5, 6, 10, 10, 10};
  const std::vector<std::uint32_t> owner = {1, 1, 5, 5, 5, 6, 7, 7, 7, 7};
  for (std::size_t k = 0; k < owner.size(); ++k)
    for (std::size_t near = 0; near < begin.size() + 3; ++near)
      EXPECT_EQ(CpEdges::source(begin, k, near), owner[k]) << "edge " << k << " from node " << near;
}

}  // namespace
}  // namespace moetrace::analyzer::detail
