// The execution graph of a trace (exec_graph.h): construction.
#include "moetrace/analyzer/exec_graph.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/name_memo.h"
#include "moetrace/analyzer/stats.h"
#include "moetrace/analyzer/stream_waits.h"

namespace moetrace::analyzer {

std::string_view exec_edge_kind_name(ExecEdgeKind k) {
  switch (k) {
    case ExecEdgeKind::kHostOrder: return "host_order";
    case ExecEdgeKind::kDuration: return "duration";
    case ExecEdgeKind::kLaunch: return "launch";
    case ExecEdgeKind::kStreamOrder: return "stream_order";
    case ExecEdgeKind::kCrossStream: return "cross_stream";
    case ExecEdgeKind::kInferredCrossStream: return "inferred_cross_stream";
    case ExecEdgeKind::kSync: return "sync";
    case ExecEdgeKind::kCollective: return "collective";
    case ExecEdgeKind::kWhatIf: return "what_if";
  }
  return "host_order";
}

std::uint32_t ExecGraph::add_node(std::int64_t measured_ns, ExecNode::Kind kind, std::uint32_t ref, bool end) {
  nodes.push_back({measured_ns, ref, kind, end});
  return static_cast<std::uint32_t>(nodes.size() - 1);
}

void ExecGraph::add_edge(std::uint32_t from, std::uint32_t to, std::int64_t latency_ns, ExecEdgeKind kind) {
  edges.push_back({from, to, latency_ns, kind});
  ++edge_counts[static_cast<std::size_t>(kind)];
}

namespace {

// A host call that waits for the GPU (HTA's BLOCKING_SYNC_CALLS and their
// HIP and driver twins).
enum class Wait : std::uint8_t { kNone, kDevice, kOne, kOwnCopy };

Wait wait_kind(std::string_view name) {
  const auto b = runtime_call_base_name(name);
  if (b == "cudaDeviceSynchronize" || b == "hipDeviceSynchronize" || b == "cuCtxSynchronize") return Wait::kDevice;
  if (b == "cudaStreamSynchronize" || b == "cudaEventSynchronize" || b == "hipStreamSynchronize" ||
      b == "hipEventSynchronize" || b == "cuStreamSynchronize" || b == "cuEventSynchronize")
    return Wait::kOne;
  // Copies that return after the copy: cudaMemcpy; cudaMemcpyAsync from or
  // to pageable memory behaves so too (HTA counts it blocking).
  if (b == "cudaMemcpy" || b == "cudaMemcpyAsync" || b == "hipMemcpy" || b == "hipMemcpyAsync" ||
      b == "cuMemcpyDtoH" || b == "cuMemcpyHtoD")
    return Wait::kOwnCopy;
  return Wait::kNone;
}

bool is_stream_wait(std::string_view name) {
  const auto b = runtime_call_base_name(name);
  return b == "cudaStreamWaitEvent" || b == "hipStreamWaitEvent" || b == "cuStreamWaitEvent";
}


class Builder {
 public:
  Builder(const Trace& t, const ExecGraphOptions& o, ExecGraph& g) : t_(t), o_(o), g_(g) {}

  void build() {
    const auto na = t_.activities.size();
    g_.activity_start.assign(na, ExecGraph::kNone);
    g_.activity_end.assign(na, ExecGraph::kNone);
    g_.nvtx_start.assign(t_.nvtx.size(), ExecGraph::kNone);
    g_.nvtx_end.assign(t_.nvtx.size(), ExecGraph::kNone);
    g_.api_start.assign(t_.api_calls.size(), ExecGraph::kNone);
    g_.api_end.assign(t_.api_calls.size(), ExecGraph::kNone);
    if (t_.activity_track_begin.size() != t_.streams.size() + 1) return;
    launch_call_.assign(na, -1);
    for (std::size_t i = 0; i < na; ++i) {
      const ApiCall* c = t_.launching_call(t_.activities[i]);
      if (c != nullptr) launch_call_[i] = static_cast<std::int32_t>(c - t_.api_calls.data());
    }
    measure_latencies();
    find_waits();
    host_points();
    gpu_points();
    recorded_cross_stream();
    recorded_event_waits();
    launch_and_stream_edges();
    sync_edges();
    if (o_.collectives) collective_edges();
    describe_missing();
  }

 private:
  // An edge with a typical latency (a median of the trace), never more than
  // the time the trace shows between its ends: no edge demands more than
  // was measured, so the replay never runs late of the measurement by an
  // edge's spread, and a start it cannot explain runs early (exec_graph.h).
  void typical_edge(std::uint32_t from, std::uint32_t to, std::int64_t typical, ExecEdgeKind kind) {
    g_.add_edge(from, to, std::min(typical, g_.nodes[to].measured_ns - g_.nodes[from].measured_ns), kind);
  }

  const RankLatencies& lat(std::int32_t rank) const {
    static const RankLatencies kZero;
    auto it = latency_index_.find(rank);
    return it == latency_index_.end() ? kZero : g_.latencies[it->second];
  }

  // The rank's launch latencies and queue gaps (exec_graph.h).
  void measure_latencies() {
    struct Launches {
      std::vector<std::int64_t> from_start, from_end;
    };
    struct Samples {
      std::array<Launches, 3> launch;
      std::vector<std::int64_t> gap;
    };
    std::map<std::int32_t, Samples> samples;
    std::map<std::pair<std::int32_t, std::int32_t>, std::vector<std::int64_t>> name_gaps;  // (rank, name)
    std::map<std::tuple<std::int32_t, std::int32_t, int>, Launches> call_launches;      // (rank, call name, type)
    for (std::size_t s = 0; s < t_.streams.size(); ++s) {
      const auto rank = t_.streams[s].rank.value;
      auto& [launches, gap] = samples[rank];
      for (auto i = t_.activity_track_begin[s]; i < t_.activity_track_begin[s + 1]; ++i) {
        const auto& a = t_.activities[i];
        const auto c = launch_call_[i];
        if (c < 0) continue;
        const auto& call = t_.api_calls[static_cast<std::size_t>(c)];
        if (wait_of_.of(call.name) == Wait::kOwnCopy) continue;  // no launch latency (see below)
        const bool first = i == t_.activity_track_begin[s];
        const auto prev_end = first ? INT64_MIN : t_.activities[i - 1].end_ns;
        if (prev_end < call.start_ns) {
          // The first activity of a stream is no sample: the stream may have
          // held work from before the trace began.
          if (first || a.start_ns < call.start_ns) continue;
          auto& l = launches[static_cast<std::size_t>(a.type)];
          l.from_start.push_back(a.start_ns - call.start_ns);
          l.from_end.push_back(a.start_ns - call.end_ns);
          auto& k = call_launches[{rank, call.name.value, static_cast<int>(a.type)}];
          k.from_start.push_back(a.start_ns - call.start_ns);
          k.from_end.push_back(a.start_ns - call.end_ns);
        } else if (a.start_ns >= prev_end) {
          gap.push_back(a.start_ns - prev_end);
          if (a.type == ActivityType::kKernel) name_gaps[{rank, a.name.value}].push_back(a.start_ns - prev_end);
        }
      }
    }
    for (auto& [rank, v] : samples) {
      RankLatencies l;
      l.rank = rank;
      for (std::size_t k = 0; k < 3; ++k) {
        l.launch_samples[k] = static_cast<std::int64_t>(v.launch[k].from_start.size());
        l.launch_ns[k] = lower_median(v.launch[k].from_start);
        l.launch_after_call_ns[k] = lower_median(v.launch[k].from_end);
      }
      // A kind never launched on an idle stream: the kernels' latency.
      for (std::size_t k = 1; k < 3; ++k)
        if (l.launch_samples[k] == 0) {
          l.launch_ns[k] = l.launch_ns[0];
          l.launch_after_call_ns[k] = l.launch_after_call_ns[0];
        }
      l.queue_gap_samples = static_cast<std::int64_t>(v.gap.size());
      l.queue_gap_ns = lower_median(v.gap);
      latency_index_[rank] = g_.latencies.size();
      g_.latencies.push_back(l);
    }
    for (auto& [key, v] : name_gaps)
      if (v.size() >= kNameSamples) name_gap_[key] = lower_median(v);
    for (auto& [key, v] : call_launches)
      if (v.from_start.size() >= kNameSamples) call_launch_[key] = {lower_median(v.from_start), lower_median(v.from_end)};
  }

  // An activity's launch latencies from its call's start and from its end:
  // those of its call's kind (cudaLaunchKernel, cudaGraphLaunch, ...) and
  // its work's kind where the trace has kNameSamples such launches on an
  // idle stream, else its work's kind's on the rank.
  std::pair<std::int64_t, std::int64_t> launch_latency(const Activity& a, const ApiCall& call) const {
    if (auto it = call_launch_.find({a.rank.value, call.name.value, static_cast<int>(a.type)}); it != call_launch_.end())
      return it->second;
    const auto& l = lat(a.rank.value);
    return {l.launch_ns[static_cast<std::size_t>(a.type)], l.launch_after_call_ns[static_cast<std::size_t>(a.type)]};
  }

  // The queue gap before an activity: its kernel's own where the trace
  // queued it kNameSamples times or more, else its rank's.
  std::int64_t queue_gap(const Activity& a) const {
    if (a.type == ActivityType::kKernel)
      if (auto it = name_gap_.find({a.rank.value, a.name.value}); it != name_gap_.end()) return it->second;
    return lat(a.rank.value).queue_gap_ns;
  }

  // For each blocking call: the activity it waited for (exec_graph.h, kSync)
  // and whether it waited (that activity ended after the call started).
  void find_waits() {
    waited_.assign(t_.api_calls.size(), -1);
    waits_.assign(t_.api_calls.size(), 0);
    std::map<std::int32_t, std::vector<std::uint32_t>> rank_streams;
    for (std::size_t s = 0; s < t_.streams.size(); ++s)
      if (t_.activity_track_begin[s + 1] > t_.activity_track_begin[s])
        rank_streams[t_.streams[s].rank.value].push_back(static_cast<std::uint32_t>(s));
    own_activity_.assign(t_.api_calls.size(), -1);
    for (std::size_t i = 0; i < t_.activities.size(); ++i)
      if (launch_call_[i] >= 0) own_activity_[static_cast<std::size_t>(launch_call_[i])] = static_cast<std::int64_t>(i);
    NameMemo stream_wait(t_, is_stream_wait);
    for (std::size_t c = 0; c < t_.api_calls.size(); ++c) {
      const auto& call = t_.api_calls[c];
      if (stream_wait.of(call.name)) ++g_.stream_wait_calls;
      const auto kind = wait_of_.of(call.name);
      if (kind == Wait::kNone || call.end_ns < call.start_ns) continue;
      std::int64_t best = -1;
      if (kind == Wait::kOwnCopy) {
        const auto a = own_activity_[c];
        if (a >= 0 && t_.activities[static_cast<std::size_t>(a)].end_ns <= call.end_ns) best = a;
      } else {
        auto it = rank_streams.find(call.rank.value);
        if (it == rank_streams.end()) continue;
        for (auto s : it->second) {
          const auto g = waited_on_stream(s, call);
          if (g < 0) continue;
          if (kind == Wait::kDevice) device_waits_.push_back({c, g});
          if (best < 0 || t_.activities[static_cast<std::size_t>(g)].end_ns >
                              t_.activities[static_cast<std::size_t>(best)].end_ns)
            best = g;
        }
      }
      if (best < 0) continue;
      waited_[c] = best;
      waits_[c] = t_.activities[static_cast<std::size_t>(best)].end_ns > call.start_ns;
    }
  }

  // The last activity of stream track `s` launched before `call` started and
  // ended by its end (critical_path.h's rule); -1 if none.
  std::int64_t waited_on_stream(std::uint32_t s, const ApiCall& call) const {
    const auto* first = t_.activities.data() + t_.activity_track_begin[s];
    const auto* last = t_.activities.data() + t_.activity_track_begin[s + 1];
    const auto* it =
        std::upper_bound(first, last, call.end_ns, [](std::int64_t v, const Activity& a) { return v < a.start_ns; });
    for (int walked = 0; it != first && walked < 64; ++walked) {
      --it;
      if (it->end_ns > call.end_ns) continue;
      const auto i = static_cast<std::size_t>(it - t_.activities.data());
      const auto c = launch_call_[i];
      const auto launched = c >= 0 ? t_.api_calls[static_cast<std::size_t>(c)].start_ns : it->start_ns;
      if (launched < call.start_ns) return static_cast<std::int64_t>(i);
    }
    return -1;
  }

  // Host points per (rank, thread) in call-stack order, chained (kHostOrder).
  void host_points() {
    struct Key {
      std::int32_t rank;
      std::int64_t thread, start, neg_end;
      bool api;
      std::uint32_t index;
    };
    std::vector<Key> keys;
    keys.reserve(t_.nvtx.size() + t_.api_calls.size());
    for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
      const auto& n = t_.nvtx[i];
      if (n.end_ns >= n.start_ns)
        keys.push_back({n.rank.value, n.thread_id, n.start_ns, -n.end_ns, false, static_cast<std::uint32_t>(i)});
    }
    for (std::size_t i = 0; i < t_.api_calls.size(); ++i) {
      const auto& c = t_.api_calls[i];
      if (c.end_ns >= c.start_ns)
        keys.push_back({c.rank.value, c.thread_id, c.start_ns, -c.end_ns, true, static_cast<std::uint32_t>(i)});
    }
    // Ranges before the calls they enclose (a call starting with its range).
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      return std::tie(a.rank, a.thread, a.start, a.neg_end, a.api, a.index) <
             std::tie(b.rank, b.thread, b.start, b.neg_end, b.api, b.index);
    });
    std::vector<const Key*> stack;
    std::uint32_t last = ExecGraph::kNone;
    auto chain = [&](std::uint32_t node, bool waited_end) {
      if (last != ExecGraph::kNone)
        g_.add_edge(last, node, waited_end ? 0 : g_.nodes[node].measured_ns - g_.nodes[last].measured_ns,
                    ExecEdgeKind::kHostOrder);
      last = node;
    };
    auto close = [&] {
      const Key* k = stack.back();
      stack.pop_back();
      const auto end = -k->neg_end;
      if (k->api) {
        const auto n = g_.add_node(end, ExecNode::Kind::kApi, k->index, true);
        g_.api_end[k->index] = n;
        chain(n, waits_[k->index] != 0);
      } else {
        const auto n = g_.add_node(end, ExecNode::Kind::kNvtx, k->index, true);
        g_.nvtx_end[k->index] = n;
        chain(n, false);
      }
    };
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto& k = keys[i];
      if (i > 0 && (keys[i - 1].rank != k.rank || keys[i - 1].thread != k.thread)) {
        while (!stack.empty()) close();
        last = ExecGraph::kNone;
      }
      while (!stack.empty() && !(k.start >= stack.back()->start && -k.neg_end <= -stack.back()->neg_end)) close();
      const auto n = g_.add_node(k.start, k.api ? ExecNode::Kind::kApi : ExecNode::Kind::kNvtx, k.index, false);
      (k.api ? g_.api_start : g_.nvtx_start)[k.index] = n;
      chain(n, false);
      stack.push_back(&k);
    }
    while (!stack.empty()) close();
  }

  void gpu_points() {
    for (std::size_t i = 0; i < t_.activities.size(); ++i) {
      const auto& a = t_.activities[i];
      const auto s = g_.add_node(a.start_ns, ExecNode::Kind::kActivity, static_cast<std::uint32_t>(i), false);
      const auto e = g_.add_node(a.end_ns, ExecNode::Kind::kActivity, static_cast<std::uint32_t>(i), true);
      g_.activity_start[i] = s;
      g_.activity_end[i] = e;
      duration_edge_.push_back(g_.edges.size());
      g_.add_edge(s, e, std::max<std::int64_t>(0, a.end_ns - a.start_ns), ExecEdgeKind::kDuration);
    }
  }

  // The ops' own dependencies across streams (moetrace traces' op_deps): the
  // dependency's last activity -> the dependent op's first activity. A
  // dependency that ran nothing on the device passes its own dependencies on.
  void recorded_cross_stream() {
    if (t_.op_deps.empty() || t_.ops.empty()) return;
    const auto nops = t_.ops.size();
    std::vector<std::int64_t> first(nops, -1), last(nops, -1);
    for (std::size_t i = 0; i < t_.activities.size(); ++i) {
      const auto& a = t_.activities[i];
      if (a.op < 0 || static_cast<std::size_t>(a.op) >= nops) continue;
      auto& f = first[static_cast<std::size_t>(a.op)];
      auto& l = last[static_cast<std::size_t>(a.op)];
      if (f < 0 || a.start_ns < t_.activities[static_cast<std::size_t>(f)].start_ns) f = static_cast<std::int64_t>(i);
      if (l < 0 || a.end_ns > t_.activities[static_cast<std::size_t>(l)].end_ns) l = static_cast<std::int64_t>(i);
    }
    std::vector<std::vector<std::int32_t>> deps(nops);
    for (const auto& d : t_.op_deps) {
      const auto o = t_.op_index(d.op), p = t_.op_index(d.dep);
      if (o >= 0 && p >= 0) deps[static_cast<std::size_t>(o)].push_back(p);
    }
    // The activities an op's start waits for: its deps' last activities,
    // through deps without activities (bounded walk).
    for (std::size_t o = 0; o < nops; ++o) {
      if (first[o] < 0) continue;
      const auto target = static_cast<std::size_t>(first[o]);
      const auto stream = t_.activities[target].stream;
      std::vector<std::int32_t> todo(deps[o].begin(), deps[o].end());
      std::vector<std::int32_t> seen;
      while (!todo.empty() && seen.size() < 256) {
        const auto p = todo.back();
        todo.pop_back();
        if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
        seen.push_back(p);
        const auto l = last[static_cast<std::size_t>(p)];
        if (l < 0) {
          todo.insert(todo.end(), deps[static_cast<std::size_t>(p)].begin(), deps[static_cast<std::size_t>(p)].end());
          continue;
        }
        // Across ranks too: emulated ranks share one device, and their
        // collectives are such dependencies.
        if (t_.activities[static_cast<std::size_t>(l)].stream == stream) continue;
        cross_[target].push_back(static_cast<std::uint32_t>(l));
      }
    }
  }

  // Event waits the profiler recorded with their event's record
  // (stream_waits.h): the producer's end -> the consumer's start.
  void recorded_event_waits() {
    for (const auto& w : recorded_stream_waits(t_, &g_.recorded_waits)) {
      auto& v = cross_[w.consumer];
      if (std::find(v.begin(), v.end(), w.producer) == v.end()) v.push_back(w.producer);
    }
  }

  void launch_and_stream_edges() {
    // Every activity's end on each rank, for the inferred waits.
    // Every activity's end on each device (emulated ranks share one device
    // and wait for each other's streams), for the inferred waits.
    auto device_of = [&](const Activity& a) {
      return a.stream >= 0 ? t_.streams[static_cast<std::size_t>(a.stream)].device.value : -1;
    };
    std::map<std::int32_t, std::vector<std::pair<std::int64_t, std::uint32_t>>> ends;
    for (std::size_t i = 0; i < t_.activities.size(); ++i)
      ends[device_of(t_.activities[i])].push_back({t_.activities[i].end_ns, static_cast<std::uint32_t>(i)});
    for (auto& [r, v] : ends) std::sort(v.begin(), v.end());
    for (std::size_t s = 0; s < t_.streams.size(); ++s) {
      for (auto i = t_.activity_track_begin[s]; i < t_.activity_track_begin[s + 1]; ++i) {
        const auto& a = t_.activities[i];
        std::int64_t allowed = INT64_MIN;
        const auto c = launch_call_[i];
        if (c >= 0 && g_.api_start[static_cast<std::size_t>(c)] != ExecGraph::kNone) {
          const auto& call = t_.api_calls[static_cast<std::size_t>(c)];
          if (wait_of_.of(call.name) == Wait::kOwnCopy) {
            // A call that returns after its own copy: the time to the copy's
            // start is the call's own CPU work (staging pageable memory:
            // 159 ms before a 2.7 ms copy on the dpmoe fixture's rank 0),
            // kept as measured; no edge from its end (the sync edge runs the
            // other way).
            const auto staged = std::max<std::int64_t>(0, a.start_ns - call.start_ns);
            g_.add_edge(g_.api_start[static_cast<std::size_t>(c)], g_.activity_start[i], staged, ExecEdgeKind::kLaunch);
            allowed = call.start_ns + staged;
          } else {
            const auto [from_start, from_end] = launch_latency(a, call);
            typical_edge(g_.api_start[static_cast<std::size_t>(c)], g_.activity_start[i], from_start,
                         ExecEdgeKind::kLaunch);
            typical_edge(g_.api_end[static_cast<std::size_t>(c)], g_.activity_start[i], from_end, ExecEdgeKind::kLaunch);
            allowed = std::max(call.start_ns + from_start, call.end_ns + from_end);
          }
        } else {
          ++g_.unlaunched;
        }
        const bool first = i == t_.activity_track_begin[s];
        const auto gap = queue_gap(a);
        if (!first) {
          typical_edge(g_.activity_end[i - 1], g_.activity_start[i], gap, ExecEdgeKind::kStreamOrder);
          allowed = std::max(allowed, t_.activities[i - 1].end_ns + gap);
        }
        if (auto it = cross_.find(i); it != cross_.end())
          for (auto src : it->second) {
            typical_edge(g_.activity_end[src], g_.activity_start[i], gap, ExecEdgeKind::kCrossStream);
            allowed = std::max(allowed, t_.activities[src].end_ns + gap);
          }
        if (allowed == INT64_MIN) continue;  // a source: keeps its measured start
        if (a.start_ns - allowed <= o_.unexplained_ns) continue;
        // Started later than its launch and stream allowed: the other
        // stream's activity that ended last before it, if after `allowed`.
        const auto& v = ends[device_of(a)];
        auto it = std::upper_bound(v.begin(), v.end(), std::make_pair(a.start_ns, ~0u));
        std::int64_t found = -1;
        for (int walked = 0; it != v.begin() && walked < 64; ++walked) {
          --it;
          if (it->first + gap <= allowed) break;
          if (t_.activities[it->second].stream != a.stream) {
            found = it->second;
            break;
          }
        }
        if (found >= 0) {
          const auto src = static_cast<std::size_t>(found);
          typical_edge(g_.activity_end[src], g_.activity_start[i], gap, ExecEdgeKind::kInferredCrossStream);
          allowed = std::max(allowed, t_.activities[src].end_ns + gap);
        }
        if (a.start_ns - allowed > o_.unexplained_ns) {
          ++g_.unexplained;
          g_.unexplained_ns += a.start_ns - allowed;
          // Work without a launching call, or the first work of a stream,
          // that nothing explains keeps its measured start: what held it
          // lies outside the trace (before it began, or in another process).
          if (c < 0 || first) {
            if (g_.anchored.empty()) g_.anchored.assign(g_.nodes.size(), 0);
            g_.anchored[g_.activity_start[i]] = 1;
          }
        }
      }
    }
  }

  void sync_edges() {
    for (std::size_t c = 0; c < t_.api_calls.size(); ++c) {
      if (waited_[c] < 0 || g_.api_end[c] == ExecGraph::kNone) continue;
      const auto& call = t_.api_calls[c];
      const auto a = static_cast<std::size_t>(waited_[c]);
      // Waited: the call's time after the GPU work ended; else a wait the
      // call would make if that work ended later: its own duration.
      const auto latency = waits_[c] ? call.end_ns - t_.activities[a].end_ns : call.end_ns - call.start_ns;
      g_.add_edge(g_.activity_end[a], g_.api_end[c], std::max<std::int64_t>(0, latency), ExecEdgeKind::kSync);
    }
    // A device synchronisation waits for every stream's last work.
    for (const auto& [c, a] : device_waits_) {
      if (a == waited_[c] || g_.api_end[c] == ExecGraph::kNone) continue;
      const auto& call = t_.api_calls[c];
      const auto latency = std::max<std::int64_t>(0, call.end_ns - std::max(t_.activities[static_cast<std::size_t>(a)].end_ns,
                                                                            call.start_ns));
      g_.add_edge(g_.activity_end[static_cast<std::size_t>(a)], g_.api_end[c], latency, ExecEdgeKind::kSync);
    }
  }

  // Collective instances on 2+ ranks (exec_graph.h, kCollective).
  void collective_edges() {
    const auto calls = collective_calls(t_);
    if (calls.empty()) return;
    std::vector<std::int64_t> op_first, op_last;
    bool by_op = false;
    for (const auto& c : calls) by_op = by_op || c.op >= 0;
    if (by_op) {
      op_first.assign(t_.ops.size(), -1);
      op_last.assign(t_.ops.size(), -1);
      for (std::size_t i = 0; i < t_.activities.size(); ++i) {
        const auto& a = t_.activities[i];
        // Every activity of the collective's op: the kernels of a
        // communication library, or the copies of an emulated communicator.
        if (a.op < 0 || static_cast<std::size_t>(a.op) >= t_.ops.size()) continue;
        auto& f = op_first[static_cast<std::size_t>(a.op)];
        auto& l = op_last[static_cast<std::size_t>(a.op)];
        if (f < 0 || a.start_ns < t_.activities[static_cast<std::size_t>(f)].start_ns) f = static_cast<std::int64_t>(i);
        if (l < 0 || a.end_ns > t_.activities[static_cast<std::size_t>(l)].end_ns) l = static_cast<std::int64_t>(i);
      }
    }
    struct Part {
      std::size_t first, last;
      std::int32_t rank;
    };
    std::vector<Part> parts;
    for (std::size_t i = 0; i < calls.size();) {
      std::size_t j = i;
      while (j < calls.size() && calls[j].key == calls[i].key) ++j;
      parts.clear();
      for (std::size_t k = i; k < j; ++k) {
        const auto& c = calls[k];
        if (!parts.empty() && parts.back().rank == c.rank) continue;
        std::int64_t f = -1, l = -1;
        if (c.activity >= 0) {
          f = l = c.activity;
        } else if (c.op >= 0 && static_cast<std::size_t>(c.op) < op_first.size()) {
          f = op_first[static_cast<std::size_t>(c.op)];
          l = op_last[static_cast<std::size_t>(c.op)];
        }
        if (f < 0 || l < 0) continue;
        parts.push_back({static_cast<std::size_t>(f), static_cast<std::size_t>(l), c.rank});
      }
      i = j;
      if (parts.size() < 2) continue;
      ++g_.collective_instances;
      std::int64_t last_start = INT64_MIN;
      for (const auto& p : parts) last_start = std::max(last_start, t_.activities[p.first].start_ns);
      for (const auto& p : parts) {
        const auto transfer = std::max<std::int64_t>(0, t_.activities[p.last].end_ns - last_start);
        if (p.first == p.last) g_.edges[duration_edge_[p.first]].latency_ns = transfer;
        for (const auto& q : parts)
          if (&p != &q) g_.add_edge(g_.activity_start[q.first], g_.activity_end[p.last], transfer, ExecEdgeKind::kCollective);
      }
    }
  }

  void describe_missing() {
    auto count = [&](ExecEdgeKind k) { return g_.edge_counts[static_cast<std::size_t>(k)]; };
    if (t_.api_calls.empty())
      g_.missing.push_back(
          "launch: the trace records no runtime calls; GPU work follows its stream only, and work that started later "
          "than its stream allowed keeps its measured start");
    else if (g_.unlaunched > 0)
      g_.missing.push_back(std::to_string(g_.unlaunched) +
                           " GPU activities have no launching call in the trace; they follow their stream only");
    if (count(ExecEdgeKind::kCrossStream) == 0) {
      std::string line = "cross-stream waits: not recorded";
      if (g_.recorded_waits > 0)
        line += " (" + std::to_string(g_.recorded_waits) + " event waits recorded, none after work it could wait for)";
      else if (g_.stream_wait_calls > 0)
        line += " (" + std::to_string(g_.stream_wait_calls) + " stream-wait calls without their event or stream)";
      line += "; " + std::to_string(count(ExecEdgeKind::kInferredCrossStream)) +
              " inferred from the timeline (a start later than its launch and stream allowed, at another stream's "
              "end); the PyTorch profiler records them exactly with experimental_config=_ExperimentalConfig("
              "enable_cuda_sync_events=True)";
      g_.missing.push_back(std::move(line));
    }
    bool several_ranks = false;
    for (std::size_t s = 1; s < t_.streams.size(); ++s)
      several_ranks = several_ranks || t_.streams[s].rank.value != t_.streams[0].rank.value;
    if (!several_ranks && count(ExecEdgeKind::kCollective) == 0)
      g_.missing.push_back(
          "collectives across ranks: one rank recorded; each collective keeps its measured duration (its wait for the "
          "other ranks included)");
    if (g_.unexplained > 0)
      g_.missing.push_back(std::to_string(g_.unexplained) +
                           " GPU activities started later than every edge into them allows (" +
                           std::to_string(g_.unexplained_ns / 1000) +
                           " us in all): something the trace does not record held them");
  }

  const Trace& t_;
  const ExecGraphOptions& o_;
  ExecGraph& g_;
  NameMemo<Wait, Wait (*)(std::string_view)> wait_of_{t_, wait_kind};  // a call's Wait, by its name
  std::vector<std::int32_t> launch_call_;
  std::vector<std::int64_t> waited_, own_activity_;
  std::vector<std::uint8_t> waits_;
  std::vector<std::pair<std::size_t, std::int64_t>> device_waits_;
  std::map<std::int32_t, std::size_t> latency_index_;
  // Samples a kernel name needs for a queue gap of its own.
  static constexpr std::size_t kNameSamples = 3;
  std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> name_gap_;  // (rank, name) -> queue gap
  // (rank, call name, activity type) -> launch latency from the call's start, from its end.
  std::map<std::tuple<std::int32_t, std::int32_t, int>, std::pair<std::int64_t, std::int64_t>> call_launch_;
  std::map<std::size_t, std::vector<std::uint32_t>> cross_;
  std::vector<std::size_t> duration_edge_;
};

}  // namespace

ExecGraph build_exec_graph(const Trace& trace, const ExecGraphOptions& options) {
  ExecGraph g;
  Builder(trace, options, g).build();
  if (!g.anchored.empty()) g.anchored.resize(g.nodes.size(), 0);
  return g;
}

}  // namespace moetrace::analyzer
