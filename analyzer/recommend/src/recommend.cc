#include "moetrace/analyzer/recommend.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/recorded_shapes.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/run_spec.h"
#include "hardware.h"
#include "trace_advice.h"

namespace moetrace::analyzer {
using detail::Hardware;
using detail::hardware_terms;
using detail::resolve_hardware;
using detail::scaled;
}  // namespace moetrace::analyzer

namespace moetrace::analyzer {

namespace {

template <typename T>
std::optional<T> config_number(const Trace& t, std::string_view key) {
  const auto s = t.config_value(key);
  if (s.empty()) return std::nullopt;
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string ms(double s) { return fmt::format("{:.3f} ms", s * 1e3); }
std::string pct(double f) { return fmt::format("{:.1f} %", f * 100.0); }
std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024)); }

struct LayerMeasures {
  double layer_s = -1;
  int iterations = 0;
  double fnec_s = 0, bnec_s = 0;
};

// From the breakdown rows and the ops of the layer.
std::map<int, LayerMeasures> layer_measures(const Trace& t, const Breakdown& b) {
  std::map<int, LayerMeasures> out;
  std::map<int, std::map<std::pair<int, int>, std::int64_t>> win;  // layer -> (iteration, phase) -> max window
  for (const auto& row : b.rows) {
    auto& w = win[row.layer][{row.iteration, static_cast<int>(row.phase)}];
    w = std::max(w, row.t.window_ns);
  }
  for (const auto& [layer, by] : win) {
    std::map<int, std::int64_t> per_iteration;
    for (const auto& [key, ns] : by) per_iteration[key.first] += ns;
    double sum = 0;
    for (const auto& [it, ns] : per_iteration) sum += static_cast<double>(ns);
    auto& m = out[layer];
    m.iterations = static_cast<int>(per_iteration.size());
    m.layer_s = per_iteration.empty() ? -1 : sum * 1e-9 / static_cast<double>(per_iteration.size());
  }
  // Chunks, and the block's non-MoE compute (attention, dense FFN and its
  // tensor-parallel all-reduce): per (iteration, phase) the slowest rank.
  std::map<int, std::map<std::tuple<int, int, int>, std::int64_t>> nonmoe;  // layer -> (it, phase, rank) -> ns
  for (const auto& op : t.ops) {
    if (op.layer < 0) continue;
    if (op.kind == OpKind::kAttention || op.kind == OpKind::kDenseFfn || op.kind == OpKind::kTensorParallelAllReduce)
      nonmoe[op.layer][{op.iteration, static_cast<int>(op.phase), op.rank.value}] += op.duration();
  }
  for (const auto& [layer, by] : nonmoe) {
    std::map<std::pair<int, int>, std::int64_t> slowest;
    for (const auto& [key, ns] : by) {
      auto& s = slowest[{std::get<0>(key), std::get<1>(key)}];
      s = std::max(s, ns);
    }
    std::map<int, std::pair<double, int>> per_phase;  // phase -> (sum, iterations)
    for (const auto& [key, ns] : slowest) {
      per_phase[key.second].first += static_cast<double>(ns) * 1e-9;
      per_phase[key.second].second += 1;
    }
    auto mean = [&](Phase p) {
      auto it = per_phase.find(static_cast<int>(p));
      return it == per_phase.end() ? 0.0 : it->second.first / it->second.second;
    };
    out[layer].fnec_s = mean(Phase::kForward);
    out[layer].bnec_s = mean(Phase::kBackward);
  }
  return out;
}

int tensor_parallel_for(const Trace& t, const MoeLayerWorkload& w, int requested) {
  if (requested > 0) return requested;
  // GPUs per node: ranks sharing a host, at most 8 (PPMoE keeps TP inside a node).
  std::map<std::string, int> per_host;
  for (const auto& r : t.ranks) ++per_host[r.host];
  int gpn = 0;
  for (const auto& [host, n] : per_host) gpn = std::max(gpn, n);
  if (gpn <= 1) gpn = 8;
  for (int T = std::min({gpn, 8, w.ranks}); T > 1; --T)
    if (w.experts % T == 0) return T;
  return 0;
}

}  // namespace

namespace {

// A quantity of the trace (its layers table or run_config) and of the
// model file: they must agree; either fills in for the other.
template <class T>
std::optional<T> agree(int layer, std::string_view what, std::optional<T> traced, const std::string& traced_source,
                       const Sourced<T>* model) {
  const bool from_model = model && model->value;
  if (traced && from_model && *traced != **model)
    throw ConfigError(fmt::format("{}{} is {} in the trace ({}) but {} in {}",
                                  layer >= 0 ? fmt::format("layer {}: ", layer) : std::string(), what, *traced,
                                  traced_source, **model, model->source));
  if (traced) return traced;
  if (from_model) return **model;
  return std::nullopt;
}

// The parallel dimension a process group serves, by its description as
// frameworks name their groups: Megatron-Core's TENSOR_MODEL_PARALLEL_GROUP,
// PIPELINE_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP,
// EXPERT_MODEL_PARALLEL_GROUP (megatron/core/parallel_state.py, group_desc);
// a DeviceMesh's "mesh_tp", "mesh_pp", "mesh_dp", "mesh_ep" (torchtitan's
// dimension names). Combined groups (TENSOR_AND_DATA, EXPERT_DATA,
// EXPERT_TENSOR, DATA_..._WITH_CP) serve no one dimension: 0.
char parallel_dimension(std::string_view process_group) {
  std::set<std::string> words;
  std::string w;
  for (char ch : std::string(process_group) + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch)) != 0) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else if (!w.empty()) {
      words.insert(w);
      w.clear();
    }
  }
  auto has = [&](const char* x) { return words.count(x) > 0; };
  const int named = has("expert") + has("tensor") + has("data") + has("pipeline") + has("context") + has("cp") + has("and");
  if (named == 1 && has("expert")) return 'e';
  if (named == 1 && has("tensor")) return 't';
  if (named == 1 && has("pipeline")) return 'p';
  if (named == 1 && has("data")) return 'd';
  if (named == 0) {
    if (has("ep")) return 'e';
    if (has("tp")) return 't';
    if (has("pp")) return 'p';
    if (has("dp")) return 'd';
  }
  return 0;
}

struct TracedParallel {
  std::map<char, std::pair<int, std::string>> sizes;  // dimension -> (ranks, the group's description)
  std::optional<int> size(char d) const {
    auto it = sizes.find(d);
    return it == sizes.end() ? std::nullopt : std::optional<int>(it->second.first);
  }
};

// Per dimension the group size its collectives record most often.
TracedParallel traced_parallel(const Trace& t) {
  std::map<char, std::map<std::pair<int, std::string>, std::int64_t>> seen;
  for (const auto& c : t.collectives)
    if (const char d = parallel_dimension(c.process_group); d != 0)
      if (const int n = c.recorded_ranks(); n > 0) ++seen[d][{n, c.process_group}];
  TracedParallel out;
  for (const auto& [d, by] : seen) {
    std::int64_t most = 0;
    for (const auto& [key, count] : by)
      if (count > most) {
        most = count;
        out.sizes[d] = key;
      }
  }
  return out;
}

}  // namespace

namespace {

// The expert load of (layer, iteration) as a routing on P ranks; rows
// without a source rank (per-expert totals) spread evenly over the sources.
plan::LayerRouting recorded_routing(const Trace& trace, int layer, int iteration, int P, int E) {
  plan::LayerRouting r{P, E, std::vector<std::int64_t>(static_cast<std::size_t>(P * E), 0)};
  for (const auto& e : trace.expert_load) {
    if (e.layer != layer || e.iteration != iteration || e.expert < 0 || e.expert >= E || e.src_rank >= P) continue;
    if (e.src_rank >= 0) {
      r.counts[static_cast<std::size_t>(e.src_rank * E + e.expert)] += e.tokens;
    } else {
      for (int s = 0; s < P; ++s)
        r.counts[static_cast<std::size_t>(s * E + e.expert)] += e.tokens / P + (s < e.tokens % P ? 1 : 0);
    }
  }
  return r;
}

}  // namespace

std::vector<MoeLayerWorkload> moe_layer_workloads(const Trace& trace, std::vector<std::string>* notes,
                                                  const WorkloadSources& sources) {
  std::vector<MoeLayerWorkload> out;
  auto note = [&](std::string s) {
    if (notes) notes->push_back(std::move(s));
  };
  const ModelSpec* model = sources.model;
  const bool have_load = !trace.expert_load.empty();
  if (!have_load && !model && sources.tokens_per_rank <= 0 && trace.input_shapes.empty()) {
    note("the trace has no expert_load rows and no recorded input shapes: no MoE layer to advise on (a model file, "
         "--model, gives the layers' shapes, as does a profile recorded with record_shapes=True; routing is then "
         "assumed balanced)");
    return out;
  }
  if (trace.run.variant == "ppmoe") {
    note("the trace runs PPMoE (tokens routed per micro-batch block, not per rank): the expert-parallel "
         "recommenders do not apply");
    return out;
  }
  int P = std::max(1, trace.run.world_size);
  for (const auto& e : trace.expert_load) P = std::max(P, e.src_rank + 1);
  // The expert-parallel group: the group size the trace's all-to-alls
  // record (Kineto's "Group size"; the most common where they differ), else
  // the model file's, else the world. Both given, they must agree.
  std::map<int, std::int64_t> a2a_groups;
  for (const auto& c : trace.collectives)
    if (c.group_size > 0 && comparable_word(c.name).find("alltoall") != std::string::npos) ++a2a_groups[c.group_size];
  std::optional<int> traced_ep;
  std::int64_t most_calls = 0;
  for (const auto& [g, n] : a2a_groups)
    if (n > most_calls) {
      most_calls = n;
      traced_ep = g;
    }
  // The process groups the collectives name: tensor, pipeline, data and
  // expert parallel sizes, each checked against the model file's.
  const auto groups = traced_parallel(trace);
  std::string ep_source = "the group size the trace's all-to-alls record", ep_in_trace = "its all-to-alls' group size";
  if (!traced_ep && groups.size('e')) {
    traced_ep = groups.size('e');
    ep_in_trace = fmt::format("its process group \"{}\"", groups.sizes.at('e').second);
    ep_source = "the trace's process group \"" + groups.sizes.at('e').second + "\"";
  }
  {
    std::string sizes;
    for (const auto& [d, v] : groups.sizes)
      sizes += fmt::format("{}{} {} (\"{}\")", sizes.empty() ? "" : ", ",
                           d == 'e' ? "EP" : d == 't' ? "TP" : d == 'p' ? "PP" : "DP", v.first, v.second);
    if (!sizes.empty()) note("parallel sizes from the trace's process groups: " + sizes);
    auto check = [&](char d, const char* what, const Sourced<int>* given) {
      if (const auto n = groups.size(d))
        agree<int>(-1, what, n, fmt::format("its process group \"{}\"", groups.sizes.at(d).second), given);
    };
    check('t', "the tensor-parallel size", model ? &model->tensor_parallel : nullptr);
    check('p', "the pipeline-parallel size", model ? &model->pipeline_parallel : nullptr);
  }
  if (const auto ep = agree<int>(-1, "the expert-parallel group", traced_ep, ep_in_trace,
                                 model ? &model->expert_parallel : nullptr)) {
    P = *ep;
    note(fmt::format("expert-parallel group of {} ranks ({})", P, traced_ep ? ep_source : model->expert_parallel.source));
  }
  std::map<int, int> last_iteration;
  std::map<int, int> max_expert;
  bool aggregated = false;
  for (const auto& e : trace.expert_load) {
    last_iteration[e.layer] = std::max(last_iteration.count(e.layer) ? last_iteration[e.layer] : -1, e.iteration);
    max_expert[e.layer] = std::max(max_expert.count(e.layer) ? max_expert[e.layer] : -1, e.expert);
    if (e.src_rank < 0) aggregated = true;
  }
  if (!have_load) {
    // The MoE layers recognised in the trace, each at its last iteration.
    for (const auto& op : trace.ops)
      if (op.layer >= 0 && op.iteration >= 0 && op_kind_info(op.kind).moe_layer)
        last_iteration[op.layer] = std::max(last_iteration.count(op.layer) ? last_iteration[op.layer] : -1,
                                            op.iteration);
    if (last_iteration.empty()) {
      note("the trace has no expert_load rows and no recognised MoE layer: nothing to advise on");
      return out;
    }
  }
  if (aggregated)
    note("expert_load holds per-expert totals only (large trace): each expert's tokens are spread evenly over "
         "the source ranks");
  const auto cfg_experts = config_number<int>(trace, "num_experts");
  const auto cfg_top_k = config_number<int>(trace, "top_k");
  const auto cfg_m = config_number<std::int64_t>(trace, "model_dim");
  const auto cfg_h = config_number<std::int64_t>(trace, "expert_hidden");
  const auto cfg_elem = config_number<int>(trace, "elem_bytes");
  bool said_balanced = false;
  for (const auto& [layer, iteration] : last_iteration) {
    MoeLayerWorkload w;
    w.layer = layer;
    w.iteration = iteration;
    w.ranks = P;
    const Layer* meta = nullptr;
    for (const auto& l : trace.layers)
      if (l.layer == layer) meta = &l;
    auto traced = [&](auto table_value, const auto& config_value, const char* key) {
      using T = std::decay_t<decltype(*config_value)>;
      if (meta && table_value > 0)
        return std::pair{std::optional<T>(static_cast<T>(table_value)), std::string("its layers table")};
      return std::pair{config_value, fmt::format("its run_config {}", key)};
    };
    auto [te, te_src] = traced(meta ? meta->num_experts : 0, cfg_experts, "num_experts");
    auto [tk, tk_src] = traced(meta ? meta->top_k : 0, cfg_top_k, "top_k");
    auto [tm, tm_src] = traced(meta ? meta->model_dim : 0, cfg_m, "model_dim");
    auto [th, th_src] = traced(meta ? meta->hidden_dim : 0, cfg_h, "expert_hidden");
    // Where neither the layers table nor run_config gives them: the shapes
    // the profiler recorded of the layer's GEMMs (record_shapes=True).
    RecordedLayerShape shape;
    if (!tm || !th || !te || !tk || (!have_load && sources.tokens_per_rank <= 0) || !cfg_elem) {
      shape = recorded_layer_shape(trace, layer);
      std::string read;
      auto take = [&](auto& value, std::string& source, const auto& recorded, const char* what) {
        if (value || !recorded) return;
        value = recorded;
        source = shape.source;
        read += fmt::format("{}{} = {}", read.empty() ? "" : ", ", what, *recorded);
      };
      take(tm, tm_src, shape.model_dim, "hidden size M");
      take(th, th_src, shape.hidden, "expert FFN size H");
      take(te, te_src, shape.experts, "routed experts E");
      take(tk, tk_src, shape.top_k, "experts per token k");
      if (!read.empty()) note(fmt::format("layer {}: {} from {}", layer, read, shape.source));
    }
    const auto experts = agree<int>(layer, "the number of routed experts", te, te_src, model ? &model->experts : nullptr);
    const auto top_k = agree<int>(layer, "experts per token", tk, tk_src, model ? &model->top_k : nullptr);
    const auto m = agree<std::int64_t>(layer, "the hidden size", tm, tm_src, model ? &model->model_dim : nullptr);
    const auto h = agree<std::int64_t>(layer, "the expert FFN size", th, th_src, model ? &model->expert_hidden : nullptr);
    if (experts && max_expert.count(layer) && max_expert[layer] >= *experts)
      throw ConfigError(fmt::format("layer {}: the trace's expert load names expert {}, but there are {} routed "
                                    "experts{}",
                                    layer, max_expert[layer], *experts,
                                    te ? "" : fmt::format(" ({})", model->experts.source)));
    w.experts = experts.value_or(max_expert.count(layer) ? max_expert[layer] + 1 : 0);
    w.top_k = top_k.value_or(1);
    w.model_dim = m.value_or(0);
    w.hidden = h.value_or(0);
    if (w.model_dim <= 0 || w.hidden <= 0) {
      note(fmt::format("layer {}: model_dim or hidden size unknown (layers table and run_config lack them; "
                       "--model gives them); skipped",
                       layer));
      continue;
    }
    if (w.experts < P || w.experts % P != 0) {
      note(fmt::format("layer {}: {} experts on {} ranks is not expert parallelism with E/P experts per rank; "
                       "skipped",
                       layer, w.experts, P));
      continue;
    }
    // The forward dispatch's bytes per rank: the tokens a rank holds where
    // the trace has no load, the element size where nothing gives it.
    std::map<std::int32_t, double> dispatch_bytes;
    for (const auto& op : trace.ops)
      if (op.kind == OpKind::kDispatchAllToAll && op.layer == layer && op.iteration == iteration &&
          op.phase == Phase::kForward && op.bytes > 0)
        dispatch_bytes[op.rank.value] += static_cast<double>(op.bytes);
    // Element size: run_config, else the model file, else the dispatch
    // bytes over the rows it sent to other ranks, else 2 (bf16).
    w.elem_bytes = cfg_elem.value_or(model && model->elem_bytes ? *model->elem_bytes : shape.elem_bytes.value_or(0));
    if (have_load) {
      w.routing = recorded_routing(trace, layer, iteration, P, w.experts);
    } else {
      // No load in the trace: balanced routing of the tokens a rank holds,
      // from --tokens, else the forward dispatch's bytes (a rank sends each
      // of its tokens k times, M elements each).
      std::int64_t tokens = sources.tokens_per_rank;
      std::string origin = "--tokens";
      if (tokens <= 0 && shape.tokens) {
        tokens = *shape.tokens;
        origin = "the rows of the router's GEMM, recorded in its Input Dims";
      }
      if (tokens <= 0) {
        const int elem = w.elem_bytes > 0 ? w.elem_bytes : 2;
        double most = 0;
        for (const auto& [r, b] : dispatch_bytes) most = std::max(most, b);
        // Op ranges of moetrace's own count the bytes a rank sends to the
        // other ranks: under balanced routing (P - 1) / P of its rows. Ops
        // recognised from a profiler's NCCL records carry the call's whole
        // input, its own segment included.
        const double local = trace.recognition.moe || P < 2 ? 1.0 : static_cast<double>(P - 1) / P;
        tokens = static_cast<std::int64_t>(
            std::llround(most / (local * static_cast<double>(w.top_k) * static_cast<double>(w.model_dim) * elem)));
        origin = trace.recognition.moe
                     ? fmt::format("the forward dispatch all-to-all's bytes / (k x M x {} B)", elem)
                     : fmt::format("the forward dispatch all-to-all's bytes to other ranks / ((P - 1) / P x k x M x {} B)",
                                   elem);
      }
      if (tokens <= 0) {
        note(fmt::format("layer {}: tokens per rank unknown (no expert load, no dispatch all-to-all bytes in the "
                         "trace): give --tokens; skipped",
                         layer));
        continue;
      }
      if (!said_balanced)
        note(fmt::format("no expert load in the trace (no all-to-all split sizes): routing assumed balanced, {} "
                         "tokens a rank ({})",
                         tokens, origin));
      said_balanced = true;
      w.routing = balanced_routing(P, w.experts, w.top_k, tokens);
    }
    if (w.elem_bytes <= 0) {
      double bytes = 0, rows = 0;
      for (const auto& [r, b] : dispatch_bytes) bytes += b;
      for (int s = 0; s < P; ++s)
        for (int e = 0; e < w.experts; ++e)
          if (w.routing.home(e) != s) rows += static_cast<double>(w.routing.count(s, e));
      const double per_elem = rows > 0 ? bytes / (rows * static_cast<double>(w.model_dim)) : 0;
      w.elem_bytes = 2;
      for (int b : {1, 2, 4, 8})
        if (per_elem > 0 && std::fabs(per_elem - b) < 0.25 * b) w.elem_bytes = b;
    }
    out.push_back(std::move(w));
  }
  return out;
}

namespace {

// The configuration the trace ran, as a what-if of its layer: its variant,
// pipeline degree and reuse strategy, DPMoE's capacity padding,
// Pro-Prophet's n and alpha, the experts FasterMoE shadowed in the layer's
// iteration. A trace of another tool runs as its ops show: pipemoe at its r
// (r = 1: plain expert parallelism). nullopt: a variant no what-if builds.
std::optional<WhatIf> own_configuration(const Trace& trace, const LayerRecommendation& L) {
  WhatIf w;
  w.window = LayerWindow::kMoeLayer;  // what the measured layer time spans
  const std::string& v = L.variant;
  if (v.empty() || v == "pipemoe" || v == "mpipemoe") {
    w.variant = v.empty() ? "pipemoe" : v;
    w.partitions = std::max(1, L.pipeline.current_r);
    if (v == "mpipemoe") {
      const auto s = trace.config_value("strategy");
      w.strategy = plan::parse_reuse_strategy(s.empty() ? "none" : s);
      if (w.partitions < 2) w.strategy = plan::ReuseStrategy::kNone;
    }
  } else if (v == "dpmoe") {
    w.variant = "dpmoe";
    w.capacity_padding = trace.config_value("dpmoe.capacity_padding") == "true";
  } else if (v == "pro_prophet") {
    w.variant = "pro_prophet";
    w.pro_prophet_n = config_number<int>(trace, "pro_prophet.n").value_or(0);
    w.pro_prophet_alpha = config_number<double>(trace, "pro_prophet.alpha").value_or(0.25);
  } else if (v == "fastermoe") {
    w.variant = "fastermoe";
    std::set<int> shadow;
    for (const auto& p : trace.placements)
      if (p.layer == L.layer && p.iteration == L.workload.iteration && p.role == "shadow") shadow.insert(p.expert);
    w.shadow_experts.assign(shadow.begin(), shadow.end());
  } else {
    return std::nullopt;
  }
  return w;
}

// Replay (recommendations.h): the trace's own configuration on the hardware
// model against the measured layer time, and per term: the expert
// computation and the all-to-alls. Simulated where the what-ifs can build the
// configuration (the busiest rank's expert and all-to-all time); else the
// pipeline advice at the trace's r by Theorem 1's closed form: the expert
// computation r t_e(r) (Eq. 15) and the dispatch + combine 2 r t_d(r) (Eq. 17)
// of each pass.
void replay_layer(const Trace& trace, const RecommendOptions& o, const Hardware& hw, const Breakdown& b,
                  const IterationReplay* iteration, LayerRecommendation& L) {
  auto& rp = L.replay;
  const auto& a = L.pipeline;
  if (!a.computed || !(L.measured_layer_s > 0) || !(a.predicted_current_s > 0)) return;
  rp.computed = true;
  // The iteration whose load the workload holds: loads drift between
  // iterations, so the mean over them is not what the replay ran. Per pass
  // the slowest rank's window (as measured_layer_s); per term the busiest
  // rank's time (as the model's).
  std::map<int, std::int64_t> window;  // phase -> slowest rank's window
  std::map<int, std::pair<double, double>> terms;  // rank -> (compute, all-to-all) ns
  for (const auto& row : b.rows) {
    if (row.layer != L.layer || row.iteration != L.workload.iteration) continue;
    auto& w = window[static_cast<int>(row.phase)];
    w = std::max(w, row.t.window_ns);
    auto& t = terms[row.rank];
    t.first += static_cast<double>(row.t.at(Category::kExpertCompute));
    t.second += static_cast<double>(row.t.at(Category::kAllToAll));
  }
  if (window.empty()) {
    rp.measured_s = L.measured_layer_s;
  } else {
    rp.measured_s = 0;
    for (const auto& [phase, ns] : window) rp.measured_s += static_cast<double>(ns) * 1e-9;
    rp.measured_compute_s = rp.measured_all_to_all_s = 0;
    for (const auto& [rank, t] : terms) {
      rp.measured_compute_s = std::max(rp.measured_compute_s, t.first * 1e-9);
      rp.measured_all_to_all_s = std::max(rp.measured_all_to_all_s, t.second * 1e-9);
    }
  }
  rp.simulated_s = a.closed_form_current_s;
  rp.basis = "closed_form";
  const int r = std::max(1, a.current_r);
  const double rr = static_cast<double>(r);
  rp.model_compute_s = rr * (a.terms.forward.t_e(r) + a.terms.backward.t_e(r));
  rp.model_all_to_all_s = 2 * rr * (a.terms.forward.t_d(r) + a.terms.backward.t_d(r));
  const auto replayed = iteration ? iteration->layers.find(L.layer) : std::map<int, WhatIfResult>::const_iterator{};
  if (iteration && replayed != iteration->layers.end()) {
    rp.basis = "iteration";
    rp.simulated_s = replayed->second.layer_s();
    rp.model_compute_s = replayed->second.compute_s;
    rp.model_all_to_all_s = replayed->second.all_to_all_s;
  } else if (o.simulate && L.workload.ranks <= o.max_simulated_ranks) {
    if (const auto own = own_configuration(trace, L)) {
      const auto res = simulate_layer(L.workload, hw.model, *own);
      if (res.ok) {
        rp.basis = "simulation";
        rp.simulated_s = res.layer_s();
        rp.model_compute_s = res.compute_s;
        rp.model_all_to_all_s = res.all_to_all_s;
      }
    }
  }
  rp.error = rp.simulated_s / rp.measured_s - 1;
  rp.unreliable = std::fabs(rp.error) > kReplayTolerance;
  if (!rp.unreliable) return;
  // The term whose model is furthest from its measurement, where one is off
  // by more than the tolerance; else the overlap of the two.
  double worst = 0;
  rp.off_term = "overlap";
  auto consider = [&](const char* name, double model, double measured) {
    if (!(measured > 0)) return;
    const double off = std::fabs(model / measured - 1);
    if (off > kReplayTolerance && std::fabs(model - measured) > worst) {
      worst = std::fabs(model - measured);
      rp.off_term = name;
    }
  };
  consider("compute", rp.model_compute_s, rp.measured_compute_s);
  consider("all-to-all", rp.model_all_to_all_s, rp.measured_all_to_all_s);
}

void advise_pipeline(const Trace& trace, const RecommendOptions& o, const Hardware& hw, LayerRecommendation& L) {
  auto& a = L.pipeline;
  const auto& w = L.workload;
  a.variant = L.variant.empty() ? "pipemoe" : L.variant;
  if (a.variant == "pro_prophet" || a.variant == "fastermoe") a.variant = "dpmoe";
  a.current_r = pipeline_degree(trace, L.layer);
  const int r_max = std::max(1, o.r_max);
  a.terms = pipeline_terms(w, hw.model);
  a.choice = choose_pipeline_degree(a.terms, std::max(r_max, a.current_r), o.r_candidates);
  a.closed_form_current_s = a.choice.t_by_r[static_cast<std::size_t>(a.current_r - 1)];
  a.recommended_r = a.choice.r;
  a.basis = "closed_form";
  a.predicted_current_s = a.closed_form_current_s;
  a.predicted_s = a.choice.t;
  a.computed = true;
  if (o.simulate && w.ranks <= o.max_simulated_ranks) {
    std::set<int> rs;
    if (o.r_candidates.empty())
      for (int r = 1; r <= std::min(r_max, 16); ++r) rs.insert(r);
    else
      for (int r : o.r_candidates)
        if (r >= 1 && r <= r_max) rs.insert(r);
    rs.insert(a.current_r);
    rs.insert(a.choice.r);
    // The what-if runs the layer's own schedule: MPipeMoE's alternating
    // order for an mpipemoe trace (with its strategy), pipemoe's otherwise.
    WhatIf what;
    what.variant = L.variant == "mpipemoe" ? "mpipemoe" : "pipemoe";
    if (what.variant == "mpipemoe")
      what.strategy = plan::parse_reuse_strategy(trace.config_value("strategy").empty() ? "none" : trace.config_value("strategy"));
    double best = 0;
    for (int r : rs) {
      what.partitions = r;
      if (what.variant == "mpipemoe" && r < 2 && what.strategy != plan::ReuseStrategy::kNone) continue;
      auto res = simulate_layer(w, hw.model, what);
      if (res.ok && (a.simulated_best_r < 0 || res.layer_s() < best)) {
        best = res.layer_s();
        a.simulated_best_r = r;
      }
      a.simulated.push_back({r, std::move(res)});
    }
    if (a.simulated_best_r > 0) {
      a.recommended_r = a.simulated_best_r;
      a.basis = "simulation";
      a.predicted_s = best;
      for (const auto& [r, res] : a.simulated)
        if (r == a.current_r && res.ok) a.predicted_current_s = res.layer_s();
    }
  }
  a.best_r = a.recommended_r;
  const double layer = L.measured_layer_s > 0 ? L.measured_layer_s : a.predicted_current_s;
  if (a.recommended_r != a.current_r && layer > 0 && (a.predicted_current_s - a.predicted_s) < o.min_gain * layer) {
    a.recommended_r = a.current_r;
    a.predicted_s = a.predicted_current_s;
  }
}

void advise_memory(const Trace& trace, const RecommendOptions& o, const Hardware& hw, std::int64_t peak,
                   LayerRecommendation& L) {
  auto& a = L.memory;
  const auto& w = L.workload;
  // At the pipeline degree the layer would run after the pipeline advice
  // (reuse needs n >= 2 partitions).
  a.partitions = std::max(2, L.pipeline.computed ? L.pipeline.recommended_r : 2);
  if (L.variant == "mpipemoe")
    a.current = plan::parse_reuse_strategy(trace.config_value("strategy").empty() ? "none" : trace.config_value("strategy"));
  a.measured_peak_bytes = peak;
  if (o.memory_budget_bytes >= 0) {
    a.budget_bytes = o.memory_budget_bytes;
    a.budget_source = "option";
  } else if (auto b = config_number<std::int64_t>(trace, "memory_budget_bytes"); b && *b > 0) {
    a.budget_bytes = *b;
    a.budget_source = "run_config memory_budget_bytes";
  } else {
    for (const auto& d : trace.devices)
      if (d.memory_bytes > 0) a.budget_bytes = a.budget_bytes > 0 ? std::min(a.budget_bytes, d.memory_bytes) : d.memory_bytes;
    a.budget_source = a.budget_bytes > 0 ? "device memory" : "none";
  }
  ReuseInputs in = reuse_inputs(w, hw.model, a.partitions);
  in.budget_bytes = a.budget_bytes;
  in.measured_peak_bytes = peak;
  in.current = a.current;
  // The measured peak is the whole run's; a candidate moves it by the change
  // of this layer's Eq. 1-5 memory (Eq. 2 = Eq. 4 for an unpipelined layer).
  a.choice = choose_reuse_strategy(in);
  a.computed = true;
  if (o.simulate && w.ranks <= o.max_simulated_ranks) {
    for (int s = 0; s < 5; ++s) {
      WhatIf what;
      what.variant = "mpipemoe";
      what.partitions = a.partitions;
      what.strategy = static_cast<plan::ReuseStrategy>(s);
      a.simulated[static_cast<std::size_t>(s)] = simulate_layer(w, hw.model, what);
    }
  }
}

// The placement a trace ran for (iteration, layer): experts with replica or
// shadow rows, their ranks other than home.
bool trace_placement(const Trace& t, const MoeLayerWorkload& w, plan::ExpertPlacement& p, int& n) {
  p = plan::ExpertPlacement::none(w.experts);
  for (const auto& row : t.placements) {
    if (row.iteration != w.iteration || row.layer != w.layer || row.role == "home") continue;
    if (row.expert < 0 || row.expert >= w.experts || row.rank < 0 || row.rank >= w.ranks) continue;
    if (row.rank == w.routing.home(row.expert)) continue;
    auto& reps = p.replicas[static_cast<std::size_t>(row.expert)];
    if (std::find(reps.begin(), reps.end(), row.rank) == reps.end()) reps.push_back(row.rank);
  }
  double copies = 0;
  for (int e = 0; e < w.experts; ++e) {
    auto& reps = p.replicas[static_cast<std::size_t>(e)];
    if (reps.empty()) continue;
    std::sort(reps.begin(), reps.end());
    p.selected.push_back(e);
    copies += static_cast<double>(reps.size());
  }
  if (p.selected.empty()) return false;
  // Eq. 4/5 take one n for all selected experts: the mean number of devices
  // an expert is not sent to.
  n = static_cast<int>(std::lround(w.ranks - 1 - copies / static_cast<double>(p.selected.size())));
  return true;
}

// A trace of moetrace's own runs replayed an iteration at a time
// (whatif.h replay_iteration): its run record holds the configuration, and
// every MoE layer is advised at the same iteration. nullopt: another tool's
// trace, ppmoe (its micro-batches and tensor-parallel groups are not the
// workload's ranks), or a configuration the builders refuse (notes say why).
std::optional<IterationReplay> own_iteration_replay(const Trace& trace, const RecommendOptions& o, const Hardware& hw,
                                                    const std::vector<MoeLayerWorkload>& workloads,
                                                    std::vector<std::string>& notes) {
  const std::string& v = trace.run.variant;
  if (!o.simulate || trace.run.config_json.empty() || workloads.empty() || v == "ppmoe" ||
      std::find(std::begin(sim::kVariants), std::end(sim::kVariants), v) == std::end(sim::kVariants))
    return std::nullopt;
  sim::RunSpec spec;
  try {
    spec = sim::run_spec_from_json(trace.run.config_json);
  } catch (const Error&) {
    return std::nullopt;  // not a configuration of ours (or of an older moetrace)
  }
  if (spec.variant != v || spec.common.ranks > o.max_simulated_ranks) return std::nullopt;
  // The layers' iteration, after the one before it (whose tail runs into it:
  // the last Agg or gradient all-reduce on the communication stream).
  const int iteration = workloads.front().iteration;
  const int L = spec.common.model.num_layers, P = spec.common.ranks, E = spec.common.model.num_experts;
  if (static_cast<int>(workloads.size()) != L) return std::nullopt;
  for (const auto& w : workloads)
    if (w.iteration != iteration || w.layer < 0 || w.layer >= L || w.ranks != P || w.experts != E) return std::nullopt;
  const bool placed = v == "pro_prophet" || v == "fastermoe";
  std::vector<std::vector<plan::LayerRouting>> routings;
  std::vector<std::vector<plan::ExpertPlacement>> placements;
  for (int j = std::max(0, iteration - 1); j <= iteration; ++j) {
    routings.emplace_back();
    if (placed) placements.emplace_back();
    for (int l = 0; l < L; ++l) {
      routings.back().push_back(recorded_routing(trace, l, j, P, E));
      if (!placed) continue;
      MoeLayerWorkload at;
      at.layer = l;
      at.iteration = j;
      at.ranks = P;
      at.experts = E;
      at.routing = routings.back().back();
      plan::ExpertPlacement p;
      int n = 0;
      if (!trace_placement(trace, at, p, n)) p = plan::ExpertPlacement::none(E);
      placements.back().push_back(std::move(p));
    }
  }
  auto replay = replay_iterations(spec, routings, placements, hw.model);
  if (!replay.ok) {
    notes.push_back(fmt::format("replay of iteration {} as the run's configuration: {}; each layer replayed alone",
                                iteration, replay.error));
    return std::nullopt;
  }
  return replay;
}

void advise_placement(const Trace& trace, const RecommendOptions& o, const Hardware& hw,
                      const LayerMeasures& meas, LayerRecommendation& L) {
  auto& a = L.placement;
  const auto& w = L.workload;
  a.iteration = w.iteration;
  a.fnec_s = meas.fnec_s;
  a.bnec_s = meas.bnec_s;
  PlacementInputs in = placement_inputs(w, hw.model, a.fnec_s, a.bnec_s, true);
  in.alpha = o.pro_prophet_alpha;
  a.model = in.model;
  a.alpha = in.alpha;
  a.advice = recommend_placement(in);
  a.computed = true;
  a.has_current = trace_placement(trace, w, a.current, a.current_n);
  a.current_estimate = a.has_current
                           ? plan::estimate_layer_time(plan::placement_load(w.routing, a.current), w.ranks,
                                                       static_cast<int>(a.current.selected.size()), a.current_n,
                                                       in.model, in.sizes)
                           : a.advice.before;
  if (o.simulate && w.ranks <= o.max_simulated_ranks) {
    WhatIf home;
    home.variant = "dpmoe";
    home.window = LayerWindow::kMoeLayer;
    a.simulated_home = simulate_layer(w, hw.model, home);
    if (a.advice.placement.selected.empty()) return;  // nothing to compare
    WhatIf placed = home;
    placed.variant = "pro_prophet";
    placed.pro_prophet_n = a.advice.n;
    placed.pro_prophet_alpha = o.pro_prophet_alpha;
    plan::ProProphetModel planner = in.model;
    planner.hide_under_computation = false;  // unscheduled in the what-if (one iteration)
    placed.planner = planner;
    a.simulated_placed = simulate_layer(w, hw.model, placed);
  }
}

void advise_layout(const Trace& trace, const RecommendOptions& o, const Hardware& hw, LayerRecommendation& L) {
  auto& a = L.layout;
  const auto& w = L.workload;
  a.tensor_parallel = tensor_parallel_for(trace, w, o.tensor_parallel);
  if (a.tensor_parallel < 2) {
    a.skipped = fmt::format("no tensor-parallel size in [2, 8] divides {} experts on {} ranks", w.experts, w.ranks);
    return;
  }
  a.comparison = compare_ppmoe_layout(layout_inputs(w, hw.model, a.tensor_parallel));
  a.computed = a.comparison.applicable;
  if (!a.computed)
    a.skipped = fmt::format("PPMoE with T = {} does not apply ({} experts, {} ranks)", a.tensor_parallel, w.experts, w.ranks);
}

// ---------------------------------------------------------------------------
// Items: one per recommender and layer.

double layer_time(const LayerRecommendation& L, double model_time) {
  return L.measured_layer_s > 0 ? L.measured_layer_s : model_time;
}

// An item's layer and subject; complete ("not computed", with the reason)
// where its analysis did not run.
template <class Analysis>
RecommendationItem item_head(const LayerRecommendation& L, const char* subject, const Analysis& a) {
  RecommendationItem it;
  it.layer = L.layer;
  it.subject = subject;
  if (!a.computed) {
    it.action = "not computed";
    it.evidence = a.skipped;
  }
  return it;
}

RecommendationItem pipeline_item(const LayerRecommendation& L, const Hardware& hw, double min_gain) {
  const auto& a = L.pipeline;
  RecommendationItem it = item_head(L, "pipeline degree", a);
  if (!a.computed) return it;
  const bool mp = L.variant == "mpipemoe";
  const char* sym = mp ? "n" : "r";
  it.change = a.recommended_r != a.current_r;
  it.action = it.change ? fmt::format("{} = {}", sym, a.recommended_r) : fmt::format("keep {} = {}", sym, a.current_r);
  const bool below_threshold = a.best_r != a.recommended_r;
  const auto& f = a.choice.forward;
  const PipelineTerms& t = a.terms.forward;
  std::string e = fmt::format(
      "pipemoe Theorem 1 on {}: alpha_a = {}, beta_a n_d = {}, alpha_e = {}, beta_e n_e = {} (forward; backward "
      "doubles the expert terms). Forward alone (Algorithm 1): r = {} ({}, {}); forward + backward: r = {}, {} vs "
      "{} at the current {} = {}.",
      hw.model.name, ms(t.alpha_a), ms(t.comm_s), ms(t.alpha_e), ms(t.comp_s), f.r, pipeline_regime_name(f.regime),
      pipeline_regime_equation(f.regime), a.choice.r, ms(a.choice.t), ms(a.closed_form_current_s), sym, a.current_r);
  if (a.simulated_best_r > 0) {
    double at_rec = 0;
    for (const auto& [r, res] : a.simulated)
      if (r == a.choice.r && res.ok) at_rec = res.layer_s();
    e += fmt::format(" Simulated with the measured routing ({} what-ifs, r = {}..{}): best r = {} at {}, current {}",
                     a.simulated.size(), a.simulated.front().first, a.simulated.back().first, a.simulated_best_r,
                     ms(a.predicted_s), ms(a.predicted_current_s));
    if (a.simulated_best_r != a.choice.r && at_rec > 0)
      e += fmt::format(" (the closed form's r = {} simulates at {}, {} slower)", a.choice.r, ms(at_rec),
                       pct(at_rec / a.predicted_s - 1));
    e += ".";
  }
  if (L.measured_layer_s > 0) e += fmt::format(" Measured MoE-layer time {} per iteration.", ms(L.measured_layer_s));
  if (below_threshold)
    e += fmt::format(" The best r = {} would save less than the {} threshold: kept.", a.best_r, pct(min_gain));
  if (a.measured) {
    std::string ranges;
    for (const auto& r : a.measured->ranges)
      ranges += fmt::format("{}n = {}: B in [{}, {}]", ranges.empty() ? "" : "; ", r.partitions, r.lower, r.upper);
    e += fmt::format(" mpipemoe Algorithm 1 on {} measured runs: {}; {} -> n = {}.", a.runs.size(), ranges,
                     a.measured->note, a.measured->partitions);
  }
  it.evidence = e;
  const double saved = a.predicted_current_s - a.predicted_s;
  it.predicted_gain = saved / layer_time(L, a.predicted_current_s);
  it.gain_known = true;
  return it;
}

RecommendationItem memory_item(const LayerRecommendation& L) {
  const auto& a = L.memory;
  RecommendationItem it = item_head(L, "memory reuse", a);
  if (!a.computed) return it;
  const auto& c = a.choice;
  it.change = c.strategy != a.current;
  it.action = it.change ? plan::reuse_strategy_action(c.strategy) : "keep " + plan::reuse_strategy_action(a.current);
  std::string costs, sims;
  for (const auto& cand : c.candidates) {
    costs += fmt::format("{}{} {}{}", costs.empty() ? "" : ", ", plan::reuse_strategy_name(cand.strategy),
                         ms(cand.eq10_s()), cand.fits ? "" : " (does not fit)");
    const auto& s = a.simulated[static_cast<std::size_t>(cand.strategy)];
    if (s.ok)
      sims += fmt::format("{}{} {} / peak {}", sims.empty() ? "" : ", ", plan::reuse_strategy_name(cand.strategy),
                          ms(s.layer_s()), gib(static_cast<double>(s.peak_bytes)));
  }
  const auto& none = c.candidates[0];
  const auto& reuse = c.candidates[static_cast<std::size_t>(c.strategy == plan::ReuseStrategy::kNone ? 4 : static_cast<int>(c.strategy))];
  std::string e = fmt::format(
      "mpipemoe at n = {}: Eq. 1 model states {}, Eq. 4 activations and buffers {} each, Eq. 5 saves {} of each "
      "(Eq. 6 ratio {}). Budget {} ({}){}; predicted peak without reuse {}, with reuse {}. Eq. 10 (forward + "
      "backward, sigma {:.2f}/{:.2f}, mu {:.2f}/{:.2f}, eta {:.2f}): {}. {}.",
      a.partitions, gib(c.memory.model_states), gib(c.memory.activations), gib(c.memory.saving),
      pct(c.memory.saving_ratio), a.budget_bytes > 0 ? gib(static_cast<double>(a.budget_bytes)) : "none",
      a.budget_source, a.measured_peak_bytes >= 0 ? fmt::format(", measured peak {}", gib(static_cast<double>(a.measured_peak_bytes))) : "",
      gib(none.predicted_peak_bytes), gib(reuse.predicted_peak_bytes), none.sigma, reuse.sigma, none.mu, reuse.mu, reuse.eta,
      costs, c.reason);
  if (!sims.empty()) e += fmt::format(" Simulated (mpipemoe, n = {}): {}.", a.partitions, sims);
  it.evidence = e;
  const auto& chosen = c.candidates[static_cast<std::size_t>(c.strategy)];
  const auto& cur = c.candidates[static_cast<std::size_t>(a.current)];
  const auto& s_chosen = a.simulated[static_cast<std::size_t>(c.strategy)];
  const auto& s_cur = a.simulated[static_cast<std::size_t>(a.current)];
  if (s_chosen.ok && s_cur.ok) {
    it.predicted_gain = (s_cur.layer_s() - s_chosen.layer_s()) / layer_time(L, s_cur.layer_s());
  } else {
    it.predicted_gain = (cur.alpha_s() - chosen.alpha_s()) / layer_time(L, cur.alpha_s());
  }
  it.gain_known = true;
  return it;
}

RecommendationItem placement_item(const LayerRecommendation& L, double min_gain) {
  const auto& a = L.placement;
  RecommendationItem it = item_head(L, "expert placement", a);
  if (!a.computed) return it;
  const auto& p = a.advice;
  const auto& w = L.workload;
  auto same = [&](const plan::ExpertPlacement& x, const plan::ExpertPlacement& y) {
    std::vector<int> sx = x.selected, sy = y.selected;
    std::sort(sx.begin(), sx.end());
    std::sort(sy.begin(), sy.end());
    return sx == sy && x.replicas == y.replicas;
  };
  it.change = a.has_current ? !same(p.placement, a.current) : !p.placement.selected.empty();
  const double model_gain = a.current_estimate.total > 0 ? (a.current_estimate.total - p.after.total) / a.current_estimate.total : 0.0;
  const bool below_threshold = it.change && model_gain < min_gain;
  if (below_threshold) it.change = false;
  if (!it.change) {
    it.action = a.has_current ? "keep the trace's placement" : "keep the home placement";
  } else {
    std::string s;
    const std::size_t shown = std::min<std::size_t>(p.placement.selected.size(), 4);
    for (std::size_t i = 0; i < shown; ++i) {
      const int e = p.placement.selected[i];
      const auto& reps = p.placement.replicas[static_cast<std::size_t>(e)];
      s += fmt::format("{}expert {} (home rank {}) to {} rank{}", i ? "; " : "", e, w.routing.home(e), reps.size(),
                       reps.size() == 1 ? "" : "s");
    }
    if (p.placement.selected.size() > shown) s += fmt::format("; {} more", p.placement.selected.size() - shown);
    it.action = fmt::format("replicate {} (pro-prophet, n = {})", s, p.n);
  }
  auto list = [](const std::vector<double>& v) {
    std::string s;
    const std::size_t n = std::min<std::size_t>(v.size(), 8);
    for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}{:.0f}", i ? ", " : "", v[i]);
    if (v.size() > n) s += ", ...";
    return "[" + s + "]";
  };
  const double max_before = p.computed_before.empty() ? 0 : *std::max_element(p.computed_before.begin(), p.computed_before.end());
  std::string e = fmt::format(
      "Load of iteration {}: tokens computed per rank H = {} (max {:.0f}, balance degree {:.1f}). pro-prophet "
      "Algorithm 1 (alpha = {}, B-bar {:.3g} GB/s, t {:.3g} tokens/s, T_FNEC {}, T_BNEC {}): {} expert{} "
      "selected; Eq. 8 layer time {} -> {} (4 T_A2A {} -> {}, 3 T_FEC {} -> {}, unhidden Trans + Agg {}); "
      "without the block-wise schedule (Eq. 6) {}; H after = {}, balance degree {:.1f} (RB {}).",
      a.iteration, list(p.computed_before), max_before, p.balance_degree_before, a.alpha,
      a.model.bandwidth_bytes_per_s * 1e-9, a.model.expert_tokens_per_s, ms(a.fnec_s), ms(a.bnec_s),
      p.placement.selected.size(), p.placement.selected.size() == 1 ? "" : "s", ms(p.before.total), ms(p.after.total),
      ms(4 * p.before.a2a), ms(4 * p.after.a2a), ms(3 * p.before.fec), ms(3 * p.after.fec), ms(p.after.trans + p.after.agg),
      ms(p.after_unhidden.total), list(p.computed_after), p.balance_degree_after,
      std::isfinite(p.rb) ? fmt::format("{:.2f}", p.rb) : "inf");
  if (a.has_current)
    e += fmt::format(" The trace ran {} replicated expert{} in iteration {} (n = {} on average): Eq. 8 {} on this "
                     "load.",
                     a.current.selected.size(), a.current.selected.size() == 1 ? "" : "s", a.iteration, a.current_n,
                     ms(a.current_estimate.total));
  if (a.simulated_home.ok && a.simulated_placed.ok)
    e += fmt::format(" Simulated MoE layer with the measured load: DPMoE {} vs Pro-Prophet (n = {}, unscheduled) {}.",
                     ms(a.simulated_home.layer_s()), p.n, ms(a.simulated_placed.layer_s()));
  if (below_threshold)
    e += fmt::format(" The planned placement would save {} by Eq. 8, below the {} threshold: kept.", pct(model_gain),
                     pct(min_gain));
  it.evidence = e;
  // Eq. 6/8 leave out startups and the rest of the layer: their relative
  // saving, not their seconds, is the prediction.
  it.predicted_gain = it.change ? model_gain : 0.0;
  it.gain_known = true;
  return it;
}

RecommendationItem layout_item(const LayerRecommendation& L, double min_gain) {
  const auto& a = L.layout;
  RecommendationItem it = item_head(L, "layout", a);
  if (!a.computed) return it;
  const auto& c = a.comparison;
  it.change = c.ppmoe_better && c.gain >= min_gain;
  it.action = it.change ? fmt::format("PPMoE layout (experts over tensor-parallel groups of {})", a.tensor_parallel)
                             : "keep expert parallelism";
  it.evidence = fmt::format(
      "ppmoe Eq. 2: t_a2a / t_FFN = {:.3g} (F = {:.3g} TFLOP/s, B = {:.3g} GB/s from the all-to-all at P = {}); Eq. 5: "
      "t_allreduce / t_cal = {:.3g} (all-reduce at T = {}: {:.3g} GB/s). With alpha terms, per device and iteration "
      "(forward + backward): expert parallelism 4 all-to-alls of {} + experts {} = {}; PPMoE experts {} + 2 "
      "all-reduces of {} = {}.",
      c.eq2_ratio, c.flops_per_s * 1e-12, c.a2a_bandwidth * 1e-9, L.workload.ranks, c.eq5_ratio, a.tensor_parallel,
      c.ar_bandwidth * 1e-9, ms(c.t_a2a), ms(3 * c.t_expert_ep), ms(c.ep_s), ms(3 * c.t_expert_pp), ms(c.t_allreduce),
      ms(c.ppmoe_s));
  it.predicted_gain = it.change && c.ep_s > 0 ? (c.ep_s - c.ppmoe_s) / c.ep_s : 0.0;
  it.gain_known = true;
  return it;
}

}  // namespace

namespace {

Recommendations recommend_impl(const Trace& trace, const RecommendOptions& o, const Breakdown* breakdown,
                               std::int64_t peak, const CostModel* fits) {
  Recommendations out;
  out.trace = trace.run.path;
  auto progress = [&](std::string_view stage, double f) {
    if (o.progress) o.progress(stage, f);
  };
  if (o.model) {
    out.notes.push_back(fmt::format("model shape from {} ({}):", o.model->path, o.model->format));
    for (auto& line : o.model->describe()) out.notes.push_back("  " + line);
  }
  const auto workloads = moe_layer_workloads(trace, &out.notes, {o.model, o.tokens_per_rank});
  if (workloads.empty()) {
    out.hardware.source = "preset";
    out.hardware.terms = hardware_terms(o.cost_model ? *o.cost_model : sim::cost_model_preset("h100-nvlink-ib"), 2);
    out.hardware.description = out.notes.empty() ? "none needed (no MoE layer to advise on)"
                                                  : "none needed (no MoE layer could be advised on; see the notes)";
    return out;
  }
  progress("fitting", 0.0);
  const Hardware hw = resolve_hardware(trace, o, fits, workloads.front().ranks, out.notes);
  hw.model.validate();
  out.hardware = hw.info;
  out.hardware.terms = hardware_terms(hw.model, workloads.front().ranks);
  Breakdown computed;
  if (!breakdown) {
    progress("breakdown", 0.0);
    computed = compute_breakdown(trace);
    breakdown = &computed;
  }
  const Breakdown& b = *breakdown;
  const auto measures = layer_measures(trace, b);

  // mpipemoe's range search: (B, n, time) of this trace and the others.
  std::map<int, std::vector<GranularityRun>> runs;
  std::vector<const Trace*> all = {&trace};
  for (const Trace* t : o.other_runs)
    if (t) all.push_back(t);
  if (all.size() > 1) {
    for (const Trace* t : all) {
      const auto ws = moe_layer_workloads(*t, nullptr, {o.model, o.tokens_per_rank});
      const auto ms_ = layer_measures(*t, t == &trace ? b : compute_breakdown(*t));
      for (const auto& w : ws) {
        auto it = ms_.find(w.layer);
        if (it == ms_.end() || it->second.layer_s <= 0) continue;
        runs[w.layer].push_back({w.max_tokens_per_rank(), pipeline_degree(*t, w.layer), it->second.layer_s, t->run.path});
      }
    }
  }

  const auto iteration_replay = own_iteration_replay(trace, o, hw, workloads, out.notes);
  // A trace that ran on hardware: its own execution graph, replayed and
  // changed (trace_advice.h), is the basis of the pipeline-degree advice.
  std::map<int, TraceReplay> trace_replays;
  if (!trace.run.simulated && o.simulate) {
    progress("replaying the trace", 0.0);
    trace_replays = detail::trace_replay_by_layer(trace, hw, o.r_candidates.empty() ? std::vector<int>{1, 2, 4, 8}
                                                                                    : o.r_candidates);
  }
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    progress("recommending", static_cast<double>(i) / static_cast<double>(workloads.size()));
    LayerRecommendation L;
    L.workload = workloads[i];
    L.layer = L.workload.layer;
    L.variant = trace.run.variant;
    LayerMeasures meas;
    if (auto it = measures.find(L.layer); it != measures.end()) meas = it->second;
    L.measured_layer_s = meas.layer_s;
    L.iterations = meas.iterations;
    advise_pipeline(trace, o, hw, L);
    replay_layer(trace, o, hw, b, iteration_replay ? &*iteration_replay : nullptr, L);
    if (auto tr = trace_replays.find(L.layer); tr != trace_replays.end()) {
      L.trace_replay = tr->second;
      // The trace's own replay decides whether its advice holds, not the
      // preset simulation of the layer.
      L.replay.unreliable = !L.trace_replay.within;
    }
    // An overlapped schedule (DualPipe-style chunks, Megatron-Core's EP
    // overlap) runs the layer's forward and backward side by side: the union
    // of their windows is less than their sum. The recommenders model one
    // layer instance at a time.
    for (const auto& s : b.layers) {
      if (s.layer != L.layer || s.ranks <= 0 || s.iterations <= 0) continue;
      const double sum = static_cast<double>(s.forward.window_ns + s.backward.window_ns) /
                         (static_cast<double>(s.ranks) * static_cast<double>(s.iterations));
      if (sum > 0 && static_cast<double>(s.mean_window_ns) < 0.95 * sum)
        out.notes.push_back(fmt::format(
            "layer {}: its forward and backward run side by side (an overlapped schedule: the union of their "
            "windows is {:.0f} % of their sum); the advice assumes a non-overlapped schedule",
            L.layer, 100.0 * static_cast<double>(s.mean_window_ns) / sum));
    }
    if (auto r = runs.find(L.layer); r != runs.end() && r->second.size() > 1) {
      L.pipeline.runs = r->second;
      L.pipeline.measured = mpipemoe_range_search(r->second, L.workload.max_tokens_per_rank());
    }
    advise_memory(trace, o, hw, peak, L);
    advise_placement(trace, o, hw, meas, L);
    advise_layout(trace, o, hw, L);
    const std::size_t first_item = out.items.size();
    const bool from_trace = L.trace_replay.computed && L.pipeline.current_r == 1 && L.trace_replay.predictions.size() > 1;
    out.items.push_back(from_trace ? detail::trace_pipeline_item(L, o.min_gain) : pipeline_item(L, hw, o.min_gain));
    out.items.push_back(memory_item(L));
    out.items.back().evidence += detail::trace_what_if_evidence(L, "reuse");
    out.items.push_back(placement_item(L, o.min_gain));
    out.items.back().evidence += detail::trace_what_if_evidence(L, "placement");
    out.items.push_back(layout_item(L, o.min_gain));
    // The gains' interval from the fitted terms' uncertainty: the same advice
    // by the closed forms on the nominal model and on the four corner models
    // (+-1 relative residual of the expert GEMM and all-to-all fits); each
    // corner moves the gain by its closed-form difference to the nominal.
    if (hw.expert_rel_sd > 0 || hw.a2a_rel_sd > 0) {
      RecommendOptions closed = o;
      closed.simulate = false;
      auto gains = [&](const Hardware& h) {
        LayerRecommendation C;
        C.workload = L.workload;
        C.layer = L.layer;
        C.variant = L.variant;
        C.measured_layer_s = L.measured_layer_s;
        C.iterations = L.iterations;
        advise_pipeline(trace, closed, h, C);
        advise_memory(trace, closed, h, peak, C);
        advise_placement(trace, closed, h, meas, C);
        advise_layout(trace, closed, h, C);
        return std::array<RecommendationItem, 4>{pipeline_item(C, h, o.min_gain), memory_item(C),
                                                 placement_item(C, o.min_gain), layout_item(C, o.min_gain)};
      };
      const auto nominal = gains(hw);
      for (std::size_t k = 0; k < 4; ++k) {
        auto& it = out.items[first_item + k];
        if (k == 0 && from_trace) continue;
        it.gain_interval = it.gain_known && nominal[k].gain_known;
        it.gain_low = it.gain_high = it.predicted_gain;
      }
      for (const double se : {-1.0, 1.0})
        for (const double sa : {-1.0, 1.0}) {
          const auto corner = gains(scaled(hw, se * hw.expert_rel_sd, sa * hw.a2a_rel_sd));
          for (std::size_t k = 0; k < 4; ++k) {
            auto& it = out.items[first_item + k];
            if (k == 0 && from_trace) continue;  // its range comes from the graph what-ifs
            if (!it.gain_interval || !corner[k].gain_known) continue;
            const double g = it.predicted_gain + corner[k].predicted_gain - nominal[k].predicted_gain;
            it.gain_low = std::min(it.gain_low, g);
            it.gain_high = std::max(it.gain_high, g);
          }
        }
    }
    if (L.replay.unreliable && !L.trace_replay.computed)
      for (std::size_t k = first_item; k < out.items.size(); ++k)
        out.items[k].evidence = fmt::format(
            "Unreliable: replaying the trace's own configuration gives {} per iteration against {} measured "
            "({:+.0f} %; the {} term is off). {}",
            ms(L.replay.simulated_s), ms(L.replay.measured_s), L.replay.error * 100, L.replay.off_term,
            out.items[k].evidence);
    out.layers.push_back(std::move(L));
  }
  progress("recommending", 1.0);
  return out;
}

}  // namespace

Recommendations recommend(const Trace& trace, const RecommendOptions& o) {
  return recommend_impl(trace, o, nullptr, memory_timeline(trace).measured_peak_bytes(), nullptr);
}

Recommendations recommend(const Trace& trace, const Analyses& a, const RecommendOptions& o) {
  return recommend_impl(trace, o, &a.breakdown, a.memory.measured_peak_bytes(), &a.cost_model);
}

void add_recommendations(const Trace& trace, Analyses& a, const RecommendOptions& options) {
  a.recommendations = recommend(trace, a, options);
}

}  // namespace moetrace::analyzer
