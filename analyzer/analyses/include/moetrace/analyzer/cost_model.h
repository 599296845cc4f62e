// Performance models fitted from a trace: alpha-beta models of computation,
// collectives and copies (pipemoe Eq. 13 and 16), and the interference
// factors sigma, mu, eta of mpipemoe Sec. II-C. Two JSON forms: the fits with
// their goodness of fit (schemas/fitted_models.schema.json; the report's
// fitted_models section), and the simulator's cost model
// (schemas/cost_model.schema.json, the format of kernels/sim's
// cost_model_from_json, `moetrace run --backend sim --cost-model FILE`).
//
// Definitions:
// - An op's time is its GPU time: the union of its attributed activities,
//   else its range (the same time the breakdown counts).
// - Linear model t(x) = alpha + beta x by ordinary least squares, with
//   R^2 = 1 - SS_res / SS_tot, the residual RMS, the number of points and the
//   range of x. Units: seconds, and seconds per FLOP / per byte.
//   * compute (pipemoe Eq. 13): per op kind of the computation categories
//     with recorded FLOPs (expert_ffn, gate, recompute, dense ops), x = FLOPs;
//     kinds without FLOPs but with bytes (permute, unpermute: memory-bound),
//     x = bytes. pipemoe's n_e counts N M H elements; an expert FFN forward
//     does 4 N M H FLOPs (two GEMMs), so its beta_e = 4 beta here. For the
//     simulator the same points are also fitted as t = launches x alpha +
//     beta x (no free intercept), launches = the simulator's GEMM count of
//     the op (expert_ffn forward 2, backward 4, recompute 1, gate backward
//     2, else 1; pipemoe Eq. 14: alpha_e = 2 alpha_gemm).
//   * collectives (pipemoe Eq. 16): per collective kind and group size,
//     one point per collective instance (its ops on every participant):
//     x = the largest bytes a participant sends to the others
//     (op_ranges.bytes; the busiest rank sets the time, pro-prophet Eq. 1),
//     t = the shortest participant's time (the others also wait for the
//     last to arrive); "lone" when no participant overlapped. Kinds: all_to_all
//     (dispatch, combine, re-communicate), all_reduce (MoE, tensor-parallel,
//     gradient), broadcast (Trans), reduce (Agg), send_recv (pipeline).
//     Group size: the number of ranks running the same collective (same
//     kind, layer, iteration, micro-batch, chunk, phase); for MoE and
//     tensor-parallel all-reduces run_config's tensor_parallel where given;
//     2 for send/recv.
//   * copies: per op kind of the memcpy category (offload, prefetch), x = bytes.
//   Where at least 3 of a group's ops ran alone (no other op on the rank
//   overlapped more than 1 % of them) and they have 2 sizes or more, only
//   those are fitted ("lone"): overlap slows ops down, and that is what the
//   interference factors are for. Otherwise every op is fitted ("all").
//   With one size only alpha and beta cannot be separated: alpha = 0 and
//   beta = mean time / x ("mean_rate").
// - Interference (mpipemoe Sec. II-C, NOTES.md naming): the actual speed of
//   computation, communication and memory copy is sigma_x, mu_x, eta_x times
//   its speed alone, x being the interfering stream class (comp, comm, mem,
//   or all: the two other classes at once). An op is "overlapped by x" when
//   ops of class x ran during at least half of it and no other class during
//   more than 1 % of it ("all": both other classes during at least half).
//   Per op kind, factor = (time alone) / (overlapped time), summed over its
//   overlapped ops, where time alone is the prediction of the lone fit of
//   the op's group (startups included: ops of other sizes compare fairly;
//   where every overlapped op of the kind has one), else (lone time / lone
//   work) / (overlapped time / overlapped work), work being FLOPs or bytes;
//   kinds are averaged weighted by their overlapped ops. 1 means no
//   slowdown; an op 1.5x slower when overlapped gives 1/1.5.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct LinearFit {
  // "least_squares" (2+ distinct x), "mean_rate" (one x: alpha 0, beta =
  // mean t / x), "none" (no usable point).
  std::string method = "none";
  double alpha = 0;          // s
  double beta = 0;           // s per unit of x
  double r2 = 0;             // 1 - SS_res / SS_tot (1 when SS_tot = 0 and the fit is exact)
  double residual_rms = 0;   // s
  int points = 0;
  double x_min = 0, x_max = 0;
  double mean_time = 0;      // s
  bool usable() const { return method != "none"; }
  double predict(double x) const { return alpha + beta * x; }
};

LinearFit fit_linear(std::span<const double> x, std::span<const double> t);

// t = launches x alpha_per_launch + beta x, the simulator's compute form.
struct LaunchFit {
  bool usable = false;
  double alpha_per_launch = 0;  // s
  double beta = 0;              // s per unit of x
};

// GEMM launches the simulator charges alpha for (kernels/sim simulator.cc).
int sim_launches(OpKind kind, Phase phase);

struct CostModelFit {
  std::string subject;                // "compute", "collective", "copy"
  std::string kind;                   // op kind (compute, copy) or collective kind
  std::vector<std::string> op_kinds;  // op kinds pooled into it
  int group_size = 1;                 // collectives: ranks taking part
  std::string x;                      // "flops" or "bytes"
  std::string sample;                 // "lone" or "all"
  LinearFit fit;
  LaunchFit launch_fit;               // compute only
};

// The host's time to issue an op (its launch interval, op_ranges'
// launch_start_ns .. launch_end_ns), per op kind: t = alpha + per_launch x
// launches, launches = the simulator's GEMM count of the op (sim_launches).
// Each launch count's median (host times have long tails: a page fault, a
// first call); with two counts or more a line through those medians
// ("medians_line"), else alpha = the median ("median"). The simulator's
// host_issue (kernels/sim cost_model.h) charges it.
struct HostIssueFit {
  std::string kind;        // op kind
  std::string method;      // "medians_line", "median"
  double alpha = 0;        // s per op
  double per_launch = 0;   // s per GEMM launch
  int points = 0;          // ops with a launch interval
  double median = 0;       // s, over all of them
};

struct InterferenceFactor {
  std::string factor;      // "sigma" (computation), "mu" (communication), "eta" (memory copy)
  std::string target;      // "comp", "comm", "mem"
  std::string interferer;  // "comp", "comm", "mem", "all"
  double value = 1;        // speed overlapped / speed alone
  int lone_ops = 0, overlapped_ops = 0;
};

struct CostModel {
  std::vector<CostModelFit> compute;      // by op kind
  std::vector<CostModelFit> collectives;  // by (kind, group size)
  std::vector<CostModelFit> copies;       // by op kind
  std::vector<InterferenceFactor> interference;  // measurable (target, interferer) pairs only
  std::vector<HostIssueFit> host_issue;          // by op kind, where ops carry launch intervals
  // The all-to-all fits' x, per instance over its participants: "max_send"
  // (the most bytes one sends to the others), or, where the trace records
  // what every all-to-all op receives (table op_recv_bytes), the rule whose
  // fit explains the times best (highest R^2 at the world's group size):
  // "max_send", "max_recv" or "max_send_recv" (the larger of the two). The
  // simulator's all_to_all_volume of the same name charges the same.
  std::string all_to_all_volume = "max_send";
  // nullptr where absent.
  const CostModelFit* find_compute(std::string_view op_kind) const;
  const CostModelFit* find_collective(std::string_view kind, int group_size) const;
  const InterferenceFactor* find_factor(std::string_view factor, std::string_view interferer) const;
};

CostModel fit_cost_model(const Trace& trace);

// What fit_cost_model() takes from a trace's events, rank by rank: each op's
// GPU time, work and overlap with the rest of its rank's work, and each
// collective op's instance. Its ranks' samples are their own, so a run's
// files analysed one at a time (run_by_file.h) fit as their union does:
// fit_cost_samples(merge_cost_samples(parts), run) = fit_cost_model(union).
struct CostSamples {
  // One collective instance: same kind, layer, iteration, micro-batch, chunk
  // and phase, and the same place among the rank's calls of those
  // coordinates (packed into integers so sorting is cheap).
  struct InstanceKey {
    std::uint64_t a = 0, b = 0, c = 0;  // (layer, iteration), (micro-batch, chunk), (kind, phase)
    std::uint32_t order = 0;            // among the rank's calls of the same coordinates, by start
    auto operator<=>(const InstanceKey&) const = default;
  };
  struct Op {
    OpKind kind = OpKind::kOtherOp;
    Phase phase = Phase::kForward;
    std::int8_t cls = 0;            // computation, communication, memory copy
    std::int8_t overlapped_by = -1;  // the class that overlaps at least half of it, 3: both others, -1: neither
    bool lone = true;               // nothing overlaps 1 % of it
    bool by_bytes = false;          // computation: x is bytes (no FLOPs)
    // Collectives: its (instance, rank) pair's place in instance_ranks
    // (not the key itself: 40 bytes an op rather than 64); -1: none.
    std::int32_t instance = -1;
    double work = 0;                // FLOPs or bytes; <= 0: unknown
    double seconds = 0;             // GPU time (union of its activities)
    double recv_bytes = -1;         // all-to-all: bytes received; -1: unknown
  };
  std::vector<Op> ops;  // ops with GPU time, in trace order (ranks in order)
  // Every op's host issue time (launch interval), with or without GPU time.
  struct HostSample {
    OpKind kind = OpKind::kOtherOp;
    Phase phase = Phase::kForward;
    double seconds = 0;
  };
  std::vector<HostSample> host;
  // Every collective op's (instance, rank), sorted, each pair once.
  std::vector<std::pair<InstanceKey, std::int32_t>> instance_ranks;
  bool any_all_to_all = false;  // an all-to-all op with bytes
  bool recv_known = true;       // every such op records what it receives
};
CostSamples cost_samples(const Trace& trace);
// Joins the samples of traces of disjoint ranks, in rank order. Consumes `parts`.
CostSamples merge_cost_samples(std::vector<CostSamples> parts);
// The fits of the samples; `run` gives the run's configuration
// (tensor_parallel) and whether MoE recognition made its ops.
CostModel fit_cost_samples(const CostSamples& samples, const Trace& run);

// collective_kind: trace.h.

inline constexpr int kCostModelVersion = 1;
// The fits with goodness of fit (schemas/fitted_models.schema.json).
nlohmann::json fitted_models_json(const Trace& trace, const CostModel& model);
// Reads it back; throws moetrace::Error naming the field on a malformed document.
CostModel fitted_models_from_json(const nlohmann::json& j);

// The simulator's cost model (schemas/cost_model.schema.json): only what the
// trace measured, so every other field keeps the value of `base` (a
// simulator preset name; empty: the simulator's default). Negative fitted
// alpha or beta (noise) are written as 0 and named in "description".
nlohmann::json sim_cost_model_json(const Trace& trace, const CostModel& model, std::string_view base = {});

}  // namespace moetrace::analyzer
