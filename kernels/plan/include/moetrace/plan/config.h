// Configurations of the MoE variants. validate() throws moetrace::ConfigError
// with one line that names the offending field, e.g.
// "num_experts (6) is not divisible by ranks (4)".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::plan {

// The model: num_layers MoE blocks. A block is an MoE layer followed by its
// non-MoE part (Pro-Prophet Sec. V-A "MoE block"): optional attention ops
// (timing only) and an optional dense FFN of hidden size dense_hidden. A
// model with MoE on every other FFN (ppmoe Sec. 4.1) has two transformer
// layers per block: attention_per_block = 2.
struct ModelShape {
  int num_layers = 1;
  int num_experts = 4;             // E
  int top_k = 1;                   // k
  std::int64_t model_dim = 8;      // M (pipemoe/mpipemoe), h (ppmoe)
  std::int64_t expert_hidden = 16; // H
  std::int64_t dense_hidden = 0;   // F of the block's dense FFN; 0: none
  bool attention = false;          // timing-only attention op(s) in each block
  // Attention ops per block when `attention` is on. Their weights (Q, K, V
  // and output projections, 4 M^2 each) are data parallel: the expert-parallel
  // builders all-reduce their gradients (timing only, like the attention).
  int attention_per_block = 1;
  // Attention ops in a block: attention_per_block, or none without attention.
  int attention_ops() const { return attention ? attention_per_block : 0; }
  std::int64_t sequence_length = 1024;  // attention FLOPs only
  int elem_bytes = 2;              // bytes per element of activations and parameters
  double learning_rate = 0.01;     // SGD step of the executors

  void validate() const;
};

// What every variant shares.
struct CommonConfig {
  ModelShape model;
  int ranks = 4;                       // world size P (D in pro-prophet)
  int iterations = 1;
  std::int64_t memory_budget_bytes = 0;  // per rank; 0: unlimited

  void validate() const;
};

// GShard-style expert parallelism: E/P experts per rank, one dispatch and one
// combine all-to-all per layer and pass.
struct DpMoeConfig {
  CommonConfig common;
  // DeepSpeed-MoE's MOELayer as it trains without dropping tokens
  // (deepspeed/moe/sharded_moe.py, top1gating/top2gating with
  // drop_tokens=False, use_tutel=False): the capacity C is the largest count
  // any rank has for any expert (each rank's max, all-reduced with MAX over
  // the world: a timing-only all-reduce of 8 bytes after the gate, ahead of
  // the dispatch on the comm stream); every (rank, expert) segment of the all-to-alls is padded to
  // C rows, every expert computes P x C rows, and dispatch and combine are
  // dense einsums "sec,sm->ecm" / "sec,ecm->sm" of 2 S E C M FLOPs each
  // (S tokens of the rank; backward: one for dispatch, two for combine, whose
  // weights need a gradient).
  bool capacity_padding = false;
  void validate() const;
};

// pipemoe: input split into r chunks whose dispatch, expert and combine
// overlap (Eq. 5-12).
struct PipeMoeConfig {
  CommonConfig common;
  int pipeline_degree = 2;  // r
  // Tutel's fused experts (PipeMoE runs inside Tutel, pipemoe Sec. IV-C):
  // a rank's local experts as one batched GEMM pair a chunk, so a chunk
  // pays the GEMM startup once whatever E/P is (FfnForward::batched). Off:
  // each expert's GEMMs launched on their own, as moetrace's executors do.
  bool fused_experts = false;
  void validate() const;
};

// mpipemoe Table II: the memory-reuse strategies. With reuse the n
// partitions share one T_DI, T_M and T_DO buffer; the backward pass gets
// T_DI and T_M back by the strategy's restore method. The meaning of each
// strategy is its row of kReuseStrategies, nowhere else.
enum class ReuseStrategy : std::uint8_t { kNone = 0, kS1 = 1, kS2 = 2, kS3 = 3, kS4 = 4 };

enum class Restore : std::uint8_t {
  kKeep,           // not reused: every partition keeps its own
  kOffload,        // copied to host in the forward pass, prefetched for the backward
  kRecommunicate,  // T_DI: dispatched again from the kept T_I
  kRecompute,      // T_M: recomputed from the restored T_DI (one GEMM)
};

struct ReuseStrategyTraits {
  ReuseStrategy strategy;
  std::string_view name;  // "none", "S1".."S4"
  Restore t_di, t_m;
  bool reuses() const { return strategy != ReuseStrategy::kNone; }
  // Runs a copy stream (offload / prefetch) next to computation and communication.
  bool copies() const { return t_di == Restore::kOffload || t_m == Restore::kOffload; }
};

inline constexpr std::array<ReuseStrategyTraits, 5> kReuseStrategies{{
    {ReuseStrategy::kNone, "none", Restore::kKeep, Restore::kKeep},
    {ReuseStrategy::kS1, "S1", Restore::kOffload, Restore::kOffload},
    {ReuseStrategy::kS2, "S2", Restore::kRecommunicate, Restore::kOffload},
    {ReuseStrategy::kS3, "S3", Restore::kOffload, Restore::kRecompute},
    {ReuseStrategy::kS4, "S4", Restore::kRecommunicate, Restore::kRecompute},
}};

inline constexpr const ReuseStrategyTraits& reuse_strategy_traits(ReuseStrategy s) {
  return kReuseStrategies[static_cast<std::size_t>(s) < kReuseStrategies.size() ? static_cast<std::size_t>(s) : 0];
}
std::string_view reuse_strategy_name(ReuseStrategy s);  // "none", "S1".."S4"
std::string_view restore_name(Restore r);               // "keep", "offload", "re-communicate", "recompute"
// "S2: re-communicate T_DI, offload T_M"; "none (no memory reuse)".
std::string reuse_strategy_action(ReuseStrategy s);
ReuseStrategy parse_reuse_strategy(std::string_view name);  // throws ConfigError
std::string reuse_strategy_names();                         // "none, S1, S2, S3, S4"

// mpipemoe: n partitions pipelined, T_DI/T_M/T_DO buffers reused (Sec. III-D).
struct MPipeMoeConfig {
  CommonConfig common;
  int partitions = 2;  // n
  ReuseStrategy strategy = ReuseStrategy::kNone;
  void validate() const;
};

// ppmoe Sec. 3.3: experts spread over a tensor-parallel group of T ranks,
// pipeline stages (1F1B), data-parallel replicas.
// ranks = data_parallel x pipeline_stages x tensor_parallel; rank index
// = (dp_group * pipeline_stages + stage) * tensor_parallel + tp_rank.
struct PpMoeConfig {
  CommonConfig common;
  int tensor_parallel = 2;   // T
  int pipeline_stages = 1;
  int micro_batches = 1;     // per iteration and data-parallel group
  int data_parallel() const;
  void validate() const;
};

// The performance model of pro-prophet Sec. IV-B (Eq. 1-8); also used for the
// FasterMoE-style shadowing decision.
struct ProProphetModel {
  double bandwidth_bytes_per_s = 12.5e9;  // B-bar
  double expert_tokens_per_s = 1e6;       // t: inputs an expert computes per second (forward)
  double fnec_seconds = 0;                // T_FNEC: forward of the non-MoE layer (static estimate)
  double bnec_seconds = 0;                // T_BNEC
  bool hide_under_computation = true;     // Eq. 8 (T_PTrans, T_PAgg) instead of Eq. 6
  double plan_flops = 1e6;                // work of one Plan search, for the timeline
};

// A lightweight expert placement (Sec. IV-A): each selected expert has, besides
// its home, the replica devices listed; a device holding an expert computes
// its own tokens for it, the others send theirs to the home device.
struct ExpertPlacement {
  std::vector<int> selected;                // experts in the order Algorithm 1 chose them
  std::vector<std::vector<int>> replicas;   // [expert]: devices other than home, ascending

  bool holds(int device, int expert, int home) const;
  static ExpertPlacement none(int experts);
};

// pro-prophet: lightweight expert placement, greedy planner (Alg. 1) and the
// block-wise schedule (Alg. 2). Its dispatch is unpadded (Eq. 1 counts the
// inputs received), so each block's ranks exchange their counts before it.
struct ProProphetConfig {
  CommonConfig common;
  int n = 0;            // devices a selected expert is NOT sent to (Eq. 4/5)
  double alpha = 0.25;  // balance condition, Eq. 7
  ProProphetModel model;
  // Alg. 2: Plan of iteration j+1 under the all-to-all of iteration j, Trans
  // under the previous block's forward, Agg under its backward. false: the
  // unscheduled order of Fig. 7 (Plan, Trans before the dispatch; Agg after
  // the expert backward), planned on the iteration's own load.
  bool block_schedule = true;
  // Given placements, [iteration][layer] (a replay of what a trace ran):
  // used as they are instead of Algorithm 1's. Empty: planned.
  std::vector<std::vector<ExpertPlacement>> placements;
  void validate() const;
};

// FasterMoE-style shadowing: popular experts are broadcast to every rank,
// which computes its own tokens for them; gradients are reduced back.
struct FasterMoeConfig {
  CommonConfig common;
  ProProphetModel model;  // performance model of the shadowing decision
  // Empty: decide per (iteration, layer) with the performance model.
  // Otherwise the experts to shadow in every layer and iteration.
  std::vector<int> shadow_experts;
  // Given shadows, [iteration][layer] (a replay of what a trace ran): used
  // instead of shadow_experts and the model's decision. Empty: not given.
  std::vector<std::vector<ExpertPlacement>> placements;
  // FasterMoE's smart schedule (laekov/fastmoe, cuda/fastermoe/
  // smart_schedule.h, fmoe_cuda_fused_forward_impl): the all-to-all runs as
  // P / g steps, step s exchanging with the g ranks of group (own + s) by
  // NCCL send/recv (g = FMOE_FASTER_GROUP_SIZE, 4 when unset,
  // smart_schedule.cpp); all steps' exchanges go first on one stream, each
  // step's expert computation follows its exchange on another, the combine
  // steps follow the computations (pipemoe Eq. 9-11 with r = P / g). A step
  // moves 1/(P/g) of every (source, expert) block here: FasterMoE's step s
  // moves the blocks of g peers, the same volume under balanced routing.
  // 0: no smart schedule (one all-to-all each way).
  int smart_schedule_group = 0;
  // FastMoE's prepare_forward (fmoe/functions.py): before the dispatch the
  // ranks exchange their per-expert counts (expert_exchange, an all-to-all
  // of P x E/P int64 by NCCL send/recv) and copy them to the host; with
  // shadowing enabled the policy all-gathers them once more
  // (fastermoe/shadow_policy.py). Each is a collective paying the
  // all-to-all's startup; the host copies are not modelled.
  bool count_exchange = false;
  void validate() const;
};

// Model states of one rank in bytes, mpipemoe Eq. 1 generalised: 4 copies
// (parameter, gradient, two Adam moments) of the gate, the rank's experts and
// its slice of the dense FFN.
std::int64_t model_state_bytes(const ModelShape& m, double experts_per_rank,
                               int dense_tensor_parallel);

// Serialised configurations (Plan::config_json, RunRecord.config_json).
std::string to_json(const ModelShape& m);
std::string to_json(const DpMoeConfig& c);
std::string to_json(const PipeMoeConfig& c);
std::string to_json(const MPipeMoeConfig& c);
std::string to_json(const PpMoeConfig& c);
std::string to_json(const ProProphetConfig& c);
std::string to_json(const FasterMoeConfig& c);

}  // namespace moetrace::plan
