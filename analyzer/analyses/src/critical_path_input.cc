// The events of the critical path's graphs (critical_path.h: "Window",
// "Nodes", "Threads", and the queue lengths of "Kernel launch").
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "critical_path_graph.h"
#include "stream_queue_walk.h"
#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/name_memo.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer::detail {
namespace {

bool cp_is_blocking(std::string_view base) {
  return base == "cudaDeviceSynchronize" || base == "cudaStreamSynchronize" || base == "cudaEventQuery" ||
         base == "cudaEventSynchronize" || base == "cudaMemcpy" || base == "cudaMemcpyAsync";
}

CpSync cp_sync_kind(std::string_view base) {
  if (base == "cudaDeviceSynchronize") return CpSync::kDevice;
  if (base == "cudaStreamSynchronize" || base == "cudaEventSynchronize") return CpSync::kOne;
  return CpSync::kNone;
}

// A PyTorch-profiler range of a category other than cpu_op: user_annotation
// (ProfilerStep#N, record_function) or python_function. HTA's graph has
// operators (cpu_op) and runtime calls only; these stay in the call stacks.
bool kineto_annotation(const Trace& t, const NvtxRange& n) {
  return (n.category == 2 || n.category == 3) && t.str(n.domain) == "pytorch";
}

// A Kineto cpu_op or user_annotation (HTA's _get_tid_for_event looks at these).
bool kineto_op_or_annotation(const Trace& t, const NvtxRange& n) {
  return (n.category == 1 || n.category == 2) && t.str(n.domain) == "pytorch";
}

using Window = std::pair<std::int64_t, std::int64_t>;  // [first, last] start times kept

// Each rank's window: its annotation instances (in order of start), or the
// whole trace (no entry).
std::map<std::int32_t, Window> annotation_windows(const Trace& t, const CriticalPathOptions& o) {
  std::map<std::int32_t, std::vector<Window>> marks;
  NameMemo named(t, [&](std::string_view name) { return name.find(o.annotation) != std::string_view::npos; });
  for (const auto& n : t.nvtx)
    if (n.end_ns >= n.start_ns && (!o.rank || *o.rank == n.rank.value) && named.of(n.name))
      marks[n.rank.value].push_back({n.start_ns, n.end_ns});
  std::map<std::int32_t, Window> out;
  std::size_t most = 0;
  for (auto& [rank, m] : marks) {
    std::sort(m.begin(), m.end());
    most = std::max(most, m.size());
    if (static_cast<std::size_t>(o.instance_last) >= m.size()) continue;
    Window w{m[static_cast<std::size_t>(o.instance_first)].first, INT64_MIN};
    for (auto i = o.instance_first; i <= o.instance_last; ++i) w.second = std::max(w.second, m[static_cast<std::size_t>(i)].second);
    out.emplace(rank, w);
  }
  if (out.empty()) {
    const auto where = o.rank ? fmt::format("rank {}", *o.rank) : std::string("any rank");
    const auto asked = o.instance_first == o.instance_last
                           ? fmt::format("instance {}", o.instance_first)
                           : fmt::format("instances {} to {}", o.instance_first, o.instance_last);
    const auto has = o.rank ? fmt::format("rank {} has {}", *o.rank, most) : fmt::format("the ranks have at most {}", most);
    throw Error(most == 0 ? fmt::format("critical path: no range named like '{}' on {}", o.annotation, where)
                          : fmt::format("critical path: {} of '{}' asked for, but {} (counted from 0)", asked,
                                        o.annotation, has));
  }
  return out;
}

// HTA's backward-thread merge: per rank, the one thread with "autograd" ops
// and the one with "forward" ops, where each is unique and they differ.
std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> backward_threads(
    const Trace& t, const std::map<std::int32_t, Window>& windows, const CriticalPathOptions& o) {
  std::map<std::int32_t, std::pair<std::set<std::int64_t>, std::set<std::int64_t>>> seen;
  NameMemo marks(t, [](std::string_view name) {
    return std::pair{name.find("forward") != std::string_view::npos, name.find("autograd") != std::string_view::npos};
  });
  for (const auto& n : t.nvtx) {
    if (n.end_ns <= n.start_ns || (o.rank && *o.rank != n.rank.value) || !kineto_op_or_annotation(t, n)) continue;
    if (const auto w = windows.find(n.rank.value);
        w != windows.end() && (n.start_ns < w->second.first || n.start_ns > w->second.second))
      continue;
    const auto [forward, autograd] = marks.of(n.name);
    if (forward) seen[n.rank.value].first.insert(n.thread_id);
    if (autograd) seen[n.rank.value].second.insert(n.thread_id);
  }
  std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> out;  // rank -> (backward, forward)
  for (const auto& [rank, s] : seen)
    if (s.first.size() == 1 && s.second.size() == 1 && *s.first.begin() != *s.second.begin())
      out.emplace(rank, std::make_pair(*s.second.begin(), *s.first.begin()));
  return out;
}

}  // namespace

bool cp_locks_runtime(std::string_view base) {
  return base == "cudaHostAlloc" || base == "cudaLaunchKernel" || base == "cudaMemcpyAsync";
}

namespace {

// What the graph needs of a runtime call's name (worked out once a name:
// NameMemo).
struct CallKind {
  bool blocking = false, lock = false, queues = false;
  CpSync sync = CpSync::kNone;
};

CallKind call_kind(std::string_view full) {
  const auto base = runtime_call_base_name(full);
  return {cp_is_blocking(base), cp_locks_runtime(base), hta_queues_work(full), cp_sync_kind(base)};
}

}  // namespace

CpInput cp_input(const Trace& t, const CriticalPathOptions& o, bool all_in_one) {
  CpInput in;
  in.clock = CpClock(t);
  in.infer_sync = o.infer_sync;
  const auto windows = o.annotation.empty() ? std::map<std::int32_t, Window>{} : annotation_windows(t, o);
  auto wanted = [&](std::int32_t rank) {
    return (!o.rank || *o.rank == rank) && (o.annotation.empty() || windows.contains(rank));
  };
  auto within = [&](std::int32_t rank, std::int64_t start) {
    const auto w = windows.find(rank);
    return w == windows.end() || (start >= w->second.first && start <= w->second.second);
  };
  const auto merged = backward_threads(t, windows, o);
  auto thread_of = [&](std::int32_t rank, std::int64_t thread) {
    const auto m = merged.find(rank);
    return m != merged.end() && m->second.first == thread ? m->second.second : thread;
  };
  // Each distinct (rank, thread)'s place in in.threads (rows come in runs of
  // one thread).
  std::map<std::pair<std::int32_t, std::int64_t>, std::uint32_t> lanes;
  std::pair<std::int32_t, std::int64_t> last_thread;
  std::int64_t last_lane = -1;
  auto lane_of = [&](std::int32_t rank, std::int64_t thread) {
    if (last_lane >= 0 && std::pair{rank, thread} == last_thread) return static_cast<std::uint32_t>(last_lane);
    const auto [it, added] = lanes.try_emplace({rank, thread}, static_cast<std::uint32_t>(in.threads.size()));
    if (added) {
      if (in.threads.size() >= kCpMaxLanes)
        throw Error(fmt::format("the critical path tells at most {} threads apart; this trace has more", kCpMaxLanes));
      in.threads.push_back(thread);
      in.thread_rank.push_back(rank);
    }
    last_thread = {rank, thread};
    last_lane = it->second;
    return it->second;
  };
  if (t.streams.size() > kCpMaxLanes)
    throw Error(fmt::format("the critical path tells at most {} streams apart; this trace has {}", kCpMaxLanes,
                            t.streams.size()));
  in.stream_rank.reserve(t.streams.size());
  for (const auto& s : t.streams) in.stream_rank.push_back(s.rank.value);
  auto key = [&](std::int32_t rank) { return all_in_one ? -1 : rank; };
  // The host event of row i of an NVTX range or an API call.
  auto host_event = [&](const auto& r, std::size_t i, PathEvent::Kind kind) {
    CpEvent e;
    e.lane = lane_of(r.rank.value, thread_of(r.rank.value, r.thread_id));
    e.source = static_cast<std::uint32_t>(i);
    e.kind = kind;
    return e;
  };
  // Each graph's events are reserved at once, for its rows of every table
  // (the GPU events join them in the graph): a bound, not a count, so the
  // vector never grows by copies; the pages past its events stay untouched.
  {
    std::map<std::int32_t, std::size_t> rows;
    auto count = [&](const auto& table, auto rank_of) {
      std::int32_t last_rank = 0;
      std::size_t* last = nullptr;
      for (const auto& r : table) {
        const std::int32_t rank = rank_of(r);
        if (!last || rank != last_rank) {
          if (!wanted(rank)) {
            last = nullptr;
            continue;
          }
          last = &rows[key(rank)];
          last_rank = rank;
        }
        ++*last;
      }
    };
    count(t.nvtx, [](const NvtxRange& n) { return n.rank.value; });
    count(t.api_calls, [](const ApiCall& c) { return c.rank.value; });
    count(t.activities, [](const Activity& a) { return a.rank.value; });
    for (const auto& [k, n] : rows) reserve_huge(in.ranks[k].host, n);
  }
  // Host events with time (HTA keeps CPU rows of positive duration) that
  // start in the window.
  for (std::size_t i = 0; i < t.nvtx.size(); ++i) {
    const auto& n = t.nvtx[i];
    if (n.end_ns <= n.start_ns || !wanted(n.rank.value) || !within(n.rank.value, n.start_ns)) continue;
    CpEvent e = host_event(n, i, PathEvent::Kind::kNvtx);
    e.node = !kineto_annotation(t, n);
    in.ranks[key(n.rank.value)].host.push_back(e);
  }
  in.api_event.assign(t.api_calls.size(), -1);
  std::set<std::int32_t> ranks_with_calls;
  NameMemo names(t, call_kind);
  for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
    const auto& c = t.api_calls[i];
    if (i == 0 || c.rank != t.api_calls[i - 1].rank) ranks_with_calls.insert(c.rank.value);
    if (c.end_ns <= c.start_ns || !wanted(c.rank.value) || !within(c.rank.value, c.start_ns)) continue;
    const auto& kind = names.of(c.name);
    auto& v = in.ranks[key(c.rank.value)].host;
    in.api_event[i] = static_cast<std::int32_t>(v.size());
    CpEvent e = host_event(c, i, PathEvent::Kind::kApi);
    e.blocking = kind.blocking;
    e.lock = kind.lock;
    e.sync = kind.sync;
    v.push_back(e);
  }
  // GPU events: those whose launching call is in the window; on a rank that
  // recorded no API calls, those that start in it. HTA's queue lengths count
  // over the whole trace (its t_full).
  in.activity.assign(t.activities.size(), 0);
  // A graph reserved above but given no events is none.
  auto drop_empty = [&] {
    std::erase_if(in.ranks, [](const auto& r) { return r.second.host.empty() && r.second.streams.empty(); });
  };
  if (t.activity_track_begin.size() != t.streams.size() + 1) {
    drop_empty();
    return in;
  }
  std::vector<QueuePoint> launches, starts;  // HTA's queue per stream (stream_queue_walk.h)
  for (std::size_t s = 0; s < t.streams.size(); ++s) {
    const auto rank = t.streams[s].rank.value;
    const auto begin = t.activity_track_begin[s], end = t.activity_track_begin[s + 1];
    if (begin == end || !wanted(rank)) continue;
    bool any = false;
    launches.clear();
    starts.clear();
    for (auto i = begin; i < end; ++i) {
      const auto& a = t.activities[i];
      const ApiCall* call = t.launching_call(a);
      const bool kept = call ? call->end_ns > call->start_ns && within(rank, call->start_ns)
                             : !ranks_with_calls.contains(rank) && within(rank, a.start_ns);
      if (kept) in.activity[i] |= CpInput::kInWindow;
      any = any || kept;
      if (call && names.of(call->name).queues) {
        launches.push_back({call->start_ns, static_cast<std::uint32_t>(i)});
        starts.push_back({a.start_ns, static_cast<std::uint32_t>(i)});
      }
    }
    walk_stream_queue(
        launches, starts,
        [&](const QueuePoint& p, std::int32_t length) {
          if (length == 1) in.activity[p.activity] |= CpInput::kAloneAtCall;
        },
        [&](const QueuePoint& p, std::int32_t length) {
          if (length == 0) in.activity[p.activity] |= CpInput::kEmptyAtStart;
        });
    if (any) in.ranks[key(rank)].streams.push_back(static_cast<std::uint32_t>(s));
  }
  drop_empty();
  return in;
}

}  // namespace moetrace::analyzer::detail
