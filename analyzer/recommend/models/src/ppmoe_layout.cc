#include "moetrace/analyzer/ppmoe_layout.h"

#include <algorithm>

namespace moetrace::analyzer {

double ppmoe_eq2(double experts, double flops_per_s, double bandwidth_bytes_per_s, double hidden) {
  if (bandwidth_bytes_per_s <= 0 || hidden <= 0) return 0;
  return (experts - 1) * experts * flops_per_s / (16.0 * bandwidth_bytes_per_s * hidden);
}

double ppmoe_eq5(double tensor_parallel, double flops_per_s, double bandwidth_bytes_per_s, double hidden) {
  if (bandwidth_bytes_per_s <= 0 || hidden <= 0) return 0;
  return (tensor_parallel - 1) * tensor_parallel * flops_per_s / (4.0 * bandwidth_bytes_per_s * hidden);
}

LayoutComparison compare_ppmoe_layout(const LayoutInputs& in) {
  LayoutComparison c;
  const int T = std::max(1, in.tensor_parallel), P = std::max(1, in.ranks);
  c.applicable = in.experts > 0 && in.experts % T == 0 && T <= P && T > 1;
  c.flops_per_s = in.seconds_per_flop > 0 ? 1.0 / in.seconds_per_flop : 0;
  c.a2a_bandwidth = in.a2a_beta > 0 ? 1.0 / in.a2a_beta : 0;
  c.ar_bandwidth = in.ar_beta > 0 ? 1.0 / in.ar_beta : 0;
  c.eq2_ratio = ppmoe_eq2(in.experts, c.flops_per_s, c.a2a_bandwidth, in.model_dim);
  c.eq5_ratio = ppmoe_eq5(T, c.flops_per_s, c.ar_bandwidth, in.model_dim);

  const double e = in.elem_bytes, h = in.model_dim, H = in.hidden, k = in.top_k, tok = in.tokens;
  const double flops_fw = 4.0 * tok * k * h * H;  // two GEMMs per routed token, same in both layouts
  const double ep_experts = static_cast<double>(in.experts) / P;
  const double pp_experts = static_cast<double>(in.experts) / T;
  c.t_a2a = in.a2a_alpha + in.a2a_beta * tok * k * h * e;
  c.t_expert_ep = ep_experts * 2 * in.alpha_gemm + in.seconds_per_flop * flops_fw;
  c.t_allreduce = in.ar_alpha + in.ar_beta * T * tok * h * e;
  c.t_expert_pp = pp_experts * 2 * in.alpha_gemm + in.seconds_per_flop * flops_fw;
  // Backward: 4 GEMMs per expert (twice the forward), communication unchanged.
  c.ep_s = (2 * c.t_a2a + c.t_expert_ep) + (2 * c.t_a2a + 2 * c.t_expert_ep);
  c.ppmoe_s = (c.t_expert_pp + c.t_allreduce) + (2 * c.t_expert_pp + c.t_allreduce);
  c.gain = c.ep_s > 0 ? (c.ep_s - c.ppmoe_s) / c.ep_s : 0;
  c.ppmoe_better = c.applicable && c.ppmoe_s < c.ep_s;
  return c;
}

}  // namespace moetrace::analyzer
