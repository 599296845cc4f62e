// The expert-parallel emitter shared by DPMoE, PipeMoE, MPipeMoE, Pro-Prophet
// and FasterMoE, parameterised by the chunking (pipemoe Eq. 5), the buffer
// reuse and restore strategy (mpipemoe Sec. III-D, Table II) and the expert
// placement with its Trans/Agg schedule (pro-prophet Alg. 2). Its pieces:
//   ep_routing.cc  where each chunk's rows go: per-peer segments (full plan)
//                  or per-rank totals (timing only), and the all-to-all ops;
//   ep_forward.cc  the forward pass of a block;
//   ep_backward.cc the backward pass of a block and its gradient all-reduce;
//   ep_balance.cc  replicated experts: Trans, Agg and their split;
//   build_expert_parallel.cc  the whole plan and the public builders.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "build_common.h"
#include "moetrace/plan/builders.h"

namespace moetrace::plan::detail {

enum class Balance { kNone, kProProphet, kFasterMoe };

struct EpSpec {
  std::string variant;
  std::string config_json;
  CommonConfig common;
  int chunks = 1;
  bool alternate = false;  // mpipemoe: S and R alternate on the comm stream
  ReuseStrategy strategy = ReuseStrategy::kNone;
  Balance balance = Balance::kNone;
  bool block_schedule = false;
  bool capacity_padding = false;  // DpMoeConfig::capacity_padding (DeepSpeed-MoE)
  int exchange_peers = 0;         // Collective::exchange_peers of every chunk's all-to-all
  bool count_exchange = false;    // FasterMoeConfig::count_exchange
  // Tutel (and PipeMoE atop it): a rank's local experts run as one batched
  // GEMM pair per chunk (FfnForward::batched); FastMoE and DeepSpeed-MoE
  // launch each expert's GEMMs on their own.
  bool batched_experts = false;
  std::vector<std::vector<ExpertPlacement>> placement;  // [iteration][layer]
  ProProphetModel perf;
  PlanDetail detail;
};

struct Segment {
  std::int64_t row = 0;
  std::int64_t rows = 0;
};

// The routing of iteration j, layer l, as Pro-Prophet's planner reads it.
LayerRouting layer_routing(const ExpertLoad& load, int j, int l);

class EpBuilder {
 public:
  EpBuilder(const EpSpec& spec, const ExpertLoad& load);

  Plan build();

 private:
  struct RankState {
    RoutedLayout layout;     // empty in a timing-only plan
    std::vector<int> serve;  // [expert]: the rank that computes this source's rows for it (full plan)
    std::int64_t tokens = 0, rows = 0;  // the source's tokens and routed rows
    BufferId x, probs, routing, t_i, t_o, y, mid, z;
    BufferId d_t_o, d_t_i, dx, d_weights;
  };
  struct ChunkRank {
    std::vector<Segment> recv;  // [source]: rows of this rank's T_DI(c) from it (full plan)
    std::int64_t rows = 0;
    // Timing only: rows this rank keeps (for its own experts), sends to
    // other ranks as a source, and receives from them as an expert host.
    std::int64_t send_local = 0, send_remote = 0, recv_remote = 0;
    std::vector<int> experts;   // served on this rank, ascending
    std::vector<std::vector<RowSpan>> spans;  // [i]: experts[i]'s rows (empty in a timing-only plan)
    std::vector<std::int64_t> expert_rows;
    BufferId t_di, t_m, t_do, host_di, host_m;
    BufferId r_di, r_m, d_t_do, d_t_di;
  };
  struct LayerState {
    std::vector<RankState> rank;
    std::vector<std::vector<ChunkRank>> chunk;   // [c][q]
    std::vector<std::vector<BufferId>> replica_params, replica_grads;  // [e][q]
    std::vector<std::vector<BufferId>> fwd_slots, bwd_slots;  // [q]
    std::int64_t capacity = 0;  // capacity padding: rows of every (rank, expert) segment
  };

  // Pro-Prophet's Plan search on rank state s's gate output.
  TimingOnly plan_search(const RankState& s) const {
    TimingOnly t;
    t.plan_search = PlanSearchWork{View{s.routing, 0, s.tokens}, m_.top_k, E_, P_};
    return t;
  }

  static std::size_t at(int i) { return static_cast<std::size_t>(i); }
  LayerState& layer(int l) { return layers_[at(l)]; }
  ChunkRank& chunk_rank(int l, int c, int q) { return layers_[at(l)].chunk[at(c)][at(q)]; }
  int home(int e) const { return e / local_; }
  bool padded() const { return spec_.capacity_padding; }
  bool timing_only() const { return spec_.detail.timing_only; }
  // DeepSpeed-MoE's dense einsum dispatch or combine on a rank of `tokens`
  // tokens: [S, E, C] x [S, M] -> [E, C, M], 2 S E C M FLOPs.
  double einsum_flops(int l, std::int64_t tokens) const {
    return 2.0 * static_cast<double>(tokens) * E_ * static_cast<double>(layers_[at(l)].capacity) *
           static_cast<double>(m_.model_dim);
  }
  // The rows the FFN of expert i of `cr` computes, forward and backward: the
  // rows routed to it, or with capacity padding the capacity of every source
  // rank (P x C).
  std::int64_t ffn_rows(const LayerState& L, const ChunkRank& cr, std::size_t i) const {
    return padded() ? P_ * L.capacity : cr.expert_rows[i];
  }
  bool reuse() const { return spec_.strategy != ReuseStrategy::kNone; }
  int chunk_coord(int c) const { return spec_.chunks > 1 ? c : -1; }
  bool recommunicate() const { return reuse_strategy_traits(spec_.strategy).t_di == Restore::kRecommunicate; }
  bool offload_t_di() const { return reuse_strategy_traits(spec_.strategy).t_di == Restore::kOffload; }
  bool offload_t_m() const { return reuse_strategy_traits(spec_.strategy).t_m == Restore::kOffload; }
  bool scheduled() const { return spec_.balance == Balance::kProProphet && spec_.block_schedule; }
  const ExpertPlacement& placement(int j, int l) const {
    return spec_.placement.empty() ? home_only_ : spec_.placement[at(j)][at(l)];
  }
  bool holds(int j, int l, int rank, int e) const { return placement(j, l).holds(rank, e, home(e)); }
  RankStreams& streams(int r) { return streams_[at(r)]; }
  StreamId copy_stream(int r) { return b_.stream(RankId(r), StreamRole::kCopy); }
  // Every rank, as a collective's group; empty (implicit) in a timing-only plan.
  std::vector<RankId> world_group() const;
  // A transient buffer of rank q with the model's element size.
  BufferId add_tensor(int q, BufferTag tag, const std::string& name, std::int64_t rows, std::int64_t cols,
                      const Coords& c, BufferBinding binding = {}) {
    return add_buffer(b_, RankId(q), tag, name, rows, cols, m_.elem_bytes, c, binding);
  }

  // ep_routing.cc
  void prepare(int j, int l);
  void prepare_layouts(int j, int l);
  void prepare_totals(int j, int l);
  Segment send_segment(const RankState& s, int q, int c) const;
  // The all-to-all of chunk c, an op per rank, between each rank's
  // `rank_buf` (T_I, dT_O) and its chunk buffer `chunk_buf` of chunk c: to
  // the experts (dispatch forward, combine backward, re-communication) or
  // back. Frees the rank buffer after the last chunk (free_rank_buf) or the
  // chunk buffer after each (free_chunk_buf).
  void all_to_all(OpKind kind, const Coords& co, int c, bool to_experts, BufferId RankState::*rank_buf,
                  BufferId ChunkRank::*chunk_buf, bool free_rank_buf, bool free_chunk_buf);

  // ep_forward.cc
  void forward(int j, int l);
  void gates(int j, int l, const Coords& co);
  void chunk_buffers(int j, int l, const Coords& co);
  // Rows of the ring slots of chunk c on rank q under reuse (mpipemoe Eq. 5):
  // the largest chunk of c's parity (T_DI, T_DO) and the largest of all (T_M).
  std::pair<std::int64_t, std::int64_t> slot_rows(int l, int q, int c) const;
  void expert_forward(int j, int l, int c);
  void count_exchange(int l, const Coords& co);
  void block_output(int j, int l, const Coords& co);

  // ep_backward.cc
  void backward(int j, int l);
  void restore_t_di(int j, int l, int c);
  void restore_t_m(int j, int l, int c);
  void expert_backward(int j, int l, int c);
  void chunk_grad_buffers(int j, int l, const Coords& co);
  void grad_all_reduce(int j, int l);

  // ep_balance.cc
  BufferId expert_params(int l, int q, int e);
  BufferId expert_grads(int j, int l, int q, int e);
  void trans(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what);
  // One collective per replicated expert over its home rank and replicas, an
  // op per member rank; per_rank(e, replicas, rank, collective, op) fills in
  // the data and the op's bytes before the op is added.
  template <class PerRank>
  void replica_collectives(int j, int l, const Coords& co, CollectiveKind kind, OpKind op_kind, const char* what,
                           PerRank&& per_rank);
  void agg(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what, bool last_part,
           Phase phase);
  LayerTimeEstimate estimate(int from, int j, int l) const;
  std::int64_t trans_split(int j, int l) const;
  std::int64_t agg_split(int j, int l) const;

  // build_expert_parallel.cc
  void add_params();
  void add_loads();

  const EpSpec& spec_;
  const ExpertLoad& load_;
  const ModelShape& m_;
  const int P_, E_, local_;
  PlanBuilder b_;
  ExpertPlacement home_only_ = ExpertPlacement::none(0);
  std::vector<RankStreams> streams_;
  std::vector<std::vector<ParamBuffers>> gate_, dense_;  // [layer][rank]
  std::vector<std::vector<ParamBuffers>> experts_;       // [layer][expert] on its home
  std::vector<LayerState> layers_;
  std::vector<std::vector<std::vector<OpId>>> plan_ops_;  // [iteration][layer][rank]
  // Timing only: split_[cnt * chunks + c], the rows of chunk c of a
  // (source, expert) pair of cnt rows, for cnt up to a source's tokens.
  std::vector<std::int64_t> split_;
};

}  // namespace moetrace::plan::detail
