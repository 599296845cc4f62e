// Each MoE layer's workload for the recommenders: its shapes (the trace's
// layers table and recorded input shapes, or the model file), its routing
// (the expert load, else balanced) and parallel sizes (the process groups).
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
#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/run_spec.h"
#include "hardware.h"
#include "recommend_internal.h"
#include "trace_advice.h"

namespace moetrace::analyzer {

using detail::config_number;
using detail::LayerNotes;
using detail::recorded_routing;

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
    if (ascii_alnum(ch)) {
      w += ascii_lower(ch);
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

// How the layer runs its local experts (MoeLayerWorkload::fused_experts).
// moetrace's own runs say so in their run config (pipemoe.fused_experts).
// Otherwise the trace shows it in its kernels: a loop over the experts
// (Megatron-Core's SequentialMLP, DeepSpeed's experts, Hugging Face's
// per-expert modules) launches at least two GEMMs, up and down projection,
// for every expert that has rows, so a forward pass of the layer with fewer
// expert kernels than the experts that can have rows in it ran them
// together (torch.bmm over the experts, grouped GEMMs, Tutel's fused
// experts, fused MoE kernels). A pass is one instance of the layer (rank,
// micro-batch, chunk) in `iteration`; the experts that can have rows in it
// are min(E / P, the busiest rank's rows / its instances).
struct FusedExperts {
  bool fused = false;
  bool from_config = false;
  int kernels = 0;                    // the most expert kernels of a forward pass
  std::int64_t experts_with_rows = 0; // the experts that can have rows in it
};
// Per (layer, iteration), per forward pass (rank, micro-batch, chunk): the
// kernels of the layer's expert ops; one pass over the activities for every
// layer.
using PassKernels = std::map<std::array<std::int32_t, 3>, int>;
std::map<std::pair<int, int>, PassKernels> expert_kernels_per_pass(const Trace& trace) {
  std::map<std::pair<int, int>, PassKernels> out;
  for (const auto& a : trace.activities) {
    if (a.op < 0 || a.type != ActivityType::kKernel) continue;
    const auto& op = trace.ops[static_cast<std::size_t>(a.op)];
    if (op.kind == OpKind::kExpertFfn && op.phase == Phase::kForward)
      ++out[{op.layer, op.iteration}][{op.rank.value, op.micro_batch, op.chunk}];
  }
  return out;
}
FusedExperts fused_experts(const Trace& trace, const std::map<std::pair<int, int>, PassKernels>& per_pass,
                           const MoeLayerWorkload& w) {
  FusedExperts out;
  if (trace.config_value("fused_experts") == "true") {
    out.fused = out.from_config = true;
    return out;
  }
  const auto it = per_pass.find({w.layer, w.iteration});
  if (it == per_pass.end()) return out;
  std::map<std::int32_t, std::int64_t> passes;  // rank -> its passes
  for (const auto& [pass, n] : it->second) {
    ++passes[pass[0]];
    out.kernels = std::max(out.kernels, n);
  }
  std::int64_t most = 1;
  for (const auto& [rank, n] : passes) most = std::max(most, n);
  out.experts_with_rows = std::min<std::int64_t>(w.experts_per_rank(), (w.max_rows_computed() + most - 1) / most);
  out.fused = out.experts_with_rows >= 2 && out.kernels < out.experts_with_rows;
  return out;
}

}  // namespace

namespace detail {

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
}  // namespace detail

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
  std::string balanced;  // the note on the routing assumed, said after the layers' notes
  std::vector<std::pair<int, FusedExperts>> fused;  // layers whose experts the kernels show fused
  const auto kernels_per_pass = expert_kernels_per_pass(trace);
  LayerNotes layer_notes;
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
    // moetrace's own runs (their layers table or run_config give H) run
    // two-matrix experts; otherwise the model file says whether the experts
    // are gated, else the recorded shapes.
    const bool own_ffn = th.has_value();
    const bool gated_known = own_ffn || (model && model->gated_experts);
    if (!tm || !th || !te || !tk || (!have_load && sources.tokens_per_rank <= 0) || !cfg_elem || !gated_known) {
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
      if (!read.empty()) layer_notes.add(layer, fmt::format("{} from {}", read, shape.source));
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
    if (!own_ffn && model && model->gated_experts) {
      w.gated = *model->gated_experts;
      if (shape.gated && *shape.gated != w.gated)
        layer_notes.add(layer, fmt::format("{} says the experts are {}gated, the trace's recorded GEMM shapes that "
                                           "they are {}: the model file is followed",
                                           model->gated_experts.source, w.gated ? "" : "not ",
                                           *shape.gated ? "" : "not "));
    } else if (!own_ffn && shape.gated) {
      w.gated = *shape.gated;
    }
    if (w.gated && w.hidden > 0)
      layer_notes.add(layer, fmt::format("gated experts (gate, up and down projections{}): modelled as a two-matrix "
                                         "FFN of hidden size 3H/2 = {}, the same GEMM FLOPs and weights",
                                         model && model->gated_experts ? ", " + model->gated_experts.source
                                                                       : ", from the recorded GEMM shapes",
                                         w.ffn_hidden()));
    if (w.model_dim <= 0 || w.hidden <= 0) {
      layer_notes.add(layer, "model_dim or hidden size unknown (layers table and run_config lack them; --model "
                             "gives them); skipped");
      continue;
    }
    if (w.experts <= 0) {
      layer_notes.add(layer, "the number of routed experts is unknown (no router GEMM or top-k with recorded "
                             "shapes, no expert load; --model gives it); skipped");
      continue;
    }
    if (w.experts < P || w.experts % P != 0) {
      layer_notes.add(layer, fmt::format("{} experts on {} ranks is not expert parallelism with E/P experts per "
                                         "rank; skipped",
                                         w.experts, P));
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
        origin = "the rows of the router's GEMM or top-k, recorded in its Input Dims";
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
        layer_notes.add(layer, "tokens per rank unknown (no expert load, no dispatch all-to-all bytes in the "
                               "trace): give --tokens; skipped");
        continue;
      }
      if (balanced.empty())
        balanced = fmt::format("no expert load in the trace (no all-to-all split sizes): routing assumed balanced, "
                               "{} tokens a rank ({})",
                               tokens, origin);
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
    const auto f = fused_experts(trace, kernels_per_pass, w);
    w.fused_experts = f.fused;
    if (f.fused && !f.from_config) fused.emplace_back(layer, f);
    out.push_back(std::move(w));
  }
  layer_notes.say(note);
  if (!balanced.empty()) note(balanced);
  if (!fused.empty()) {
    const auto& [layer, f] = fused.front();
    note(fmt::format("the experts run fused (one batched or grouped GEMM per projection) in {} of {} layers: "
                     "layer {} launched at most {} kernels in a forward pass of its experts, where a loop over "
                     "its {} experts that can have rows would launch two GEMMs each; a GEMM's startup is charged "
                     "once per projection and chunk",
                     fused.size(), out.size(), layer, f.kernels, f.experts_with_rows));
  }
  return out;
}

}  // namespace moetrace::analyzer
