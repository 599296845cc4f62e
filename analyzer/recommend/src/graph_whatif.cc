// What-ifs on a trace's execution graph (graph_whatif.h).
#include "moetrace/analyzer/graph_whatif.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <tuple>

#include "moetrace/analyzer/cost_model.h"
#include "moetrace/schema/error.h"
#include "graph_edit.h"
#include "graph_overlap.h"
#include "graph_placement.h"
#include "graph_reuse.h"
#include "hardware.h"

namespace moetrace::analyzer {

void parse_graph_what_if(std::string_view kv, GraphWhatIfs& w) {
  const auto eq = kv.find('=');
  if (eq == std::string_view::npos)
    throw ConfigError(fmt::format("what-if '{}': expected KEY=VALUE (pipeline_degree=R, reuse=S1..S4, placement=pro-prophet, overlap=off|on)", kv));
  const auto key = kv.substr(0, eq), value = kv.substr(eq + 1);
  if (key == "pipeline_degree") {
    int r = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), r);
    if (ec != std::errc() || p != value.data() + value.size() || r < 1 || r > 64)
      throw ConfigError(fmt::format("what-if pipeline_degree={}: a whole number from 1 to 64", value));
    w.pipeline_degree = r;
  } else if (key == "reuse") {
    const auto strategy = plan::parse_reuse_strategy(value);  // throws naming the strategies
    if (strategy == plan::ReuseStrategy::kNone)
      throw ConfigError("what-if reuse=none: removing a trace's memory reuse is not a what-if (S1, S2, S3, S4)");
    w.reuse = std::string(plan::reuse_strategy_name(strategy));
  } else if (key == "placement") {
    if (value != "pro-prophet")
      throw ConfigError(fmt::format("what-if placement={}: pro-prophet (its planner on the trace's load)", value));
    w.placement = std::string(value);
  } else if (key == "overlap") {
    if (value != "on" && value != "off")
      throw ConfigError(fmt::format("what-if overlap={}: on or off", value));
    w.overlap = value == "on";
  } else {
    throw ConfigError(fmt::format("what-if {}: unknown key (pipeline_degree, reuse, placement, overlap)", key));
  }
}

namespace {

bool is_a2a(OpKind k) { return k == OpKind::kDispatchAllToAll || k == OpKind::kCombineAllToAll; }
bool is_expert(OpKind k) { return k == OpKind::kExpertFfn; }

// A MoE layer instance: (rank, layer, iteration, phase, micro-batch).
using InstanceKey = std::tuple<std::int32_t, std::int32_t, std::int32_t, int, std::int32_t>;

class PipelineSplit {
 public:
  PipelineSplit(const Trace& t, ExecGraph& g, const sim::CostModel& m, int R, GraphWhatIfResult& out)
      : t_(t), g_(g), m_(m), R_(R), out_(out), ed_(t, g) {}

  void run() {
    std::map<InstanceKey, std::vector<std::size_t>> instances;
    for (std::size_t o = 0; o < t_.ops.size(); ++o) {
      const auto& op = t_.ops[o];
      if (op.layer < 0 || !op_kind_info(op.kind).moe_layer) continue;
      instances[{op.rank.value, op.layer, op.iteration, static_cast<int>(op.phase), op.micro_batch}].push_back(o);
    }
    std::map<std::string, int> skipped;
    for (auto& [key, ops] : instances) {
      const auto why = split(ops);
      if (why.empty())
        ++out_.instances_changed;
      else
        ++skipped[why];
    }
    for (const auto& [why, n] : skipped)
      out_.notes.push_back(fmt::format("pipeline_degree: {} layer instance{} left as measured: {}", n,
                                       n == 1 ? "" : "s", why));
  }

 private:
  using Span = detail::HostSpan;
  Span host_span(std::size_t o, std::int32_t chain_hint) const { return ed_.host_span(o, chain_hint); }

  // The part of an op's measured time `d` (ns) that scales with its work:
  // beta x W where the trace gives the op's work W (FLOPs of an expert op,
  // bytes of an all-to-all); else its time beyond the startups the cost
  // model charges (alpha per GEMM launch of an expert op, the all-to-all's
  // alpha at P): pipemoe Eq. 15-18 split a stage's time the same way.
  double scalable_ns(std::size_t o, std::int64_t d) const {
    const auto& op = t_.ops[o];
    const int P = std::max(2, t_.run.world_size);
    const auto a2a = m_.collective(plan::CollectiveKind::kAllToAllV).at(P);
    if (is_expert(op.kind) && op.flops > 0) return m_.compute_cost(op.kind).seconds_per_flop * op.flops * 1e9;
    if (is_a2a(op.kind) && op.bytes > 0) return a2a.beta_s * static_cast<double>(op.bytes) * 1e9;
    double alpha_s = 0;
    if (is_expert(op.kind)) {
      int gemms = 0;
      for (auto a : ed_.op_activities(o))
        if (t_.activities[a].type == ActivityType::kKernel && detail::is_gemm_kernel_name(t_.str(t_.activities[a].name)))
          ++gemms;
      alpha_s = m_.compute_cost(op.kind).alpha_s * std::max(1, gemms);
    } else if (is_a2a(op.kind)) {
      alpha_s = a2a.alpha_s;
    }
    return std::max(0.0, static_cast<double>(d) - alpha_s * 1e9);
  }

  std::string split(std::vector<std::size_t> ops) {
    std::vector<std::size_t> a2a, experts;
    for (auto o : ops) {
      if (t_.ops[o].chunk > 0) return "already split in chunks (predicting from a split trace is not supported)";
      if (is_a2a(t_.ops[o].kind)) a2a.push_back(o);
      if (is_expert(t_.ops[o].kind)) experts.push_back(o);
    }
    if (experts.empty() || a2a.empty()) return "no all-to-all and experts to split";
    // The chain: the one the expert ops were issued from.
    std::int32_t chain = -1;
    for (auto o : experts) {
      const auto s = host_span(o, -1);
      if (s.chain >= 0) {
        chain = s.chain;
        break;
      }
    }
    if (chain < 0) return "no host calls of its experts in the trace";
    Span ex;
    for (auto o : experts) {
      const auto s = host_span(o, chain);
      if (s.chain != chain) return "its ops were issued from several threads";
      ex.first = ex.first < 0 ? s.first : std::min(ex.first, s.first);
      ex.last = std::max(ex.last, s.last);
    }
    // The all-to-alls issued before the experts (dispatch: one op, or
    // several kernels of a library such as DeepEP's notify and dispatch)
    // and after them (combine).
    std::vector<std::size_t> before, after;
    Span first_a2a, last_a2a;
    auto widen = [](Span& into, const Span& s) {
      into.chain = s.chain;
      into.first = into.first < 0 ? s.first : std::min(into.first, s.first);
      into.last = std::max(into.last, s.last);
    };
    for (auto o : a2a) {
      const auto s = host_span(o, chain);
      if (s.chain != chain) return "its ops were issued from several threads";
      if (s.last < ex.first) {
        before.push_back(o);
        widen(first_a2a, s);
      } else if (s.first > ex.last) {
        after.push_back(o);
        widen(last_a2a, s);
      } else {
        return "its host work is not dispatch, experts, combine in that order";
      }
    }
    if (before.empty() || after.empty()) return "no all-to-all on one side of its experts";
    const auto& c = ed_.chains()[static_cast<std::size_t>(chain)];
    const std::int32_t region_end = last_a2a.last;
    if (static_cast<std::size_t>(region_end) + 1 >= c.size()) return "nothing follows it on its thread";
    // Blocks [begin, end) of chain positions.
    const std::array<std::pair<std::int32_t, std::int32_t>, 3> blocks = {
        std::pair{first_a2a.first, ex.first}, std::pair{ex.first, last_a2a.first},
        std::pair{last_a2a.first, region_end + 1}};
    // The split ops' activities, by block, in their issue order.
    std::array<std::vector<std::size_t>, 3> acts;
    std::map<std::size_t, double> scale;  // activity -> duration factor
    for (std::size_t b = 0; b < 3; ++b) {
      const auto& list = b == 0 ? before : b == 2 ? after : experts;
      for (auto o : list) {
        std::int64_t d = 0;
        for (auto a : ed_.op_activities(o)) d += t_.activities[a].duration();
        const double cut = scalable_ns(o, d) * (1.0 - 1.0 / R_);
        const double f = d > 0 ? std::clamp((static_cast<double>(d) - cut) / static_cast<double>(d), 1.0 / R_, 1.0) : 1.0;
        for (auto a : ed_.op_activities(o)) {
          const auto* call = t_.launching_call(t_.activities[a]);
          if (call == nullptr) return "an expert or all-to-all kernel without its launching call";
          const auto p = ed_.pos_of(g_.api_start[static_cast<std::size_t>(call - t_.api_calls.data())]);
          if (p < blocks[b].first || p >= blocks[b].second) return "its kernels were launched outside its ops' host work";
          acts[b].push_back(a);
          scale[a] = f;
        }
      }
      std::sort(acts[b].begin(), acts[b].end(), [&](std::size_t x, std::size_t y) {
        return t_.activities[x].start_ns < t_.activities[y].start_ns;
      });
    }
    rewire(c, blocks, acts, scale);
    return {};
  }

  // Chunk j of activity a: its points (j = 0: the activity's own).
  struct Points {
    std::uint32_t start, end;
  };

  void rewire(const std::vector<std::uint32_t>& c, const std::array<std::pair<std::int32_t, std::int32_t>, 3>& blocks,
              const std::array<std::vector<std::size_t>, 3>& acts, const std::map<std::size_t, double>& scale) {
    // Host: the blocks' points cloned for chunks 1..R-1.
    std::map<std::uint32_t, std::vector<std::uint32_t>> host_clone;  // original -> chunk j's (j >= 1)
    for (const auto& [b0, b1] : blocks)
      for (auto p = b0; p < b1; ++p) {
        const auto n = c[static_cast<std::size_t>(p)];
        auto& v = host_clone[n];
        for (int j = 1; j < R_; ++j) v.push_back(g_.add_node(g_.nodes[n].measured_ns, ExecNode::Kind::kAdded, ExecGraph::kNone, g_.nodes[n].end));
      }
    auto host_at = [&](std::uint32_t n, int j) { return j == 0 ? n : host_clone.at(n)[static_cast<std::size_t>(j - 1)]; };
    auto latency_into = [&](std::int32_t pos) {
      const auto e = ed_.host_edge_into(c[static_cast<std::size_t>(pos)]);
      return e >= 0 ? g_.edges[static_cast<std::size_t>(e)].latency_ns : 0;
    };
    // The new host order: block 0 x R, block 1 x R, block 2 x R; the gap
    // after a block copy is the gap that followed the block.
    const std::int32_t after_region = blocks[2].second;
    std::vector<std::pair<std::uint32_t, std::int64_t>> order;  // node, latency of its incoming host edge
    for (std::size_t b = 0; b < 3; ++b) {
      const auto [b0, b1] = blocks[b];
      if (b0 == b1) continue;
      for (int j = 0; j < R_; ++j)
        for (auto p = b0; p < b1; ++p) {
          std::int64_t lat = latency_into(p);
          // A copy after the first follows the one before with the gap that
          // followed the block; the first copy comes as the block came.
          if (p == b0 && j > 0) lat = latency_into(b1);
          order.push_back({host_at(c[static_cast<std::size_t>(p)], j), lat});
        }
    }
    // Remove the edges into the blocks' points (all but the region's first)
    // and into the point after the region; chain anew.
    for (std::size_t b = 0; b < 3; ++b)
      for (auto p = blocks[b].first; p < blocks[b].second; ++p)
        if (!(b == 0 && p == blocks[0].first) && ed_.host_edge_into(c[static_cast<std::size_t>(p)]) >= 0)
          ed_.remove_edge(static_cast<std::uint32_t>(ed_.host_edge_into(c[static_cast<std::size_t>(p)])));
    const auto after = c[static_cast<std::size_t>(after_region)];
    const auto after_lat = latency_into(after_region);
    if (ed_.host_edge_into(after) >= 0) ed_.remove_edge(static_cast<std::uint32_t>(ed_.host_edge_into(after)));
    for (std::size_t k = 1; k < order.size(); ++k)
      ed_.add_edge(order[k - 1].first, order[k].first, order[k].second, ExecEdgeKind::kHostOrder);
    ed_.add_edge(order.back().first, after, after_lat, ExecEdgeKind::kHostOrder);

    // GPU: chunks 1..R-1 of every split activity, launched from the cloned calls.
    std::map<std::size_t, std::vector<Points>> clones;
    for (const auto& list : acts)
      for (auto a : list) {
        const auto& act = t_.activities[a];
        const auto f = scale.at(a);
        const auto d = static_cast<std::int64_t>(static_cast<double>(act.duration()) * f);
        for (auto k : ed_.all_edges_into(g_.activity_end[a]))
          if (g_.edges[k].kind == ExecEdgeKind::kDuration && g_.edges[k].from == g_.activity_start[a])
            g_.edges[k].latency_ns = std::min(g_.edges[k].latency_ns, d);
        auto& v = clones[a];
        for (int j = 1; j < R_; ++j) {
          AddedTask task;
          task.name = std::string(t_.str(act.name));
          task.stream = act.stream;
          task.rank = act.rank.value;
          task.op = act.op;
          task.type = act.type;
          task.duration_ns = d;
          task.start = g_.add_node(act.start_ns, ExecNode::Kind::kAdded, static_cast<std::uint32_t>(g_.added.size()), false);
          task.end = g_.add_node(act.end_ns, ExecNode::Kind::kAdded, static_cast<std::uint32_t>(g_.added.size()), true);
          ed_.add_edge(task.start, task.end, d, ExecEdgeKind::kDuration);
          for (auto k : ed_.all_edges_into(g_.activity_start[a])) {
            const auto e = g_.edges[k];
            if (e.kind == ExecEdgeKind::kLaunch && host_clone.contains(e.from))
              ed_.add_edge(host_at(e.from, j), task.start, e.latency_ns, ExecEdgeKind::kLaunch);
          }
          v.push_back({task.start, task.end});
          g_.added.push_back(std::move(task));
        }
      }
    auto at = [&](std::size_t a, int j) {
      return j == 0 ? Points{g_.activity_start[a], g_.activity_end[a]} : clones.at(a)[static_cast<std::size_t>(j - 1)];
    };
    // Streams: the split activities in issue order (block, chunk, place).
    std::map<std::int32_t, std::vector<std::pair<std::size_t, int>>> on_stream;
    for (const auto& list : acts)
      for (int j = 0; j < R_; ++j)
        for (auto a : list) on_stream[t_.activities[a].stream].push_back({a, j});
    std::set<std::size_t> split(acts[0].begin(), acts[0].end());
    split.insert(acts[1].begin(), acts[1].end());
    split.insert(acts[2].begin(), acts[2].end());
    // The queue gap into each split activity, before any edge goes.
    std::map<std::size_t, std::int64_t> gap_into;
    for (auto a : split)
      for (auto e : ed_.all_edges_into(g_.activity_start[a]))
        if (g_.edges[e].kind == ExecEdgeKind::kStreamOrder && g_.edges[e].latency_ns != ExecGraph::kRemoved)
          gap_into[a] = g_.edges[e].latency_ns;
    for (auto& [stream, seq] : on_stream) {
      // The stream's edge into its first split activity stays; the others
      // go, and so does the edge out of the last one (the split activities
      // of an instance follow each other on their stream).
      std::int64_t out_lat = 0;
      std::uint32_t out_to = ExecGraph::kNone;
      for (const auto& [a, j] : seq) {
        if (j != 0) continue;
        for (auto k : ed_.all_edges_out(g_.activity_end[a])) {
          const auto& e = g_.edges[k];
          if (e.kind != ExecEdgeKind::kStreamOrder || e.latency_ns == ExecGraph::kRemoved) continue;
          const auto& to = g_.nodes[e.to];
          if (to.kind != ExecNode::Kind::kActivity || !split.contains(to.ref)) {
            out_lat = e.latency_ns;
            out_to = e.to;
          }
          ed_.remove_edge(k);
        }
      }
      for (std::size_t k = 1; k < seq.size(); ++k) {
        auto it = gap_into.find(seq[k].first);
        ed_.add_edge(at(seq[k - 1].first, seq[k - 1].second).end, at(seq[k].first, seq[k].second).start,
                    it == gap_into.end() ? 0 : it->second, ExecEdgeKind::kStreamOrder);
      }
      if (out_to != ExecGraph::kNone)
        ed_.add_edge(at(seq.back().first, seq.back().second).end, out_to, out_lat, ExecEdgeKind::kStreamOrder);
    }
    // Cross-stream and sync edges of the split activities, per chunk.
    for (const auto& [a, v] : clones) {
      for (auto k : ed_.all_edges_into(g_.activity_start[a])) {
        const auto e = g_.edges[k];
        if (e.latency_ns == ExecGraph::kRemoved) continue;
        if (e.kind != ExecEdgeKind::kCrossStream && e.kind != ExecEdgeKind::kInferredCrossStream) continue;
        const auto& from = g_.nodes[e.from];
        const bool inside = from.kind == ExecNode::Kind::kActivity && clones.contains(from.ref);
        for (int j = 1; j < R_; ++j)
          ed_.add_edge(inside ? at(from.ref, j).end : e.from, at(a, j).start, e.latency_ns, e.kind);
      }
      for (auto k : ed_.all_edges_out(g_.activity_end[a])) {
        const auto e = g_.edges[k];
        if (e.latency_ns == ExecGraph::kRemoved) continue;
        if (e.kind != ExecEdgeKind::kCrossStream && e.kind != ExecEdgeKind::kInferredCrossStream &&
            e.kind != ExecEdgeKind::kSync)
          continue;
        const auto& to = g_.nodes[e.to];
        if (to.kind == ExecNode::Kind::kActivity && clones.contains(to.ref)) continue;  // done above
        for (int j = 1; j < R_; ++j) ed_.add_edge(at(a, j).end, e.to, e.latency_ns, e.kind);
      }
    }
  }

  const Trace& t_;
  ExecGraph& g_;
  const sim::CostModel& m_;
  int R_;
  GraphWhatIfResult& out_;
  detail::GraphEditor ed_;
};

}  // namespace

GraphWhatIfResult apply_graph_what_ifs(const Trace& trace, ExecGraph& graph, const GraphWhatIfs& w,
                                       const sim::CostModel& model, const std::string& model_source,
                                       const WorkloadSources& sources) {
  GraphWhatIfResult out;
  if (w.pipeline_degree > 1) {
    PipelineSplit(trace, graph, model, w.pipeline_degree, out).run();
    const auto& ex = model.compute_cost(OpKind::kExpertFfn);
    out.applied.push_back(fmt::format(
        "pipeline_degree={}: {} MoE layer instance{} split into {} chunks; each chunk's kernels last their measured "
        "time less beta x work x (1 - 1/{}), beta from {} (experts {:.3g} s/FLOP)",
        w.pipeline_degree, out.instances_changed, out.instances_changed == 1 ? "" : "s", w.pipeline_degree,
        w.pipeline_degree, model_source, ex.seconds_per_flop));
  } else if (w.pipeline_degree == 1) {
    out.applied.push_back("pipeline_degree=1: nothing to split");
  }
  if (!w.reuse.empty()) {
    GraphWhatIfResult r;
    detail::apply_reuse(trace, graph, plan::parse_reuse_strategy(w.reuse), model, sources, r);
    out.applied.push_back(fmt::format(
        "reuse={}: {} added to {} MoE layer instance{}, per chunk; copies at the cost model's alpha + beta x bytes, "
        "from {}",
        w.reuse, plan::reuse_strategy_action(plan::parse_reuse_strategy(w.reuse)), r.instances_changed,
        r.instances_changed == 1 ? "" : "s", model_source));
    for (auto& n : r.notes) out.notes.push_back(std::move(n));
    out.layer_notes.merge(r.layer_notes);
    out.instances_changed += r.instances_changed;
  }
  if (!w.placement.empty()) detail::apply_placement(trace, graph, model, sources, out);
  if (w.overlap && !*w.overlap) detail::apply_serialise(trace, graph, out);
  if (w.overlap && *w.overlap) detail::apply_overlap(trace, graph, out);
  return out;
}

GraphWhatIfResult apply_graph_what_ifs(const Trace& trace, ExecGraph& graph, const GraphWhatIfs& w,
                                       const RecommendOptions& options) {
  std::vector<std::string> notes;
  const auto hw = detail::resolve_hardware(trace, options, nullptr, std::max(2, trace.run.world_size), notes);
  auto out = apply_graph_what_ifs(trace, graph, w, hw.model, hw.info.description, options.sources());
  for (auto& n : notes) out.notes.push_back(std::move(n));
  return out;
}

ReplayWithWhatIfs replay_with_what_ifs(const Trace& trace, const GraphWhatIfs& w, const RecommendOptions& options,
                                       const ExecGraphOptions& graph_options) {
  ReplayWithWhatIfs r;
  if (w.empty()) {
    r.summary = replay(trace, graph_options);
    return r;
  }
  auto g = build_exec_graph(trace, graph_options);
  std::size_t unresolved = 0;
  const auto times = evaluate_exec_graph(g, &unresolved);
  const auto replayed = replayed_trace(trace, g, times);
  auto changed = g;
  r.what_ifs = apply_graph_what_ifs(trace, changed, w, options);
  std::size_t predicted_unresolved = 0;
  const auto predicted = replayed_trace(trace, changed, evaluate_exec_graph(changed, &predicted_unresolved));
  r.summary = compare_replay(trace, replayed, g, &predicted, unresolved);
  add_start_shifts(trace, g, times, r.summary);
  if (predicted_unresolved > 0)
    r.what_ifs.notes.push_back(fmt::format(
        "the changed graph holds a cycle ({} points on or after it keep their measured times): the host waited for "
        "work the what-if moved later; the prediction does not hold",
        predicted_unresolved));
  r.predicted_unresolved = static_cast<std::int64_t>(predicted_unresolved);
  return r;
}

}  // namespace moetrace::analyzer
