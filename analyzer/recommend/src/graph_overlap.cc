// The overlap what-ifs on a trace's execution graph (graph_overlap.h): MoE
// layer instances that ran side by side on a rank run one after the other
// (off), or independent passes that ran one after the other run side by
// side (on).
#include "graph_overlap.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>

namespace moetrace::analyzer::detail {
namespace {

// (rank, layer, iteration, micro-batch, forward or backward): a weight
// gradient part belongs to its backward instance (moe_recognition.h).
using PartKey = std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t, bool>;

struct Instance {
  PartKey key;
  std::vector<std::size_t> acts;  // its activities
  std::int64_t start = INT64_MAX, end = INT64_MIN;
  std::int32_t iteration() const { return std::get<2>(key); }
  std::int32_t micro_batch() const { return std::get<3>(key); }
  bool backward() const { return std::get<4>(key); }
};

// The MoE layer instances of each rank that have GPU work, by start.
std::map<std::int32_t, std::vector<Instance>> instances_by_rank(const Trace& t, const GraphEditor& ed) {
  std::map<PartKey, Instance> instances;
  for (std::size_t o = 0; o < t.ops.size(); ++o) {
    const auto& op = t.ops[o];
    if (op.layer < 0 || !op_kind_info(op.kind).moe_layer || op.phase == Phase::kOther) continue;
    const PartKey key{op.rank.value, op.layer, op.iteration, op.micro_batch, is_backward(op.phase)};
    auto& in = instances[key];
    in.key = key;
    for (auto a : ed.op_activities(o)) {
      in.acts.push_back(a);
      in.start = std::min(in.start, t.activities[a].start_ns);
      in.end = std::max(in.end, t.activities[a].end_ns);
    }
  }
  std::map<std::int32_t, std::vector<Instance>> by_rank;
  for (auto& [key, in] : instances)
    if (!in.acts.empty()) by_rank[std::get<0>(key)].push_back(std::move(in));
  for (auto& [rank, list] : by_rank)
    std::stable_sort(list.begin(), list.end(), [](const Instance& a, const Instance& b) { return a.start < b.start; });
  return by_rank;
}

// Calls f(i, j) for each maximal group [i, j) of instances (by start) whose
// windows overlap one another.
template <typename F>
void for_each_group(const std::vector<Instance>& list, F&& f) {
  for (std::size_t i = 0; i < list.size();) {
    std::size_t j = i + 1;
    std::int64_t end = list[i].end;
    while (j < list.size() && list[j].start < end) end = std::max(end, list[j++].end);
    f(i, j);
    i = j;
  }
}

bool is_comm_activity(const Trace& t, const Activity& a) {
  if (a.op >= 0 && is_communication(op_category(t.ops[static_cast<std::size_t>(a.op)].kind))) return true;
  return a.stream >= 0 && t.streams[static_cast<std::size_t>(a.stream)].role == "comm";
}

std::int64_t queue_gap_of(const ExecGraph& g, std::int32_t rank) {
  for (const auto& l : g.latencies)
    if (l.rank == rank) return l.queue_gap_ns;
  return 0;
}

// Two adjacent passes of one rank run side by side (graph_overlap.h).
class PassPair {
 public:
  PassPair(const Trace& t, ExecGraph& g, GraphEditor& ed, std::int32_t rank, std::span<const Instance> first,
           std::span<const Instance> second)
      : t_(t), g_(g), ed_(ed), rank_(rank), p_(first), q_(second) {}

  // Returns whether a stream's communication took a stream of its own.
  bool run() {
    place_activities();
    cut_edges();
    return order_lanes();
  }

 private:
  enum Group : std::uint8_t { kFirst, kSecond, kBetween };
  struct Place {
    Group group;
    std::size_t segment;
    std::int64_t offset = 0;  // from its segment's start
    std::size_t comm_ordinal = 0;  // communication: its op's place among its segment's communication ops
  };

  // Each of the rank's activities from the first pass's start to the second
  // pass's end: its pass (or between) and its segment.
  void place_activities() {
    const auto n = std::min(p_.size(), q_.size());
    const auto p_end = p_.back().end, q_start = q_.front().start;
    auto segment_of = [&](std::span<const Instance> pass, std::int64_t at) {
      std::size_t j = 0;
      while (j + 1 < n && pass[j].end <= at) ++j;
      return j;
    };
    std::set<std::size_t> own_q;
    for (std::size_t k = 0; k < q_.size(); ++k)
      for (auto a : q_[k].acts) own_q.insert(a);
    for (std::size_t s = 0; s < t_.streams.size(); ++s) {
      if (t_.streams[s].rank.value != rank_) continue;
      for (auto a = t_.activity_track_begin[s]; a < t_.activity_track_begin[s + 1]; ++a) {
        const auto& act = t_.activities[a];
        if (act.start_ns < p_.front().start || act.start_ns >= q_.back().end) continue;
        Place pl{kBetween, 0};
        if (own_q.contains(a) || act.start_ns >= q_start) pl = {kSecond, segment_of(q_, act.start_ns)};
        else if (act.start_ns < p_end) pl = {kFirst, segment_of(p_, act.start_ns)};
        place_[a] = pl;
      }
    }
    std::map<std::pair<Group, std::size_t>, std::int64_t> seg_start;
    for (const auto& [a, pl] : place_) {
      auto [it, fresh] = seg_start.try_emplace({pl.group, pl.segment}, t_.activities[a].start_ns);
      if (!fresh) it->second = std::min(it->second, t_.activities[a].start_ns);
    }
    for (auto& [a, pl] : place_) pl.offset = t_.activities[a].start_ns - seg_start[{pl.group, pl.segment}];
    // Each segment's communication ops in the order they started: every
    // rank of a communicator issues its collectives in one order, and so
    // must the new schedule, which offsets (rank by rank) would not keep.
    std::map<std::pair<Group, std::size_t>, std::vector<std::size_t>> comm;
    for (const auto& [a, pl] : place_)
      if (is_comm_activity(t_, t_.activities[a])) comm[{pl.group, pl.segment}].push_back(a);
    for (auto& [seg, acts] : comm) {
      std::stable_sort(acts.begin(), acts.end(),
                       [&](std::size_t x, std::size_t y) { return t_.activities[x].start_ns < t_.activities[y].start_ns; });
      std::map<std::int32_t, std::size_t> ordinal_of_op;
      std::size_t next = 0;
      for (auto a : acts) {
        const auto op = t_.activities[a].op;
        if (op < 0) {
          place_[a].comm_ordinal = next++;
          continue;
        }
        auto [it, fresh] = ordinal_of_op.try_emplace(op, next);
        if (fresh) ++next;
        place_[a].comm_ordinal = it->second;
      }
    }
  }

  const Place* place(std::uint32_t node) const {
    const auto& n = g_.nodes[node];
    if (n.kind != ExecNode::Kind::kActivity) return nullptr;
    auto it = place_.find(n.ref);
    return it == place_.end() ? nullptr : &it->second;
  }

  // Drops the edges between the passes (and the work between them), the
  // second pass's launch edges and each stream's edges into and out of the
  // window, which order_lanes() puts back around the new order.
  void cut_edges() {
    for (const auto& [a, pl] : place_) {
      const auto stream = t_.activities[a].stream;
      for (auto k : ed_.all_edges_into(g_.activity_start[a])) {
        const auto e = g_.edges[k];
        const auto* from = place(e.from);
        const bool ordering = e.kind == ExecEdgeKind::kStreamOrder || e.kind == ExecEdgeKind::kCrossStream ||
                              e.kind == ExecEdgeKind::kInferredCrossStream;
        if (e.kind == ExecEdgeKind::kLaunch && pl.group == kSecond) {
          ed_.remove_edge(k);
        } else if (from != nullptr && ordering && from->group != pl.group) {
          ed_.remove_edge(k);
        } else if (from == nullptr && e.kind == ExecEdgeKind::kStreamOrder) {
          into_[stream] = {e.from, e.latency_ns};
          ed_.remove_edge(k);
        }
      }
      for (auto k : ed_.edges_out(g_.activity_end[a], ExecEdgeKind::kStreamOrder)) {
        const auto e = g_.edges[k];
        if (place(e.to) != nullptr) continue;
        out_of_[stream] = {e.to, e.latency_ns};
        ed_.remove_edge(k);
      }
    }
  }

  // Each stream's work in the new order: the two passes' segments side by
  // side, then the work between them; communication on a lane of its own
  // where the stream also computed.
  bool order_lanes() {
    std::map<std::pair<std::int32_t, bool>, std::vector<std::size_t>> lanes;  // (stream, comm) -> activities
    for (const auto& [a, pl] : place_) lanes[{t_.activities[a].stream, is_comm_activity(t_, t_.activities[a])}].push_back(a);
    std::set<std::int32_t> streams, split;
    for (const auto& [key, acts] : lanes) {
      if (streams.contains(key.first)) split.insert(key.first);
      streams.insert(key.first);
    }
    const auto gap = queue_gap_of(g_, rank_);
    for (auto& [key, acts] : lanes) {
      const bool comm = key.second;
      std::sort(acts.begin(), acts.end(), [&](std::size_t x, std::size_t y) {
        const auto &a = place_.at(x), &b = place_.at(y);
        const bool ga = a.group == kBetween, gb = b.group == kBetween;
        const auto sx = t_.activities[x].start_ns, sy = t_.activities[y].start_ns;
        if (ga || gb) return ga == gb ? sx < sy : gb;
        // Communication alternates the two passes' ops of a segment, in
        // each pass's own order; computation goes by offset.
        const auto ka = comm ? static_cast<std::int64_t>(a.comm_ordinal) : a.offset;
        const auto kb = comm ? static_cast<std::int64_t>(b.comm_ordinal) : b.offset;
        return std::tie(a.segment, ka, a.group, sx) < std::tie(b.segment, kb, b.group, sy);
      });
      for (std::size_t k = 1; k < acts.size(); ++k)
        ed_.add_edge(g_.activity_end[acts[k - 1]], g_.activity_start[acts[k]], gap, ExecEdgeKind::kStreamOrder);
      if (auto it = into_.find(key.first); it != into_.end())
        ed_.add_edge(it->second.first, g_.activity_start[acts.front()], it->second.second, ExecEdgeKind::kStreamOrder);
      if (auto it = out_of_.find(key.first); it != out_of_.end())
        ed_.add_edge(g_.activity_end[acts.back()], it->second.first, it->second.second, ExecEdgeKind::kStreamOrder);
    }
    // The second pass starts no earlier than the first; its work is
    // explained by the what-if now, not anchored at its measured start.
    std::size_t first = p_.front().acts.front();  // then the first pass's first work
    for (const auto& [a, pl] : place_)
      if (pl.group == kFirst && t_.activities[a].start_ns < t_.activities[first].start_ns) first = a;
    for (const auto& [a, pl] : place_) {
      if (pl.group != kSecond) continue;
      ed_.add_edge(g_.activity_start[first], g_.activity_start[a], 0, ExecEdgeKind::kWhatIf);
      if (g_.activity_start[a] < g_.anchored.size()) g_.anchored[g_.activity_start[a]] = 0;
    }
    return !split.empty();
  }

  const Trace& t_;
  ExecGraph& g_;
  GraphEditor& ed_;
  std::int32_t rank_;
  std::span<const Instance> p_, q_;
  std::map<std::size_t, Place> place_;
  std::map<std::int32_t, std::pair<std::uint32_t, std::int64_t>> into_, out_of_;  // by stream: (node, latency)
};

std::string plural(int n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

void apply_serialise(const Trace& t, ExecGraph& g, GraphWhatIfResult& out) {
  GraphEditor ed(t, g);
  auto by_rank = instances_by_rank(t, ed);
  int serialised = 0, groups = 0;
  for (auto& entry : by_rank) {
    auto& list = entry.second;  // (a lambda uses it: clang 14 captures no structured binding)
    for_each_group(list, [&](std::size_t i, std::size_t j) {
      if (j - i < 2) return;
      ++groups;
      // The group's activities per stream in their order; each instance's
      // run before the next instance's on that stream.
      std::map<std::size_t, std::size_t> place;  // activity -> instance in the group
      for (std::size_t k = i; k < j; ++k)
        for (auto a : list[k].acts) place[a] = k - i;
      std::map<std::int32_t, std::vector<std::size_t>> streams;
      for (const auto& [a, k] : place) streams[t.activities[a].stream].push_back(a);
      for (auto& [s, acts] : streams) {
        std::sort(acts.begin(), acts.end(),
                  [&](std::size_t x, std::size_t y) { return t.activities[x].start_ns < t.activities[y].start_ns; });
        auto order = acts;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return place[x] < place[y]; });
        if (order == acts) continue;
        // Take the group's activities out of the stream's chain, then put
        // them back in the new order between the same neighbours.
        std::set<std::uint32_t> mine;
        for (auto a : acts) mine.insert(g.activity_start[a]);
        std::uint32_t into = ExecGraph::kNone, out_to = ExecGraph::kNone;
        std::int64_t into_gap = 0, out_gap = 0;
        std::map<std::size_t, std::int64_t> gap;
        for (auto a : acts) {
          for (auto k : ed.edges_into(g.activity_start[a], ExecEdgeKind::kStreamOrder)) {
            const auto e = g.edges[k];
            gap[a] = e.latency_ns;
            const auto& from = g.nodes[e.from];
            const bool inside = from.kind == ExecNode::Kind::kActivity && mine.contains(g.activity_start[from.ref]);
            if (!inside) {
              into = e.from;
              into_gap = e.latency_ns;
            }
            ed.remove_edge(k);
          }
          for (auto k : ed.edges_out(g.activity_end[a], ExecEdgeKind::kStreamOrder)) {
            const auto e = g.edges[k];
            const auto& to = g.nodes[e.to];
            if (to.kind != ExecNode::Kind::kActivity || !mine.contains(g.activity_start[to.ref])) {
              out_to = e.to;
              out_gap = e.latency_ns;
            }
            ed.remove_edge(k);
          }
        }
        if (into != ExecGraph::kNone) ed.add_edge(into, g.activity_start[order.front()], into_gap, ExecEdgeKind::kStreamOrder);
        for (std::size_t k = 1; k < order.size(); ++k)
          ed.add_edge(g.activity_end[order[k - 1]], g.activity_start[order[k]], gap[order[k]],
                      ExecEdgeKind::kStreamOrder);
        if (out_to != ExecGraph::kNone) ed.add_edge(g.activity_end[order.back()], out_to, out_gap, ExecEdgeKind::kStreamOrder);
      }
      // Each instance's work waits for the end of the one before it.
      for (std::size_t k = i + 1; k < j; ++k) {
        const auto& prev = list[k - 1];
        auto last = *std::max_element(prev.acts.begin(), prev.acts.end(), [&](std::size_t x, std::size_t y) {
          return t.activities[x].end_ns < t.activities[y].end_ns;
        });
        std::map<std::int32_t, std::size_t> first;  // stream -> its first activity of this instance
        for (auto a : list[k].acts) {
          auto [it, fresh] = first.try_emplace(t.activities[a].stream, a);
          if (!fresh && t.activities[a].start_ns < t.activities[it->second].start_ns) it->second = a;
        }
        for (const auto& [s, a] : first) ed.add_edge(g.activity_end[last], g.activity_start[a], 0, ExecEdgeKind::kWhatIf);
        ++serialised;
      }
    });
  }
  out.instances_changed += serialised;
  out.applied.push_back(fmt::format(
      "overlap=off: {} that ran beside another ({} on their ranks) now wait for the one before them; each stream "
      "runs one instance's work before the next's",
      plural(serialised, "MoE layer instance", "MoE layer instances"), plural(groups, "group", "groups")));
  if (serialised == 0) out.notes.push_back("overlap=off: no MoE layer instances ran side by side in the trace");
}

namespace {

// The ranks that share a collective with one another (joined by the
// graph's collective edges), by rank: a representative of each.
std::map<std::int32_t, std::int32_t> communicator_groups(const Trace& t, const ExecGraph& g) {
  std::map<std::int32_t, std::int32_t> parent;
  auto find = [&](std::int32_t r) {
    parent.try_emplace(r, r);
    while (parent[r] != r) r = parent[r] = parent[parent[r]];
    return r;
  };
  auto rank_of = [&](std::uint32_t node) -> std::int32_t {
    const auto& n = g.nodes[node];
    if (n.kind != ExecNode::Kind::kActivity) return -1;
    const auto s = t.activities[n.ref].stream;
    return s < 0 ? -1 : t.streams[static_cast<std::size_t>(s)].rank.value;
  };
  for (const auto& e : g.edges) {
    if (e.kind != ExecEdgeKind::kCollective || e.latency_ns == ExecGraph::kRemoved) continue;
    const auto a = rank_of(e.from), b = rank_of(e.to);
    if (a >= 0 && b >= 0) parent[find(a)] = find(b);
  }
  std::map<std::int32_t, std::int32_t> group;
  for (const auto& entry : parent) group[entry.first] = find(entry.first);
  return group;
}

}  // namespace

void apply_overlap(const Trace& t, ExecGraph& g, GraphWhatIfResult& out) {
  GraphEditor ed(t, g);
  const auto by_rank = instances_by_rank(t, ed);
  // A pass by (iteration, micro-batch, backward); a pair by its two passes.
  using PassKey = std::tuple<std::int32_t, std::int32_t, bool>;
  using PairKey = std::pair<PassKey, PassKey>;
  struct Candidate {
    std::int32_t rank;
    std::span<const Instance> first, second;
    PairKey key;
  };
  std::vector<Candidate> candidates;
  std::map<std::int32_t, std::set<PassKey>> passes_of;    // rank -> its passes (instances side by side included)
  std::map<std::int32_t, std::set<PairKey>> pairs_of;     // rank -> the pairs it would make
  int side_by_side = 0;
  bool micro_batches = false;
  for (const auto& entry : by_rank) {
    const auto rank = entry.first;
    const auto& list = entry.second;  // (a lambda uses it: clang 14 captures no structured binding)
    for (const auto& in : list) passes_of[rank].insert({in.iteration(), in.micro_batch(), in.backward()});
    // Passes: runs of instances that ran alone, of one (iteration,
    // micro-batch, direction); an instance that ran beside another ends one.
    struct Pass {
      std::size_t begin, end;
    };
    std::vector<Pass> passes;
    for_each_group(list, [&](std::size_t i, std::size_t j) {
      if (j - i >= 2) {
        side_by_side += static_cast<int>(j - i);
        passes.push_back({i, i});  // an empty pass: nothing pairs across it
        return;
      }
      const auto& in = list[i];
      micro_batches |= in.micro_batch() >= 0;
      if (!passes.empty() && passes.back().end == i && passes.back().end > passes.back().begin) {
        const auto& prev = list[i - 1];
        if (prev.iteration() == in.iteration() && prev.micro_batch() == in.micro_batch() &&
            prev.backward() == in.backward()) {
          passes.back().end = j;
          return;
        }
      }
      passes.push_back({i, j});
    });
    const std::span<const Instance> all(list);
    for (std::size_t k = 0; k + 1 < passes.size(); ++k) {
      const auto &p = passes[k], &q = passes[k + 1];
      if (p.begin == p.end || q.begin == q.end || p.end != q.begin) continue;
      const auto &a = list[p.begin], &b = list[q.begin];
      if (a.iteration() != b.iteration() || a.micro_batch() < 0 || b.micro_batch() < 0 ||
          a.micro_batch() == b.micro_batch())
        continue;
      const PairKey key{{a.iteration(), a.micro_batch(), a.backward()}, {b.iteration(), b.micro_batch(), b.backward()}};
      candidates.push_back({rank, all.subspan(p.begin, p.end - p.begin), all.subspan(q.begin, q.end - q.begin), key});
      pairs_of[rank].insert(key);
      ++k;  // each pass in one pair
    }
  }
  // Every rank of a communicator must issue its collectives in one order:
  // a pair runs side by side only where each rank sharing a collective with
  // its rank, and running either pass, makes the same pair.
  const auto groups = communicator_groups(t, g);
  auto group_of = [&](std::int32_t rank) {
    auto it = groups.find(rank);
    return it == groups.end() ? rank : it->second;
  };
  int pairs = 0, moved = 0, lanes = 0, declined = 0;
  for (const auto& c : candidates) {
    bool agreed = true;
    for (const auto& [other, passes] : passes_of) {
      if (other == c.rank || group_of(other) != group_of(c.rank)) continue;
      if (!passes.contains(c.key.first) && !passes.contains(c.key.second)) continue;
      agreed = agreed && pairs_of[other].contains(c.key);
    }
    if (!agreed) {
      ++declined;
      continue;
    }
    PassPair pair(t, g, ed, c.rank, c.first, c.second);
    lanes += pair.run() ? 1 : 0;
    ++pairs;
    moved += static_cast<int>(std::min(c.first.size(), c.second.size()));
  }
  out.instances_changed += 2 * moved;
  if (pairs == 0) {
    out.applied.push_back("overlap=on: no pair of passes to run side by side; the graph is unchanged");
  } else {
    out.applied.push_back(fmt::format(
        "overlap=on: {} of two micro-batches now run side by side, layer by layer ({} paired); each stream runs both "
        "passes' computation in the order of its offset in its layer, and their communication alternating, each "
        "pass's in its own order, beside the other pass's computation{}; "
        "the second pass is issued with the first; work between the passes runs after them; an upper bound: "
        "communication and computation keep their measured durations though they share the GPU",
        plural(pairs, "pair of passes", "pairs of passes"), plural(moved, "layer", "layers"),
        lanes > 0 ? fmt::format(" ({} where communication ran on the computation's stream: it takes a stream of its own)",
                                plural(lanes, "pair", "pairs"))
                  : ""));
  }
  if (declined > 0)
    out.notes.push_back(fmt::format(
        "overlap=on: {} left as they ran: a rank sharing a collective with theirs does not run the same two passes "
        "one after the other, and ranks of one communicator must issue their collectives in one order",
        plural(declined, "pair of passes", "pairs of passes")));
  if (side_by_side > 0)
    out.notes.push_back(fmt::format("overlap=on: {} already ran beside another; left as they ran",
                                    plural(side_by_side, "MoE layer instance", "MoE layer instances")));
  if (pairs == 0)
    out.notes.push_back(
        micro_batches
            ? "overlap=on: no two adjacent passes of different micro-batches in one iteration: nothing independent "
              "to run side by side"
            : "overlap=on: the trace names no micro-batches: overlapping needs two independent micro-batches' layers "
              "(a forward beside a backward, or two forwards); with one micro-batch per step, pipeline_degree=R "
              "splits each layer's work instead");
}

}  // namespace moetrace::analyzer::detail
