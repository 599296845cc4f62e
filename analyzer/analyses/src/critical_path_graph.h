// The graph of critical_path.h, shared by its three files: critical_path.cc
// builds it (call stacks, the runtime lock, GPU edges, synchronisation,
// collectives across ranks); critical_path_input.cc chooses the events
// (window, threads); critical_path_search.cc finds its longest paths and
// reports them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "critical_path_edges.h"
#include "moetrace/analyzer/critical_path.h"
#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/sort_runs.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer::detail {

enum class CpSync : std::uint8_t { kNone, kDevice, kOne };

// An event of the graph: host events first, then GPU events.
struct CpEvent {
  std::uint32_t source = 0;  // index into nvtx, api_calls or activities (by kind): its times are read there (CpClock)
  // Host: the call stack it is on (the backward thread merged, see
  // critical_path.h), an index into CpInput::threads, one for each (rank,
  // thread); GPU: its stream, an index into Trace::streams. One field for
  // both, and the event's rank found through it (CpInput::rank), in 24 bits
  // beside the kind and the flags: 8 bytes an event (the graph across ranks
  // of a 10 M-event trace holds 7.8 M of them; with its times copied in, 24
  // bytes, 119 MiB more).
  std::uint32_t lane : 24 = 0;
  PathEvent::Kind kind : 3 = PathEvent::Kind::kNvtx;
  bool blocking : 1 = false;  // HTA's BLOCKING_SYNC_CALLS
  bool node : 1 = true;       // host: an operator or runtime call (else only structure: an annotation)
  bool lock : 1 = false;      // a call that takes the CUDA runtime's lock
  CpSync sync : 2 = CpSync::kNone;

  bool gpu() const { return kind >= PathEvent::Kind::kKernel; }
};
static_assert(sizeof(CpEvent) == 8);

// An event's start and end, read from its row (CpEvent::source) in the
// table of its kind: NVTX ranges, API calls or activities. One read a time,
// no branch on the kind: a table per kind of where its first row's times are
// and how far apart its rows are.
class CpClock {
 public:
  CpClock() = default;
  explicit CpClock(const Trace& t) {
    rows(PathEvent::Kind::kNvtx, std::span<const NvtxRange>(t.nvtx), &NvtxRange::start_ns, &NvtxRange::end_ns);
    rows(PathEvent::Kind::kApi, std::span<const ApiCall>(t.api_calls), &ApiCall::start_ns, &ApiCall::end_ns);
    for (auto k : {PathEvent::Kind::kKernel, PathEvent::Kind::kMemcpy, PathEvent::Kind::kMemset})
      rows(k, std::span<const Activity>(t.activities), &Activity::start_ns, &Activity::end_ns);
  }
  // The events of kind k read their times from table[source].
  template <class Row>
  void rows(PathEvent::Kind k, std::span<const Row> table, std::int64_t Row::*start, std::int64_t Row::*end) {
    const auto i = static_cast<std::size_t>(k);
    stride_[i] = sizeof(Row);
    start_[i] = table.empty() ? nullptr : reinterpret_cast<const std::byte*>(&(table[0].*start));
    end_[i] = table.empty() ? nullptr : reinterpret_cast<const std::byte*>(&(table[0].*end));
  }
  std::int64_t start(const CpEvent& e) const { return read(start_, e); }
  std::int64_t end(const CpEvent& e) const { return read(end_, e); }

 private:
  static constexpr std::size_t kKinds = 8;  // CpEvent::kind's 3 bits
  std::int64_t read(const std::array<const std::byte*, kKinds>& base, const CpEvent& e) const {
    const auto i = static_cast<std::size_t>(e.kind);
    std::int64_t v;
    std::memcpy(&v, base[i] + stride_[i] * e.source, sizeof v);
    return v;
  }
  std::array<const std::byte*, kKinds> start_{}, end_{};
  std::array<std::size_t, kKinds> stride_{};
};
// The most lanes a graph can tell apart.
constexpr std::size_t kCpMaxLanes = std::size_t{1} << 24;

// The events of one graph: host events (nodes and annotations) of the
// window, and the stream tracks whose activities may join it.
struct CpRankInput {
  std::vector<CpEvent> host;
  std::vector<std::uint32_t> streams;
};

struct CpInput {
  std::map<std::int32_t, CpRankInput> ranks;  // by rank (-1: every rank in one graph)
  std::vector<std::int64_t> threads;          // the host events' threads (CpEvent::lane)
  std::vector<std::int32_t> thread_rank;      // and their ranks
  std::vector<std::int32_t> stream_rank;      // each of Trace::streams's rank
  std::int32_t rank(const CpEvent& e) const { return e.gpu() ? stream_rank[e.lane] : thread_rank[e.lane]; }
  // Per API call and per activity (mapped apart, huge_pages.h: given back
  // once the graph is built, not left in the heap).
  // api_calls[i]'s place in its graph's host events, -1: not in the window.
  MappedVector<std::int32_t> api_event;
  // Per activity, a byte of these flags (what the graph reads of HTA's
  // queue lengths: two bits, not the two lengths, 8 bytes an activity).
  static constexpr std::uint8_t kInWindow = 1;      // its launching call is in the window; or, on a rank with no API calls at all, its own start is
  static constexpr std::uint8_t kAloneAtCall = 2;   // HTA's queue length on its stream at its launching call (after the call's +1) is 1
  static constexpr std::uint8_t kEmptyAtStart = 4;  // and at its start (after its -1) is 0
  MappedVector<std::uint8_t> activity;
  bool infer_sync = false;
  CpClock clock;  // the events' times
};

// The window's events (CriticalPathOptions: the annotation instances or the
// whole trace). Throws moetrace::Error where an instance is missing on a rank
// asked for by name.
CpInput cp_input(const Trace& t, const CriticalPathOptions& o, bool all_in_one);

bool cp_locks_runtime(std::string_view base_name);

// Nodes: event e's start is node 2e, its end 2e + 1.
inline std::int64_t cp_time(const CpClock& c, std::span<const CpEvent> ev, std::uint32_t node) {
  return node % 2 == 0 ? c.start(ev[node / 2]) : c.end(ev[node / 2]);
}

// The nodes of the calls that take the CUDA runtime's lock (host events
// before `host` that are lock and node), in order of (rank, time, node):
// f(rank, node) for each. The events are grouped by rank (a stable counting
// sort); within a rank the starts and the ends are sorted apart as (time,
// event) pairs, read once from the event tables (a rank's calls come in
// order of correlation id: mostly in order of time, one run a thread, so
// sort_runs mostly only checks), and merged as they are read. One rank's
// pairs at a time: 16 bytes a call of one rank, not 24 of every call (on a
// 10 M-event trace 7.8 M of them, 187 MB), and no comparison that reads the
// event tables (sorting arrays of event indices by the times they point
// to took 0.8-1.3 s of a 10 M-event trace's 3.9 M calls, now 0.3 s).
template <class F>
void cp_lock_nodes(std::span<const CpEvent> ev, std::size_t host, const CpInput& in, F&& f) {
  // Each lock event's rank, read once (an event's rank is its lane's).
  std::vector<std::int32_t> rank_of(host);
  for (std::size_t e = 0; e < host; ++e)
    if (ev[e].lock && ev[e].node) rank_of[e] = in.rank(ev[e]);
  // Each lock event's rank as its slot among the ranks (few), then a stable
  // counting sort by slot.
  std::map<std::int32_t, std::size_t> count;
  std::size_t n = 0;
  std::size_t* counted = nullptr;  // the count of the rank of the last lock event (ranks come in runs)
  std::int32_t counted_rank = 0;
  for (std::size_t e = 0; e < host; ++e)
    if (ev[e].lock && ev[e].node) {
      if (counted == nullptr || rank_of[e] != counted_rank) {
        counted = &count[rank_of[e]];
        counted_rank = rank_of[e];
      }
      ++*counted;
      ++n;
    }
  std::map<std::int32_t, std::size_t> next;  // rank -> its next place
  std::size_t at = 0;
  for (const auto& [rank, c] : count) {
    next[rank] = at;
    at += c;
  }
  std::vector<std::uint32_t> grouped(n);
  auto slot = next.end();
  for (std::size_t e = 0; e < host; ++e)
    if (ev[e].lock && ev[e].node) {
      if (slot == next.end() || slot->first != rank_of[e]) slot = next.find(rank_of[e]);
      grouped[slot->second++] = static_cast<std::uint32_t>(e);
    }
  std::vector<std::int32_t>().swap(rank_of);
  const auto& c = in.clock;
  using Key = std::pair<std::int64_t, std::uint32_t>;  // (time, event)
  std::vector<Key> starts, ends;
  std::size_t begin = 0;
  for (const auto& [rank, size] : count) {
    starts.resize(size);
    ends.resize(size);
    for (std::size_t i = 0; i < size; ++i) {
      const auto e = grouped[begin + i];
      starts[i] = {c.start(ev[e]), e};
      ends[i] = {c.end(ev[e]), e};
    }
    begin += size;
    sort_runs(starts, std::less<Key>());
    sort_runs(ends, std::less<Key>());
    // A start and an end of one time: by node, 2e against 2e' + 1, i.e.
    // the start first where e <= e'.
    std::size_t i = 0, j = 0;
    while (i < size || j < size) {
      if (j == size || (i < size && starts[i] <= ends[j])) {
        f(rank, 2 * starts[i].second);
        ++i;
      } else {
        f(rank, 2 * ends[j].second + 1);
        ++j;
      }
    }
  }
}

// The ranks of a graph's events, each given a slot (its place among them).
class CpRankSlots {
 public:
  explicit CpRankSlots(std::vector<std::int32_t> sorted_ranks);
  std::size_t size() const { return ranks_.size(); }
  std::int32_t rank(std::size_t slot) const { return ranks_[slot]; }
  std::size_t of(std::int32_t rank) const;

 private:
  std::vector<std::int32_t> ranks_;
  std::int32_t first_ = 0;
  std::vector<std::int32_t> dense_;  // rank - first_ -> slot, where the ranks span little
};

constexpr std::uint32_t kCpNoEdge = UINT32_MAX;

// Longest paths in Kahn's order over edges grouped by source (out_begin,
// CpEdges::group_by_source); nodes on a cycle (inconsistent times) never
// become ready. Without `ranks`: over every edge, one path (best[0]).
// With: each rank's own, as on its graph alone: edges between ranks left out
// and shortened edges at their own weight; best[slot] per rank. A FIFO queue
// restricted to one rank's nodes sees them in the order it would on that
// rank's graph alone (its nodes and each node's edges keep their relative
// order), so ties resolve as they would there.
// A search's arrays are a previous search's where `s` held one (the same
// graph: no new pages to fault in).
// Each node's longest-path length so far (at least 0: weights are), in 48
// bits: 6 bytes a node, not 8 (30 MiB less on a 10 M-event trace's 15.6 M
// nodes). A path of more than 2^48 - 1 ns (78 hours; no trace spans that,
// but a path sums weights across ranks' clocks) throws moetrace::Error
// rather than wrap.
class CpDistances {
 public:
  static constexpr std::int64_t kMax = (std::int64_t{1} << 48) - 1;
  // n nodes at 0, in the arrays of a previous search where they are large
  // enough (no new pages to fault in), else in new ones advised for huge
  // pages.
  void assign(std::size_t n) {
    reserve_huge_or_reuse(low_, n);
    reserve_huge_or_reuse(high_, n);
    low_.assign(n, 0);
    high_.assign(n, 0);
  }
  std::size_t size() const { return low_.size(); }
  std::int64_t operator[](std::size_t i) const {
    return static_cast<std::int64_t>((std::uint64_t{high_[i]} << 32) | low_[i]);
  }
  void set(std::size_t i, std::int64_t v) {
    if (v > kMax)
      throw Error("critical path: a path longer than 2^48 ns (78 hours); are the ranks' clocks aligned?");
    low_[i] = static_cast<std::uint32_t>(v);
    high_[i] = static_cast<std::uint16_t>(static_cast<std::uint64_t>(v) >> 32);
  }

 private:
  std::vector<std::uint32_t> low_;
  std::vector<std::uint16_t> high_;
};

struct CpSearch {
  CpDistances dist;
  std::vector<std::uint32_t> pred;  // edge index; kCpNoEdge: none
  std::vector<std::int64_t> best;   // the path's last node per slot; -1: none
  // Scratch: each node's in-degree, a byte each (15 M nodes); a node with
  // 255 or more in-edges (a runtime-lock end closing many calls) keeps the
  // rest in indegree_more (few).
  std::vector<std::uint8_t> indegree;
  std::unordered_map<std::uint32_t, std::uint32_t> indegree_more;
};
// `in`: the events' times, and their ranks, read where `ranks` is given.
void cp_search(std::span<const CpEvent> ev, const CpEdges& edges, const CpOutIndex& out_begin,
               const CpRankSlots* ranks, const CpInput& in, CpSearch& s);

// The categories fit below CpEdges::kNoCategory, which masks them in an edge's flags.
static_assert(kNumPathCategories <= CpEdges::kNoCategory);

// An edge's weight in a search: the time between its nodes unless flagged
// (CpEdges); `own`: a shortened edge with its own weight. `from_time`: the
// time of its source node.
inline std::int64_t cp_weight(const CpClock& c, std::span<const CpEvent> ev, const CpEdges& edges, std::size_t k,
                              std::int64_t from_time, bool own) {
  if (edges.zero(k)) return 0;
  if (edges.has_explicit(k) && !(own && edges.shortened(k))) return edges.explicit_weight(k);
  return std::max<std::int64_t>(0, cp_time(c, ev, edges.v[k]) - from_time);
}

// The event an edge's time is attributed to, -1 for none: derived from
// its nodes and category (the rules critical_path.cc adds its edges by),
// not stored, 4 bytes an edge fewer (the graph across ranks of a 10 M-event
// trace has 16 M edges). A dependency: none. An operator edge, as HTA's
// _attribute_edge: from a start, the source's event; to an end, the
// destination's; end -> start, the event enclosing the source in its call
// stack (`enclosing`, per host event; -1 at the top). A launch delay: the
// launched GPU event; a kernel gap: the stream's previous one. A GPU
// event's own edge and a collective hub's edge to a participant's end: the
// destination's.
inline std::int32_t cp_edge_event(std::uint32_t u, std::uint32_t v, std::uint8_t category,
                                  std::span<const std::int32_t> enclosing) {
  switch (category) {
    case CpEdges::kNoCategory: return -1;
    case static_cast<std::uint8_t>(PathCategory::kCpuOp):
      return u % 2 == 0   ? static_cast<std::int32_t>(u / 2)
             : v % 2 == 1 ? static_cast<std::int32_t>(v / 2)
                          : enclosing[u / 2];
    case static_cast<std::uint8_t>(PathCategory::kKernelGap): return static_cast<std::int32_t>(u / 2);
    default: return static_cast<std::int32_t>(v / 2);
  }
}

// Across ranks: the path time of each rank's events, the path's edges
// from one rank to another.
struct CpAcrossTotals {
  std::map<std::int32_t, std::int64_t> rank_ns;
  std::int64_t crossings = 0;
};

// The path ending at `end` of a search (its length, category split and top
// events, most time first); `across`: the path over every edge, its totals
// added there; else a rank's own.
// `enclosing`: each host event's enclosing event in its call stack (cp_edge_event).
RankCriticalPath cp_path(const Trace& t, const CpInput& in, std::span<const CpEvent> ev, const CpEdges& edges,
                         const CpOutIndex& out_begin, std::span<const std::int32_t> enclosing,
                         const CpSearch& s, std::uint32_t end, std::size_t top_events, CpAcrossTotals* across);

}  // namespace moetrace::analyzer::detail
