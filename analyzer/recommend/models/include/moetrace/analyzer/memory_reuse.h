// Memory-reuse strategy of a pipelined MoE layer under a memory budget:
// mpipemoe's memory model (Eq. 1-6) for each candidate, its performance
// model (Eq. 7-10) with the interference factors sigma, mu, eta, and the
// choice of Sec. III-E: the cheapest strategy whose memory fits.
//
// Strategies (mpipemoe Table II; NOTES.md): none, S1 (T_DI offload, T_M
// offload), S2 (T_DI re-communicate, T_M offload), S3 (T_DI offload, T_M
// recompute), S4 (T_DI re-communicate, T_M recompute). Q = [GEMMs,
// all-to-alls, copies] per pass; the paper counts copies in units of b x M
// with H = 4 M (T_M = 4 units); here a T_M copy is H / M units, so the
// vectors hold for any H.
//
// Factors (NOTES.md naming; actual speed = factor x nominal speed): sigma
// for computation, mu for communication, eta for memory copies. Table II's mu
// and eta columns are garbled in our copy; our reading: mu_comp where no copy
// stream runs (none, S4), mu_all where one does (S1-S3); eta_all for S1-S3;
// sigma the same way (sigma_comm / sigma_all; the paper sets sigma = 1).
// Eq. 10's first line divides the copy term by mu, its second line by eta;
// we follow the second (NOTES.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "moetrace/analyzer/mpipemoe_memory.h"
#include "moetrace/plan/config.h"

namespace moetrace::analyzer {

// mpipemoe Table II: [GEMMs, all-to-alls, T_DI copies, T_M copies] per pass.
struct ReuseQ {
  int gemms = 0, all_to_alls = 0, copies_di = 0, copies_m = 0;
  // q3 of Table II in units of b x M, for T_M of b x H elements.
  double q3(double h_over_m) const { return copies_di + copies_m * h_over_m; }
};
ReuseQ reuse_q_forward(plan::ReuseStrategy s);
ReuseQ reuse_q_backward(plan::ReuseStrategy s);

// Everything Eq. 1-10 need for one MoE layer on one device: the shape of
// Eq. 1-6 (memory.h; mpipemoe Table I, B = tokens per device routed to
// experts, x top_k) and the speeds of Eq. 7-10.
struct ReuseInputs : MpipemoeShape {
  // Speeds, nominal (alone): W_comp = 1 / seconds_per_flop, W_comm = 1 /
  // a2a_beta, W_mem = 1 / copy_beta; and startups per op for the alpha-aware cost.
  double seconds_per_flop = 0;  // expert GEMMs
  double alpha_gemm = 0;        // s per GEMM
  double a2a_alpha = 0;         // s per all-to-all
  double a2a_beta = 0;          // s per byte of a device's all-to-all volume
  double copy_alpha = 0;        // s per copy (offload / prefetch)
  double copy_beta = 0;         // s per byte
  // Interference factors (1: no slowdown).
  double sigma_comm = 1, sigma_all = 1;
  double mu_comp = 1, mu_all = 1;
  double eta_all = 1;
  // Budget and what the trace measured.
  std::int64_t budget_bytes = 0;          // per device; 0: none
  std::int64_t measured_peak_bytes = -1;  // per device, -1: unknown
  plan::ReuseStrategy current = plan::ReuseStrategy::kNone;  // the strategy the trace ran
};

using ReuseMemory = MpipemoeMemory;  // mpipemoe Eq. 1-6 (memory.h)

struct ReuseCandidate {
  plan::ReuseStrategy strategy = plan::ReuseStrategy::kNone;
  ReuseQ q_forward, q_backward;
  double sigma = 1, mu = 1, eta = 1;  // the factors Table II assigns it (our reading)
  // Eq. 10 per pass, seconds: max(q1 v_comp / (sigma W_comp), q2 v_comm /
  // (mu W_comm), q3 v_mem / (eta W_mem)), forward + backward.
  double eq10_forward_s = 0, eq10_backward_s = 0;
  double eq10_s() const { return eq10_forward_s + eq10_backward_s; }
  // The same with each stream's startups added (n partitions x ops x alpha).
  double alpha_forward_s = 0, alpha_backward_s = 0;
  double alpha_s() const { return alpha_forward_s + alpha_backward_s; }
  const char* bound = "";            // the stream that sets Eq. 10 in backward: "comp", "comm", "mem"
  double layer_memory_bytes = 0;     // Eq. 1 + Eq. 4 (act + buf) - 2 Eq. 5 (reuse): Eq. 6's accounting
  // The measured peak minus Eq. 5's dM_act where this candidate reuses and
  // the trace did not (plus it in the opposite case): the peak sits at the
  // end of the forward pass, where the activations are all alive and the
  // temporaries of Eq. 3 are not yet, so one dM counts there, not two.
  // Without a measured peak: layer_memory_bytes (an upper bound).
  double predicted_peak_bytes = 0;
  bool fits = true;                  // predicted peak within the budget (or no budget)
};

struct ReuseChoice {
  std::array<ReuseCandidate, 5> candidates;  // none, S1..S4
  ReuseMemory memory;
  plan::ReuseStrategy strategy = plan::ReuseStrategy::kNone;
  bool fits = true;       // the chosen one fits (false: none fits; the least memory is chosen)
  std::string reason;     // one sentence
};

// Evaluates the five candidates and chooses the one with the lowest Eq. 10
// cost among those whose predicted peak fits the budget (ties: the lower
// alpha-aware cost, then the lower index).
ReuseChoice choose_reuse_strategy(const ReuseInputs& in);

}  // namespace moetrace::analyzer
