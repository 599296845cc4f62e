// The execution graph of a trace (exec_graph.h): evaluation, and the trace
// at its replayed times.
#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "moetrace/analyzer/exec_graph.h"

namespace moetrace::analyzer {

std::vector<std::int64_t> evaluate_exec_graph(const ExecGraph& g, std::size_t* unresolved) {
  const auto n = g.nodes.size();
  std::vector<std::uint32_t> begin(n + 1, 0), indegree(n, 0);
  // Edges a what-if took out order nothing: not in the adjacency at all.
  auto live = [&](const ExecEdge& e) { return e.latency_ns != ExecGraph::kRemoved; };
  std::size_t live_edges = 0;
  for (const auto& e : g.edges) {
    if (!live(e)) continue;
    ++begin[e.from + 1];
    ++indegree[e.to];
    ++live_edges;
  }
  for (std::size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
  std::vector<std::uint32_t> out(live_edges), fill(begin.begin(), begin.end() - 1);
  for (std::size_t k = 0; k < g.edges.size(); ++k)
    if (live(g.edges[k])) out[fill[g.edges[k].from]++] = static_cast<std::uint32_t>(k);
  std::vector<std::int64_t> t(n, INT64_MIN);
  std::vector<std::uint32_t> ready;
  ready.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (indegree[i] == 0 || (i < g.anchored.size() && g.anchored[i])) t[i] = g.nodes[i].measured_ns;
    if (indegree[i] == 0) ready.push_back(static_cast<std::uint32_t>(i));
  }
  std::vector<std::uint8_t> done(n, 0);
  for (std::size_t head = 0; head < ready.size(); ++head) {
    const auto u = ready[head];
    done[u] = 1;
    for (auto k = begin[u]; k < begin[u + 1]; ++k) {
      const auto& e = g.edges[out[k]];
      t[e.to] = std::max(t[e.to], t[u] + e.latency_ns);
      if (--indegree[e.to] == 0) ready.push_back(e.to);
    }
  }
  // On a cycle (times that contradict each other): the measured time.
  std::size_t undone = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!done[i] || t[i] == INT64_MIN) {
      t[i] = g.nodes[i].measured_ns;
      ++undone;
    }
  if (unresolved != nullptr) *unresolved = undone;
  return t;
}

namespace {

std::int64_t at(const std::vector<std::int64_t>& times, std::uint32_t node, std::int64_t fallback) {
  return node == ExecGraph::kNone || node >= times.size() ? fallback : times[node];
}

}  // namespace

Trace replayed_trace(const Trace& trace, const ExecGraph& g, const std::vector<std::int64_t>& times) {
  Trace r = trace;
  for (const auto& s : g.added_streams) r.streams.push_back(s);
  for (std::size_t i = 0; i < r.nvtx.size() && i < g.nvtx_start.size(); ++i) {
    auto& n = r.nvtx[i];
    const auto s = at(times, g.nvtx_start[i], n.start_ns);
    n.end_ns = at(times, g.nvtx_end[i], n.end_ns);
    n.start_ns = s;
  }
  for (std::size_t i = 0; i < r.api_calls.size() && i < g.api_start.size(); ++i) {
    auto& c = r.api_calls[i];
    const auto s = at(times, g.api_start[i], c.start_ns);
    c.end_ns = at(times, g.api_end[i], c.end_ns);
    c.start_ns = s;
  }
  // Activities at their replayed times, a what-if's added tasks joined,
  // then the tracks sorted again.
  std::vector<Activity> acts;
  acts.reserve(r.activities.size() + g.added.size());
  for (std::size_t i = 0; i < r.activities.size(); ++i) {
    auto a = r.activities[i];
    if (i < g.activity_start.size()) {
      a.start_ns = at(times, g.activity_start[i], a.start_ns);
      a.end_ns = at(times, g.activity_end[i], a.end_ns);
    }
    acts.push_back(a);
  }
  std::map<std::string, StringId> added_names;
  auto intern = [&](const std::string& name) {
    auto [it, fresh] = added_names.try_emplace(name, StringId());
    if (fresh) {
      r.strings.push_back(name);
      it->second = StringId(static_cast<std::int32_t>(r.strings.size() - 1));
      r.kernel_category.resize(r.strings.size(), -1);
    }
    return it->second;
  };
  std::int64_t next_op_id = 0;
  for (const auto& op : r.ops) next_op_id = std::max<std::int64_t>(next_op_id, op.id.value + 1);
  const auto ops_before = r.ops.size();
  for (const auto& t : g.added) {
    Activity a;
    a.type = t.type;
    a.stream = t.stream;
    a.rank = RankId(t.rank);
    a.op = t.op;
    a.launched_by = -2;
    a.start_ns = at(times, t.start, 0);
    a.end_ns = at(times, t.end, a.start_ns);
    a.name = intern(t.name);
    if (t.own_kind && t.op >= 0 && static_cast<std::size_t>(t.op) < ops_before) {
      OpRange op = r.ops[static_cast<std::size_t>(t.op)];
      op.id = OpId(static_cast<std::int32_t>(next_op_id++));
      op.kind = *t.own_kind;
      if (t.own_phase) op.phase = *t.own_phase;
      op.name = a.name;
      op.stream = t.stream;
      op.nvtx_id = -1;
      op.launch_start_ns = op.launch_end_ns = -1;
      a.op = static_cast<std::int32_t>(r.ops.size());
      r.ops.push_back(op);
    }
    acts.push_back(a);
  }
  std::stable_sort(acts.begin(), acts.end(), [](const Activity& a, const Activity& b) {
    return a.stream != b.stream ? a.stream < b.stream : a.start_ns < b.start_ns;
  });
  r.activities = std::move(acts);
  r.activity_track_begin.assign(r.streams.size() + 1, 0);
  for (const auto& a : r.activities)
    if (a.stream >= 0 && static_cast<std::size_t>(a.stream) < r.streams.size())
      ++r.activity_track_begin[static_cast<std::size_t>(a.stream) + 1];
  for (std::size_t s = 0; s < r.streams.size(); ++s) r.activity_track_begin[s + 1] += r.activity_track_begin[s];
  if (!g.added.empty()) r.classify_kernel_names();

  // Op ranges: the envelope of their activities; else their NVTX range's;
  // else moved as the latest end of the ops they depend on moved.
  const auto nops = r.ops.size();
  std::vector<std::int64_t> first(nops, INT64_MAX), last(nops, INT64_MIN);
  for (const auto& a : r.activities)
    if (a.op >= 0 && static_cast<std::size_t>(a.op) < nops) {
      first[static_cast<std::size_t>(a.op)] = std::min(first[static_cast<std::size_t>(a.op)], a.start_ns);
      last[static_cast<std::size_t>(a.op)] = std::max(last[static_cast<std::size_t>(a.op)], a.end_ns);
    }
  std::map<std::int64_t, std::size_t> nvtx_by_id;
  for (std::size_t i = 0; i < trace.nvtx.size(); ++i) nvtx_by_id[trace.nvtx[i].id] = i;
  std::vector<std::int64_t> shift(nops, 0);
  std::vector<std::uint8_t> placed(nops, 0);
  for (std::size_t o = 0; o < nops; ++o) {
    auto& op = r.ops[o];
    const auto nv = op.nvtx_id >= 0 ? nvtx_by_id.find(op.nvtx_id) : nvtx_by_id.end();
    if (nv != nvtx_by_id.end()) {
      op.launch_start_ns = r.nvtx[nv->second].start_ns;
      op.launch_end_ns = r.nvtx[nv->second].end_ns;
    }
    if (first[o] <= last[o]) {
      shift[o] = first[o] - op.start_ns;
      op.start_ns = first[o];
      op.end_ns = last[o];
      placed[o] = 1;
    } else if (nv != nvtx_by_id.end()) {
      shift[o] = r.nvtx[nv->second].start_ns - op.start_ns;
      op.start_ns = r.nvtx[nv->second].start_ns;
      op.end_ns = r.nvtx[nv->second].end_ns;
      placed[o] = 1;
    }
  }
  if (!r.op_deps.empty()) {
    // Ops with neither (a collective that ran nothing on one rank): in start
    // order, each moves as its latest-ending dependency moved.
    std::vector<std::vector<std::int32_t>> deps(nops);
    for (const auto& d : r.op_deps) {
      const auto o = r.op_index(d.op), p = r.op_index(d.dep);
      if (o >= 0 && p >= 0) deps[static_cast<std::size_t>(o)].push_back(p);
    }
    // An op's measured times; the ops a what-if added (past the trace's)
    // have only their replayed ones.
    auto measured = [&](std::size_t o) -> const OpRange& { return o < trace.ops.size() ? trace.ops[o] : r.ops[o]; };
    std::vector<std::size_t> order(nops);
    for (std::size_t o = 0; o < nops; ++o) order[o] = o;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return measured(a).start_ns < measured(b).start_ns; });
    for (auto o : order) {
      if (placed[o]) continue;
      std::int64_t best_end = INT64_MIN, s = 0;
      for (auto p : deps[o])
        if (measured(static_cast<std::size_t>(p)).end_ns > best_end) {
          best_end = measured(static_cast<std::size_t>(p)).end_ns;
          s = r.ops[static_cast<std::size_t>(p)].end_ns - best_end;
        }
      shift[o] = s;
      r.ops[o].start_ns += s;
      r.ops[o].end_ns += s;
      if (r.ops[o].launch_start_ns >= 0) r.ops[o].launch_start_ns += s;
      if (r.ops[o].launch_end_ns >= 0) r.ops[o].launch_end_ns += s;
      placed[o] = 1;
    }
  }
  // The ops' host launch intervals move with their first activity.
  for (std::size_t o = 0; o < nops; ++o) {
    auto& op = r.ops[o];
    if (op.nvtx_id >= 0 && nvtx_by_id.contains(op.nvtx_id)) continue;
    if (op.launch_start_ns >= 0 && first[o] <= last[o]) {
      op.launch_start_ns += shift[o];
      op.launch_end_ns += shift[o];
    }
  }
  r.index_ops();
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& a : r.activities) {
    lo = std::min(lo, a.start_ns);
    hi = std::max(hi, a.end_ns);
  }
  if (lo <= hi) {
    r.run.start_ns = std::min(lo, r.run.start_ns);
    r.run.end_ns = std::max(hi, lo);
  }
  return r;
}

}  // namespace moetrace::analyzer
