// The simulator's cost model: how long each op of a plan takes on the
// hardware it describes, and how concurrent ops slow each other down.
//
//  - Compute ops: t = launches x alpha + max(flops x seconds_per_flop,
//    GEMM operand bytes x gemm_seconds_per_byte) + bytes x seconds_per_byte,
//    per op kind (pipemoe Eq. 13, the roofline's memory side where a preset
//    sets it: ComputeCost; a GEMM costs
//    alpha_gemm + beta_gemm x work; an expert FFN forward is two GEMMs, so
//    alpha_e = 2 alpha_gemm, Eq. 14-15). `launches` is the number of GEMMs the
//    op's data semantics run (FFN forward 2, backward 4, recompute 1: the
//    GEMM counts of mpipemoe Table II), 1 for every other op.
//  - Collectives: t = alpha(P) + beta(P) x volume, per collective kind and
//    group size P (pipemoe Eq. 16; alpha and beta depend on P, Table II). An
//    uneven all-to-all costs what its busiest rank moves (pro-prophet Eq. 1).
//  - Copies: t = alpha + beta x bytes per direction (H2D, D2H, D2D).
//  - Interference (mpipemoe Sec. II-C): while other kinds of work run on the
//    same rank, compute runs at sigma x nominal speed, communication at mu x,
//    memory copies at eta x (NOTES.md fixes this naming).
//  - Link sharing: how communication ops of one rank that could run at once
//    share its network link (see LinkSharing).
//  - Host issue (not in the papers, which take the host's issue as free): a
//    rank's host thread issues its ops one at a time in plan order, op o
//    taking host_issue[kind].at(launches(o)); an op cannot start on the GPU
//    before the host has issued it. Where ops are small the host, not the
//    GPU, sets the layer's time (an H200 running PipeMoE at r = 8: 128
//    expert ops an iteration, 50-85 us of host time each against a few
//    microseconds of GEMM; BENCHMARKS.md, "The GPU path"). Fitted from
//    a trace's launch intervals (`moetrace fit`); empty in every preset.
//
// Units: seconds and bytes. Cost models load from and save to JSON
// (cost_model_from_json / to_json) so fitted models (`moetrace fit`) plug in.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/plan/plan.h"
#include "moetrace/schema/op_kind.h"

namespace moetrace::sim {

// How a rank's network link serves communication ops that could run at the
// same time (on different streams of the rank).
enum class LinkSharing : std::uint8_t {
  // One communication op at a time per rank (pipemoe's "one network
  // resource", Sec. III, Eq. 9-12): a ready op waits until the links of all
  // its participants are free; among waiting ops the one earliest in the plan
  // goes first (the builders issue dispatches before combines). This is the
  // rule under which pipemoe Eq. 25 and 40 are exact (NOTES.md).
  kSerial = 0,
  // Concurrent communication ops of a rank share its bandwidth equally
  // (processor sharing): each progresses at 1/k of its speed with k ops on
  // the link.
  kFairShare = 1,
  // Every communication op has a link of its own (no contention).
  kIndependent = 2,
};
std::string_view link_sharing_name(LinkSharing s);  // "serial", "fair_share", "independent"
LinkSharing parse_link_sharing(std::string_view name);  // throws ConfigError

// Which traffic of an uneven all-to-all sets its time.
enum class AllToAllVolume : std::uint8_t {
  kMaxSendRecv = 0,  // the busiest rank by max(sent, received) bytes
  kMaxRecv = 1,      // pro-prophet Eq. 1 literally: max_i R_i x size(input)
  kMaxSend = 2,      // the largest input tensor (pipemoe's y, Eq. 16)
};
std::string_view all_to_all_volume_name(AllToAllVolume v);  // "max_send_recv", "max_recv", "max_send"
AllToAllVolume parse_all_to_all_volume(std::string_view name);

// t = alpha + beta x x.
struct LinearCost {
  double alpha_s = 0;
  double beta_s = 0;  // per byte (communication, copies)
  double at(double x) const { return alpha_s + beta_s * x; }
};

struct ComputeCost {
  double alpha_s = 0;           // per launch (per GEMM for FFN ops)
  double seconds_per_flop = 0;  // 1 / sustained FLOP/s
  double seconds_per_byte = 0;  // memory-bound ops (permute, unpermute carry bytes)
  // FFN GEMMs (an expert's forward, backward and recompute; PPMoE's dense
  // FFN runs as the same ops): seconds per byte of
  // the weights and activations they read and write (plan flops.h), the
  // memory side of a roofline: such an op takes its startups plus the
  // longer of FLOPs x seconds_per_flop and its bytes x this. A GEMM of few
  // rows per expert reads its weights for little work (2 rows FLOPs a
  // weight element: 128 rows in BF16 do 128 FLOP a byte, under an H100's
  // 989 TFLOP/s / 3.35 TB/s = 295) and is bound by HBM, not by FLOPs.
  // 0: FLOPs alone, the papers' Eq. 13 (every paper preset, fitted models).
  double gemm_seconds_per_byte = 0;
};

// Host time to issue one op: alpha per op plus per_launch_s per GEMM launch
// the simulator counts for it (launches(), the same count as ComputeCost's
// alpha: an expert FFN forward issues 2 GEMMs, its backward 4).
struct HostIssueCost {
  double alpha_s = 0;
  double per_launch_s = 0;
  double at(int launches) const { return alpha_s + per_launch_s * launches; }
};

// alpha and beta of one collective kind measured at one group size.
struct CollectiveScalePoint {
  int ranks = 2;
  double alpha_s = 0;
  double beta_s = 0;  // per byte
};

// A collective kind's cost over group sizes: the point with P ranks where one
// is given; between two points alpha and beta are interpolated linearly in
// log2(P); outside the range the nearest point is used.
struct CollectiveCost {
  std::vector<CollectiveScalePoint> points;  // ascending ranks
  LinearCost at(int ranks) const;
};

// Speed factors (actual speed = factor x nominal speed), mpipemoe Sec. II-C
// and Eq. 10. The subscript names the interfering stream kind; "all" means
// both other kinds run.
struct Interference {
  double sigma_comm = 1, sigma_mem = 1, sigma_all = 1;  // computation
  double mu_comp = 1, mu_mem = 1, mu_all = 1;           // communication
  double eta_comp = 1, eta_comm = 1, eta_all = 1;       // memory copies
  bool none() const;
};

// The device the trace describes (DeviceRecord).
struct DeviceSpec {
  std::string name = "simulated GPU";
  int compute_major = 9, compute_minor = 0;
  int sm_count = 132;
  std::int64_t memory_bytes = 80LL << 30;
  std::string kernel_arch = "sm90";  // prefix of synthesized GEMM kernel names
  int gpus_per_node = 8;             // ranks' hosts and local ranks in the trace
};

struct CostModel {
  std::string name;
  std::string description;  // where the numbers come from
  DeviceSpec device;
  ComputeCost compute;                        // every compute op kind without an override
  std::map<OpKind, ComputeCost> compute_by_kind;
  std::array<CollectiveCost, 5> collectives;  // by plan::CollectiveKind
  LinearCost copy_h2d, copy_d2h, copy_d2d;
  Interference interference;
  LinkSharing link_sharing = LinkSharing::kSerial;
  AllToAllVolume all_to_all_volume = AllToAllVolume::kMaxSendRecv;
  // Whether a rank's segment to itself counts in the all-to-all volume.
  // pipemoe fits beta on the whole input tensor (Eq. 16, y = N x M);
  // pro-prophet Eq. 1 counts inputs received from *other* devices.
  bool all_to_all_counts_local = true;
  // Concurrent compute ops of a rank (on different streams) share its SMs
  // equally.
  bool share_compute = true;
  // Host issue time by op kind; a kind not listed issues instantly. Empty:
  // no host term at all (the papers' model).
  std::map<OpKind, HostIssueCost> host_issue;

  const ComputeCost& compute_cost(OpKind k) const;
  const CollectiveCost& collective(plan::CollectiveKind k) const {
    return collectives[static_cast<std::size_t>(k)];
  }
  CollectiveCost& collective(plan::CollectiveKind k) {
    return collectives[static_cast<std::size_t>(k)];
  }
  // Throws ConfigError naming the field ("cost_model.compute.seconds_per_flop
  // (-1) must be >= 0").
  void validate() const;
};

// Named hardware presets (numbers and sources in cost_model.cc and README):
//  "h100-nvlink-ib"   default: H100 SXM, NVLink 4 inside 8-GPU nodes, 400 Gb/s
//                     NDR InfiniBand per GPU between nodes.
//  "pipemoe-2080ti-ib100"  pipemoe's released solver.py: RTX 2080 Ti GEMMs,
//                     all-to-all over 100 Gb/s InfiniBand at P = 16, 32, 64.
//  "pipemoe-fig6"     the same cluster with the GEMM fit of pipemoe Fig. 6.
//  "a100-nvlink-ib200" mpipemoe's DGX A100 cluster (8 x A100 40 GB per node,
//                     200 Gb/s HDR per node as the paper states).
//  "v100-nvlink-ib100" ppmoe's V100 cluster.
//  "rtx3090-pcie-ib100" pro-prophet's HPWNV nodes (4 x RTX 3090, PCIe 3.0,
//                     100 Gb/s InfiniBand).
//  "rtx2080ti-pcie-ib100" pro-prophet's LPWNV nodes (the same with RTX 2080 Ti).
struct CostModelPreset {
  std::string name;
  std::string summary;
};
std::vector<CostModelPreset> cost_model_presets();
CostModel cost_model_preset(std::string_view name);  // throws ConfigError for an unknown name

// JSON (the format `--cost-model FILE` reads and to_json writes):
// {"name": ..., "compute": {"alpha_s", "seconds_per_flop", "seconds_per_byte",
//  "gemm_seconds_per_byte"},
//  "compute_by_kind": {"expert_ffn": {...}}, "collectives": {"all_to_all_v":
//  [{"ranks", "alpha_s", "beta_s"}...], ...}, "copy": {"h2d": {"alpha_s",
//  "beta_s"}, ...}, "interference": {"sigma_comm", ...}, "link_sharing":
//  "serial", "all_to_all_volume": "max_send_recv", "all_to_all_counts_local":
//  true, "share_compute": true, "host_issue": {"expert_ffn": {"alpha_s",
//  "per_launch_s"}, ...}, "device": {...}, "base": "<preset>"}.
// "base" starts from a preset; every other key overrides it. Unknown keys are
// errors (a typo must not silently keep the default).
CostModel cost_model_from_json(std::string_view json_text);
std::string to_json(const CostModel& model);

}  // namespace moetrace::sim
