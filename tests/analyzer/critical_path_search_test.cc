// The longest-path search of the critical path's graph
// (analyzer/analyses/src/critical_path_search.cc) and the order of its
// runtime-lock nodes (critical_path_graph.h), on graphs written out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "critical_path_graph.h"

namespace moetrace::analyzer::detail {
namespace {

// Events' times, row e for event e (CpEvent::source), as the trace's tables
// hold them.
struct Times {
  std::int64_t start = 0, end = 0;
};

CpInput input_of(const std::vector<Times>& rows, std::vector<CpEvent>& ev) {
  CpInput in;
  in.clock.rows(PathEvent::Kind::kNvtx, std::span<const Times>(rows), &Times::start, &Times::end);
  for (std::size_t e = 0; e < ev.size(); ++e) ev[e].source = static_cast<std::uint32_t>(e);
  return in;
}

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
  std::vector<Times> times(ev.size(), {0, 1});
  times[kChainA] = {0, 150};
  times[kChainB] = {150, 300};
  times[kLast] = {1000, 1005};
  const auto in = input_of(times, ev);
  CpEdges edges;
  edges.reserve(2 * ev.size() + kShort + 2);
  const auto cpu = static_cast<std::uint8_t>(PathCategory::kCpuOp);
  for (std::uint32_t i = 0; i <= kLast; ++i) edges.push(2 * i, 2 * i + 1, true, cpu);
  for (std::uint32_t i = 0; i < kShort; ++i) edges.push(2 * i + 1, 2 * kLast, false, CpEdges::kNoCategory);
  edges.push(2 * kChainA + 1, 2 * kChainB, false, CpEdges::kNoCategory);
  edges.push(2 * kChainB + 1, 2 * kLast, false, CpEdges::kNoCategory);
  const auto out_begin = edges.group_by_source(2 * ev.size());
  CpSearch s;
  cp_search(ev, edges, out_begin, nullptr, in, s);
  ASSERT_EQ(s.best.size(), 1u);
  EXPECT_EQ(s.best[0], 2 * kLast + 1);
  EXPECT_EQ(s.dist[2 * kLast + 1], 305);
  // From any node it starts at, the search finds the same source.
  for (const std::uint32_t near : {0u, 2 * kChainB + 1, 2 * kLast, 2 * kLast + 1, 10000u})
    EXPECT_EQ(CpEdges::source(out_begin, s.pred[2 * kLast], near), 2 * kChainB + 1) << near;
}

// A node's distance keeps its 48 bits (a path of 30 hours: past 32 bits),
// and one past them is an error, not a wrapped length.
TEST(CriticalPathSearch, DistancesKeep48BitsAndRefuseMore) {
  CpDistances d;
  d.assign(3);
  EXPECT_EQ(d[1], 0);
  const std::int64_t hours30 = std::int64_t{30} * 3600 * 1000000000;
  d.set(0, hours30);
  d.set(1, CpDistances::kMax);
  d.set(2, (std::int64_t{1} << 32) + 7);
  EXPECT_EQ(d[0], hours30);
  EXPECT_EQ(d[1], (std::int64_t{1} << 48) - 1);
  EXPECT_EQ(d[2], (std::int64_t{1} << 32) + 7);
  EXPECT_THROW(d.set(0, CpDistances::kMax + 1), Error);
  d.assign(2);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], 0);
}

// Grouped by source, the edges come in the order of a stable sort by source
// (each node's in the order they were added), whatever their number (one
// block or many, the last one short) and however their sources are spread
// (few nodes with many edges, many with one, nodes with none); each node's
// first edge is the count of the edges of the nodes before it, and an edge
// with its own weight keeps it at its new place.
TEST(CriticalPathEdges, GroupedBySourceAsAStableSortWouldOrderThem) {
  std::uint64_t seed = 99;
  auto draw = [&](std::uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::uint32_t>((seed >> 33) % n);
  };
  for (const std::size_t n : {0, 1, 15, 16, 17, 1000, 100003}) {
    for (const std::uint32_t nodes : {1u, 7u, 5000u}) {
      CpEdges edges;
      edges.reserve(n);
      struct Added {
        std::uint32_t u, v;
        std::uint8_t flags;
        std::int64_t weight;  // -1: none of its own
      };
      std::vector<Added> added;
      for (std::size_t k = 0; k < n; ++k) {
        const auto from = draw(nodes), to = static_cast<std::uint32_t>(k);  // v: the order it was added in
        edges.push(from, to, draw(2) == 0, static_cast<std::uint8_t>(draw(6)));
        std::int64_t w = -1;
        if (draw(50) == 0) {
          w = draw(1000);
          edges.set_weight(k, w);
        }
        added.push_back({from, to, edges.flags[k], w});
      }
      auto want = added;
      std::stable_sort(want.begin(), want.end(), [](const Added& a, const Added& b) { return a.u < b.u; });
      const auto begin = edges.group_by_source(nodes);
      ASSERT_EQ(begin.size(), nodes + 1u);
      EXPECT_TRUE(edges.u.empty());
      ASSERT_EQ(edges.size(), n);
      for (std::uint32_t x = 0; x < nodes; ++x) {
        const auto count = std::count_if(added.begin(), added.end(), [&](const Added& a) { return a.u < x; });
        ASSERT_EQ(begin[x], static_cast<std::uint32_t>(count)) << n << " edges, node " << x;
      }
      ASSERT_EQ(begin[nodes], n);
      for (std::size_t k = 0; k < n; ++k) {
        ASSERT_EQ(edges.v[k], want[k].v) << n << " edges, " << nodes << " nodes, at " << k;
        ASSERT_EQ(edges.flags[k], want[k].flags) << n << " edges, at " << k;
        if (want[k].weight >= 0) {
          EXPECT_EQ(edges.explicit_weight(k), want[k].weight) << k;
        }
      }
    }
  }
}

// An edge whose weight is set twice (a participant of two collective
// instances) weighs the later one, read before the edges are grouped and at
// its place after; an edge set once keeps its own. Edges 0 (from node 3) and
// 2 (from node 0): edge 2 goes first once grouped, edge 0 last.
TEST(CriticalPathEdges, WeightSetTwiceWeighsTheLaterOne) {
  CpEdges edges;
  edges.reserve(3);
  edges.push(3, 4, true, 0);
  edges.push(1, 2, true, 0);
  edges.push(0, 5, true, 0);
  edges.set_weight(0, 40);
  edges.set_weight(2, 7);
  EXPECT_EQ(edges.explicit_weight(0), 40);
  edges.set_weight(0, 25);
  EXPECT_EQ(edges.explicit_weight(0), 25);
  EXPECT_EQ(edges.explicit_weight(2), 7);
  const auto begin = edges.group_by_source(6);
  ASSERT_EQ(edges.v, (std::vector<std::uint32_t>{5, 2, 4}));
  EXPECT_TRUE(edges.has_explicit(0));
  EXPECT_FALSE(edges.has_explicit(1));
  EXPECT_TRUE(edges.has_explicit(2));
  EXPECT_EQ(edges.explicit_weight(0), 7);
  EXPECT_EQ(edges.explicit_weight(2), 25);
  EXPECT_EQ(edges.explicit_w.size(), 2u);
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
      EXPECT_EQ(CpEdges::source(CpOutIndex(begin), k, near), owner[k]) << "edge " << k << " from node " << near;
}

// The first-edge index keeps every entry, whether its blocks' entries span
// at most 65535 edges (2 bytes an entry) or not (4): entries that climb by
// 65535 a block and more in all, then one node of 70000 edges inside a
// block; and an edge's source found from either.
TEST(CriticalPathSearch, FirstEdgeIndexKeepsEveryEntry) {
  for (const std::uint32_t jump : {1023u, 70000u}) {
    std::vector<std::uint32_t> begin;
    std::uint32_t at = 0;
    for (std::uint32_t i = 0; i < 1000; ++i) {
      begin.push_back(at);
      at += i % 64 == 63 ? 65535 - 62 * 3 : 3;  // a block's entries span 65535 edges at most
      if (i == 500) at += jump;                  // node 500: 1023 edges more (fits), or 70000 (does not)
    }
    begin.push_back(at);
    const CpOutIndex index(begin);
    ASSERT_EQ(index.size(), begin.size());
    for (std::size_t i = 0; i < begin.size(); ++i) ASSERT_EQ(index[i], begin[i]) << "jump " << jump << ", entry " << i;
    for (const std::size_t node : {0u, 63u, 64u, 500u, 999u}) {
      EXPECT_EQ(CpEdges::source(index, begin[node], 0), node) << "jump " << jump;
      EXPECT_EQ(CpEdges::source(index, begin[node + 1] - 1, 999), node) << "jump " << jump;
    }
  }
}

// The runtime lock's nodes come in order of (rank, time, node), as one sort
// of every start and end gave them. By hand: rank 3's calls a = [10, 20]
// and b = [20, 30] (b starts when a ends; b's start is node 2, a's end node
// 1: the end first), then rank 1's c = [5, 5 + 1] before them (rank 1 <
// rank 3), an annotation (not a node) and a call without the lock between.
// Events: 0 a (rank 3), 1 b (rank 3), 2 c (rank 1), 3 no lock, 4 not a node.
// Order: c's 4 (t 5), 5 (t 6); then rank 3: a's 0 (t 10), a's end 1 (t 20)
// before b's start 2 (t 20), b's end 3 (t 30).
TEST(CriticalPathLock, NodesByRankTimeThenNode) {
  std::vector<CpEvent> ev(5);
  std::vector<Times> times(ev.size());
  auto in = input_of(times, ev);  // an event's rank is its lane's: lane 0 on rank 3, lane 1 on rank 1
  in.threads = {7, 7};
  in.thread_rank = {3, 1};
  auto set = [&](std::size_t e, std::int32_t rank, std::int64_t start, std::int64_t end) {
    ev[e].lane = rank == 3 ? 0 : 1;
    times[e] = {start, end};
    ev[e].lock = true;
  };
  set(0, 3, 10, 20);
  set(1, 3, 20, 30);
  set(2, 1, 5, 6);
  set(3, 3, 12, 13);
  ev[3].lock = false;
  set(4, 3, 11, 12);
  ev[4].node = false;
  std::vector<std::pair<std::int32_t, std::uint32_t>> got;
  cp_lock_nodes(ev, ev.size(), in, [&](std::int32_t r, std::uint32_t n) { got.emplace_back(r, n); });
  const std::vector<std::pair<std::int32_t, std::uint32_t>> want = {{1, 4}, {1, 5}, {3, 0}, {3, 1}, {3, 2}, {3, 3}};
  EXPECT_EQ(got, want);
}

// The event an edge's time goes to, from its nodes (event e's start 2e,
// its end 2e + 1) and its category: HTA's _attribute_edge for operator
// edges (from a start: the source's event; to an end: the destination's;
// end -> start: the source's enclosing event, -1 at the top of its stack),
// the launched event for a launch delay, the stream's previous event for a
// kernel gap, the destination's for a GPU event's own edge and a collective
// hub's edge to a participant's end; none for a dependency.
TEST(CriticalPathSearch, AnEdgesEventFromItsNodesAndCategory) {
  const std::vector<std::int32_t> enclosing = {-1, 0, 0, 1, -1, 2};  // host events 0-5
  const auto c = [](PathCategory x) { return static_cast<std::uint8_t>(x); };
  EXPECT_EQ(cp_edge_event(2 * 1, 2 * 1 + 1, c(PathCategory::kCpuOp), enclosing), 1);  // its own span
  EXPECT_EQ(cp_edge_event(2 * 0, 2 * 1, c(PathCategory::kCpuOp), enclosing), 0);      // start -> start
  EXPECT_EQ(cp_edge_event(2 * 3, 2 * 1 + 1, c(PathCategory::kCpuOp), enclosing), 3);  // start -> end
  EXPECT_EQ(cp_edge_event(2 * 3 + 1, 2 * 1 + 1, c(PathCategory::kCpuOp), enclosing), 1);  // end -> end
  EXPECT_EQ(cp_edge_event(2 * 3 + 1, 2 * 5, c(PathCategory::kCpuOp), enclosing), 1);  // end -> start: 3's enclosing
  EXPECT_EQ(cp_edge_event(2 * 5 + 1, 2 * 3, c(PathCategory::kCpuOp), enclosing), 2);
  EXPECT_EQ(cp_edge_event(2 * 4 + 1, 2 * 0, c(PathCategory::kCpuOp), enclosing), -1);  // top level
  EXPECT_EQ(cp_edge_event(2 * 3, 2 * 8, c(PathCategory::kLaunchDelay), enclosing), 8);
  EXPECT_EQ(cp_edge_event(2 * 7 + 1, 2 * 8, c(PathCategory::kKernelGap), enclosing), 7);
  EXPECT_EQ(cp_edge_event(2 * 8, 2 * 8 + 1, c(PathCategory::kKernelCompute), enclosing), 8);
  EXPECT_EQ(cp_edge_event(2 * 6, 2 * 9 + 1, c(PathCategory::kKernelCommunication), enclosing), 9);  // hub -> end
  EXPECT_EQ(cp_edge_event(2 * 6, 2 * 6 + 1, c(PathCategory::kMemcpyMemset), enclosing), 6);
  EXPECT_EQ(cp_edge_event(2 * 3 + 1, 2 * 8 + 1, CpEdges::kNoCategory, enclosing), -1);
}

// Against one sort of (rank, time, node) records (the order the lock's
// edges were built in before): ranks interleaved as correlation ids order
// them, times drawn from a few values (many ties between starts and ends,
// of one event and of others), calls out of order on several threads (1 to
// over 64 runs: the merged runs and the sort they fall back to), events that
// take no lock or are no node, and events past `host` left out.
TEST(CriticalPathLock, NodesAgreeWithOneSortOfStartsAndEnds) {
  std::uint64_t seed = 12345;
  auto draw = [&](std::uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>((seed >> 33) % n);
  };
  for (const int runs : {1, 2, 5, 40, 70, 200}) {
    std::vector<CpEvent> ev;
    std::vector<Times> times;
    std::int64_t t = 0;
    for (int i = 0; i < 600; ++i) {
      CpEvent e;
      e.lane = static_cast<std::uint32_t>(draw(4));
      // Time moves on, and jumps back at the start of each run.
      t = i % (600 / runs + 1) == 0 ? draw(5) : t + draw(3);
      times.push_back({t, t + draw(4)});
      e.lock = draw(5) != 0;
      e.node = draw(7) != 0;
      ev.push_back(e);
    }
    auto in = input_of(times, ev);  // lane l on rank 2 l - 1
    in.threads = {1, 1, 1, 1};
    in.thread_rank = {-1, 1, 3, 5};
    const std::size_t host = ev.size() - 20;
    struct Timed {
      std::int32_t rank;
      std::int64_t ts;
      std::uint32_t node;
    };
    std::vector<Timed> want;
    for (std::size_t e = 0; e < host; ++e)
      if (ev[e].lock && ev[e].node) {
        want.push_back({in.rank(ev[e]), times[e].start, static_cast<std::uint32_t>(2 * e)});
        want.push_back({in.rank(ev[e]), times[e].end, static_cast<std::uint32_t>(2 * e + 1)});
      }
    std::sort(want.begin(), want.end(), [](const Timed& a, const Timed& b) {
      return std::tie(a.rank, a.ts, a.node) < std::tie(b.rank, b.ts, b.node);
    });
    std::vector<std::pair<std::int32_t, std::uint32_t>> got;
    cp_lock_nodes(ev, host, in, [&](std::int32_t r, std::uint32_t n) { got.emplace_back(r, n); });
    ASSERT_EQ(got.size(), want.size()) << runs;
    ASSERT_GT(want.size(), 500u);
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].rank) << runs << " at " << i;
      EXPECT_EQ(got[i].second, want[i].node) << runs << " at " << i;
    }
  }
}

}  // namespace
}  // namespace moetrace::analyzer::detail
