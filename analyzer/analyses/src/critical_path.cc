#include "moetrace/analyzer/critical_path.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>
#include <utility>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/launch_queue.h"
#include "parallel.h"

namespace moetrace::analyzer {
namespace {

enum class CpSync : std::uint8_t { kNone, kDevice, kOne };

// An event of one rank: host events first, then GPU events.
struct CpEvent {
  std::int64_t start = 0, end = 0;
  std::int64_t thread = -1;
  std::int32_t rank = 0;
  std::int32_t stream = -1;   // index into Trace::streams (GPU)
  std::uint32_t source = 0;   // index into nvtx, api_calls or activities
  PathEvent::Kind kind = PathEvent::Kind::kNvtx;
  bool blocking = false;
  CpSync sync = CpSync::kNone;
};

constexpr std::uint8_t kCpNoCategory = 255;

struct CpEdge {
  std::uint32_t u = 0, v = 0;
  std::int64_t w = 0;
  std::int32_t event = -1;  // attributed event; -1: none
  std::uint8_t category = kCpNoCategory;
  bool collective = false;  // a collective edge between ranks (across-ranks graph)
};

bool cp_is_blocking(std::string_view base) {
  return base == "cudaDeviceSynchronize" || base == "cudaStreamSynchronize" || base == "cudaEventQuery" ||
         base == "cudaEventSynchronize" || base == "cudaMemcpy" || base == "cudaMemcpyAsync";
}

CpSync cp_sync_kind(std::string_view base) {
  if (base == "cudaDeviceSynchronize") return CpSync::kDevice;
  if (base == "cudaStreamSynchronize" || base == "cudaEventSynchronize") return CpSync::kOne;
  return CpSync::kNone;
}

class CpGraph {
 public:
  // across: the graph of every rank, joined at collectives (rank: -1).
  CpGraph(const Trace& t, std::int32_t rank, std::vector<CpEvent> host, const std::vector<std::uint32_t>& streams,
            std::vector<std::int32_t>& api_event, bool across = false)
      : t_(t), rank_(rank), across_(across), ev_(std::move(host)), streams_(streams), api_event_(api_event) {}

  RankCriticalPath run(std::size_t top_events) {
    host_edges();
    gpu_edges();
    sync_edges();
    if (across_) collective_edges();
    return longest(top_events);
  }

  // Across ranks: the collective instances that joined ranks, the edges
  // added, the path's edges between ranks, path time per rank.
  std::int64_t instances = 0, collective_edge_count = 0, crossings = 0, wait_ns = 0;
  std::map<std::int32_t, std::int64_t> rank_ns;

 private:
  std::uint32_t start_node(std::size_t e) const { return static_cast<std::uint32_t>(2 * e); }
  std::uint32_t end_node(std::size_t e) const { return static_cast<std::uint32_t>(2 * e + 1); }
  std::int64_t ts(std::uint32_t n) const { return n % 2 == 0 ? ev_[n / 2].start : ev_[n / 2].end; }

  void span(std::uint32_t u, std::uint32_t v, std::int32_t event, PathCategory c, bool zero = false) {
    edges_.push_back({u, v, zero ? 0 : std::max<std::int64_t>(0, ts(v) - ts(u)), event, static_cast<std::uint8_t>(c)});
  }
  void link(std::uint32_t u, std::uint32_t v) { edges_.push_back({u, v, 0, -1, kCpNoCategory}); }

  // HTA's depth-first walk of each thread's call stack.
  void host_edges() {
    const std::size_t host = ev_.size();
    // Sorted by (rank, thread, start, longest first): the keys side by side,
    // not compared through the events (a sort of every rank's host events,
    // the costliest step of a many-rank run's path).
    struct Key {
      std::int64_t thread, start, neg_end;
      std::int32_t rank;
      std::uint32_t event;
    };
    std::vector<Key> keys(host);
    for (std::size_t i = 0; i < host; ++i)
      keys[i] = {ev_[i].thread, ev_[i].start, -ev_[i].end, ev_[i].rank, static_cast<std::uint32_t>(i)};
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      return std::tie(a.rank, a.thread, a.start, a.neg_end, a.event) <
             std::tie(b.rank, b.thread, b.start, b.neg_end, b.event);
    });
    std::vector<std::uint32_t> order(host);
    for (std::size_t i = 0; i < host; ++i) order[i] = keys[i].event;
    std::vector<Key>().swap(keys);
    std::vector<std::uint32_t> stack;
    std::int64_t last = -1, last_top_end = -1;
    auto exit_top = [&] {
      const auto e = stack.back();
      stack.pop_back();
      const auto from = static_cast<std::uint32_t>(last);
      // start -> end of a leaf: itself; end -> end: the event that ends.
      span(from, end_node(e), static_cast<std::int32_t>(e), PathCategory::kCpuOp, ev_[e].blocking);
      if (stack.empty()) {
        last = -1;
        last_top_end = end_node(e);
      } else {
        last = end_node(e);
      }
    };
    for (std::size_t k = 0; k < order.size(); ++k) {
      const auto e = order[k];
      if (k > 0 && (ev_[order[k - 1]].thread != ev_[e].thread || ev_[order[k - 1]].rank != ev_[e].rank)) {
        while (!stack.empty()) exit_top();
        last = -1;
        last_top_end = -1;
      }
      while (!stack.empty() && !(ev_[e].start >= ev_[stack.back()].start && ev_[e].end <= ev_[stack.back()].end))
        exit_top();
      if (stack.empty() && last_top_end >= 0) link(static_cast<std::uint32_t>(last_top_end), start_node(e));
      if (last >= 0) {
        const auto from = static_cast<std::uint32_t>(last);
        // start -> start: the source's event; end -> start: the enclosing op.
        const auto owner = from % 2 == 0 ? from / 2 : stack.back();
        span(from, start_node(e), static_cast<std::int32_t>(owner), PathCategory::kCpuOp);
      }
      stack.push_back(e);
      last = start_node(e);
    }
    while (!stack.empty()) exit_top();
  }

  void gpu_edges() {
    for (auto s : streams_) {
      const auto begin = t_.activity_track_begin[s];
      std::int64_t prev = -1;
      for (std::size_t i = begin; i < t_.activity_track_begin[s + 1]; ++i) {
        const auto& a = t_.activities[i];
        CpEvent g;
        g.start = a.start_ns;
        g.end = a.end_ns;
        g.stream = static_cast<std::int32_t>(s);
        g.rank = t_.streams[s].rank.value;
        g.source = static_cast<std::uint32_t>(i);
        g.kind = a.type == ActivityType::kMemcpy   ? PathEvent::Kind::kMemcpy
                 : a.type == ActivityType::kMemset ? PathEvent::Kind::kMemset
                                                   : PathEvent::Kind::kKernel;
        const auto id = ev_.size();
        ev_.push_back(g);
        const auto c = a.type != ActivityType::kKernel ? PathCategory::kMemcpyMemset
                       : is_communication(classify_activity(t_, a)) ? PathCategory::kKernelCommunication
                                                                    : PathCategory::kKernelCompute;
        own_edge_.push_back(edges_.size());
        span(start_node(id), end_node(id), static_cast<std::int32_t>(id), c);
        const auto h = launch_event(a);
        if (h >= 0 && (prev < 0 || ev_[static_cast<std::size_t>(prev)].end < ev_[static_cast<std::size_t>(h)].start))
          span(start_node(static_cast<std::size_t>(h)), start_node(id), static_cast<std::int32_t>(id),
               PathCategory::kLaunchDelay);
        else if (prev >= 0)
          span(end_node(static_cast<std::size_t>(prev)), start_node(id), static_cast<std::int32_t>(prev),
               PathCategory::kKernelGap);
        prev = static_cast<std::int64_t>(id);
      }
    }
  }

  // The host event of an activity's launching call on this rank, or -1.
  std::int64_t launch_event(const Activity& a) const {
    const ApiCall* call = t_.launching_call(a);
    if (call == nullptr) return -1;
    return api_event_[static_cast<std::size_t>(call - t_.api_calls.data())];
  }

  // The last GPU event of stream track `s` launched before `call` started
  // and ended by its end; -1 if none.
  std::int64_t waited_for(std::uint32_t s, const CpEvent& call) const {
    const auto* first = t_.activities.data() + t_.activity_track_begin[s];
    const auto* last = t_.activities.data() + t_.activity_track_begin[s + 1];
    const auto* it = std::upper_bound(first, last, call.end,
                                      [](std::int64_t v, const Activity& a) { return v < a.start_ns; });
    for (int walked = 0; it != first && walked < 64; ++walked) {
      --it;
      if (it->end_ns > call.end) continue;
      const auto h = launch_event(*it);
      const auto launched = h >= 0 ? ev_[static_cast<std::size_t>(h)].start : it->start_ns;
      if (launched < call.start) return gpu_event_[static_cast<std::size_t>(it - t_.activities.data())];
    }
    return -1;
  }

  void sync_edges() {
    gpu_event_.assign(t_.activities.size(), -1);
    for (std::size_t e = 0; e < ev_.size(); ++e)
      if (ev_[e].stream >= 0) gpu_event_[ev_[e].source] = static_cast<std::int64_t>(e);
    const auto host = ev_.size();
    for (std::size_t e = 0; e < host; ++e) {
      if (ev_[e].sync == CpSync::kNone) continue;
      std::int64_t best = -1;
      for (auto s : streams_) {
        if (t_.streams[s].rank.value != ev_[e].rank) continue;
        const auto g = waited_for(s, ev_[e]);
        if (g < 0) continue;
        if (ev_[e].sync == CpSync::kDevice)
          link(end_node(static_cast<std::size_t>(g)), end_node(e));
        else if (best < 0 || ev_[static_cast<std::size_t>(g)].end > ev_[static_cast<std::size_t>(best)].end)
          best = g;
      }
      if (best >= 0) link(end_node(static_cast<std::size_t>(best)), end_node(e));
    }
  }

  // Across ranks (critical_path.h): each collective instance with 2+ ranks
  // (clock_align.h's collective_calls) joins its participants' kernels.
  void collective_edges() {
    const auto host = host_count();
    // Op-paired calls: the op's communication kernels, first start and last end.
    std::vector<std::int64_t> op_first, op_last;
    auto gpu = [&](std::size_t activity) { return gpu_event_[activity]; };
    const auto calls = collective_calls(t_);
    bool by_op = false;
    for (const auto& c : calls) by_op = by_op || c.op >= 0;
    if (by_op) {
      op_first.assign(t_.ops.size(), -1);
      op_last.assign(t_.ops.size(), -1);
      for (std::size_t e = host; e < ev_.size(); ++e) {
        const auto& a = t_.activities[ev_[e].source];
        if (a.type != ActivityType::kKernel || a.op < 0 || static_cast<std::size_t>(a.op) >= t_.ops.size() ||
            !is_communication(classify_activity(t_, a)))
          continue;
        auto& f = op_first[static_cast<std::size_t>(a.op)];
        auto& l = op_last[static_cast<std::size_t>(a.op)];
        if (f < 0 || ev_[e].start < ev_[static_cast<std::size_t>(f)].start) f = static_cast<std::int64_t>(e);
        if (l < 0 || ev_[e].end > ev_[static_cast<std::size_t>(l)].end) l = static_cast<std::int64_t>(e);
      }
    }
    struct Part {
      std::size_t first, last;  // GPU events: the first kernel's start, the last kernel's end
    };
    std::vector<Part> parts;
    for (std::size_t i = 0; i < calls.size();) {
      std::size_t j = i;
      while (j < calls.size() && calls[j].key == calls[i].key) ++j;
      parts.clear();
      std::int32_t prev_rank = 0;
      for (std::size_t k = i; k < j; ++k) {
        const auto& c = calls[k];
        if (!parts.empty() && c.rank == prev_rank) continue;  // one part per rank
        std::int64_t f = -1, l = -1;
        if (c.activity >= 0) {
          f = l = gpu(static_cast<std::size_t>(c.activity));
        } else if (c.op >= 0 && static_cast<std::size_t>(c.op) < op_first.size()) {
          f = op_first[static_cast<std::size_t>(c.op)];
          l = op_last[static_cast<std::size_t>(c.op)];
        }
        if (f < 0 || l < 0) continue;
        parts.push_back({static_cast<std::size_t>(f), static_cast<std::size_t>(l)});
        prev_rank = c.rank;
      }
      i = j;
      if (parts.size() < 2) continue;
      ++instances;
      std::int64_t last_start = 0;
      for (const auto& p : parts) last_start = std::max(last_start, ev_[p.first].start);
      // The part of the first kernel before the last participant started
      // is waiting: it weighs nothing (like a blocking call's wait).
      for (const auto& p : parts) {
        auto& e = edges_[own_edge_[p.first - host]];
        const auto w = std::max<std::int64_t>(0, ev_[p.first].end - std::max(ev_[p.first].start, last_start));
        wait_ns += e.w - w;
        e.w = w;
      }
      // Every participant's start -> every other's end weighs
      // end(other) - max(start(this), last_start) = end(other) - last_start
      // (no participant starts after the last): the same for every `this`.
      // So one hub, the last participant's start, carries them: each other
      // start -> hub (weight 0), hub -> each end. 2n - 1 edges instead of
      // n (n - 1), the same longest paths (a participant's own end through
      // the hub weighs what its own kernels do).
      std::size_t hub = parts.front().first;
      for (const auto& p : parts)
        if (ev_[p.first].start == last_start) {
          hub = p.first;
          break;
        }
      for (const auto& p : parts)
        if (p.first != hub) {
          edges_.push_back({start_node(p.first), start_node(hub), 0, -1, kCpNoCategory, true});
          ++collective_edge_count;
        }
      for (const auto& q : parts) {
        const auto w = std::max<std::int64_t>(0, ev_[q.last].end - last_start);
        edges_.push_back({start_node(hub), end_node(q.last), w, static_cast<std::int32_t>(q.last),
                          static_cast<std::uint8_t>(PathCategory::kKernelCommunication), true});
        ++collective_edge_count;
      }
    }
  }

  std::size_t host_count() const {
    std::size_t h = 0;
    while (h < ev_.size() && ev_[h].stream < 0) ++h;
    return h;
  }

  RankCriticalPath longest(std::size_t top_events) {
    const std::size_t n = 2 * ev_.size();
    RankCriticalPath r;
    r.rank = rank_;
    r.nodes = static_cast<std::int64_t>(n);
    r.edges = static_cast<std::int64_t>(edges_.size());
    if (n == 0) return r;
    std::vector<std::uint32_t> out_begin(n + 1, 0), indegree(n, 0);
    for (const auto& e : edges_) {
      ++out_begin[e.u + 1];
      ++indegree[e.v];
    }
    for (std::size_t i = 0; i < n; ++i) out_begin[i + 1] += out_begin[i];
    std::vector<std::uint32_t> out(edges_.size()), fill(out_begin.begin(), out_begin.end() - 1);
    for (std::size_t k = 0; k < edges_.size(); ++k) out[fill[edges_[k].u]++] = static_cast<std::uint32_t>(k);
    // Kahn's order; nodes on a cycle (inconsistent times) never become ready.
    std::vector<std::int64_t> dist(n, 0);
    std::vector<std::int64_t> pred(n, -1);  // edge index
    std::deque<std::uint32_t> ready;
    for (std::size_t i = 0; i < n; ++i)
      if (indegree[i] == 0) ready.push_back(static_cast<std::uint32_t>(i));
    std::int64_t best = -1;
    while (!ready.empty()) {
      const auto u = ready.front();
      ready.pop_front();
      if (best < 0 || dist[u] > dist[static_cast<std::size_t>(best)]) best = u;
      for (auto k = out_begin[u]; k < out_begin[u + 1]; ++k) {
        const auto& e = edges_[out[k]];
        if (pred[e.v] < 0 || dist[u] + e.w > dist[e.v]) {
          dist[e.v] = dist[u] + e.w;
          pred[e.v] = out[k];
        }
        if (--indegree[e.v] == 0) ready.push_back(e.v);
      }
    }
    if (best < 0) return r;
    r.length_ns = dist[static_cast<std::size_t>(best)];
    std::map<std::pair<std::int32_t, std::uint8_t>, std::int64_t> by_event;
    auto node = static_cast<std::uint32_t>(best);
    r.end_ns = ts(node);
    r.start_ns = r.end_ns;
    while (pred[node] >= 0) {
      const auto& e = edges_[static_cast<std::size_t>(pred[node])];
      ++r.path_edges;
      if (e.category != kCpNoCategory) {
        r.category_ns[e.category] += e.w;
        if (e.event >= 0 && e.w > 0) by_event[{e.event, e.category}] += e.w;
        if (across_ && e.event >= 0) rank_ns[ev_[static_cast<std::size_t>(e.event)].rank] += e.w;
      }
      if (e.collective && e.category != kCpNoCategory) {
        // A hub's edge to a participant's end: from the rank the path
        // entered the hub from.
        std::int32_t from = ev_[e.u / 2].rank;
        if (const auto in = pred[e.u]; in >= 0 && edges_[static_cast<std::size_t>(in)].collective)
          from = ev_[edges_[static_cast<std::size_t>(in)].u / 2].rank;
        if (from != ev_[e.v / 2].rank) ++crossings;
      }
      node = e.u;
      r.start_ns = ts(node);
    }
    // Ranked by (path time descending, start, end, name) on light records;
    // only the events kept are built (names copied). std::sort on the
    // records sees the same comparisons as on the events, so the order
    // (ties included) is the one of sorting the built events.
    struct Ranked {
      std::int64_t ns, start, end;
      std::string_view name;
      std::int32_t event;
      std::uint8_t category;
    };
    std::vector<Ranked> ranked;
    ranked.reserve(by_event.size());
    for (const auto& [key, ns] : by_event) {
      const auto& ev = ev_[static_cast<std::size_t>(key.first)];
      std::string_view name;
      switch (ev.kind) {
        case PathEvent::Kind::kNvtx: name = t_.str(t_.nvtx[ev.source].name); break;
        case PathEvent::Kind::kApi: name = t_.str(t_.api_calls[ev.source].name); break;
        case PathEvent::Kind::kMemcpy: name = "memcpy"; break;
        case PathEvent::Kind::kMemset: name = "memset"; break;
        default: name = t_.str(t_.activities[ev.source].name);
      }
      ranked.push_back({ns, ev.start, ev.end, name, key.first, key.second});
    }
    std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
      if (a.ns != b.ns) return a.ns > b.ns;
      if (a.start != b.start) return a.start < b.start;
      if (a.end != b.end) return a.end < b.end;
      return a.name < b.name;
    });
    r.path_event_count = static_cast<std::int64_t>(ranked.size());
    if (top_events > 0 && ranked.size() > top_events) ranked.resize(top_events);
    r.events.reserve(ranked.size());
    for (const auto& k : ranked) {
      const auto& ev = ev_[static_cast<std::size_t>(k.event)];
      PathEvent p;
      p.kind = ev.kind;
      p.start_ns = ev.start;
      p.end_ns = ev.end;
      p.category = static_cast<PathCategory>(k.category);
      p.path_ns = k.ns;
      p.name = std::string(k.name);
      p.rank = ev.rank;
      switch (ev.kind) {
        case PathEvent::Kind::kNvtx: p.thread = ev.thread; break;
        case PathEvent::Kind::kApi:
          p.thread = ev.thread;
          p.correlation_id = t_.api_calls[ev.source].correlation_id;
          break;
        default: {
          const auto& a = t_.activities[ev.source];
          p.stream = t_.streams[static_cast<std::size_t>(ev.stream)].id.value;
          p.correlation_id = a.correlation_id;
        }
      }
      r.events.push_back(std::move(p));
    }
    return r;
  }

  const Trace& t_;
  std::int32_t rank_;
  bool across_;
  std::vector<CpEvent> ev_;
  const std::vector<std::uint32_t>& streams_;
  std::vector<std::int32_t>& api_event_;
  std::vector<std::int64_t> gpu_event_;
  std::vector<std::size_t> own_edge_;  // GPU event - host_count() -> its start -> end edge
  std::vector<CpEdge> edges_;
};

}  // namespace

std::string_view path_category_name(PathCategory c) {
  switch (c) {
    case PathCategory::kCpuOp: return "cpu_op";
    case PathCategory::kKernelCompute: return "kernel_compute";
    case PathCategory::kKernelCommunication: return "kernel_communication";
    case PathCategory::kMemcpyMemset: return "memcpy_memset";
    case PathCategory::kLaunchDelay: return "launch_delay";
    case PathCategory::kKernelGap: return "kernel_gap";
  }
  return "cpu_op";
}

std::string_view path_event_kind_name(PathEvent::Kind k) {
  switch (k) {
    case PathEvent::Kind::kNvtx: return "nvtx";
    case PathEvent::Kind::kApi: return "api";
    case PathEvent::Kind::kKernel: return "kernel";
    case PathEvent::Kind::kMemcpy: return "memcpy";
    case PathEvent::Kind::kMemset: return "memset";
  }
  return "nvtx";
}

namespace {

// Every rank's host events (index into nvtx / api_calls in `source`) and
// stream tracks with activities; api_event[i]: api_calls[i]'s place in its
// rank's host events (-1: none). all_in_one: one list under rank -1 (the
// graph across ranks), the places in it.
struct CpInput {
  std::map<std::int32_t, std::vector<CpEvent>> host;
  std::map<std::int32_t, std::vector<std::uint32_t>> streams;
  std::vector<std::int32_t> api_event;
};

CpInput cp_input(const Trace& t, std::optional<std::int32_t> only, bool all_in_one) {
  CpInput in;
  auto wanted = [&](std::int32_t rank) { return !only || *only == rank; };
  auto key = [&](std::int32_t rank) { return all_in_one ? -1 : rank; };
  for (std::size_t i = 0; i < t.nvtx.size(); ++i) {
    const auto& n = t.nvtx[i];
    if (n.end_ns < n.start_ns || !wanted(n.rank.value)) continue;
    in.host[key(n.rank.value)].push_back({n.start_ns, n.end_ns, n.thread_id, n.rank.value, -1,
                                          static_cast<std::uint32_t>(i), PathEvent::Kind::kNvtx, false, CpSync::kNone});
  }
  in.api_event.assign(t.api_calls.size(), -1);
  for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
    const auto& c = t.api_calls[i];
    if (c.end_ns < c.start_ns || !wanted(c.rank.value)) continue;
    const auto base = runtime_call_base_name(t.str(c.name));
    auto& v = in.host[key(c.rank.value)];
    in.api_event[i] = static_cast<std::int32_t>(v.size());
    v.push_back({c.start_ns, c.end_ns, c.thread_id, c.rank.value, -1, static_cast<std::uint32_t>(i),
                 PathEvent::Kind::kApi, cp_is_blocking(base), cp_sync_kind(base)});
  }
  if (t.activity_track_begin.size() == t.streams.size() + 1)
    for (std::size_t s = 0; s < t.streams.size(); ++s)
      if (wanted(t.streams[s].rank.value) && t.activity_track_begin[s + 1] > t.activity_track_begin[s])
        in.streams[key(t.streams[s].rank.value)].push_back(static_cast<std::uint32_t>(s));
  return in;
}

}  // namespace

std::vector<RankCriticalPath> critical_paths(const Trace& t, const CriticalPathOptions& o) {
  auto in = cp_input(t, o.rank, false);
  std::vector<std::int32_t> ranks;
  for (const auto& [r, _] : in.host) ranks.push_back(r);
  for (const auto& [r, _] : in.streams) ranks.push_back(r);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  // Each rank's graph is its own: built side by side where threads allow.
  std::vector<RankCriticalPath> out(ranks.size());
  static const std::vector<std::uint32_t> kNone;
  detail::parallel_for(ranks.size(), o.threads, [&](std::size_t i) {
    const auto r = ranks[i];
    auto h = in.host.find(r);
    auto s = in.streams.find(r);
    CpGraph g(t, r, h != in.host.end() ? std::move(h->second) : std::vector<CpEvent>{},
              s != in.streams.end() ? s->second : kNone, in.api_event);
    out[i] = g.run(o.top_events);
  });
  return out;
}

CrossRankCriticalPath critical_path_across_ranks(const Trace& t, std::size_t top_events) {
  auto in = cp_input(t, std::nullopt, true);
  CrossRankCriticalPath out;
  {
    std::vector<std::int32_t> ranks;
    for (const auto& e : in.host[-1]) ranks.push_back(e.rank);
    for (auto s : in.streams[-1]) ranks.push_back(t.streams[s].rank.value);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    out.ranks = std::move(ranks);
  }
  out.path.rank = -1;
  if (out.ranks.empty()) return out;
  CpGraph g(t, -1, std::move(in.host[-1]), in.streams[-1], in.api_event, true);
  out.path = g.run(top_events);
  out.collective_instances = g.instances;
  out.collective_edges = g.collective_edge_count;
  out.waiting_ns = g.wait_ns;
  out.crossings = g.crossings;
  for (auto r : out.ranks) out.rank_ns.push_back({r, g.rank_ns.count(r) ? g.rank_ns[r] : 0});
  return out;
}

}  // namespace moetrace::analyzer
