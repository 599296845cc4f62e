// The longest paths of a critical path's graph and what is reported of them
// (critical_path.h: "Critical path"); the graph is critical_path.cc's.
#include <algorithm>
#include <deque>
#include <string_view>
#include <tuple>
#include <utility>

#include "critical_path_graph.h"
#include "moetrace/analyzer/huge_pages.h"

namespace moetrace::analyzer::detail {

CpRankSlots::CpRankSlots(std::vector<std::int32_t> sorted_ranks) : ranks_(std::move(sorted_ranks)) {
  if (ranks_.empty()) return;
  first_ = ranks_.front();
  // A table where the ranks span at most a few times their number (rank ids
  // are small and dense in every run seen); else a binary search.
  const auto span = static_cast<std::int64_t>(ranks_.back()) - first_ + 1;
  if (span > 4 * static_cast<std::int64_t>(ranks_.size()) + 1024) return;
  dense_.assign(static_cast<std::size_t>(span), -1);
  for (std::size_t i = 0; i < ranks_.size(); ++i) dense_[static_cast<std::size_t>(ranks_[i] - first_)] = static_cast<std::int32_t>(i);
}

std::size_t CpRankSlots::of(std::int32_t rank) const {
  if (!dense_.empty()) return static_cast<std::size_t>(dense_[static_cast<std::size_t>(rank - first_)]);
  return static_cast<std::size_t>(std::lower_bound(ranks_.begin(), ranks_.end(), rank) - ranks_.begin());
}

void cp_search(std::span<const CpEvent> ev, const CpEdges& edges, const CpOutIndex& out_begin,
               const CpRankSlots* ranks, const CpInput& in, CpSearch& s) {
  const std::size_t n = 2 * ev.size();
  const bool own = ranks != nullptr;
  s.best.assign(own ? ranks->size() : 1, -1);
  // Memory advised for huge pages (fewer page faults), reused from a
  // search before where there was one.
  auto& indegree = s.indegree;
  auto& more = s.indegree_more;
  reserve_huge_or_reuse(indegree, n);
  indegree.assign(n, 0);
  more.clear();
  for (std::size_t k = 0; k < edges.size(); ++k) {
    if (own && edges.collective(k)) continue;
    auto& low = indegree[edges.v[k]];
    if (low < UINT8_MAX) ++low;
    else ++more[edges.v[k]];
  }
  // One in-edge of v done; true where none is left.
  auto done = [&](std::uint32_t v) {
    if (indegree[v] == UINT8_MAX)
      if (const auto it = more.find(v); it != more.end()) {
        if (--it->second == 0) more.erase(it);
        return false;
      }
    return --indegree[v] == 0;
  };
  s.dist.assign(n);
  reserve_huge_or_reuse(s.pred, n);
  s.pred.assign(n, kCpNoEdge);
  auto& dist = s.dist;
  auto& pred = s.pred;
  const auto first_edge = out_begin.view();
  std::deque<std::uint32_t> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push_back(static_cast<std::uint32_t>(i));
  while (!ready.empty()) {
    const auto u = ready.front();
    ready.pop_front();
    auto& best = s.best[own ? ranks->of(in.rank(ev[u / 2])) : 0];
    if (best < 0 || dist[u] > dist[static_cast<std::size_t>(best)]) best = u;
    const auto tu = cp_time(in.clock, ev, u);
    for (auto k = first_edge[u], last = first_edge[u + 1]; k < last; ++k) {
      if (own && edges.collective(k)) continue;
      const auto v = edges.v[k];
      const auto w = cp_weight(in.clock, ev, edges, k, tu, own);
      if (pred[v] == kCpNoEdge || dist[u] + w > dist[v]) {
        dist.set(v, dist[u] + w);
        pred[v] = k;
      }
      if (done(v)) ready.push_back(v);
    }
  }
}

RankCriticalPath cp_path(const Trace& t, const CpInput& in, std::span<const CpEvent> ev, const CpEdges& edges,
                         const CpOutIndex& out_begin, std::span<const std::int32_t> enclosing,
                         const CpSearch& s, std::uint32_t end, std::size_t top_events, CpAcrossTotals* across) {
  const bool own = across == nullptr;
  const auto first_edge = out_begin.view();
  const auto& pred = s.pred;
  const auto& clock = in.clock;
  RankCriticalPath r;
  r.length_ns = s.dist[end];
  // The path time of each (event, category): every weighed edge's share
  // listed, then sorted by that key and summed (what a map so keyed gives,
  // without a tree node per edge of a path of a million edges).
  struct Share {
    std::int32_t event;
    std::uint8_t category;
    std::int64_t ns;
  };
  std::vector<Share> by_event;
  reserve_huge(by_event, 2 * ev.size());  // a path has fewer edges than the graph has nodes: never grown
  auto node = end;
  r.end_ns = cp_time(clock, ev, node);
  r.start_ns = r.end_ns;
  while (pred[node] != kCpNoEdge) {
    const auto k = pred[node];
    const auto u = CpEdges::source(first_edge, k, node);
    const auto category = edges.category(k);
    const auto w = cp_weight(clock, ev, edges, k, cp_time(clock, ev, u), own);
    const auto event = cp_edge_event(u, edges.v[k], category, enclosing);
    ++r.path_edges;
    if (category != CpEdges::kNoCategory) {
      r.category_ns[category] += w;
      if (event >= 0 && w > 0) by_event.push_back({event, category, w});
      if (across && event >= 0) across->rank_ns[in.rank(ev[static_cast<std::size_t>(event)])] += w;
    }
    if (across && edges.collective(k) && category != CpEdges::kNoCategory) {
      // A hub's edge to a participant's end: from the rank the path
      // entered the hub from.
      std::int32_t from = in.rank(ev[u / 2]);
      if (const auto entered = pred[u]; entered != kCpNoEdge && edges.collective(entered))
        from = in.rank(ev[CpEdges::source(first_edge, entered, u) / 2]);
      if (from != in.rank(ev[edges.v[k] / 2])) ++across->crossings;
    }
    node = u;
    r.start_ns = cp_time(clock, ev, node);
  }
  // Ranked by (path time descending, start, end, name, then event and
  // category: a total order, so the events kept and their order do not
  // depend on the sort), read from each event as compared (mostly the path
  // times alone decide), no record of every event's keys beside the shares
  // (48 bytes each); only the events kept are built (names copied), and
  // only they are put in order (a partial sort: a path of 10^4-10^5 events
  // keeps 20 by default).
  std::sort(by_event.begin(), by_event.end(), [](const Share& a, const Share& b) {
    return std::tie(a.event, a.category) < std::tie(b.event, b.category);
  });
  std::size_t shares = 0;
  for (const auto& share : by_event) {
    if (shares > 0 && by_event[shares - 1].event == share.event && by_event[shares - 1].category == share.category)
      by_event[shares - 1].ns += share.ns;
    else
      by_event[shares++] = share;
  }
  by_event.resize(shares);
  const auto name_of = [&](const CpEvent& e) -> std::string_view {
    switch (e.kind) {
      case PathEvent::Kind::kNvtx: return t.str(t.nvtx[e.source].name);
      case PathEvent::Kind::kApi: return t.str(t.api_calls[e.source].name);
      case PathEvent::Kind::kMemcpy: return "memcpy";
      case PathEvent::Kind::kMemset: return "memset";
      default: return t.str(t.activities[e.source].name);
    }
  };
  const auto before = [&](const Share& a, const Share& b) {
    if (a.ns != b.ns) return a.ns > b.ns;
    if (a.event == b.event) return a.category < b.category;
    const auto& ea = ev[static_cast<std::size_t>(a.event)];
    const auto& eb = ev[static_cast<std::size_t>(b.event)];
    if (const auto sa = clock.start(ea), sb = clock.start(eb); sa != sb) return sa < sb;
    if (const auto xa = clock.end(ea), xb = clock.end(eb); xa != xb) return xa < xb;
    if (const auto na = name_of(ea), nb = name_of(eb); na != nb) return na < nb;
    return a.event < b.event;
  };
  r.path_event_count = static_cast<std::int64_t>(by_event.size());
  if (top_events > 0 && by_event.size() > top_events) {
    const auto kept = by_event.begin() + static_cast<std::ptrdiff_t>(top_events);
    std::partial_sort(by_event.begin(), kept, by_event.end(), before);
    by_event.erase(kept, by_event.end());
  } else {
    std::sort(by_event.begin(), by_event.end(), before);
  }
  r.events.reserve(by_event.size());
  for (const auto& k : by_event) {
    const auto& e = ev[static_cast<std::size_t>(k.event)];
    PathEvent p;
    p.kind = e.kind;
    p.start_ns = clock.start(e);
    p.end_ns = clock.end(e);
    p.category = static_cast<PathCategory>(k.category);
    p.path_ns = k.ns;
    p.name = std::string(name_of(e));
    p.rank = in.rank(e);
    switch (e.kind) {
      case PathEvent::Kind::kNvtx: p.thread = in.threads[static_cast<std::size_t>(e.lane)]; break;
      case PathEvent::Kind::kApi:
        p.thread = in.threads[static_cast<std::size_t>(e.lane)];
        p.correlation_id = t.api_calls[e.source].correlation_id;
        break;
      default: {
        const auto& a = t.activities[e.source];
        p.stream = t.streams[static_cast<std::size_t>(e.lane)].id.value;
        p.native_stream = t.streams[static_cast<std::size_t>(e.lane)].native_id;
        p.correlation_id = a.correlation_id;
      }
    }
    r.events.push_back(std::move(p));
  }
  return r;
}

}  // namespace moetrace::analyzer::detail
