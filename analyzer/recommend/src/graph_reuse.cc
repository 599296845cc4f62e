// The reuse=S what-if on a trace's execution graph (graph_whatif.h):
// MPipeMoE's memory reuse added to a layer that ran without it.
#include "graph_reuse.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer::detail {
namespace {

struct Chunk {
  std::int32_t dispatch = -1, combine = -1;
  std::vector<std::size_t> experts;  // in start order
};

// (rank, layer, iteration, micro-batch) -> phase -> chunk -> its ops.
using ReuseKey = std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t>;

bool restores(OpKind k) {
  return k == OpKind::kOffload || k == OpKind::kPrefetch || k == OpKind::kRecompute || k == OpKind::kRecommunicate;
}

class Reuse {
 public:
  Reuse(const Trace& t, ExecGraph& g, const sim::CostModel& m, const plan::ReuseStrategyTraits& s,
        const WorkloadSources& sources, GraphWhatIfResult& out)
      : t_(t), g_(g), m_(m), s_(s), sources_(sources), out_(out), ed_(t, g) {}

  void run() {
    std::map<ReuseKey, std::array<std::map<std::int32_t, Chunk>, 2>> layers;
    std::map<ReuseKey, bool> reused;
    for (std::size_t o = 0; o < t_.ops.size(); ++o) {
      const auto& op = t_.ops[o];
      if (op.layer < 0 || !op_kind_info(op.kind).moe_layer) continue;
      const ReuseKey key{op.rank.value, op.layer, op.iteration, op.micro_batch};
      if (restores(op.kind)) reused[key] = true;
      if (op.phase != Phase::kForward && op.phase != Phase::kBackward) continue;
      auto& c = layers[key][op.phase == Phase::kForward ? 0 : 1][std::max(0, op.chunk)];
      if (op.kind == OpKind::kDispatchAllToAll) c.dispatch = static_cast<std::int32_t>(o);
      if (op.kind == OpKind::kCombineAllToAll) c.combine = static_cast<std::int32_t>(o);
      if (op.kind == OpKind::kExpertFfn) c.experts.push_back(o);
    }
    std::map<std::string, int> skipped;
    for (auto& [key, phases] : layers) {
      std::string why;
      if (reused[key])
        why = "it already reuses memory";
      else if (phases[0].empty() || phases[1].empty())
        why = "it has no forward and backward pass";
      else
        why = apply(key, phases[0], phases[1]);
      if (why.empty())
        ++out_.instances_changed;
      else
        ++skipped[why];
    }
    ed_.order_stream_queues(copy_gap_);
    for (const auto& [why, n] : skipped)
      out_.notes.push_back(fmt::format("reuse: {} layer instance{} left as measured: {}", n, n == 1 ? "" : "s", why));
  }

 private:
  // The rank's typical launch latency of a kind of work (exec_graph.h).
  std::int64_t launch_latency(std::int32_t rank, ActivityType type) const {
    for (const auto& l : g_.latencies)
      if (l.rank == rank) return l.launch_ns[static_cast<std::size_t>(type)];
    return 0;
  }
  std::int64_t queue_gap(std::int32_t rank) const {
    for (const auto& l : g_.latencies)
      if (l.rank == rank) return l.queue_gap_ns;
    return 0;
  }
  // Host time to issue an added op of `kind`: the cost model's host issue
  // term (a calibration measures it), else the trace's median launching
  // call of that kind of work (found once per kind of work: every added
  // copy asks).
  std::int64_t host_issue(OpKind kind, ActivityType type) {
    if (auto it = m_.host_issue.find(kind); it != m_.host_issue.end())
      return static_cast<std::int64_t>(it->second.at(0) * 1e9);
    if (auto it = median_launch_.find(type); it != median_launch_.end()) return it->second;
    std::vector<std::int64_t> d;
    for (const auto& a : t_.activities)
      if (a.type == type)
        if (const auto* c = t_.launching_call(a)) d.push_back(c->end_ns - c->start_ns);
    std::int64_t median = 0;
    if (!d.empty()) {
      std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
      median = d[d.size() / 2];
    }
    median_launch_.emplace(type, median);
    return median;
  }
  std::int64_t copy_ns(bool d2h, std::int64_t bytes) const {
    return static_cast<std::int64_t>((d2h ? m_.copy_d2h : m_.copy_h2d).at(static_cast<double>(bytes)) * 1e9);
  }

  // The first and last host point of ops, and their first / last activity.
  std::uint32_t host_first(const std::vector<std::size_t>& ops, std::int32_t hint) const {
    std::uint32_t best = ExecGraph::kNone;
    std::int32_t pos = -1;
    for (auto o : ops) {
      const auto s = ed_.host_span(o, hint);
      if (s.chain >= 0 && (pos < 0 || s.first < pos)) {
        pos = s.first;
        best = ed_.chain_node(s.chain, s.first);
      }
    }
    return best;
  }
  std::uint32_t host_last(const std::vector<std::size_t>& ops, std::int32_t hint) const {
    std::uint32_t best = ExecGraph::kNone;
    std::int32_t pos = -1;
    for (auto o : ops) {
      const auto s = ed_.host_span(o, hint);
      if (s.chain >= 0 && s.last > pos) {
        pos = s.last;
        best = ed_.chain_node(s.chain, s.last);
      }
    }
    return best;
  }
  std::int64_t last_activity(const std::vector<std::size_t>& ops) const {
    std::int64_t best = -1;
    for (auto o : ops)
      for (auto a : ed_.op_activities(o))
        if (best < 0 || t_.activities[a].end_ns > t_.activities[static_cast<std::size_t>(best)].end_ns)
          best = static_cast<std::int64_t>(a);
    return best;
  }
  std::int64_t first_activity(const std::vector<std::size_t>& ops) const {
    std::int64_t best = -1;
    for (auto o : ops)
      for (auto a : ed_.op_activities(o))
        if (best < 0 || t_.activities[a].start_ns < t_.activities[static_cast<std::size_t>(best)].start_ns)
          best = static_cast<std::int64_t>(a);
    return best;
  }
  // T_DI of a chunk: the bytes its dispatch brought to this rank (recorded
  // received bytes, else sent), else the rows the layer's workload has the
  // rank compute, in `chunks` equal parts, x M x the element size; -1:
  // none of these known.
  std::int64_t t_di_bytes(const Chunk& c, std::int32_t rank, std::int32_t layer, std::size_t chunks) {
    if (c.dispatch >= 0) {
      const auto& op = t_.ops[static_cast<std::size_t>(c.dispatch)];
      if (op.recv_bytes >= 0) return op.recv_bytes;
      if (op.bytes > 0) return op.bytes;
    }
    const auto* w = layer_shape(layer);
    if (!w || w->model_dim <= 0 || chunks == 0) return -1;
    const auto& rows = w->rows;
    if (rank < 0 || static_cast<std::size_t>(rank) >= rows.size() || rows[static_cast<std::size_t>(rank)] <= 0) return -1;
    return rows[static_cast<std::size_t>(rank)] * w->model_dim * w->elem_bytes / static_cast<std::int64_t>(chunks);
  }

  // A layer as the recommenders see it, for what its layers table and its
  // ops lack (moe_layer_workloads: run_config, recorded input shapes),
  // with the rows each rank computes; read once, when first needed.
  struct LayerShape {
    std::int64_t model_dim = 0, hidden = 0;
    int elem_bytes = 2;
    std::vector<std::int64_t> rows;  // MoeLayerWorkload::rows_computed()
  };
  const LayerShape* layer_shape(std::int32_t layer) {
    if (!shapes_read_) {
      shapes_read_ = true;
      try {
        for (const auto& w : moe_layer_workloads(t_, nullptr, sources_))
          shape_of_[w.layer] = {w.model_dim, w.ffn_hidden(), w.elem_bytes, w.rows_computed()};
      } catch (const Error&) {
        // (a shape the sources disagree on: the layers table alone counts)
      }
    }
    const auto it = shape_of_.find(layer);
    return it == shape_of_.end() ? nullptr : &it->second;
  }

  std::string apply(const ReuseKey& key, const std::map<std::int32_t, Chunk>& fwd, const std::map<std::int32_t, Chunk>& bwd) {
    const auto rank = std::get<0>(key), layer = std::get<1>(key);
    // H / M: the layer's hidden size over its model size (T_M = T_DI H / M).
    double h_over_m = 0;
    for (const auto& l : t_.layers)
      if (l.layer == layer && l.model_dim > 0 && l.hidden_dim > 0)
        h_over_m = static_cast<double>(l.hidden_dim) / static_cast<double>(l.model_dim);
    if (h_over_m <= 0)
      if (const auto* w = layer_shape(layer); w && w->model_dim > 0 && w->hidden > 0)
        h_over_m = static_cast<double>(w->hidden) / static_cast<double>(w->model_dim);
    if (h_over_m <= 0) return "the layer's model and hidden sizes are not in the trace";
    for (const auto& [c, ch] : fwd)
      if (ch.dispatch < 0) return "no dispatch all-to-all (one rank): MPipeMoE's T_DI is the dispatched input";
    for (const auto& [c, ch] : fwd)
      if (t_di_bytes(ch, rank, layer, fwd.size()) < 0)
        return "the bytes its dispatch brought are not in the trace (no dispatch bytes, no expert load)";
    std::int32_t chain = -1;
    for (const auto& [c, ch] : fwd)
      for (auto o : ch.experts)
        if (chain < 0) chain = ed_.host_span(o).chain;
    if (chain < 0) return "no host calls of its experts in the trace";
    const auto copy_stream = ed_.stream_with_role(rank, "copy");
    const auto copy_launch = launch_latency(rank, ActivityType::kMemcpy);
    const auto gap = queue_gap(rank);
    copy_gap_ = gap;
    std::map<std::int32_t, TaskPoints> off_di, off_m;
    // Forward: offloads after the chunk's dispatch (T_DI) and experts (T_M);
    // one T_M buffer: the next chunk's experts wait for the offload.
    TaskPoints prev_off_m;
    for (const auto& [c, ch] : fwd) {
      if (ch.experts.empty()) return "a chunk without experts";
      const auto di = t_di_bytes(ch, rank, layer, fwd.size());
      const auto first_e = first_activity(ch.experts);
      if (prev_off_m.end != ExecGraph::kNone && first_e >= 0)
        ed_.add_edge(prev_off_m.end, g_.activity_start[static_cast<std::size_t>(first_e)], gap, ExecEdgeKind::kWhatIf);
      if (s_.t_di == plan::Restore::kOffload) {
        const auto after = host_last({static_cast<std::size_t>(ch.dispatch)}, chain);
        if (after == ExecGraph::kNone) return "no host work of its dispatch";
        const auto h = ed_.insert_host_after(after, host_issue(OpKind::kOffload, ActivityType::kMemcpy));
        auto task = ed_.add_op_task(fmt::format("L{}.offload.T_DI.c{} (what-if)", layer, c), copy_stream, rank,
                                    ch.dispatch, OpKind::kOffload, Phase::kForward, ActivityType::kMemcpy,
                                    copy_ns(true, di), h.start, copy_launch);
        ed_.queue_on_stream(copy_stream, task, g_.nodes[h.start].measured_ns);
        if (const auto a = last_activity({static_cast<std::size_t>(ch.dispatch)}); a >= 0)
          ed_.add_edge(g_.activity_end[static_cast<std::size_t>(a)], task.start, gap, ExecEdgeKind::kWhatIf);
        off_di[c] = task;
      }
      if (s_.t_m == plan::Restore::kOffload) {
        const auto after = host_last(ch.experts, chain);
        const auto h = ed_.insert_host_after(after, host_issue(OpKind::kOffload, ActivityType::kMemcpy));
        const auto m = static_cast<std::int64_t>(static_cast<double>(di) * h_over_m);
        auto task = ed_.add_op_task(fmt::format("L{}.offload.T_M.c{} (what-if)", layer, c), copy_stream, rank,
                                    static_cast<std::int32_t>(ch.experts.back()), OpKind::kOffload, Phase::kForward,
                                    ActivityType::kMemcpy, copy_ns(true, m), h.start, copy_launch);
        ed_.queue_on_stream(copy_stream, task, g_.nodes[h.start].measured_ns);
        if (const auto a = last_activity(ch.experts); a >= 0)
          ed_.add_edge(g_.activity_end[static_cast<std::size_t>(a)], task.start, gap, ExecEdgeKind::kWhatIf);
        off_m[c] = task;
        prev_off_m = task;
      }
    }
    // Backward, in the order its chunks ran: restore before the chunk's
    // experts; one T_M buffer: a prefetch waits for the previous chunk's
    // backward experts.
    std::vector<std::pair<std::int64_t, std::int32_t>> order;
    for (const auto& [c, ch] : bwd) {
      const auto a = first_activity(ch.experts);
      order.push_back({a >= 0 ? t_.activities[static_cast<std::size_t>(a)].start_ns : 0, c});
    }
    std::sort(order.begin(), order.end());
    std::int64_t prev_bwd_last = -1;
    for (const auto& [when, c] : order) {
      const auto& ch = bwd.at(c);
      auto f = fwd.find(c);
      if (f == fwd.end() || ch.experts.empty()) return "its backward chunks do not match its forward chunks";
      const auto first_e = first_activity(ch.experts);
      if (first_e < 0) return "backward experts without GPU work";
      const auto target = g_.activity_start[static_cast<std::size_t>(first_e)];
      const auto before = host_first(ch.experts, chain);
      if (before == ExecGraph::kNone) return "no host work of its backward experts";
      const auto di = t_di_bytes(f->second, rank, layer, fwd.size());
      TaskPoints di_ready;
      if (s_.t_di == plan::Restore::kOffload) {
        const auto h = ed_.insert_host_before(before, host_issue(OpKind::kPrefetch, ActivityType::kMemcpy));
        di_ready = ed_.add_op_task(fmt::format("L{}.prefetch.T_DI.c{}.bwd (what-if)", layer, c), copy_stream, rank,
                                   static_cast<std::int32_t>(ch.experts.front()), OpKind::kPrefetch, Phase::kBackward,
                                   ActivityType::kMemcpy, copy_ns(false, di), h.start, copy_launch);
        ed_.queue_on_stream(copy_stream, di_ready, g_.nodes[h.start].measured_ns);
        ed_.add_edge(off_di.at(c).end, di_ready.start, gap, ExecEdgeKind::kWhatIf);
      } else if (f->second.dispatch >= 0) {
        // Re-communicate: the chunk's forward dispatch again, as it was
        // measured (its host work and its kernels), on its streams.
        const auto d = static_cast<std::size_t>(f->second.dispatch);
        const auto span = ed_.host_span(d, chain);
        const std::int64_t host =
            span.chain >= 0 ? g_.nodes[ed_.chain_node(span.chain, span.last)].measured_ns -
                                  g_.nodes[ed_.chain_node(span.chain, span.first)].measured_ns
                            : 0;
        const auto h = ed_.insert_host_before(before, host);
        // On the dispatch's streams right after the chunk's backward combine
        // there (the builder's order), else after the stream's last task.
        std::map<std::int32_t, std::uint32_t> after;
        if (ch.combine >= 0)
          for (auto a : ed_.op_activities(static_cast<std::size_t>(ch.combine)))
            after[t_.activities[a].stream] = g_.activity_end[a];
        for (auto a : ed_.op_activities(d)) {
          const auto& act = t_.activities[a];
          auto task = ed_.add_op_task(std::string(t_.str(act.name)), act.stream, rank,
                                      static_cast<std::int32_t>(ch.experts.front()), OpKind::kRecommunicate,
                                      Phase::kBackward, act.type, act.duration(), h.start, launch_latency(rank, act.type));
          if (auto it = after.find(act.stream); it != after.end()) {
            ed_.insert_on_stream_after(task, it->second, gap);
            it->second = task.end;
          }
          di_ready = task;
        }
      }
      if (di_ready.end != ExecGraph::kNone) ed_.add_edge(di_ready.end, target, gap, ExecEdgeKind::kWhatIf);
      if (s_.t_m == plan::Restore::kOffload) {
        const auto m = static_cast<std::int64_t>(static_cast<double>(di) * h_over_m);
        const auto h = ed_.insert_host_before(before, host_issue(OpKind::kPrefetch, ActivityType::kMemcpy));
        auto task = ed_.add_op_task(fmt::format("L{}.prefetch.T_M.c{}.bwd (what-if)", layer, c), copy_stream, rank,
                                    static_cast<std::int32_t>(ch.experts.front()), OpKind::kPrefetch, Phase::kBackward,
                                    ActivityType::kMemcpy, copy_ns(false, m), h.start, copy_launch);
        ed_.queue_on_stream(copy_stream, task, g_.nodes[h.start].measured_ns);
        ed_.add_edge(off_m.at(c).end, task.start, gap, ExecEdgeKind::kWhatIf);
        if (prev_bwd_last >= 0)
          ed_.add_edge(g_.activity_end[static_cast<std::size_t>(prev_bwd_last)], task.start, gap, ExecEdgeKind::kWhatIf);
        ed_.add_edge(task.end, target, gap, ExecEdgeKind::kWhatIf);
      } else {
        // Recompute T_M: the first GEMM of each of the chunk's forward
        // experts again, as measured, on the experts' stream before the
        // backward experts; its host work that share of the forward
        // expert op's.
        for (auto o : f->second.experts) {
          const auto& acts = ed_.op_activities(o);
          auto gemm = std::find_if(acts.begin(), acts.end(), [&](std::size_t a) {
            return t_.activities[a].type == ActivityType::kKernel &&
                   classify_activity(t_, t_.activities[a]) != Category::kMemcpy &&
                   is_gemm_kernel_name(t_.str(t_.activities[a].name));
          });
          if (gemm == acts.end()) return "a forward expert op without a GEMM kernel";
          const auto span = ed_.host_span(o, chain);
          const std::int64_t host =
              span.chain >= 0 ? (g_.nodes[ed_.chain_node(span.chain, span.last)].measured_ns -
                                 g_.nodes[ed_.chain_node(span.chain, span.first)].measured_ns) /
                                    static_cast<std::int64_t>(std::max<std::size_t>(1, acts.size()))
                              : 0;
          const auto h = ed_.insert_host_before(before, host);
          const auto& k = t_.activities[*gemm];
          auto task = ed_.add_op_task(std::string(t_.str(k.name)),
                                      t_.activities[static_cast<std::size_t>(first_e)].stream, rank,
                                      static_cast<std::int32_t>(ch.experts.front()), OpKind::kRecompute,
                                      Phase::kBackward, k.type, k.duration(), h.start, launch_latency(rank, k.type));
          ed_.insert_on_stream_before(task, target, gap);
          if (di_ready.end != ExecGraph::kNone) ed_.add_edge(di_ready.end, task.start, gap, ExecEdgeKind::kWhatIf);
        }
      }
      prev_bwd_last = last_activity(ch.experts);
    }
    return {};
  }

  const Trace& t_;
  ExecGraph& g_;
  const sim::CostModel& m_;
  const plan::ReuseStrategyTraits& s_;
  const WorkloadSources sources_;  // (moe_layer_workloads')
  GraphWhatIfResult& out_;
  GraphEditor ed_;
  std::map<std::int32_t, LayerShape> shape_of_;  // by layer (layer_shape())
  bool shapes_read_ = false;
  std::int64_t copy_gap_ = 0;  // the queue gap between the added copies
  std::map<ActivityType, std::int64_t> median_launch_;  // host_issue()'s medians
};

}  // namespace

void apply_reuse(const Trace& trace, ExecGraph& graph, plan::ReuseStrategy strategy, const sim::CostModel& model,
                 const WorkloadSources& sources, GraphWhatIfResult& out) {
  Reuse(trace, graph, model, plan::reuse_strategy_traits(strategy), sources, out).run();
}

}  // namespace moetrace::analyzer::detail
