// Builders: variant configuration + routing load -> plan (plan.h). Each
// validates its configuration and the load (ConfigError naming the field) and
// emits forward and backward passes for every (iteration, layer), the
// gradient synchronisation and the optimizer step of every iteration.
//
// Expert-parallel variants (DPMoE, PipeMoE, MPipeMoE, Pro-Prophet, FasterMoE):
// ranks = sources; rank p holds experts [p E/P, (p+1) E/P) and the gate and
// dense weights (data parallel, gradients all-reduced). Per block and rank:
//   gate -> permute -> per chunk: dispatch_all_to_all -> expert_ffn (one op
//   per expert served on the rank) -> combine_all_to_all -> unpermute
//   -> [attention (timing only)] -> [dense_ffn]
// and the mirror image backward; dispatch and combine share the rank's comm
// stream (pipemoe's single network resource, NOTES.md).
#pragma once

#include <cstdint>
#include <limits>

#include "moetrace/plan/config.h"
#include "moetrace/plan/plan.h"
#include "moetrace/plan/pro_prophet.h"
#include "moetrace/plan/routing.h"

namespace moetrace::plan {

// How much of the plan a builder writes (build_dpmoe and build_pipemoe).
struct PlanDetail {
  // Timing only, for the simulator at 1024 ranks and beyond: the same ops in
  // the same order, with the same names, coordinates, streams, FLOPs, bytes,
  // buffers, accesses, allocations, frees and dependencies, except that
  //  - an all-to-all op lists two aggregated transfers per direction (its
  //    segment to itself, and the rest with an invalid peer);
  //  - collectives leave their group (every rank) implicit;
  //  - routed layouts and the experts' row spans are empty;
  // so a layer costs O(P E) instead of O(P^2 E) and the simulator gives it the
  // same times. The CPU and CUDA executors cannot run such a plan. Not with
  // DPMoE's capacity padding.
  bool timing_only = false;
  // Above this many (iteration, layer, source, expert) entries, Plan::loads
  // holds per-expert totals (source -1) instead.
  std::int64_t max_load_entries = std::numeric_limits<std::int64_t>::max();
};

// GShard-style expert parallelism, one chunk.
Plan build_dpmoe(const DpMoeConfig& config, const ExpertLoad& load, const PlanDetail& mode = {});

// pipemoe Eq. 5-12: r chunks; dispatches D_1..D_r then combines C_1..C_r on
// the comm stream, expert computations E_1..E_r on the compute stream; each
// chunk has its own T_DI, T_M, T_DO.
Plan build_pipemoe(const PipeMoeConfig& config, const ExpertLoad& load, const PlanDetail& mode = {});

// mpipemoe Sec. III-B/D: n partitions, S and R alternating on the comm stream
// (Fig. 7a: S1 S2 R1 S3 R2 ...). With a reuse strategy, T_DI and T_DO use two
// ring buffers and T_M one (Eq. 5), and the backward pass restores T_DI by
// prefetch (offloaded in forward) or re-communication and T_M by prefetch or
// recompute (Table II, S1-S4). Partitions split every (source, expert) row
// block evenly, as pipemoe Eq. 5 does (interpretation of Fig. 5(b): each
// partition is a fine-grained all-to-all over all peers, as there, and the
// partitions stay equal-sized under skewed routing).
Plan build_mpipemoe(const MPipeMoeConfig& config, const ExpertLoad& load);

// ppmoe Sec. 3.3: per stage, a tensor-parallel group of T ranks holds E/T
// experts each; the gate runs on every TP rank, index_slice dispatches,
// index_assign + moe_all_reduce gathers (Alg. 1); the dense FFN is split
// Megatron-style with tp_all_reduce; stages run micro-batches 1F1B with
// pipeline_send/recv. Sources of the load are blocks
// dp_group * micro_batches + micro_batch.
Plan build_ppmoe(const PpMoeConfig& config, const ExpertLoad& load);

// pro-prophet: placements from Algorithm 1; with block_schedule, Algorithm 2:
// Plan of iteration j+1 beside the dispatch of iteration j (placement of
// iteration 0 is the home placement: there is no earlier distribution),
// Trans of block i+1 split into SubTrans1 (beside FEC_i) and SubTrans2
// (beside FNEC_i), Agg of block i+1 split into SubAgg1 (beside BNEC_i) and
// SubAgg2 (beside BEC_i); Trans of block 0 opens the iteration, Agg of block 0
// closes it. The split gives SubTrans1 the share T_FEC / (T_FEC + T_FNEC) of
// the parameter rows and SubAgg1 T_BNEC / (T_BNEC + T_BEC) of the gradient
// rows (our reading of "properly split", Sec. V-B).
Plan build_pro_prophet(const ProProphetConfig& config, const ExpertLoad& load);

// FasterMoE-style shadowing: shadowed experts are broadcast to every rank
// before the dispatch and their gradients reduced after the expert backward;
// optionally FasterMoE's smart schedule (P / g steps of group-wise exchange)
// and FastMoE's count exchange (FasterMoeConfig).
Plan build_fastermoe(const FasterMoeConfig& config, const ExpertLoad& load);

// Placements the Pro-Prophet builder uses: [iteration][layer].
std::vector<std::vector<ExpertPlacement>> pro_prophet_placements(const ProProphetConfig& config,
                                                                 const ExpertLoad& load);

}  // namespace moetrace::plan
