// Whether PPMoE's layout (experts spread over a tensor-parallel group, index
// slicing in, one all-reduce out; ppmoe Sec. 3.3) would beat expert
// parallelism (two all-to-alls) for an MoE layer.
//
// The paper's ratios (ppmoe Sec. 3.2), latency terms dropped, 2-byte elements:
//   Eq. 2  t'_a2a / t'_FFN         = (E - 1) E F / (16 B h)
//   Eq. 5  t_all-reduce / t_cal    = (T - 1) T F / (4 B h)
// F = device FLOP/s, B = link bandwidth (bytes/s), h = hidden (model) size,
// E = experts = all-to-all ranks, T = tensor-parallel size.
//
// With measured alpha-beta models we compare the layer times themselves, per
// device and per pass, for the same tokens per device c (the TP group of T
// devices runs a micro-batch of T c tokens, so a device's expert FLOPs are
// the same in both layouts, balanced routing):
//   EP     forward  2 t_a2a(P, c k h e) + t_e(E/P experts)
//   PPMoE  forward  t_e(E/T experts) + t_ar(T, T c h e)
//   backward: the same communication, computation doubled (ppmoe footnote 2;
//   4 GEMMs); EP keeps two all-to-alls, PPMoE one all-reduce (of the input
//   gradient).
// Other parts of the block (attention, dense layers) are left out: they are
// data-parallel in DPMoE and tensor-parallel in PPMoE, a separate trade-off.
#pragma once

#include <cstdint>

namespace moetrace::analyzer {

// ppmoe Eq. 2 (experts E, F FLOP/s, B bytes/s, h model size).
double ppmoe_eq2(double experts, double flops_per_s, double bandwidth_bytes_per_s, double hidden);
// ppmoe Eq. 5 (tensor-parallel size T).
double ppmoe_eq5(double tensor_parallel, double flops_per_s, double bandwidth_bytes_per_s, double hidden);

struct LayoutInputs {
  int experts = 0;          // E
  int ranks = 0;            // P: the all-to-all group of expert parallelism
  int tensor_parallel = 8;  // T of the PPMoE layout considered
  double tokens = 0;        // c: tokens per device
  int top_k = 1;
  double model_dim = 0;     // h (M)
  double hidden = 0;        // H of an expert
  int elem_bytes = 2;
  // Measured (fitted) models, seconds.
  double alpha_gemm = 0, seconds_per_flop = 0;  // expert GEMMs (pipemoe Eq. 13)
  double a2a_alpha = 0, a2a_beta = 0;           // all-to-all at P, per byte of a device's volume
  double ar_alpha = 0, ar_beta = 0;             // all-reduce at T, per byte of the reduced tensor
};

struct LayoutComparison {
  // The paper's ratios with measured F (1 / seconds_per_flop) and bandwidths
  // (1 / beta of the all-to-all at P, of the all-reduce at T).
  double flops_per_s = 0, a2a_bandwidth = 0, ar_bandwidth = 0;
  double eq2_ratio = 0, eq5_ratio = 0;
  // With alpha terms, one device, seconds.
  double t_a2a = 0;          // one all-to-all of c k h e bytes at P
  double t_expert_ep = 0;    // forward expert computation, E/P experts
  double t_allreduce = 0;    // one all-reduce of T c h e bytes at T
  double t_expert_pp = 0;    // forward expert computation, E/T experts
  double ep_s = 0;           // EP forward + backward
  double ppmoe_s = 0;        // PPMoE forward + backward
  bool ppmoe_better = false;
  double gain = 0;           // (ep - ppmoe) / ep; negative where EP is faster
  bool applicable = true;    // E divisible by T, T <= P
};

LayoutComparison compare_ppmoe_layout(const LayoutInputs& in);

}  // namespace moetrace::analyzer
