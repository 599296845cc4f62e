#include "moetrace/analyzer/memory_reuse.h"

#include <fmt/format.h>

#include <algorithm>

namespace moetrace::analyzer {

using plan::ReuseStrategy;

// Table II (NOTES.md): Q_fw / Q_bw follow from the restore methods
// (plan::kReuseStrategies). Forward: 2 GEMMs, 2 all-to-alls, one copy per
// offloaded tensor (S1 [2, 2, 5], S2 [2, 2, 4], S3 [2, 2, 1] in b x M units
// with H = 4 M). Backward: 4 GEMMs (+1 recomputing T_M), 2 all-to-alls (+1
// re-communicating T_DI), the offloaded tensors prefetched (S1 [4, 2, 5],
// S2 [4, 3, 4], S3 [5, 2, 1], S4 [5, 3, 0]).
ReuseQ reuse_q_forward(ReuseStrategy s) {
  const auto& t = plan::reuse_strategy_traits(s);
  return {2, 2, t.t_di == plan::Restore::kOffload ? 1 : 0, t.t_m == plan::Restore::kOffload ? 1 : 0};
}

ReuseQ reuse_q_backward(ReuseStrategy s) {
  const auto& t = plan::reuse_strategy_traits(s);
  return {4 + (t.t_m == plan::Restore::kRecompute ? 1 : 0), 2 + (t.t_di == plan::Restore::kRecommunicate ? 1 : 0),
          t.t_di == plan::Restore::kOffload ? 1 : 0, t.t_m == plan::Restore::kOffload ? 1 : 0};
}

namespace {

bool copies(ReuseStrategy s) { return plan::reuse_strategy_traits(s).copies(); }

struct PassCost {
  double eq10 = 0, with_alpha = 0;
  const char* bound = "comp";
};

// Eq. 7-10 for one pass: the slowest of the three streams.
PassCost pass_cost(const ReuseInputs& in, const ReuseQ& q, double sigma, double mu, double eta) {
  const double B = in.tokens, M = in.model_dim, H = in.hidden, e = in.elem_bytes, n = std::max(1, in.partitions);
  const double v_comp = 2.0 * B * H * M;  // Eq. 7 (b H M multiply-adds = 2 b H M FLOPs per GEMM)
  const double v_comm = B * M * e;        // Eq. 8, bytes
  const double v_mem = B * M * e;         // Eq. 9, bytes
  const double comp = q.gemms * v_comp * in.seconds_per_flop / sigma;
  const double comm = q.all_to_alls * v_comm * in.a2a_beta / mu;
  const double mem = q.q3(M > 0 ? H / M : 0) * v_mem * in.copy_beta / eta;
  PassCost c;
  c.eq10 = std::max({comp, comm, mem});
  c.bound = c.eq10 == comp ? "comp" : c.eq10 == comm ? "comm" : "mem";
  const double comp_a = comp + n * q.gemms * in.alpha_gemm / sigma;
  const double comm_a = comm + n * q.all_to_alls * in.a2a_alpha / mu;
  const double mem_a = mem + n * (q.copies_di + q.copies_m) * in.copy_alpha / eta;
  c.with_alpha = std::max({comp_a, comm_a, mem_a});
  return c;
}

}  // namespace

ReuseChoice choose_reuse_strategy(const ReuseInputs& in) {
  ReuseChoice out;
  out.memory = mpipemoe_memory(in);
  for (int i = 0; i < 5; ++i) {
    const auto s = static_cast<ReuseStrategy>(i);
    ReuseCandidate& c = out.candidates[static_cast<std::size_t>(i)];
    c.strategy = s;
    c.q_forward = reuse_q_forward(s);
    c.q_backward = reuse_q_backward(s);
    c.sigma = copies(s) ? in.sigma_all : in.sigma_comm;
    c.mu = copies(s) ? in.mu_all : in.mu_comp;
    c.eta = copies(s) ? in.eta_all : 1.0;
    const auto fw = pass_cost(in, c.q_forward, c.sigma, c.mu, c.eta);
    const auto bw = pass_cost(in, c.q_backward, c.sigma, c.mu, c.eta);
    c.eq10_forward_s = fw.eq10;
    c.eq10_backward_s = bw.eq10;
    c.alpha_forward_s = fw.with_alpha;
    c.alpha_backward_s = bw.with_alpha;
    c.bound = bw.bound;
    c.layer_memory_bytes = out.memory.layer_bytes(plan::reuse_strategy_traits(s).reuses());
    const bool reuse = s != ReuseStrategy::kNone, reused = in.current != ReuseStrategy::kNone;
    c.predicted_peak_bytes =
        in.measured_peak_bytes >= 0
            ? std::max(0.0, static_cast<double>(in.measured_peak_bytes) -
                                (reuse == reused ? 0.0 : reuse ? out.memory.saving : -out.memory.saving))
            : c.layer_memory_bytes;
    c.fits = in.budget_bytes <= 0 || c.predicted_peak_bytes <= static_cast<double>(in.budget_bytes);
  }
  const ReuseCandidate* best = nullptr;
  for (const auto& c : out.candidates) {
    if (!c.fits) continue;
    if (!best || c.eq10_s() < best->eq10_s() || (c.eq10_s() == best->eq10_s() && c.alpha_s() < best->alpha_s()))
      best = &c;
  }
  const std::string budget =
      in.budget_bytes > 0 ? fmt::format("{:.2f} GiB", static_cast<double>(in.budget_bytes) / (1 << 30)) : "none";
  if (best) {
    out.strategy = best->strategy;
    out.fits = true;
    int fitting = 0;
    for (const auto& c : out.candidates) fitting += c.fits ? 1 : 0;
    out.reason = fmt::format("lowest mpipemoe Eq. 10 cost ({:.3f} ms forward + backward) among the {} of 5 "
                             "strategies whose predicted peak fits the budget ({})",
                             best->eq10_s() * 1e3, fitting, budget);
  } else {
    for (const auto& c : out.candidates)
      if (!best || c.predicted_peak_bytes < best->predicted_peak_bytes ||
          (c.predicted_peak_bytes == best->predicted_peak_bytes && c.eq10_s() < best->eq10_s()))
        best = &c;
    out.strategy = best->strategy;
    out.fits = false;
    out.reason = fmt::format("no strategy fits the budget ({}); the least memory is chosen: more partitions n "
                             "(Eq. 5 grows with n) or fewer tokens per device are needed",
                             budget);
  }
  return out;
}

}  // namespace moetrace::analyzer
