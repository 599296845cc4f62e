#include "moetrace/analyzer/recorded_shapes.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "moetrace/schema/ascii.h"
#include "moetrace/schema/schema.h"

namespace moetrace::analyzer {

namespace {

// The most frequent value of `counts` (ties: the larger value).
template <class T>
std::optional<T> mode(const std::map<T, int>& counts) {
  std::optional<T> best;
  int n = 0;
  for (const auto& [v, c] : counts)
    if (c >= n) {
      n = c;
      best = v;
    }
  return best;
}

// The scores a top-k router picks from, where `op_name` is torch.topk
// (aten::topk(self, k, dim=-1, ...)) and its first input is 2-D: (rows,
// width) = (tokens, candidates). Every top-k router calls it on the [T, E]
// scores (Mixtral's and Qwen-MoE's in Hugging Face transformers,
// Megatron-Core's topk routing, DeepSeek-V3's gate, whose group-limited
// routing also picks groups from [T, n_group] first).
std::optional<std::pair<std::int64_t, std::int64_t>> topk_scores(std::string_view op_name, std::string_view dims) {
  if (!schema::top_k_name(op_name)) return std::nullopt;
  const auto j = nlohmann::json::parse(dims, nullptr, false);
  if (!j.is_array() || j.empty() || !j[0].is_array() || j[0].size() != 2) return std::nullopt;
  const auto& d = j[0];
  if (!d[0].is_number_integer() || !d[1].is_number_integer()) return std::nullopt;
  const auto rows = d[0].get<std::int64_t>(), width = d[1].get<std::int64_t>();
  if (rows <= 0 || width <= 1) return std::nullopt;
  return std::pair{rows, width};
}

}  // namespace

RecordedLayerShape recorded_layer_shape(const Trace& trace, int layer) {
  RecordedLayerShape out;
  if (trace.input_shapes.empty()) return out;
  const LaunchShapes shapes(trace);
  std::map<std::pair<std::int64_t, std::int64_t>, int> gate, expert;  // (in, out) -> GEMMs
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> expert_rows;  // (in, out) -> rows
  std::int64_t gate_rows = 0;
  std::map<std::int64_t, std::pair<int, std::int64_t>> topk;  // width -> (calls, rows) of the router's top-k
  std::map<std::string, int> types;  // the first input's element type -> GEMMs
  std::set<std::size_t> seen;
  std::optional<std::pair<std::int64_t, std::pair<std::int64_t, std::int64_t>>> first_expert;  // (launch, features)
  std::set<std::string> names;
  for (const auto& a : trace.activities) {
    if (a.op < 0) continue;
    const auto& op = trace.ops[static_cast<std::size_t>(a.op)];
    if (op.layer != layer || op.phase != Phase::kForward) continue;
    if (op.kind != OpKind::kGate && op.kind != OpKind::kExpertFfn) continue;
    const ApiCall* call = trace.launching_call(a);
    const auto hit = call ? shapes.range_of(a) : std::nullopt;
    if (!hit || !seen.insert(*hit).second) continue;
    const auto& r = trace.nvtx[*hit];
    const auto& shape = trace.input_shapes[static_cast<std::size_t>(r.input_shape)];
    const auto g = shapes.gemm_of(*hit);
    if (!g) {
      if (op.kind == OpKind::kGate)
        if (const auto k = topk_scores(trace.str(r.name), shape.dims)) {
          auto& [calls, rows] = topk[k->second];
          ++calls;
          rows += k->first;
          names.insert(std::string(trace.str(r.name)));
        }
      continue;
    }
    const std::pair f{g->in, g->out};
    if (op.kind == OpKind::kGate) {
      ++gate[f];
      gate_rows += g->rows;
    } else {
      ++expert[f];
      expert_rows[f] += g->rows;
      if (!first_expert || call->start_ns < first_expert->first) first_expert = std::pair{call->start_ns, f};
      const auto t = nlohmann::json::parse(shape.types, nullptr, false);
      if (t.is_array() && !t.empty() && t[0].is_string()) ++types[t[0].get<std::string>()];
    }
    names.insert(std::string(trace.str(r.name)));
    ++out.gemms;
  }
  if (out.gemms == 0) return out;
  // The router maps M to E. Where its GEMM was not placed in the gate (a
  // plain GEMM before the top-k), E and the tokens are the widest scores the
  // top-k picks from and their rows.
  int router_gemms = 0;
  for (const auto& [f, c] : gate) router_gemms += c;
  if (const auto g = mode(gate)) {
    out.model_dim = g->first;
    out.experts = static_cast<int>(g->second);
  } else if (!topk.empty()) {
    const auto& [width, calls_rows] = *topk.rbegin();
    out.experts = static_cast<int>(width);
    router_gemms = calls_rows.first;
    gate_rows = calls_rows.second;
  }
  // The experts: up (M -> H, or 2H fused with the gate projection), then
  // down (H -> M). Without a router, M is the input of the expert GEMM
  // launched first (an up projection).
  if (!out.model_dim && first_expert) out.model_dim = first_expert->second.first;
  if (out.model_dim) {
    std::map<std::int64_t, int> down;
    std::int64_t down_rows = 0;
    for (const auto& [f, n] : expert)
      if (f.second == *out.model_dim) {
        down[f.first] += n;
        down_rows += expert_rows[f];
      }
    out.hidden = mode(down);
    // Gated experts (SwiGLU): the up side (GEMMs from M to anything but M)
    // writes 2H a down-projected row, as one fused gate_up GEMM (M -> 2H)
    // or as two (M -> H each); a two-matrix expert writes H. Where H = M
    // and the gate and up GEMMs are separate, the up side cannot be told
    // from the down projections: not read.
    double up_elems = 0;
    for (const auto& [f, n] : expert)
      if (f.first == *out.model_dim && f.second != *out.model_dim)
        up_elems += static_cast<double>(expert_rows[f]) * static_cast<double>(f.second);
    if (out.hidden && up_elems > 0 && down_rows > 0) {
      const double ratio = up_elems / (static_cast<double>(down_rows) * static_cast<double>(*out.hidden));
      if (std::fabs(ratio - 2) <= 0.25) out.gated = true;
      else if (std::fabs(ratio - 1) <= 0.125) out.gated = false;
    }
    // Each token's k routed rows pass one down projection: k = rows there /
    // rows of the router. A k of E or more is no top-k (experts computed
    // densely over every token): not read.
    if (router_gemms > 0 && gate_rows > 0) {
      out.tokens = gate_rows / router_gemms;
      const auto k = static_cast<int>(std::llround(static_cast<double>(down_rows) / static_cast<double>(gate_rows)));
      if (k >= 1 && (!out.experts || k < *out.experts)) out.top_k = k;
    }
  }
  // The element size of the experts' inputs (PyTorch's dtype names).
  if (const auto t = mode(types)) {
    const auto n = to_ascii_lower(*t);
    if (n.find("bfloat16") != std::string::npos || n.find("half") != std::string::npos) out.elem_bytes = 2;
    else if (n.find("float8") != std::string::npos) out.elem_bytes = 1;
    else if (n.find("double") != std::string::npos) out.elem_bytes = 8;
    else if (n == "float" || n.find("float32") != std::string::npos) out.elem_bytes = 4;
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  int topk_calls = 0;
  for (const auto& [w, cr] : topk) topk_calls += cr.first;
  out.source = fmt::format("the Input Dims of {} forward GEMM{}{} in its router and experts ({})", out.gemms,
                           out.gemms == 1 ? "" : "s",
                           topk_calls > 0 && gate.empty() ? fmt::format(" and {} top-k", topk_calls) : "", list);
  return out;
}

}  // namespace moetrace::analyzer
