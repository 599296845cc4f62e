#include "moetrace/analyzer/critical_path.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <tuple>
#include <utility>

#include "critical_path_edges.h"
#include "critical_path_graph.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/stream_waits.h"
#include "parallel.h"

namespace moetrace::analyzer {
namespace {

using detail::CpEvent;
using detail::CpSync;

constexpr std::uint8_t kCpNoCategory = detail::CpEdges::kNoCategory;

// A collective call (CollectiveCall) as the graph reads it: its rank, its
// NCCL kernel (index into Trace::activities, -1: none) or its op range
// (index into Trace::ops, -1: none), and whether it is the first of its
// instance (the calls come grouped by key). 16 bytes a call, not 80: the
// calls themselves are given back before the graph is built (74 MiB on a
// 10 M-event trace).
struct CallPart {
  std::int32_t rank, activity, op;
  bool first;
};

std::vector<CallPart> call_parts(const std::vector<CollectiveCall>& calls) {
  std::vector<CallPart> parts;
  parts.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    parts.push_back({c.rank, static_cast<std::int32_t>(c.activity), c.op, i == 0 || c.key != calls[i - 1].key});
  }
  return parts;
}

class CpGraph {
 public:
  // across: the graph of every rank, joined at collectives (rank: -1).
  // calls: call_parts() of the trace's collective_calls(), given for the
  // graph across ranks.
  CpGraph(const Trace& t, std::int32_t rank, detail::CpRankInput input, const detail::CpInput& in,
          std::optional<std::vector<CallPart>> calls = std::nullopt)
      : t_(t), rank_(rank), across_(calls.has_value()), ev_(std::move(input.host)), streams_(std::move(input.streams)),
        in_(in), calls_(std::move(calls)) {}

  // release: the input, emptied once the edges are built (where no other
  // graph reads it) so that the longest path's arrays take its place.
  RankCriticalPath run(std::size_t top_events, detail::CpInput* release = nullptr) {
    host_ = ev_.size();
    add_gpu_events();
    reserve_edges(calls_ ? calls_->size() : 0);
    lock_edges();
    host_edges();
    gpu_edges();
    if (in_.infer_sync) inferred_sync_edges();
    if (calls_) collective_edges(*calls_);
    calls_.reset();  // not read from here on
    // What the longest path does not read.
    MappedVector<std::int32_t>().swap(gpu_event_);
    MappedVector<std::uint32_t>().swap(own_edge_);
    if (release) {
      MappedVector<std::int32_t>().swap(release->api_event);
      MappedVector<std::uint8_t>().swap(release->activity);
    }
    auto r = longest(top_events);
    r.window_start_ns = INT64_MAX;
    r.window_end_ns = INT64_MIN;
    for (const auto& e : ev_) {
      r.window_start_ns = std::min(r.window_start_ns, in_.clock.start(e));
      r.window_end_ns = std::max(r.window_end_ns, in_.clock.end(e));
    }
    if (ev_.empty()) r.window_start_ns = r.window_end_ns = 0;
    return r;
  }

  // Across ranks: the collective instances that joined ranks, the edges
  // added, the path's edges between ranks, path time per rank.
  std::int64_t instances = 0, collective_edge_count = 0, crossings = 0, wait_ns = 0;
  std::map<std::int32_t, std::int64_t> rank_ns;

 private:
  std::uint32_t start_node(std::size_t e) const { return static_cast<std::uint32_t>(2 * e); }
  std::uint32_t end_node(std::size_t e) const { return static_cast<std::uint32_t>(2 * e + 1); }
  static bool is_start(std::uint32_t n) { return n % 2 == 0; }
  std::int64_t ts(std::uint32_t n) const { return detail::cp_time(in_.clock, ev_, n); }
  std::int64_t start_of(std::size_t e) const { return in_.clock.start(ev_[e]); }
  std::int64_t end_of(std::size_t e) const { return in_.clock.end(ev_[e]); }

  // An edge of category c, attributed to the event detail::cp_edge_event
  // derives from its nodes and c (each call below adds one its rules give).
  void span(std::uint32_t u, std::uint32_t v, PathCategory c, bool zero = false) {
    edges_.push(u, v, !zero, static_cast<std::uint8_t>(c));
  }
  void link(std::uint32_t u, std::uint32_t v) { edges_.push(u, v, false, kCpNoCategory); }

  // Room for every edge the graph can get, reserved at once (a bound: each
  // host node adds at most one call-stack edge and one runtime-lock edge at
  // each of its two ends, each GPU event at most three, a synchronisation at
  // most one a stream, a collective call two), so the edges are never copied
  // to a bigger array; the pages past the last edge are never touched.
  void reserve_edges(std::size_t collective_calls) {
    std::size_t bound = 0, syncs = 0;
    for (std::size_t e = 0; e < host_; ++e) {
      if (ev_[e].node) bound += ev_[e].lock ? 4 : 2;
      if (ev_[e].sync != CpSync::kNone) ++syncs;
    }
    bound += 3 * (ev_.size() - host_);
    std::size_t records = 0;
    for (const auto& y : t_.sync_events)
      if (across_ || y.rank.value == rank_) ++records;
    bound += (records + syncs) * std::max<std::size_t>(streams_.size(), 1) + 2 * collective_calls;
    edges_.reserve(bound);
  }

  // GPU events of the window, after the host events, by stream track in
  // start order; gpu_event_[activity] is each one's place.
  void add_gpu_events() {
    gpu_event_.assign(t_.activities.size(), -1);
    for (auto s : streams_)
      for (auto i = t_.activity_track_begin[s]; i < t_.activity_track_begin[s + 1]; ++i) {
        if (!(in_.activity[i] & detail::CpInput::kInWindow)) continue;
        const auto& a = t_.activities[i];
        CpEvent g;
        g.lane = s;
        g.source = static_cast<std::uint32_t>(i);
        g.kind = a.type == ActivityType::kMemcpy   ? PathEvent::Kind::kMemcpy
                 : a.type == ActivityType::kMemset ? PathEvent::Kind::kMemset
                                                   : PathEvent::Kind::kKernel;
        gpu_event_[i] = static_cast<std::int32_t>(ev_.size());
        ev_.push_back(g);
      }
  }

  // The CUDA runtime's lock (HTA _construct_graph_from_cuda_runtime_events):
  // the calls that take it, on every thread of a rank (one process, one
  // lock), in order of their nodes' times: each end closes every call
  // started since the previous end (its own start: its span; others': a
  // dependency) and follows the previous end.
  void lock_edges() {
    std::vector<std::uint32_t> pending;
    std::int64_t last = -1;
    std::int32_t rank = 0;
    bool first = true;
    detail::cp_lock_nodes(ev_, host_, in_, [&](std::int32_t r, std::uint32_t n) {
      if (!first && r != rank) {  // another rank's lock
        pending.clear();
        last = -1;
      }
      first = false;
      rank = r;
      if (is_start(n)) {
        pending.push_back(n);
      } else {
        while (!pending.empty()) {
          const auto p = pending.back();
          pending.pop_back();
          if (p / 2 == n / 2) span(p, n, PathCategory::kCpuOp);
          else link(p, n);
        }
        if (last >= 0 && !is_start(static_cast<std::uint32_t>(last))) link(static_cast<std::uint32_t>(last), n);
      }
      last = n;
    });
  }

  bool shares_lock(std::uint32_t a, std::uint32_t b) const {
    return ev_[a / 2].lock && ev_[b / 2].lock && (is_start(a) || !is_start(b));
  }

  // HTA's call stacks (hta/common/call_stack.py) walked depth first
  // (CPGraph._construct_graph_from_call_stack), one per (rank, thread).
  void host_edges() {
    // The events by (rank, thread, event): each one's (rank, thread) as its
    // place among the distinct ones (few), then a stable counting sort.
    using Lane = std::pair<std::int32_t, std::int64_t>;
    std::map<Lane, std::uint32_t> lanes;  // -> its id, in order of first sight
    std::vector<std::uint32_t> lane(host_);
    {
      std::uint32_t last_id = 0;
      Lane last_lane;
      for (std::size_t i = 0; i < host_; ++i) {
        const Lane l{in_.rank(ev_[i]), in_.threads[ev_[i].lane]};
        if (i == 0 || l != last_lane) {
          last_id = lanes.try_emplace(l, static_cast<std::uint32_t>(lanes.size())).first->second;
          last_lane = l;
        }
        lane[i] = last_id;
      }
      std::vector<std::uint32_t> sorted(lanes.size());  // id -> place in (rank, thread) order
      std::uint32_t next = 0;
      for (const auto& entry : lanes) sorted[entry.second] = next++;
      for (auto& l : lane) l = sorted[l];
    }
    std::vector<std::uint32_t> lane_begin(lanes.size() + 1, 0);
    for (const auto l : lane) ++lane_begin[l + 1];
    for (std::size_t i = 0; i + 1 < lane_begin.size(); ++i) lane_begin[i + 1] += lane_begin[i];
    std::vector<std::uint32_t> order(host_);
    for (std::size_t i = 0; i < host_; ++i) order[lane_begin[lane[i]]++] = static_cast<std::uint32_t>(i);
    std::vector<std::uint32_t>().swap(lane);
    enclosing_.assign(host_, -1);
    StackScratch scratch;
    scratch.slot.resize(host_);
    for (std::size_t k = 0; k < order.size();) {
      auto j = k;
      while (j < order.size() && ev_[order[j]].lane == ev_[order[k]].lane)  // a lane is one (rank, thread)
        ++j;
      walk_thread(std::span<const std::uint32_t>(order.data() + k, j - k), enclosing_, scratch);
      k = j;
    }
  }

  // The arrays of walk_thread, kept from one thread to the next.
  struct StackPoint {
    std::int64_t time, dur;
    std::uint32_t event;
    bool start;
  };
  struct StackScratch {
    std::vector<StackPoint> points;
    std::vector<std::uint32_t> slot;  // host event -> 1 + its place in the thread's events
    std::vector<std::uint32_t> opened;  // the thread's events in order of start, and their parents' slots
    std::vector<std::uint32_t> opened_in;
    std::vector<std::uint32_t> child_begin, children;  // the children of each slot (0: the top level), in order of start
    std::vector<std::pair<std::uint32_t, std::uint32_t>> todo;
  };

  // One thread: HTA's stack from its start and end points (compare_events:
  // by time; at one time ends before starts, longer starts first, shorter
  // ends first, then by event; an end pops whatever is on top), then the
  // depth-first walk that adds the edges.
  void walk_thread(std::span<const std::uint32_t> events, std::vector<std::int32_t>& parent, StackScratch& scratch) {
    auto& points = scratch.points;
    auto& slot = scratch.slot;
    points.clear();
    points.reserve(2 * events.size());
    for (auto e : events) {
      const auto d = end_of(e) - start_of(e);
      points.push_back({start_of(e), d, e, true});
      points.push_back({end_of(e), d, e, false});
    }
    std::sort(points.begin(), points.end(), [](const StackPoint& x, const StackPoint& y) {
      if (x.time != y.time) return x.time < y.time;
      if (x.start != y.start) return !x.start;  // events here last > 0: the end first
      if (x.dur != y.dur) return x.start ? x.dur > y.dur : x.dur < y.dur;
      return x.start ? x.event < y.event : x.event > y.event;
    });
    for (std::size_t i = 0; i < events.size(); ++i) slot[events[i]] = static_cast<std::uint32_t>(i + 1);
    // The stack: each event's parent, and its place among its parent's
    // children (in order of start, as they are opened).
    auto& opened = scratch.opened;
    auto& opened_in = scratch.opened_in;
    opened.clear();
    opened_in.clear();
    std::vector<std::uint32_t> stack;
    for (const auto& p : points) {
      if (p.start) {
        parent[p.event] = stack.empty() ? -1 : static_cast<std::int32_t>(stack.back());
        opened.push_back(p.event);
        opened_in.push_back(stack.empty() ? 0 : slot[stack.back()]);
        stack.push_back(p.event);
      } else if (!stack.empty()) {
        stack.pop_back();
      }
    }
    auto& child_begin = scratch.child_begin;
    auto& children = scratch.children;
    child_begin.assign(events.size() + 2, 0);
    for (auto in : opened_in) ++child_begin[in + 1];
    for (std::size_t i = 0; i + 1 < child_begin.size(); ++i) child_begin[i + 1] += child_begin[i];
    children.resize(opened.size());
    for (std::size_t k = 0; k < opened.size(); ++k) children[child_begin[opened_in[k]]++] = opened[k];
    for (std::size_t i = child_begin.size() - 1; i > 0; --i) child_begin[i] = child_begin[i - 1];
    child_begin[0] = 0;
    std::int64_t last = -1;  // the last node visited
    int depth = 0;           // operators open
    auto enter = [&](std::uint32_t e) {
      if (!ev_[e].node) return;
      const auto s = start_node(e);
      if (last >= 0 && !shares_lock(static_cast<std::uint32_t>(last), s)) {
        if (depth == 0) link(static_cast<std::uint32_t>(last), s);  // consecutive top-level operators
        else span(static_cast<std::uint32_t>(last), s, PathCategory::kCpuOp);  // attributed as HTA does: cp_edge_event
      }
      last = s;
      ++depth;
    };
    auto exit = [&](std::uint32_t e) {
      if (!ev_[e].node) return;
      const auto n = end_node(e);
      if (last >= 0 && !shares_lock(static_cast<std::uint32_t>(last), n))
        span(static_cast<std::uint32_t>(last), n, PathCategory::kCpuOp, ev_[e].blocking);
      last = n;
      --depth;
    };
    // Iterative depth-first walk: (slot, next child).
    auto& todo = scratch.todo;
    todo.assign(1, {0, child_begin[0]});
    while (!todo.empty()) {
      auto& [at, next] = todo.back();
      if (next < child_begin[at + 1]) {
        const auto c = children[next++];
        enter(c);
        todo.push_back({slot[c], child_begin[slot[c]]});
        continue;
      }
      if (at != 0) exit(events[at - 1]);
      todo.pop_back();
    }
  }

  PathCategory gpu_category(const Activity& a) const {
    return a.type != ActivityType::kKernel ? PathCategory::kMemcpyMemset
           : is_communication(classify_activity(t_, a)) ? PathCategory::kKernelCommunication
                                                        : PathCategory::kKernelCompute;
  }

  // HTA's _construct_graph_from_kernels: GPU events and synchronisation
  // records in order of time (a record by its end), each stream's last event
  // remembered.
  void gpu_edges() {
    // The GPU events by start, at one start by place: merged from their
    // runs in that order (a stream track's events are one: the trace keeps
    // each track in start order, Trace::activity_track_begin; a track out
    // of order would be several), a cursor a run in a heap, no array of
    // every event and its start (16 bytes each; 60 MiB beside the graph
    // being built, on a 10 M-event trace).
    struct Run {
      std::size_t next, end;  // GPU events [next, end)
    };
    std::vector<Run> runs;
    for (auto e = host_; e < ev_.size(); ++e)
      if (e == host_ || ev_[e].lane != ev_[e - 1].lane || start_of(e) < start_of(e - 1)) runs.push_back({e, e + 1});
      else runs.back().end = e + 1;
    const auto after = [this](const Run& a, const Run& b) {
      const auto sa = start_of(a.next), sb = start_of(b.next);
      return sa != sb ? sa > sb : a.next > b.next;
    };
    std::priority_queue<Run, std::vector<Run>, decltype(after)> gpu_events(after, std::move(runs));
    // The synchronisation records that wait for streams, by end, at one end
    // in the order listed; taken after the GPU events that start then.
    std::vector<std::pair<std::int64_t, std::size_t>> records;  // (end, index)
    for (std::size_t i = 0; i < t_.sync_events.size(); ++i) {
      const auto& y = t_.sync_events[i];
      if ((across_ || y.rank.value == rank_) && (y.kind == SyncEvent::kStreamSynchronize || y.kind == SyncEvent::kContextSynchronize))
        records.emplace_back(y.end_ns, i);
    }
    std::sort(records.begin(), records.end());
    // Recorded event waits (stream_waits.h): consumer activity -> producer.
    std::map<std::uint32_t, std::uint32_t> waited;
    for (const auto& w : recorded_stream_waits(t_)) waited[w.consumer] = w.producer;
    std::vector<std::int64_t> last(t_.streams.size(), -1);  // stream track -> its last GPU event so far, -1: none
    own_edge_.assign(ev_.size() - host_, 0);
    std::size_t record = 0;
    while (!gpu_events.empty() || record < records.size()) {
      if (record < records.size() &&
          (gpu_events.empty() || records[record].first < start_of(gpu_events.top().next))) {
        sync_record(t_.sync_events[records[record++].second], last);
        continue;
      }
      auto run = gpu_events.top();
      gpu_events.pop();
      const auto id = run.next++;
      if (run.next < run.end) gpu_events.push(run);
      const auto& a = t_.activities[ev_[id].source];
      own_edge_[id - host_] = static_cast<std::uint32_t>(edges_.size());
      span(start_node(id), end_node(id), gpu_category(a));
      const auto h = launch_event(a);
      const std::int64_t prev = last[static_cast<std::size_t>(ev_[id].lane)];
      const auto prev_end = prev >= 0 ? end_of(static_cast<std::size_t>(prev)) : INT64_MIN;
      const auto call_start = h >= 0 ? start_of(static_cast<std::size_t>(h)) : INT64_MIN;
      // A recorded wait: the producer's end -> this start (HTA's
      // SYNC_DEPENDENCY, weight 0); the launch or the stream's previous
      // event holds this one only where it ended after the producer.
      std::int64_t sync_end = INT64_MIN;
      if (const auto w = waited.find(static_cast<std::uint32_t>(ev_[id].source)); w != waited.end())
        if (const auto pe = gpu_event_[w->second]; pe >= 0) {
          link(end_node(static_cast<std::size_t>(pe)), start_node(id));
          sync_end = end_of(static_cast<std::size_t>(pe));
        }
      constexpr auto kAlone = detail::CpInput::kAloneAtCall | detail::CpInput::kEmptyAtStart;
      if (h >= 0 && (in_.activity[ev_[id].source] & kAlone) == kAlone &&
          prev_end < call_start && sync_end < call_start)
        span(start_node(static_cast<std::size_t>(h)), start_node(id), PathCategory::kLaunchDelay);
      else if (prev >= 0 && (h < 0 || prev_end > call_start) && sync_end < prev_end)
        span(end_node(static_cast<std::size_t>(prev)), start_node(id), PathCategory::kKernelGap);
      last[static_cast<std::size_t>(ev_[id].lane)] = static_cast<std::int64_t>(id);
    }
  }

  // A "Stream Sync" record: its stream's last GPU event so far -> the end of
  // the call that waited (by correlation id); "Context Sync": every stream's.
  // `last`: per stream track, its last GPU event so far (-1: none).
  void sync_record(const SyncEvent& y, const std::vector<std::int64_t>& last) {
    const auto call = call_event(y.rank, y.correlation_id);
    if (call < 0) return;
    if (y.kind == SyncEvent::kContextSynchronize) {
      for (std::size_t stream = 0; stream < last.size(); ++stream)
        if (last[stream] >= 0 && t_.streams[stream].rank == y.rank)
          link(end_node(static_cast<std::size_t>(last[stream])), end_node(static_cast<std::size_t>(call)));
      return;
    }
    const auto s = t_.stream_index(y.stream);
    if (s < 0) return;
    if (const auto g = last[static_cast<std::size_t>(s)]; g >= 0)
      link(end_node(static_cast<std::size_t>(g)), end_node(static_cast<std::size_t>(call)));
  }

  // The host event of the API call with this correlation id on `rank`, or -1.
  std::int64_t call_event(RankId rank, std::int64_t correlation_id) const {
    auto it = std::lower_bound(t_.api_calls.begin(), t_.api_calls.end(), std::make_pair(correlation_id, rank),
                               [](const ApiCall& c, const std::pair<std::int64_t, RankId>& k) {
                                 return std::tie(c.correlation_id, c.rank) < std::tie(k.first, k.second);
                               });
    if (it == t_.api_calls.end() || it->correlation_id != correlation_id || it->rank != rank) return -1;
    return in_.api_event[static_cast<std::size_t>(it - t_.api_calls.begin())];
  }

  // The host event of an activity's launching call in the window, or -1.
  std::int64_t launch_event(const Activity& a) const {
    const ApiCall* call = t_.launching_call(a);
    if (call == nullptr) return -1;
    return in_.api_event[static_cast<std::size_t>(call - t_.api_calls.data())];
  }

  // The last GPU event of stream track `s` launched before `call` started
  // and ended by its end; -1 if none.
  std::int64_t waited_for(std::uint32_t s, std::size_t call_event) const {
    const auto call_start = start_of(call_event), call_end = end_of(call_event);
    const auto* first = t_.activities.data() + t_.activity_track_begin[s];
    const auto* last = t_.activities.data() + t_.activity_track_begin[s + 1];
    const auto* it = std::upper_bound(first, last, call_end,
                                      [](std::int64_t v, const Activity& a) { return v < a.start_ns; });
    for (int walked = 0; it != first && walked < 64; ++walked) {
      --it;
      if (it->end_ns > call_end) continue;
      const auto g = gpu_event_[static_cast<std::size_t>(it - t_.activities.data())];
      if (g < 0) continue;
      const auto h = launch_event(*it);
      const auto launched = h >= 0 ? start_of(static_cast<std::size_t>(h)) : it->start_ns;
      if (launched < call_start) return g;
    }
    return -1;
  }

  // CriticalPathOptions::infer_sync: synchronisation read from the runtime
  // calls on the ranks whose trace has no GPU-side records (critical_path.h).
  void inferred_sync_edges() {
    std::set<std::int32_t> recorded;
    for (const auto& y : t_.sync_events) recorded.insert(y.rank.value);
    for (std::size_t e = 0; e < host_; ++e) {
      if (ev_[e].sync == CpSync::kNone || recorded.contains(in_.rank(ev_[e]))) continue;
      std::int64_t best = -1;
      for (auto s : streams_) {
        if (t_.streams[s].rank.value != in_.rank(ev_[e])) continue;
        const auto g = waited_for(s, e);
        if (g < 0) continue;
        if (ev_[e].sync == CpSync::kDevice)
          link(end_node(static_cast<std::size_t>(g)), end_node(e));
        else if (best < 0 || end_of(static_cast<std::size_t>(g)) > end_of(static_cast<std::size_t>(best)))
          best = g;
      }
      if (best >= 0) link(end_node(static_cast<std::size_t>(best)), end_node(e));
    }
  }

  // Across ranks (critical_path.h): each collective instance with 2+ ranks
  // (clock_align.h's collective_calls) joins its participants' kernels.
  void collective_edges(const std::vector<CallPart>& calls) {
    const auto host = host_;
    // Op-paired calls: the op's communication kernels, first start and last
    // end (GPU events: fewer than 2^31, their nodes numbered in 32 bits).
    std::vector<std::int32_t> op_first, op_last;
    auto gpu = [&](std::size_t activity) { return static_cast<std::int64_t>(gpu_event_[activity]); };
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
        if (f < 0 || start_of(e) < start_of(static_cast<std::size_t>(f))) f = static_cast<std::int32_t>(e);
        if (l < 0 || end_of(e) > end_of(static_cast<std::size_t>(l))) l = static_cast<std::int32_t>(e);
      }
    }
    struct Part {
      std::size_t first, last;  // GPU events: the first kernel's start, the last kernel's end
    };
    std::vector<Part> parts;
    for (std::size_t i = 0; i < calls.size();) {
      std::size_t j = i + 1;
      while (j < calls.size() && !calls[j].first) ++j;
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
      for (const auto& p : parts) last_start = std::max(last_start, start_of(p.first));
      // The part of the first kernel before the last participant started
      // is waiting: it weighs nothing (like a blocking call's wait).
      for (const auto& p : parts) {
        const auto k = own_edge_[p.first - host];
        const auto own = detail::cp_weight(in_.clock, ev_, edges_, k, start_of(p.first), false);
        const auto w = std::max<std::int64_t>(0, end_of(p.first) - std::max(start_of(p.first), last_start));
        wait_ns += own - w;
        edges_.set_weight(k, w);
        edges_.flags[k] |= detail::CpEdges::kShortened;
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
        if (start_of(p.first) == last_start) {
          hub = p.first;
          break;
        }
      for (const auto& p : parts)
        if (p.first != hub) {
          edges_.push(start_node(p.first), start_node(hub), false, kCpNoCategory, true);
          ++collective_edge_count;
        }
      for (const auto& q : parts) {
        // The hub starts at last_start (unless no participant does: every
        // start before 0): the time between the nodes, else set.
        edges_.push(start_node(hub), end_node(q.last), true,
                    static_cast<std::uint8_t>(PathCategory::kKernelCommunication), true);
        if (start_of(hub) != last_start)
          edges_.set_weight(edges_.size() - 1, std::max<std::int64_t>(0, end_of(q.last) - last_start));
        ++collective_edge_count;
      }
    }
  }

  // The longest path over every edge (across ranks: joined at collectives).
  RankCriticalPath longest(std::size_t top_events) {
    RankCriticalPath r;
    r.rank = rank_;
    r.nodes = static_cast<std::int64_t>(2 * ev_.size());
    r.edges = static_cast<std::int64_t>(edges_.size());
    if (ev_.empty()) return r;
    group_edges();
    auto& s = search_;
    detail::cp_search(ev_, edges_, out_begin_, nullptr, in_, s);
    if (s.best[0] < 0) return r;
    detail::CpAcrossTotals totals;
    auto path = detail::cp_path(t_, in_, ev_, edges_, out_begin_, enclosing_, s, static_cast<std::uint32_t>(s.best[0]),
                                top_events, across_ ? &totals : nullptr);
    path.rank = r.rank;
    path.nodes = r.nodes;
    path.edges = r.edges;
    rank_ns = std::move(totals.rank_ns);
    crossings = totals.crossings;
    return path;
  }

 public:
  // Each rank's own path from the graph across ranks, as its graph alone
  // gives it (critical_path.h: critical_paths_and_across): the same events
  // and edges, without the collective ones, and the participants' own
  // edges at their own weight.
  std::vector<RankCriticalPath> rank_paths(const std::vector<std::int32_t>& ranks, std::size_t top_events,
                                          int threads) {
    const detail::CpRankSlots slots(ranks);
    std::vector<RankCriticalPath> out(slots.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i].rank = slots.rank(i);
      out[i].window_start_ns = INT64_MAX;
      out[i].window_end_ns = INT64_MIN;
    }
    for (const auto& e : ev_) {
      auto& r = out[slots.of(in_.rank(e))];
      r.nodes += 2;
      r.window_start_ns = std::min(r.window_start_ns, in_.clock.start(e));
      r.window_end_ns = std::max(r.window_end_ns, in_.clock.end(e));
    }
    for (auto& r : out)
      if (r.nodes == 0) r.window_start_ns = r.window_end_ns = 0;
    if (ev_.empty()) return out;
    group_edges();
    for (std::size_t u = 0; u + 1 < out_begin_.size(); ++u)
      for (auto k = out_begin_[u]; k < out_begin_[u + 1]; ++k)
        if (!edges_.collective(k)) ++out[slots.of(in_.rank(ev_[u / 2]))].edges;
    auto& s = search_;
    detail::cp_search(ev_, edges_, out_begin_, &slots, in_, s);
    // Each rank's path read from the search: independent, the graph and the
    // search only read.
    detail::parallel_for(out.size(), threads, [&](std::size_t i) {
      if (s.best[i] < 0) return;
      auto path = detail::cp_path(t_, in_, ev_, edges_, out_begin_, enclosing_, s,
                                  static_cast<std::uint32_t>(s.best[i]), top_events, nullptr);
      path.rank = out[i].rank;
      path.nodes = out[i].nodes;
      path.edges = out[i].edges;
      path.window_start_ns = out[i].window_start_ns;
      path.window_end_ns = out[i].window_end_ns;
      out[i] = std::move(path);
    });
    return out;
  }

 private:
  // Each node's out edges: the edges reordered by source, in the order they
  // were added among one node's (once).
  void group_edges() {
    if (out_begin_.empty()) out_begin_ = edges_.group_by_source(2 * ev_.size());
  }

  const Trace& t_;
  std::int32_t rank_;
  bool across_;
  std::vector<CpEvent> ev_;
  std::vector<std::uint32_t> streams_;
  const detail::CpInput& in_;
  std::optional<std::vector<CallPart>> calls_;
  detail::CpOutIndex out_begin_;  // group_edges()
  detail::CpSearch search_;              // the last search's arrays, reused by the next
  std::size_t host_ = 0;                // host events come first in ev_
  // Per activity and per GPU event, mapped apart (huge_pages.h): given back
  // once the edges are built.
  MappedVector<std::int32_t> gpu_event_;
  MappedVector<std::uint32_t> own_edge_;  // GPU event - host_count() -> its start -> end edge
  std::vector<std::int32_t> enclosing_;  // host event -> its parent in its call stack, -1: none (cp_edge_event)
  detail::CpEdges edges_;
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

std::vector<RankCriticalPath> critical_paths(const Trace& t, const CriticalPathOptions& o) {
  auto in = detail::cp_input(t, o, false);
  std::vector<std::int32_t> ranks;
  for (const auto& [r, _] : in.ranks) ranks.push_back(r);
  // Each rank's graph is its own: built side by side where threads allow.
  std::vector<RankCriticalPath> out(ranks.size());
  detail::parallel_for(ranks.size(), o.threads, [&](std::size_t i) {
    CpGraph g(t, ranks[i], std::move(in.ranks[ranks[i]]), in);
    out[i] = g.run(o.top_events);
  });
  return out;
}

CrossRankCriticalPath critical_path_across_ranks(const Trace& t, std::size_t top_events) {
  return critical_path_across_ranks(t, collective_calls(t), top_events);
}

namespace {

// The graph across ranks, its path, and where `rank_paths` is given each
// rank's own from the same graph.
CrossRankCriticalPath across_ranks(const Trace& t, const std::vector<CollectiveCall>& calls, std::size_t top_events,
                                   std::vector<RankCriticalPath>* rank_paths, int threads = 1,
                                   const std::function<void()>& calls_read = {}) {
  // What the graph reads of the calls, copied; the calls given back (their
  // other readers done with them too: freed) before the graph's input is
  // chosen.
  auto parts = call_parts(calls);
  if (calls_read) calls_read();
  CriticalPathOptions o;
  auto in = detail::cp_input(t, o, true);
  CrossRankCriticalPath out;
  auto& all = in.ranks[-1];
  {
    std::vector<std::int32_t> ranks;
    for (const auto& e : all.host) ranks.push_back(in.rank(e));
    for (auto s : all.streams) ranks.push_back(t.streams[s].rank.value);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    out.ranks = std::move(ranks);
  }
  out.path.rank = -1;
  if (out.ranks.empty()) return out;
  CpGraph g(t, -1, std::move(all), in, std::move(parts));
  out.path = g.run(top_events, &in);
  out.collective_instances = g.instances;
  out.collective_edges = g.collective_edge_count;
  out.waiting_ns = g.wait_ns;
  out.crossings = g.crossings;
  for (auto r : out.ranks) out.rank_ns.push_back({r, g.rank_ns.count(r) ? g.rank_ns[r] : 0});
  if (rank_paths) *rank_paths = g.rank_paths(out.ranks, top_events, threads);
  return out;
}

}  // namespace

CrossRankCriticalPath critical_path_across_ranks(const Trace& t, const std::vector<CollectiveCall>& calls,
                                                 std::size_t top_events) {
  return across_ranks(t, calls, top_events, nullptr);
}

CriticalPaths critical_paths_and_across(const Trace& t, const std::vector<CollectiveCall>& calls,
                                        std::size_t top_events, int threads, const std::function<void()>& calls_read) {
  CriticalPaths out;
  out.across = across_ranks(t, calls, top_events, &out.ranks, threads, calls_read);
  return out;
}

}  // namespace moetrace::analyzer
