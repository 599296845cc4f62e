#include "moetrace/sim/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "moetrace/schema/enum_names.h"
#include "moetrace/schema/error.h"

namespace moetrace::sim {

using plan::CollectiveKind;

constexpr EnumName<LinkSharing> kLinkSharings[] = {
    {LinkSharing::kSerial, "serial"},
    {LinkSharing::kFairShare, "fair_share"},
    {LinkSharing::kIndependent, "independent"},
};

std::string_view link_sharing_name(LinkSharing s) { return enum_name(kLinkSharings, s); }

LinkSharing parse_link_sharing(std::string_view name) { return parse_enum(kLinkSharings, name, "link_sharing"); }

constexpr EnumName<AllToAllVolume> kAllToAllVolumes[] = {
    {AllToAllVolume::kMaxSendRecv, "max_send_recv"},
    {AllToAllVolume::kMaxRecv, "max_recv"},
    {AllToAllVolume::kMaxSend, "max_send"},
};

std::string_view all_to_all_volume_name(AllToAllVolume v) { return enum_name(kAllToAllVolumes, v); }

AllToAllVolume parse_all_to_all_volume(std::string_view name) {
  return parse_enum(kAllToAllVolumes, name, "all_to_all_volume");
}

LinearCost CollectiveCost::at(int ranks) const {
  if (points.empty()) return {};
  if (ranks <= points.front().ranks) return {points.front().alpha_s, points.front().beta_s};
  if (ranks >= points.back().ranks) return {points.back().alpha_s, points.back().beta_s};
  for (std::size_t i = 1; i < points.size(); ++i) {
    const auto& hi = points[i];
    if (ranks > hi.ranks) continue;
    const auto& lo = points[i - 1];
    if (ranks == hi.ranks) return {hi.alpha_s, hi.beta_s};
    // alpha and beta of all-to-all algorithms grow like P or P^2 (pipemoe
    // Table II); between measured scales, interpolate in log2(P).
    const double f = (std::log2(ranks) - std::log2(lo.ranks)) / (std::log2(hi.ranks) - std::log2(lo.ranks));
    return {lo.alpha_s + f * (hi.alpha_s - lo.alpha_s), lo.beta_s + f * (hi.beta_s - lo.beta_s)};
  }
  return {points.back().alpha_s, points.back().beta_s};
}

bool Interference::none() const {
  for (double f : {sigma_comm, sigma_mem, sigma_all, mu_comp, mu_mem, mu_all, eta_comp, eta_comm, eta_all})
    if (f != 1.0) return false;
  return true;
}

const ComputeCost& CostModel::compute_cost(OpKind k) const {
  auto it = compute_by_kind.find(k);
  return it == compute_by_kind.end() ? compute : it->second;
}

namespace {

constexpr std::array<CollectiveKind, 5> kCollectiveKinds = {
    CollectiveKind::kAllToAllV, CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
    CollectiveKind::kReduce, CollectiveKind::kSendRecv};

void check_non_negative(std::string_view field, double v) {
  if (!(v >= 0) || !std::isfinite(v))
    throw ConfigError(fmt::format("cost_model.{} ({}) must be a finite number >= 0", field, v));
}

void check_factor(std::string_view field, double v) {
  if (!(v > 0) || v > 1e6 || !std::isfinite(v))
    throw ConfigError(fmt::format("cost_model.interference.{} ({}) must be > 0", field, v));
}

void validate_compute(std::string_view where, const ComputeCost& c) {
  check_non_negative(fmt::format("{}.alpha_s", where), c.alpha_s);
  check_non_negative(fmt::format("{}.seconds_per_flop", where), c.seconds_per_flop);
  check_non_negative(fmt::format("{}.seconds_per_byte", where), c.seconds_per_byte);
  check_non_negative(fmt::format("{}.gemm_seconds_per_byte", where), c.gemm_seconds_per_byte);
}

}  // namespace

void CostModel::validate() const {
  validate_compute("compute", compute);
  for (const auto& [kind, c] : compute_by_kind)
    validate_compute(fmt::format("compute_by_kind.{}", op_kind_name(kind)), c);
  for (auto k : kCollectiveKinds) {
    const auto& pts = collective(k).points;
    const auto kind_name = plan::collective_kind_name(k);
    if (pts.empty())
      throw ConfigError(fmt::format("cost_model.collectives.{} has no scale points", kind_name));
    for (std::size_t i = 0; i < pts.size(); ++i) {
      if (pts[i].ranks < 1)
        throw ConfigError(fmt::format("cost_model.collectives.{}[{}].ranks ({}) must be at least 1",
                                      kind_name, i, pts[i].ranks));
      if (i > 0 && pts[i].ranks <= pts[i - 1].ranks)
        throw ConfigError(fmt::format("cost_model.collectives.{}[{}].ranks ({}) must be larger than "
                                      "the previous point's ({})",
                                      kind_name, i, pts[i].ranks, pts[i - 1].ranks));
      check_non_negative(fmt::format("collectives.{}[{}].alpha_s", kind_name, i), pts[i].alpha_s);
      check_non_negative(fmt::format("collectives.{}[{}].beta_s", kind_name, i), pts[i].beta_s);
    }
  }
  for (const auto& [kind, h] : host_issue) {
    check_non_negative(fmt::format("host_issue.{}.alpha_s", op_kind_name(kind)), h.alpha_s);
    check_non_negative(fmt::format("host_issue.{}.per_launch_s", op_kind_name(kind)), h.per_launch_s);
  }
  for (auto [field, c] : {std::pair{"copy.h2d", &copy_h2d}, std::pair{"copy.d2h", &copy_d2h},
                          std::pair{"copy.d2d", &copy_d2d}}) {
    check_non_negative(fmt::format("{}.alpha_s", field), c->alpha_s);
    check_non_negative(fmt::format("{}.beta_s", field), c->beta_s);
  }
  const auto& f = interference;
  for (auto [field, v] : {std::pair{"sigma_comm", f.sigma_comm}, std::pair{"sigma_mem", f.sigma_mem},
                          std::pair{"sigma_all", f.sigma_all}, std::pair{"mu_comp", f.mu_comp},
                          std::pair{"mu_mem", f.mu_mem}, std::pair{"mu_all", f.mu_all},
                          std::pair{"eta_comp", f.eta_comp}, std::pair{"eta_comm", f.eta_comm},
                          std::pair{"eta_all", f.eta_all}})
    check_factor(field, v);
  if (device.gpus_per_node < 1)
    throw ConfigError(fmt::format("cost_model.device.gpus_per_node ({}) must be at least 1",
                                  device.gpus_per_node));
  if (device.memory_bytes <= 0)
    throw ConfigError(fmt::format("cost_model.device.memory_bytes ({}) must be positive",
                                  device.memory_bytes));
}

// ---------------------------------------------------------------------------
// Presets

namespace {

// Compute ops that are not GEMMs: memory-bound kernels (permute, unpermute,
// index_slice carry the bytes they move) with a launch cost of their own.
void set_memory_bound(CostModel& m, double launch_s, double seconds_per_byte) {
  for (OpKind k : {OpKind::kPermute, OpKind::kUnpermute, OpKind::kIndexSlice})
    m.compute_by_kind[k] = {launch_s, m.compute.seconds_per_flop, seconds_per_byte};
}

// pipemoe's testbed (Sec. V-A): 16 nodes x 4 RTX 2080 Ti on PCIe 3.0 x16,
// 100 Gb/s InfiniBand. All-to-all alpha/beta from the released solver.py
// (NOTES.md), which applies beta to bytes (NBYTES_PER_ELEMENT = 4).
// Sources (kernels/sim/README.md, "Hardware presets"):
//   paper     GEMM and all-to-all alpha/beta (solver.py or Fig. 6), serial link
//             (Eq. 9-12), volume = the whole input tensor (Eq. 16's fit);
//   datasheet 616 GB/s GDDR6, 11 GB; 100 Gb/s IB = 12.5 GB/s; PCIe 3.0 x16;
//   assumed   80 % of memory bandwidth achieved, 10 us per memory-bound kernel,
//             20 us send/recv startup, 12 GB/s pinned host copies; the other
//             collectives through each node's NIC at the rate the all-to-all
//             fit implies for it (below).
CostModel pipemoe_cluster(std::string name, double alpha_gemm, double beta_gemm_per_4mnk,
                          std::vector<CollectiveScalePoint> all_to_all) {
  const int gpus_per_node = 4;  // Sec. V-A
  CostModel m;
  m.name = std::move(name);
  m.device = {"NVIDIA GeForce RTX 2080 Ti (simulated)", 7, 5, 68, 11LL << 30, "turing", gpus_per_node};
  // solver.py: t_gemm = alpha + beta x (m n k x 4); a GEMM of m n k
  // multiply-adds is 2 m n k FLOPs, so seconds per FLOP = 2 beta. For
  // solver.py's 3.73e-14 this is 13.4 TFLOP/s, the card's FP32 peak.
  m.compute = {alpha_gemm, 2.0 * beta_gemm_per_4mnk, 0.0};
  // 616 GB/s GDDR6, about 80 % achievable; each moved byte is read and written.
  set_memory_bound(m, 1e-5, 2.0 / (0.8 * 616e9));
  m.collective(CollectiveKind::kAllToAllV).points = all_to_all;
  // Not measured by the paper; derived from the all-to-all fit. In the
  // all-to-all the share (P-G)/P of each GPU's input leaves the node, and the
  // G = 4 GPUs of a node share its one NIC: the fit's beta means a node
  // moves G (P-G)/P / beta bytes/s through it (about 10 GB/s at P = 16, 32
  // and 64 alike: 80 % of 12.5 GB/s). A ring all-reduce crosses each node
  // once per ring, so the NIC carries one GPU's ring traffic, 2 (P-1)/P of
  // the data, at that whole rate (NCCL spreads its rings over every link of
  // the node); broadcast and reduce carry the data once. Startup as the
  // all-to-all's.
  std::vector<CollectiveScalePoint> ar, once;
  for (const auto& p : all_to_all) {
    // (A point within one node has no NIC traffic: the all-to-all's rate.)
    const double off_node = static_cast<double>(p.ranks - gpus_per_node) / p.ranks;
    const double node_seconds_per_byte = off_node > 0 ? p.beta_s / (gpus_per_node * off_node) : p.beta_s;
    ar.push_back({p.ranks, p.alpha_s, 2.0 * (p.ranks - 1) / p.ranks * node_seconds_per_byte});
    once.push_back({p.ranks, p.alpha_s, node_seconds_per_byte});
  }
  m.collective(CollectiveKind::kAllReduce).points = ar;
  m.collective(CollectiveKind::kBroadcast).points = once;
  m.collective(CollectiveKind::kReduce).points = once;
  // Point-to-point over one 100 Gb/s link (12.5 GB/s), ~20 us startup.
  m.collective(CollectiveKind::kSendRecv).points = {{2, 2e-5, 1.0 / 12.5e9}};
  // PCIe 3.0 x16: ~12 GB/s pinned host copies.
  m.copy_h2d = m.copy_d2h = {1e-5, 1.0 / 12e9};
  m.copy_d2d = {5e-6, 2.0 / (0.8 * 616e9)};
  // pipemoe's timing model (Eq. 9-12) assumes one network resource and no
  // slowdown between computation and communication.
  m.link_sharing = LinkSharing::kSerial;
  m.all_to_all_volume = AllToAllVolume::kMaxSend;
  m.all_to_all_counts_local = true;
  return m;
}

CostModel preset_pipemoe_solver() {
  auto m = pipemoe_cluster("pipemoe-2080ti-ib100", 1.5e-4, 3.73e-14,
                           {{16, 5.70e-4, 2.96e-10}, {32, 2.09e-4, 3.55e-10}, {64, 7.83e-4, 3.84e-10}});
  m.description =
      "pipemoe testbed (RTX 2080 Ti, 100 Gb/s InfiniBand); GEMM and all-to-all alpha/beta as "
      "hard-coded in the released solver.py (github Fragile-azalea/PipeMoE); other collectives, "
      "copies and memory-bound kernels derived from link and memory bandwidths";
  return m;
}

CostModel preset_pipemoe_fig6() {
  auto m = pipemoe_cluster("pipemoe-fig6", 6.19e-5, 4.1e-14,
                           {{16, 1.72e-5, 2.96e-10}, {32, 2.09e-4, 3.54e-10}, {64, 7.83e-4, 3.84e-10}});
  m.description =
      "pipemoe testbed with the fits reported in the paper's Fig. 6 (alpha_gemm 6.19e-5 s, "
      "beta_gemm 4.1e-14 in solver.py's units; all-to-all at P = 16, 32, 64)";
  return m;
}

// A modern default: H100 SXM 80 GB, 8 per node on NVLink 4 / NVSwitch, one
// 400 Gb/s NDR InfiniBand NIC per GPU between nodes (DGX H100 layout).
// Sources: datasheet — 989 dense BF16 TFLOP/s, 3.35 TB/s, NVLink 4 450 GB/s
// per direction, 400 Gb/s NDR per GPU, PCIe 5.0; assumed — the achieved
// fractions (61 % GEMM, 78 % memory, ~78 % NVLink, 90 % NIC) and the
// startups (typical NCCL values). No paper measures this machine.
CostModel preset_h100() {
  CostModel m;
  m.name = "h100-nvlink-ib";
  m.description =
      "H100 SXM 80 GB, 8 GPUs per node on NVLink 4 (450 GB/s per direction, ~350 GB/s achieved "
      "by NCCL), one 400 Gb/s NDR NIC per GPU (50 GB/s, ~45 GB/s achieved); GEMMs at 600 of the "
      "989 dense BF16 TFLOP/s, memory-bound kernels and expert GEMMs' operands at 2.6 of 3.35 TB/s HBM3 "
      "(a GEMM takes the longer of its FLOPs and its bytes); latencies are "
      "typical NCCL values. Estimates, to be replaced by a model fitted from traces";
  m.device = {"NVIDIA H100 80GB HBM3 (simulated)", 9, 0, 132, 80LL << 30, "sm90", 8};
  // Expert GEMMs of few rows are bound by HBM: their operands at the
  // memory-bound kernels' 2.6 TB/s (each byte read or written once).
  m.compute = {5e-6, 1.0 / 600e12, 0.0, 1.0 / 2.6e12};
  set_memory_bound(m, 3e-6, 2.0 / 2.6e12);
  // All-to-all: the share (P-1)/P of the input leaves the GPU, over NVLink
  // inside a node; beyond 8 GPUs the share (P-8)/P crosses the NIC, which is
  // the bottleneck. The volume counts the whole input (local segment too).
  m.collective(CollectiveKind::kAllToAllV).points = {
      {2, 8e-6, 0.5 / 350e9},        {8, 15e-6, 0.875 / 350e9},     {16, 30e-6, 0.5 / 45e9},
      {64, 60e-6, 0.875 / 45e9},     {256, 150e-6, 0.96875 / 45e9}, {1024, 500e-6, 0.9921875 / 45e9}};
  // Ring all-reduce: 2 (P-1)/P of the data per rank at the bus bandwidth.
  // Between nodes a ring crosses each node once; NCCL runs a ring per NIC,
  // so a node's 8 NICs (8 x 45 GB/s) carry it together and NVLink (350 GB/s)
  // stays the bound. Broadcast and reduce (pipelined rings or trees) move
  // the data once over the same links.
  m.collective(CollectiveKind::kAllReduce).points = {
      {2, 10e-6, 1.0 / 350e9},      {8, 20e-6, 1.75 / 350e9},        {16, 40e-6, 1.875 / 350e9},
      {64, 80e-6, 1.96875 / 350e9}, {1024, 400e-6, 1.998046875 / 350e9}};
  m.collective(CollectiveKind::kBroadcast).points = {
      {2, 8e-6, 1.0 / 350e9}, {8, 15e-6, 1.0 / 350e9}, {16, 30e-6, 1.0 / 350e9}, {1024, 200e-6, 1.0 / 350e9}};
  m.collective(CollectiveKind::kReduce).points = m.collective(CollectiveKind::kBroadcast).points;
  // Pipeline stages usually sit on different nodes: one NIC.
  m.collective(CollectiveKind::kSendRecv).points = {{2, 10e-6, 1.0 / 45e9}};
  // PCIe 5.0 x16, ~50 GB/s pinned.
  m.copy_h2d = m.copy_d2h = {8e-6, 1.0 / 50e9};
  m.copy_d2d = {3e-6, 2.0 / 2.6e12};
  // Concurrent NCCL operations share the NIC.
  m.link_sharing = LinkSharing::kFairShare;
  return m;
}

// mpipemoe's cluster (Sec. V-A): DGX A100, 8 x A100 SXM 40 GB per node on
// NVLink 3 / NVSwitch; the paper gives 200 Gb/s HDR per node in one sentence
// and 1,600 Gb/s per node in the next; we take 8 x 200 Gb/s (one HDR NIC per
// GPU, as in a DGX A100).
// Sources: paper — 64 A100 40 GB, DGX A100, 200 Gb/s HDR per node and
// 1,600 Gb/s between machines (Sec. V-A), sigma = 1 (Sec. II-C); assumed —
// one 200 Gb/s HDR NIC per GPU (the DGX A100 layout); datasheet — 312 dense FP16 TFLOP/s, 1.555
// TB/s HBM2, NVLink 3 300 GB/s per direction, PCIe 4.0 x16; assumed — the
// achieved fractions (64 % GEMM, 84 % memory, ~77 % NVLink, 88 % HDR), the
// startups, and mu/eta (Fig. 3 shows slowdowns without numbers in the text).
CostModel preset_a100() {
  CostModel m;
  m.name = "a100-nvlink-ib200";
  m.description =
      "mpipemoe cluster: DGX A100 (A100 SXM 40 GB, NVLink 3 ~230 GB/s achieved all-to-all, one "
      "200 Gb/s HDR NIC per GPU ~22 GB/s achieved); GEMMs at 200 of 312 BF16 TFLOP/s; "
      "interference factors illustrative (sigma = 1 as the paper sets; mu, eta < 1 where its "
      "Fig. 3 shows a slowdown)";
  m.device = {"NVIDIA A100-SXM4-40GB (simulated)", 8, 0, 108, 40LL << 30, "sm80", 8};
  m.compute = {6e-6, 1.0 / 200e12, 0.0};
  set_memory_bound(m, 4e-6, 2.0 / 1.3e12);
  m.collective(CollectiveKind::kAllToAllV).points = {
      {2, 10e-6, 0.5 / 230e9}, {8, 18e-6, 0.875 / 230e9}, {16, 35e-6, 0.5 / 22e9}, {64, 70e-6, 0.875 / 22e9}};
  // Between nodes a ring crosses each node once; NCCL runs a ring per NIC,
  // so the node's 8 HDR NICs carry it together: 8 x 22 = 176 GB/s, below
  // NVLink's 230. Broadcast and reduce move the data once.
  m.collective(CollectiveKind::kAllReduce).points = {
      {2, 12e-6, 1.0 / 230e9}, {8, 25e-6, 1.75 / 230e9}, {16, 45e-6, 1.875 / 176e9}, {64, 90e-6, 1.96875 / 176e9}};
  m.collective(CollectiveKind::kBroadcast).points = {
      {2, 10e-6, 1.0 / 230e9}, {8, 18e-6, 1.0 / 230e9}, {16, 35e-6, 1.0 / 176e9}, {64, 60e-6, 1.0 / 176e9}};
  m.collective(CollectiveKind::kReduce).points = m.collective(CollectiveKind::kBroadcast).points;
  m.collective(CollectiveKind::kSendRecv).points = {{2, 12e-6, 1.0 / 22e9}};
  // PCIe 4.0 x16, ~24 GB/s pinned.
  m.copy_h2d = m.copy_d2h = {1e-5, 1.0 / 24e9};
  m.copy_d2d = {4e-6, 2.0 / 1.3e12};
  m.interference = {1.0, 1.0, 1.0, 0.85, 0.8, 0.7, 0.95, 0.8, 0.7};
  m.link_sharing = LinkSharing::kSerial;
  return m;
}

// ppmoe's cluster (Sec. 4.1-4.3): V100 nodes of 8 GPUs (NVLink 2), InfiniBand
// between nodes. Two constants come from the paper's own side measurements,
// not from the rows they are checked against (Table 2's MoE rows, Table 3):
// - The all-to-all between nodes from Table 1, the time split of a DPMoE
//   forward step: the two all-to-alls take 65.5 % of it, gating, experts and
//   the rest (computation) 34.5 %. A token of the small DPMoE (GPT-3 Medium
//   backbone, top-1) computes the dense model's 0.805e9 forward FLOPs, 65.1
//   us at the rate below; so its 24 all-to-alls (12 MoE layers x 2) take
//   65.1 x 65.5 / 34.5 = 123.6 us, 5.15 us each for the token's 2048 bytes
//   (h = 1024, fp16): beta(32) = 5.15e-6 / 2048 = 2.515e-9 s a byte of a
//   rank's all-to-all volume (0.398 GB/s). That is 31x slower than the
//   paper's stated B = 12.5e9 B/s taken as the rate of a GPU's bytes (Sec.
//   3.2); it equals Eq. 2's own charge, (E - 1) bsh / B = 63 x 1024 / 12.5e9
//   = 5.16 us a token for E = 64, which divides the element count by B and
//   grows with the ranks as a ring all-to-all does (Sec. 4.3: "the time
//   complexity of ring-style all-to-all communication is proportional to the
//   number of processes"). Other group sizes between nodes scale by Eq. 2's
//   N - 1 (16: 15/31, 64: 63/31, 256: 255/31 of beta(32)).
// - Ring collectives and point-to-point sends between nodes run at the
//   network's line rate, B = 12.5e9 B/s a GPU (Sec. 3.2), 100 GB/s a node
//   of 8 (a ring runs over all of it, below NVLink's ~130 GB/s).
// - The time per FLOP from the dense baseline, Table 2 "0.3B Dense, DP 32,
//   32 V100: 5120 tokens/s/GPU". GPT-3 Medium (24 layers, h = 1024,
//   sequence 2048, Sec. 4.1) costs 72 l h^2 (1 + s / 6h) = 2.416e9 FLOPs a
//   token in training as the builders count them (attention 8h^2 + 4sh and
//   FFN 16h^2 a token forward, x3 with backward; Narayanan et al. 2021
//   without recomputation or the logits): 5120 x 2.416e9 = 12.37 TFLOP/s.
//   That run's time also holds what the simulator charges apart (gradient
//   communication, optimizer, elementwise kernels, the logits), so this is
//   an upper bound of the time a FLOP takes (10 % of the V100's 125 TFLOP/s).
// Sources: paper — V100 nodes of 8, fp16 (Sec. 4.1-4.3), B (Sec. 3.2),
// the dense DP 32 throughput (Table 2); datasheet — 900 GB/s HBM2, NVLink 2;
// assumed — the memory-bound fraction (83 %), NVLink's ~130 GB/s achieved,
// the startups.
CostModel preset_v100() {
  CostModel m;
  m.name = "v100-nvlink-ib100";
  m.description =
      "ppmoe cluster: V100 SXM2 32 GB, 8 per node on NVLink 2 (~130 GB/s achieved); all-to-all between "
      "nodes from Table 1's split (65.5 % of a DPMoE forward: 2.5 ns a byte at 32 ranks, Eq. 2's N - 1 "
      "growth), ring and point-to-point traffic at the paper's B = 12.5 GB/s a GPU (Sec. 3.2); time per "
      "FLOP from its dense GPT-3 Medium at DP 32 (Table 2: 5120 tokens/s/GPU = 12.4 TFLOP/s of model FLOPs)";
  m.device = {"Tesla V100-SXM2-32GB (simulated)", 7, 0, 80, 32LL << 30, "volta", 8};
  m.compute = {7e-6, 1.0 / (5120.0 * 2.416e9), 0.0};
  set_memory_bound(m, 5e-6, 2.0 / 750e9);
  // Between nodes: Table 1's all-to-all, beta(32) = 2.515e-9 s/B, scaled by
  // Eq. 2's N - 1 (above).
  constexpr double kA2aBeta32 = 5.15e-6 / 2048;
  m.collective(CollectiveKind::kAllToAllV).points = {{2, 12e-6, 0.5 / 130e9},
                                                     {8, 25e-6, 0.875 / 130e9},
                                                     {16, 50e-6, kA2aBeta32 * 15 / 31},
                                                     {32, 80e-6, kA2aBeta32},
                                                     {64, 120e-6, kA2aBeta32 * 63 / 31},
                                                     {256, 300e-6, kA2aBeta32 * 255 / 31}};
  // Between nodes a ring crosses each node once, over the node's 8 x 12.5
  // = 100 GB/s, below NVLink's 130. Broadcast and reduce move the data once.
  m.collective(CollectiveKind::kAllReduce).points = {
      {2, 12e-6, 1.0 / 130e9}, {8, 30e-6, 1.75 / 130e9}, {16, 60e-6, 1.875 / 100e9}, {256, 400e-6, 1.9921875 / 100e9}};
  m.collective(CollectiveKind::kBroadcast).points = {
      {2, 12e-6, 1.0 / 130e9}, {8, 25e-6, 1.0 / 130e9}, {16, 50e-6, 1.0 / 100e9}, {256, 250e-6, 1.0 / 100e9}};
  m.collective(CollectiveKind::kReduce).points = m.collective(CollectiveKind::kBroadcast).points;
  m.collective(CollectiveKind::kSendRecv).points = {{2, 15e-6, 1.0 / 12.5e9}};
  m.copy_h2d = m.copy_d2h = {1e-5, 1.0 / 12e9};
  m.copy_d2d = {5e-6, 2.0 / 750e9};
  m.link_sharing = LinkSharing::kFairShare;
  return m;
}

// pro-prophet's HPWNV nodes (Sec. VI): 4 x RTX 3090 24 GB on PCIe 3.0 (no
// NVLink), 100 Gb/s InfiniBand between nodes. Its own model (Eq. 1) uses one
// average bandwidth B-bar and counts received inputs only.
// Sources: paper — 4 RTX 3090 per node on PCIe 3.0, 100 Gb/s IB per node
// (Sec. VI), Eq. 1's volume (received inputs only); datasheet — 71 FP16
// tensor TFLOP/s with FP32 accumulate (GA102 whitepaper; mixed-precision
// training accumulates in FP32), 936 GB/s GDDR6X, 12.5 GB/s per node over
// 4 GPUs = 3.1 GB/s each in an all-to-all; assumed — 70 % of the GEMM peak,
// 85 % of memory bandwidth, ~10 GB/s between GPUs of a node through the
// host (also the bound of ring collectives between nodes), the startups.
CostModel preset_rtx3090() {
  CostModel m;
  m.name = "rtx3090-pcie-ib100";
  m.description =
      "pro-prophet HPWNV nodes: 4 x RTX 3090 24 GB on PCIe 3.0 (~10 GB/s between GPUs), "
      "100 Gb/s InfiniBand per node (~3 GB/s per GPU); fp16 GEMMs at 50 of 71 TFLOP/s; "
      "all-to-all volume = inputs received from other devices (pro-prophet Eq. 1)";
  m.device = {"NVIDIA GeForce RTX 3090 (simulated)", 8, 6, 82, 24LL << 30, "sm86", 4};
  m.compute = {6e-6, 1.0 / 50e12, 0.0};
  set_memory_bound(m, 4e-6, 2.0 / 800e9);
  m.collective(CollectiveKind::kAllToAllV).points = {
      {2, 15e-6, 1.0 / 10e9}, {4, 25e-6, 1.0 / 10e9}, {8, 50e-6, 1.0 / 3e9}, {32, 120e-6, 1.0 / 3e9}};
  // Between nodes a ring crosses each node once, so the node's NIC carries
  // one GPU's ring traffic at its whole ~12 GB/s (the all-to-all splits it
  // over 4 GPUs); the PCIe hops between the node's GPUs (~10 GB/s) are then
  // the bound. Broadcast and reduce move the data once.
  m.collective(CollectiveKind::kAllReduce).points = {
      {2, 15e-6, 1.0 / 10e9}, {4, 30e-6, 1.5 / 10e9}, {8, 60e-6, 1.75 / 10e9}, {32, 150e-6, 1.9375 / 10e9}};
  m.collective(CollectiveKind::kBroadcast).points = {
      {2, 15e-6, 1.0 / 10e9}, {4, 25e-6, 1.0 / 10e9}, {8, 50e-6, 1.0 / 10e9}, {32, 100e-6, 1.0 / 10e9}};
  m.collective(CollectiveKind::kReduce).points = m.collective(CollectiveKind::kBroadcast).points;
  m.collective(CollectiveKind::kSendRecv).points = {{2, 15e-6, 1.0 / 10e9}};
  m.copy_h2d = m.copy_d2h = {1e-5, 1.0 / 11e9};
  m.copy_d2d = {4e-6, 2.0 / 800e9};
  m.link_sharing = LinkSharing::kSerial;
  m.all_to_all_volume = AllToAllVolume::kMaxRecv;
  m.all_to_all_counts_local = false;
  return m;
}

// pro-prophet's LPWNV nodes (Sec. VI): the HPWNV node with RTX 2080 Ti
// instead of RTX 3090 ("the difference between HPWNV and LPWNV is that the
// type of GPUs of a LPWNV node is 2080Ti"): network, PCIe and link model as
// rtx3090-pcie-ib100.
// Sources: paper — as HPWNV, GPU RTX 2080 Ti; datasheet — 53.8 FP16 tensor
// TFLOP/s with FP32 accumulate (Turing whitepaper: 107.6 with FP16
// accumulate, half that with FP32 accumulate on GeForce cards), 616 GB/s
// GDDR6, 11 GB; assumed — the same achieved fractions as on the 3090 (70 %
// of the GEMM peak, 85 % of memory bandwidth).
CostModel preset_rtx2080ti() {
  CostModel m = preset_rtx3090();
  m.name = "rtx2080ti-pcie-ib100";
  m.description =
      "pro-prophet LPWNV nodes: 4 x RTX 2080 Ti 11 GB on PCIe 3.0 (~10 GB/s between GPUs), "
      "100 Gb/s InfiniBand per node (~3 GB/s per GPU); fp16 GEMMs at 37.7 of 53.8 TFLOP/s; "
      "all-to-all volume = inputs received from other devices (pro-prophet Eq. 1)";
  m.device = {"NVIDIA GeForce RTX 2080 Ti (simulated)", 7, 5, 68, 11LL << 30, "turing", 4};
  m.compute = {6e-6, 1.0 / (0.7 * 53.8e12), 0.0};
  set_memory_bound(m, 4e-6, 2.0 / (0.85 * 616e9));
  m.copy_d2d = {4e-6, 2.0 / (0.85 * 616e9)};
  return m;
}

struct PresetEntry {
  const char* name;
  const char* summary;
  CostModel (*make)();
};

constexpr PresetEntry kPresets[] = {
    {"h100-nvlink-ib", "default: H100 SXM, NVLink 4 in 8-GPU nodes, 400 Gb/s NDR per GPU",
     preset_h100},
    {"pipemoe-2080ti-ib100", "pipemoe solver.py: RTX 2080 Ti GEMM, all-to-all at P=16/32/64 on 100 Gb/s IB",
     preset_pipemoe_solver},
    {"pipemoe-fig6", "pipemoe Fig. 6 fits (GEMM and all-to-all at P=16/32/64)", preset_pipemoe_fig6},
    {"a100-nvlink-ib200", "mpipemoe cluster: DGX A100 40 GB, HDR 200 Gb/s per GPU", preset_a100},
    {"v100-nvlink-ib100", "ppmoe cluster: V100 32 GB, NVLink 2, all-to-all from Table 1, InfiniBand B = 12.5 GB/s a GPU", preset_v100},
    {"rtx3090-pcie-ib100", "pro-prophet HPWNV: RTX 3090 on PCIe 3.0, 100 Gb/s IB", preset_rtx3090},
    {"rtx2080ti-pcie-ib100", "pro-prophet LPWNV: RTX 2080 Ti on PCIe 3.0, 100 Gb/s IB", preset_rtx2080ti},
};

}  // namespace

std::vector<CostModelPreset> cost_model_presets() {
  std::vector<CostModelPreset> out;
  for (const auto& p : kPresets) out.push_back({p.name, p.summary});
  return out;
}

CostModel cost_model_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p.make();
  std::string known;
  for (const auto& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw ConfigError(fmt::format("cost_model \"{}\" is not a known preset ({})", name, known));
}

// ---------------------------------------------------------------------------
// JSON

namespace {

using nlohmann::json;

double number(const json& j, std::string_view field) {
  if (!j.is_number()) throw ConfigError(fmt::format("cost_model.{} must be a number", field));
  return j.get<double>();
}

template <class F>
void for_each_key(const json& obj, std::string_view where, F&& f) {
  if (!obj.is_object()) throw ConfigError(fmt::format("cost_model.{} must be an object", where));
  for (auto it = obj.begin(); it != obj.end(); ++it) f(it.key(), it.value());
}

// A FLOP rate given without a GEMM byte rate is FLOPs alone (pipemoe Eq.
// 13; `moetrace fit` writes such rates): the memory side of the entry it
// overrides (a preset's) was not measured with it and is dropped.
void read_compute(const json& j, std::string_view where, ComputeCost& c) {
  if ((j.contains("seconds_per_flop") || j.contains("flops_per_s")) && !j.contains("gemm_seconds_per_byte") &&
      !j.contains("gemm_bytes_per_s"))
    c.gemm_seconds_per_byte = 0;
  for_each_key(j, where, [&](const std::string& k, const json& v) {
    const auto field = fmt::format("{}.{}", where, k);
    if (k == "alpha_s") c.alpha_s = number(v, field);
    else if (k == "seconds_per_flop") c.seconds_per_flop = number(v, field);
    else if (k == "seconds_per_byte") c.seconds_per_byte = number(v, field);
    else if (k == "flops_per_s") c.seconds_per_flop = 1.0 / number(v, field);
    else if (k == "bytes_per_s") c.seconds_per_byte = 1.0 / number(v, field);
    else if (k == "gemm_seconds_per_byte") c.gemm_seconds_per_byte = number(v, field);
    else if (k == "gemm_bytes_per_s") c.gemm_seconds_per_byte = 1.0 / number(v, field);
    else throw ConfigError(fmt::format("cost_model.{} is not a known field", field));
  });
}

void read_linear(const json& j, std::string_view where, LinearCost& c) {
  for_each_key(j, where, [&](const std::string& k, const json& v) {
    const auto field = fmt::format("{}.{}", where, k);
    if (k == "alpha_s") c.alpha_s = number(v, field);
    else if (k == "beta_s") c.beta_s = number(v, field);
    else if (k == "bytes_per_s") c.beta_s = 1.0 / number(v, field);
    else throw ConfigError(fmt::format("cost_model.{} is not a known field", field));
  });
}

void read_points(const json& j, std::string_view where, CollectiveCost& c) {
  if (!j.is_array()) throw ConfigError(fmt::format("cost_model.{} must be an array of points", where));
  c.points.clear();
  for (std::size_t i = 0; i < j.size(); ++i) {
    CollectiveScalePoint p;
    const auto at = fmt::format("{}[{}]", where, i);
    for_each_key(j[i], at, [&](const std::string& k, const json& v) {
      const auto field = fmt::format("{}.{}", at, k);
      if (k == "ranks") {
        if (!v.is_number_integer()) throw ConfigError(fmt::format("cost_model.{} must be an integer", field));
        p.ranks = v.get<int>();
      } else if (k == "alpha_s") {
        p.alpha_s = number(v, field);
      } else if (k == "beta_s") {
        p.beta_s = number(v, field);
      } else if (k == "bytes_per_s") {
        p.beta_s = 1.0 / number(v, field);
      } else {
        throw ConfigError(fmt::format("cost_model.{} is not a known field", field));
      }
    });
    c.points.push_back(p);
  }
}

bool boolean(const json& j, std::string_view field) {
  if (!j.is_boolean()) throw ConfigError(fmt::format("cost_model.{} must be true or false", field));
  return j.get<bool>();
}

std::string string(const json& j, std::string_view field) {
  if (!j.is_string()) throw ConfigError(fmt::format("cost_model.{} must be a string", field));
  return j.get<std::string>();
}

}  // namespace

CostModel cost_model_from_json(std::string_view json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw ConfigError(fmt::format("cost model is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw ConfigError("cost model must be a JSON object");
  CostModel m = cost_model_preset(j.contains("base") ? string(j["base"], "base") : "h100-nvlink-ib");
  if (!j.contains("base")) m.name = "custom";
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "base") continue;
    if (k == "name") m.name = string(v, k);
    else if (k == "description") m.description = string(v, k);
    else if (k == "compute") read_compute(v, "compute", m.compute);
    else if (k == "compute_by_kind") {
      for_each_key(v, k, [&](const std::string& kind_name, const json& c) {
        const auto kind = parse_op_kind(kind_name);
        if (!kind)
          throw ConfigError(fmt::format("cost_model.compute_by_kind.{} is not an op kind", kind_name));
        ComputeCost cost = m.compute_cost(*kind);
        read_compute(c, "compute_by_kind." + kind_name, cost);
        m.compute_by_kind[*kind] = cost;
      });
    } else if (k == "collectives") {
      for_each_key(v, k, [&](const std::string& name, const json& pts) {
        bool found = false;
        for (auto ck : kCollectiveKinds)
          if (plan::collective_kind_name(ck) == name) {
            read_points(pts, "collectives." + name, m.collective(ck));
            found = true;
          }
        if (!found)
          throw ConfigError(fmt::format("cost_model.collectives.{} is not a collective kind "
                                        "(all_to_all_v, all_reduce, broadcast, reduce, send_recv)",
                                        name));
      });
    } else if (k == "copy") {
      for_each_key(v, k, [&](const std::string& dir, const json& c) {
        if (dir == "h2d") read_linear(c, "copy.h2d", m.copy_h2d);
        else if (dir == "d2h") read_linear(c, "copy.d2h", m.copy_d2h);
        else if (dir == "d2d") read_linear(c, "copy.d2d", m.copy_d2d);
        else throw ConfigError(fmt::format("cost_model.copy.{} is not one of h2d, d2h, d2d", dir));
      });
    } else if (k == "interference") {
      auto& f = m.interference;
      for_each_key(v, k, [&](const std::string& name, const json& x) {
        const auto field = "interference." + name;
        double* target = name == "sigma_comm"  ? &f.sigma_comm
                         : name == "sigma_mem" ? &f.sigma_mem
                         : name == "sigma_all" ? &f.sigma_all
                         : name == "mu_comp"   ? &f.mu_comp
                         : name == "mu_mem"    ? &f.mu_mem
                         : name == "mu_all"    ? &f.mu_all
                         : name == "eta_comp"  ? &f.eta_comp
                         : name == "eta_comm"  ? &f.eta_comm
                         : name == "eta_all"   ? &f.eta_all
                                               : nullptr;
        if (!target) throw ConfigError(fmt::format("cost_model.{} is not a known factor", field));
        *target = number(x, field);
      });
    } else if (k == "link_sharing") {
      m.link_sharing = parse_link_sharing(string(v, k));
    } else if (k == "all_to_all_volume") {
      m.all_to_all_volume = parse_all_to_all_volume(string(v, k));
    } else if (k == "all_to_all_counts_local") {
      m.all_to_all_counts_local = boolean(v, k);
    } else if (k == "share_compute") {
      m.share_compute = boolean(v, k);
    } else if (k == "host_issue") {
      for_each_key(v, k, [&](const std::string& kind_name, const json& c) {
        const auto kind = parse_op_kind(kind_name);
        if (!kind) throw ConfigError(fmt::format("cost_model.host_issue.{} is not an op kind", kind_name));
        HostIssueCost cost;
        for_each_key(c, "host_issue." + kind_name, [&](const std::string& f, const json& x) {
          const auto field = "host_issue." + kind_name + "." + f;
          if (f == "alpha_s") cost.alpha_s = number(x, field);
          else if (f == "per_launch_s") cost.per_launch_s = number(x, field);
          else throw ConfigError(fmt::format("cost_model.{} is not a known field", field));
        });
        m.host_issue[*kind] = cost;
      });
    } else if (k == "device") {
      for_each_key(v, k, [&](const std::string& f, const json& x) {
        const auto field = "device." + f;
        if (f == "name") m.device.name = string(x, field);
        else if (f == "kernel_arch") m.device.kernel_arch = string(x, field);
        else if (f == "compute_major") m.device.compute_major = static_cast<int>(number(x, field));
        else if (f == "compute_minor") m.device.compute_minor = static_cast<int>(number(x, field));
        else if (f == "sm_count") m.device.sm_count = static_cast<int>(number(x, field));
        else if (f == "memory_bytes") m.device.memory_bytes = static_cast<std::int64_t>(number(x, field));
        else if (f == "gpus_per_node") m.device.gpus_per_node = static_cast<int>(number(x, field));
        else throw ConfigError(fmt::format("cost_model.{} is not a known field", field));
      });
    } else {
      throw ConfigError(fmt::format("cost_model.{} is not a known field", k));
    }
  }
  m.validate();
  return m;
}

std::string to_json(const CostModel& m) {
  json j;
  j["name"] = m.name;
  j["description"] = m.description;
  auto compute = [](const ComputeCost& c) {
    json out{{"alpha_s", c.alpha_s}, {"seconds_per_flop", c.seconds_per_flop},
             {"seconds_per_byte", c.seconds_per_byte}};
    out["gemm_seconds_per_byte"] = c.gemm_seconds_per_byte;
    return out;
  };
  j["compute"] = compute(m.compute);
  json by_kind = json::object();
  for (const auto& [kind, c] : m.compute_by_kind) by_kind[std::string(op_kind_name(kind))] = compute(c);
  j["compute_by_kind"] = by_kind;
  json coll = json::object();
  for (auto k : kCollectiveKinds) {
    json pts = json::array();
    for (const auto& p : m.collective(k).points)
      pts.push_back({{"ranks", p.ranks}, {"alpha_s", p.alpha_s}, {"beta_s", p.beta_s}});
    coll[std::string(plan::collective_kind_name(k))] = pts;
  }
  j["collectives"] = coll;
  auto lin = [](const LinearCost& c) { return json{{"alpha_s", c.alpha_s}, {"beta_s", c.beta_s}}; };
  j["copy"] = {{"h2d", lin(m.copy_h2d)}, {"d2h", lin(m.copy_d2h)}, {"d2d", lin(m.copy_d2d)}};
  const auto& f = m.interference;
  j["interference"] = {{"sigma_comm", f.sigma_comm}, {"sigma_mem", f.sigma_mem}, {"sigma_all", f.sigma_all},
                       {"mu_comp", f.mu_comp},       {"mu_mem", f.mu_mem},       {"mu_all", f.mu_all},
                       {"eta_comp", f.eta_comp},     {"eta_comm", f.eta_comm},   {"eta_all", f.eta_all}};
  j["link_sharing"] = std::string(link_sharing_name(m.link_sharing));
  j["all_to_all_volume"] = std::string(all_to_all_volume_name(m.all_to_all_volume));
  j["all_to_all_counts_local"] = m.all_to_all_counts_local;
  j["share_compute"] = m.share_compute;
  if (!m.host_issue.empty()) {
    json host = json::object();
    for (const auto& [kind, h] : m.host_issue)
      host[std::string(op_kind_name(kind))] = {{"alpha_s", h.alpha_s}, {"per_launch_s", h.per_launch_s}};
    j["host_issue"] = host;
  }
  j["device"] = {{"name", m.device.name},
                 {"compute_major", m.device.compute_major},
                 {"compute_minor", m.device.compute_minor},
                 {"sm_count", m.device.sm_count},
                 {"memory_bytes", m.device.memory_bytes},
                 {"kernel_arch", m.device.kernel_arch},
                 {"gpus_per_node", m.device.gpus_per_node}};
  return j.dump(2);
}

}  // namespace moetrace::sim
