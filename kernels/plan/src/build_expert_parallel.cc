// The expert-parallel builders: DPMoE, PipeMoE, MPipeMoE, Pro-Prophet and
// FasterMoE share one emitter, parameterised by the chunking (pipemoe Eq. 5),
// the buffer reuse and restore strategy (mpipemoe Sec. III-D, Table II) and
// the expert placement with its Trans/Agg schedule (pro-prophet Alg. 2).
#include <algorithm>
#include <numeric>

#include "build_common.h"
#include "moetrace/plan/builders.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace detail {
namespace {

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
  std::vector<std::vector<ExpertPlacement>> placement;  // [iteration][layer]
  ProProphetModel perf;
};

struct Segment {
  std::int64_t row = 0;
  std::int64_t rows = 0;
};

class EpBuilder {
 public:
  EpBuilder(const EpSpec& spec, const ExpertLoad& load)
      : spec_(spec),
        load_(load),
        m_(spec.common.model),
        P_(spec.common.ranks),
        E_(m_.num_experts),
        local_(E_ / P_),
        b_(spec.variant, P_) {}

  Plan build();

 private:
  struct RankState {
    RoutedLayout layout;
    std::vector<int> serve;  // [expert]: the rank that computes this source's rows for it
    BufferId x, probs, routing, t_i, t_o, y, mid, z;
    BufferId d_t_o, d_t_i, dx, d_weights;
  };
  struct ChunkRank {
    std::vector<Segment> recv;  // [source]: rows of this rank's T_DI(c) from it
    std::int64_t rows = 0;
    std::vector<int> experts;   // served on this rank, ascending
    std::vector<std::vector<RowSpan>> spans;
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
    t.plan_search = PlanSearchWork{View{s.routing, 0, s.layout.tokens}, m_.top_k, E_, P_};
    return t;
  }

  int home(int e) const { return e / local_; }
  bool padded() const { return spec_.capacity_padding; }
  // DeepSpeed-MoE's dense einsum dispatch or combine on a rank of `tokens`
  // tokens: [S, E, C] x [S, M] -> [E, C, M], 2 S E C M FLOPs.
  double einsum_flops(int l, std::int64_t tokens) const {
    return 2.0 * static_cast<double>(tokens) * E_ *
           static_cast<double>(layers_[static_cast<std::size_t>(l)].capacity) * static_cast<double>(m_.model_dim);
  }
  bool reuse() const { return spec_.strategy != ReuseStrategy::kNone; }
  int chunk_coord(int c) const { return spec_.chunks > 1 ? c : -1; }
  bool recommunicate() const { return reuse_strategy_traits(spec_.strategy).t_di == Restore::kRecommunicate; }
  bool offload_t_di() const { return reuse_strategy_traits(spec_.strategy).t_di == Restore::kOffload; }
  bool offload_t_m() const { return reuse_strategy_traits(spec_.strategy).t_m == Restore::kOffload; }
  bool scheduled() const { return spec_.balance == Balance::kProProphet && spec_.block_schedule; }
  const ExpertPlacement& placement(int j, int l) const {
    return spec_.placement.empty() ? home_only_
                                   : spec_.placement[static_cast<std::size_t>(j)][static_cast<std::size_t>(l)];
  }
  bool holds(int j, int l, int rank, int e) const { return placement(j, l).holds(rank, e, home(e)); }
  RankStreams& streams(int r) { return streams_[static_cast<std::size_t>(r)]; }
  StreamId copy_stream(int r) { return b_.stream(RankId(r), StreamRole::kCopy); }

  Segment send_segment(const RankState& s, int q, int c) const;
  void prepare(int j, int l);
  void forward(int j, int l);
  void backward(int j, int l);
  void all_to_all(OpKind kind, const Coords& c, bool to_experts, int chunk,
                  const std::vector<BufferId>& src, const std::vector<BufferId>& dst,
                  const std::vector<std::vector<BufferId>>& frees);
  void expert_forward(int j, int l, int c);
  void expert_backward(int j, int l, int c);
  void restore_t_di(int j, int l, int c);
  void restore_t_m(int j, int l, int c);
  BufferId expert_params(int l, int q, int e);
  BufferId expert_grads(int j, int l, int q, int e);
  void trans(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what);
  // One collective per replicated expert over its home rank and replicas, an
  // op per member rank; per_rank(e, replicas, rank, collective, op) fills in
  // the data and the op's bytes before the op is added.
  template <class PerRank>
  void replica_collectives(int j, int l, const Coords& co, CollectiveKind kind, OpKind op_kind,
                           const char* what, PerRank&& per_rank);
  void agg(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what,
           bool last_part, Phase phase);
  std::int64_t trans_split(int j, int l) const;
  std::int64_t agg_split(int j, int l) const;

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
};

Segment EpBuilder::send_segment(const RankState& s, int q, int c) const {
  Segment seg;
  bool found = false;
  for (std::size_t i = 0; i < s.layout.experts.size(); ++i) {
    if (s.serve[static_cast<std::size_t>(s.layout.experts[i])] != q) continue;
    if (!found) {
      seg.row = s.layout.offset(c, i);
      found = true;
    }
    seg.rows += s.layout.rows_in_chunk(c, i);
  }
  if (!found) seg.row = s.layout.chunk_offset(c);
  return seg;
}

void EpBuilder::prepare(int j, int l) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  L = LayerState{};
  L.rank.resize(static_cast<std::size_t>(P_));
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    s.serve.resize(static_cast<std::size_t>(E_));
    for (int e = 0; e < E_; ++e) s.serve[static_cast<std::size_t>(e)] = holds(j, l, p, e) ? p : home(e);
    // Experts grouped by serving rank so each peer's rows are contiguous.
    std::vector<int> order(static_cast<std::size_t>(E_));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return s.serve[static_cast<std::size_t>(a)] < s.serve[static_cast<std::size_t>(b)];
    });
    s.layout.tokens = load_.tokens_of(j, p);
    s.layout.top_k = m_.top_k;
    s.layout.num_chunks = spec_.chunks;
    s.layout.experts = order;
    for (int e : order) s.layout.expert_rows.push_back(load_.count(j, l, p, e));
  }
  L.chunk.assign(static_cast<std::size_t>(spec_.chunks),
                 std::vector<ChunkRank>(static_cast<std::size_t>(P_)));
  for (int c = 0; c < spec_.chunks; ++c)
    for (int q = 0; q < P_; ++q) {
      ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
      for (int p = 0; p < P_; ++p) {
        Segment seg = send_segment(L.rank[static_cast<std::size_t>(p)], q, c);
        cr.recv.push_back({cr.rows, seg.rows});
        cr.rows += seg.rows;
      }
      for (int e = 0; e < E_; ++e) {
        bool served = false;
        std::vector<RowSpan> spans;
        std::int64_t rows = 0;
        for (int p = 0; p < P_; ++p) {
          const RankState& s = L.rank[static_cast<std::size_t>(p)];
          if (s.serve[static_cast<std::size_t>(e)] != q) continue;
          served = true;
          // e's rows inside p's segment for q.
          std::int64_t within = 0;
          for (std::size_t i = 0; i < s.layout.experts.size(); ++i) {
            const int x = s.layout.experts[i];
            if (s.serve[static_cast<std::size_t>(x)] != q) continue;
            if (x == e) {
              const std::int64_t n = s.layout.rows_in_chunk(c, i);
              if (n > 0) spans.push_back({cr.recv[static_cast<std::size_t>(p)].row + within, n});
              rows += n;
              break;
            }
            within += s.layout.rows_in_chunk(c, i);
          }
        }
        if (served || home(e) == q) {
          cr.experts.push_back(e);
          cr.spans.push_back(std::move(spans));
          cr.expert_rows.push_back(rows);
        }
      }
    }
  if (padded())
    for (int p = 0; p < P_; ++p)
      for (int e = 0; e < E_; ++e) L.capacity = std::max(L.capacity, load_.count(j, l, p, e));
  L.replica_params.assign(static_cast<std::size_t>(E_), std::vector<BufferId>(static_cast<std::size_t>(P_)));
  L.replica_grads = L.replica_params;
  L.fwd_slots.assign(static_cast<std::size_t>(P_), {});
  L.bwd_slots.assign(static_cast<std::size_t>(P_), {});
}

BufferId EpBuilder::expert_params(int l, int q, int e) {
  if (home(e) == q) return experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)].params;
  return layers_[static_cast<std::size_t>(l)].replica_params[static_cast<std::size_t>(e)][static_cast<std::size_t>(q)];
}

BufferId EpBuilder::expert_grads(int j, int l, int q, int e) {
  if (home(e) == q) return experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)].grads;
  BufferId& g = layers_[static_cast<std::size_t>(l)].replica_grads[static_cast<std::size_t>(e)][static_cast<std::size_t>(q)];
  if (!g.valid()) {
    BufferBinding zero;
    zero.kind = BufferBinding::Kind::kZero;
    g = add_buffer(b_, RankId(q), BufferTag::kGrads, fmt::format("L{}.it{}.expert{}.replica.grads", l, j, e),
                   2 * m_.model_dim, m_.expert_hidden, m_.elem_bytes, coords(l, j, -1, -1, Phase::kBackward),
                   zero);
  }
  return g;
}

void EpBuilder::all_to_all(OpKind kind, const Coords& c, bool to_experts, int chunk,
                           const std::vector<BufferId>& src, const std::vector<BufferId>& dst,
                           const std::vector<std::vector<BufferId>>& frees) {
  const LayerState& L = layers_[static_cast<std::size_t>(c.layer)];
  const CollectiveId id = b_.next_collective();
  std::vector<RankId> group;
  for (int r = 0; r < P_; ++r) group.push_back(RankId(r));
  const std::int64_t row_bytes = m_.model_dim * m_.elem_bytes;
  std::string what = std::string(op_kind_name(kind));
  for (int r = 0; r < P_; ++r) {
    Collective col;
    col.id = id;
    col.kind = CollectiveKind::kAllToAllV;
    col.group = group;
    std::int64_t bytes = 0;
    for (int peer = 0; peer < P_; ++peer) {
      Segment as_source = send_segment(L.rank[static_cast<std::size_t>(r)], peer, chunk);
      Segment as_expert =
          L.chunk[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(r)].recv[static_cast<std::size_t>(peer)];
      Segment s = to_experts ? as_source : as_expert;
      Segment d = to_experts ? as_expert : as_source;
      // Capacity padding: the wire carries C rows per expert of the segment,
      // whatever the rows routed (the views stay the routed rows).
      const std::int64_t padded_bytes = local_ * L.capacity * row_bytes;
      const std::int64_t send_bytes = padded() ? padded_bytes : s.rows * row_bytes;
      const std::int64_t recv_bytes = padded() ? padded_bytes : d.rows * row_bytes;
      col.sends.push_back({RankId(peer), View{src[static_cast<std::size_t>(r)], s.row, s.rows}, send_bytes});
      col.recvs.push_back({RankId(peer), View{dst[static_cast<std::size_t>(r)], d.row, d.rows}, recv_bytes});
      if (peer != r) bytes += send_bytes;
    }
    OpArgs a = op_at(kind, c, what, RankId(r), streams(r).comm);
    a.bytes = bytes;
    a.data = std::move(col);
    if (!frees.empty()) a.free = frees[static_cast<std::size_t>(r)];
    b_.add(std::move(a));
  }
}

void EpBuilder::expert_forward(int j, int l, int c) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kForward);
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
    for (std::size_t i = 0; i < cr.experts.size(); ++i) {
      const int e = cr.experts[i];
      OpArgs a = op_at(OpKind::kExpertFfn, co, fmt::format("expert_ffn.e{}", e), RankId(q), streams(q).compute);
      a.flops = ffn_forward_flops(padded() ? P_ * L.capacity : cr.expert_rows[i], m_.model_dim, m_.expert_hidden);
      a.data = FfnForward{e, expert_params(l, q, e), cr.t_di, cr.t_m, cr.t_do, cr.spans[i]};
      b_.add(std::move(a));
    }
    if (offload_t_m()) {
      OpArgs a = op_at(OpKind::kOffload, co, "offload.T_M", RankId(q), copy_stream(q));
      a.bytes = cr.rows * m_.expert_hidden * m_.elem_bytes;
      a.data = Copy{View{cr.t_m, 0, cr.rows}, View{cr.host_m, 0, cr.rows}};
      b_.add(std::move(a));
    }
  }
}

void EpBuilder::restore_t_di(int j, int l, int c) {
  if (!reuse()) return;
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
  if (recommunicate()) {
    // mpipemoe S2/S4: T_DI is dispatched again from the kept T_I.
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(static_cast<std::size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.rank[static_cast<std::size_t>(r)].t_i);
      dst.push_back(L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(r)].r_di);
      if (c == spec_.chunks - 1) frees[static_cast<std::size_t>(r)].push_back(L.rank[static_cast<std::size_t>(r)].t_i);
    }
    all_to_all(OpKind::kRecommunicate, co, true, c, src, dst, frees);
    return;
  }
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
    OpArgs a = op_at(OpKind::kPrefetch, co, "prefetch.T_DI", RankId(q), copy_stream(q));
    a.bytes = cr.rows * m_.model_dim * m_.elem_bytes;
    a.data = Copy{View{cr.host_di, 0, cr.rows}, View{cr.r_di, 0, cr.rows}};
    a.free = {cr.host_di};
    b_.add(std::move(a));
  }
}

void EpBuilder::restore_t_m(int j, int l, int c) {
  if (!reuse()) return;
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
    if (offload_t_m()) {
      OpArgs a = op_at(OpKind::kPrefetch, co, "prefetch.T_M", RankId(q), copy_stream(q));
      a.bytes = cr.rows * m_.expert_hidden * m_.elem_bytes;
      a.data = Copy{View{cr.host_m, 0, cr.rows}, View{cr.r_m, 0, cr.rows}};
      a.free = {cr.host_m};
      b_.add(std::move(a));
      continue;
    }
    // mpipemoe S3/S4: T_M recomputed from the restored T_DI (one GEMM).
    for (std::size_t i = 0; i < cr.experts.size(); ++i) {
      const int e = cr.experts[i];
      OpArgs a = op_at(OpKind::kRecompute, co, fmt::format("recompute.T_M.e{}", e), RankId(q), streams(q).compute);
      a.flops = ffn_recompute_flops(cr.expert_rows[i], m_.model_dim, m_.expert_hidden);
      a.data = FfnRecompute{e, expert_params(l, q, e), cr.r_di, cr.r_m, cr.spans[i]};
      b_.add(std::move(a));
    }
  }
}

void EpBuilder::expert_backward(int j, int l, int c) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
    for (std::size_t i = 0; i < cr.experts.size(); ++i) {
      const int e = cr.experts[i];
      OpArgs a = op_at(OpKind::kExpertFfn, co, fmt::format("expert_ffn.e{}", e), RankId(q), streams(q).compute);
      a.flops = ffn_backward_flops(padded() ? P_ * L.capacity : cr.expert_rows[i], m_.model_dim, m_.expert_hidden);
      const BufferId input = reuse() ? cr.r_di : cr.t_di;
      const BufferId middle = reuse() ? cr.r_m : cr.t_m;
      a.data = FfnBackward{e, expert_params(l, q, e), expert_grads(j, l, q, e), input, middle,
                           cr.d_t_do, cr.d_t_di, cr.spans[i]};
      if (i + 1 == cr.experts.size() && !reuse()) a.free = {cr.t_di, cr.t_m, cr.d_t_do};
      if (home(e) != q && c == spec_.chunks - 1)
        a.free.push_back(L.replica_params[static_cast<std::size_t>(e)][static_cast<std::size_t>(q)]);
      b_.add(std::move(a));
    }
  }
}

std::int64_t EpBuilder::trans_split(int j, int l) const {
  // SubTrans1 hides under FEC, SubTrans2 under FNEC: rows in proportion.
  const int from = std::max(0, j - 1);
  LayerRouting routing{P_, E_, {}};
  for (int s = 0; s < P_; ++s)
    for (int e = 0; e < E_; ++e) routing.counts.push_back(load_.count(from, l, s, e));
  const auto t = estimate_layer_time(placement_load(routing, placement(j, l)), P_, 0, 0, spec_.perf,
                                     planner_sizes(m_));
  const double total = t.fec + spec_.perf.fnec_seconds;
  const double share = total > 0 ? t.fec / total : 1.0;
  return static_cast<std::int64_t>(std::llround(share * 2.0 * static_cast<double>(m_.model_dim)));
}

std::int64_t EpBuilder::agg_split(int j, int l) const {
  // SubAgg1 hides under BNEC, SubAgg2 under BEC (= 2 FEC, Eq. 3).
  LayerRouting routing{P_, E_, {}};
  for (int s = 0; s < P_; ++s)
    for (int e = 0; e < E_; ++e) routing.counts.push_back(load_.count(j, l, s, e));
  const auto t = estimate_layer_time(placement_load(routing, placement(j, l)), P_, 0, 0, spec_.perf,
                                     planner_sizes(m_));
  const double total = t.bec + spec_.perf.bnec_seconds;
  const double share = total > 0 ? spec_.perf.bnec_seconds / total : 0.0;
  return static_cast<std::int64_t>(std::llround(share * 2.0 * static_cast<double>(m_.model_dim)));
}

template <class PerRank>
void EpBuilder::replica_collectives(int j, int l, const Coords& co, CollectiveKind kind, OpKind op_kind,
                                    const char* what, PerRank&& per_rank) {
  const ExpertPlacement& pl = placement(j, l);
  for (int e = 0; e < E_; ++e) {
    const auto& replicas = pl.replicas[static_cast<std::size_t>(e)];
    if (replicas.empty()) continue;
    std::vector<RankId> group{RankId(home(e))};
    for (int r : replicas) group.push_back(RankId(r));
    std::sort(group.begin(), group.end());
    const CollectiveId id = b_.next_collective();
    for (RankId r : group) {
      Collective col;
      col.id = id;
      col.kind = kind;
      col.group = group;
      col.root = RankId(home(e));
      OpArgs a = op_at(op_kind, co, fmt::format("{}.e{}", what, e), r, streams(r.value).comm);
      per_rank(e, replicas, r, col, a);
      a.data = std::move(col);
      b_.add(std::move(a));
    }
  }
}

void EpBuilder::trans(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what) {
  if (row_end <= row_begin) return;
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, -1, Phase::kForward);
  const std::int64_t bytes = (row_end - row_begin) * m_.expert_hidden * m_.elem_bytes;
  replica_collectives(j, l, co, CollectiveKind::kBroadcast, OpKind::kTrans, what,
                      [&](int e, const std::vector<int>& replicas, RankId r, Collective& col, OpArgs& a) {
    if (r.value == home(e)) {
      for (int rep : replicas)
        col.sends.push_back({RankId(rep), View{experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)].params, row_begin, row_end - row_begin}, bytes});
      a.bytes = bytes * static_cast<std::int64_t>(replicas.size());
    } else {
      BufferId& buf = L.replica_params[static_cast<std::size_t>(e)][static_cast<std::size_t>(r.value)];
      if (!buf.valid())
        buf = add_buffer(b_, r, BufferTag::kParams, fmt::format("L{}.it{}.expert{}.replica.params", l, j, e),
                         2 * m_.model_dim, m_.expert_hidden, m_.elem_bytes, co);
      col.recvs.push_back({RankId(home(e)), View{buf, row_begin, row_end - row_begin}, bytes});
    }
    // The placement was decided by this rank's Plan (pro-prophet Fig. 7).
    if (spec_.balance == Balance::kProProphet) {
      const OpId plan = plan_ops_[static_cast<std::size_t>(j)][static_cast<std::size_t>(l)][static_cast<std::size_t>(r.value)];
      if (plan.valid()) a.extra_deps.push_back(plan);
    }
  });
}

void EpBuilder::agg(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what,
                    bool last_part, Phase phase) {
  if (row_end <= row_begin) return;
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, -1, phase);
  const std::int64_t bytes = (row_end - row_begin) * m_.expert_hidden * m_.elem_bytes;
  replica_collectives(j, l, co, CollectiveKind::kReduce, OpKind::kAgg, what,
                      [&](int e, const std::vector<int>& replicas, RankId r, Collective& col, OpArgs& a) {
    if (r.value == home(e)) {
      for (int rep : replicas)
        col.recvs.push_back({RankId(rep), View{experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)].grads, row_begin, row_end - row_begin}, bytes});
    } else {
      const BufferId g = L.replica_grads[static_cast<std::size_t>(e)][static_cast<std::size_t>(r.value)];
      col.sends.push_back({RankId(home(e)), View{g, row_begin, row_end - row_begin}, bytes});
      a.bytes = bytes;
      if (last_part) a.free = {g};
    }
  });
}

void EpBuilder::forward(int j, int l) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, -1, Phase::kForward);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  const int n = spec_.chunks;

  // Pro-Prophet Alg. 2: block 0 has no earlier block to hide its Trans.
  if (scheduled() && l == 0) trans(j, 0, 0, 2 * M, "trans");

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens;
    if (l == 0) {
      BufferBinding in;
      in.kind = BufferBinding::Kind::kModelInput;
      in.iteration = j;
      in.block = p;
      s.x = add_buffer(b_, RankId(p), BufferTag::kActivation, fmt::format("it{}.input", j), tokens, M,
                       m_.elem_bytes, co, in);
    } else {
      s.x = layers_[static_cast<std::size_t>(l - 1)].rank[static_cast<std::size_t>(p)].z;
    }
    s.probs = add_buffer(b_, RankId(p), BufferTag::kRouting, op_name(co, "probs"), tokens, E_, 4, co);
    s.routing = add_buffer(b_, RankId(p), BufferTag::kRouting, op_name(co, "routing"), tokens,
                           2 * m_.top_k, 4, co);
    OpArgs a = op_at(OpKind::kGate, co, "gate", RankId(p), streams(p).compute);
    a.flops = gate_forward_flops(tokens, M, E_);
    a.data = GateForward{View{s.x, 0, tokens}, gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(p)].params,
                         s.probs, s.routing, m_.top_k};
    b_.add(std::move(a));
  }

  std::vector<OpId> plan_now(static_cast<std::size_t>(P_));
  if (spec_.balance == Balance::kProProphet && !spec_.block_schedule) {
    // Unscheduled (Fig. 7): Plan on this iteration's gate output, then Trans.
    for (int p = 0; p < P_; ++p) {
      OpArgs a = op_at(OpKind::kPlan, co, "plan", RankId(p), streams(p).compute);
      a.flops = spec_.perf.plan_flops;
      a.data = plan_search(L.rank[static_cast<std::size_t>(p)]);
      a.extra_access = {{L.rank[static_cast<std::size_t>(p)].routing, schema::Access::kRead}};
      plan_now[static_cast<std::size_t>(p)] = b_.add(std::move(a));
      plan_ops_[static_cast<std::size_t>(j)][static_cast<std::size_t>(l)][static_cast<std::size_t>(p)] =
          plan_now[static_cast<std::size_t>(p)];
    }
    trans(j, l, 0, 2 * M, "trans");
  } else if (spec_.balance == Balance::kFasterMoe) {
    trans(j, l, 0, 2 * M, "shadow_broadcast");
  }

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t rows = s.layout.total_rows();
    s.t_i = add_buffer(b_, RankId(p), BufferTag::kTI, op_name(co, "T_I"), rows, M, m_.elem_bytes, co);
    s.t_o = add_buffer(b_, RankId(p), BufferTag::kTO, op_name(co, "T_O"), rows, M, m_.elem_bytes, co);
    OpArgs a = op_at(OpKind::kPermute, co, "permute", RankId(p), streams(p).compute);
    a.bytes = rows * M * m_.elem_bytes;
    if (padded()) a.flops = einsum_flops(l, s.layout.tokens);
    a.data = Permute{View{s.x, 0, s.layout.tokens}, s.routing, s.layout, View{s.t_i, 0, rows}};
    if (plan_now[static_cast<std::size_t>(p)].valid()) a.extra_deps.push_back(plan_now[static_cast<std::size_t>(p)]);
    b_.add(std::move(a));
  }

  // Chunk buffers: one set per chunk, or (mpipemoe reuse, Eq. 5) two ring
  // slots for T_DI and T_DO and one for T_M, sized for their largest chunk.
  for (int q = 0; q < P_; ++q) {
    std::vector<BufferId> di_slot(2), do_slot(2), m_slot(1);
    for (int c = 0; c < n; ++c) {
      ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
      const Coords cc = coords(l, j, -1, chunk_coord(c), Phase::kForward);
      if (!reuse()) {
        cr.t_di = add_buffer(b_, RankId(q), BufferTag::kTDI, op_name(cc, "T_DI"), cr.rows, M, m_.elem_bytes, cc);
        cr.t_m = add_buffer(b_, RankId(q), BufferTag::kTM, op_name(cc, "T_M"), cr.rows, m_.expert_hidden, m_.elem_bytes, cc);
        cr.t_do = add_buffer(b_, RankId(q), BufferTag::kTDO, op_name(cc, "T_DO"), cr.rows, M, m_.elem_bytes, cc);
        // Chunks are views of one T_DO tensor (mpipemoe Eq. 2/4): it lives
        // until the layer's output is combined.
        L.fwd_slots[static_cast<std::size_t>(q)].push_back(cr.t_do);
        continue;
      }
      std::int64_t max2 = 0, max1 = 0;
      for (int c2 = c % 2; c2 < n; c2 += 2)
        max2 = std::max(max2, L.chunk[static_cast<std::size_t>(c2)][static_cast<std::size_t>(q)].rows);
      for (int c2 = 0; c2 < n; ++c2)
        max1 = std::max(max1, L.chunk[static_cast<std::size_t>(c2)][static_cast<std::size_t>(q)].rows);
      const Coords slot = coords(l, j, -1, c % 2, Phase::kForward);
      if (!di_slot[static_cast<std::size_t>(c % 2)].valid()) {
        di_slot[static_cast<std::size_t>(c % 2)] = add_buffer(b_, RankId(q), BufferTag::kTDI, op_name(slot, "T_DI.slot"), max2, M, m_.elem_bytes, slot);
        do_slot[static_cast<std::size_t>(c % 2)] = add_buffer(b_, RankId(q), BufferTag::kTDO, op_name(slot, "T_DO.slot"), max2, M, m_.elem_bytes, slot);
      }
      if (!m_slot[0].valid())
        m_slot[0] = add_buffer(b_, RankId(q), BufferTag::kTM, op_name(co, "T_M.slot"), max1, m_.expert_hidden, m_.elem_bytes, co);
      cr.t_di = di_slot[static_cast<std::size_t>(c % 2)];
      cr.t_do = do_slot[static_cast<std::size_t>(c % 2)];
      cr.t_m = m_slot[0];
      BufferBinding none;
      if (offload_t_di())
        cr.host_di = add_buffer(b_, RankId(q), BufferTag::kHostOffload, op_name(cc, "T_DI.host"), cr.rows, M,
                                m_.elem_bytes, cc, none, schema::MemoryKind::kPinnedHost);
      if (offload_t_m())
        cr.host_m = add_buffer(b_, RankId(q), BufferTag::kHostOffload, op_name(cc, "T_M.host"), cr.rows,
                               m_.expert_hidden, m_.elem_bytes, cc, none, schema::MemoryKind::kPinnedHost);
    }
    auto& slots = L.fwd_slots[static_cast<std::size_t>(q)];
    for (BufferId id : {di_slot[0], di_slot[1], do_slot[0], do_slot[1], m_slot[0]})
      if (id.valid()) slots.push_back(id);
  }

  auto dispatch = [&](int c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(static_cast<std::size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.rank[static_cast<std::size_t>(r)].t_i);
      dst.push_back(L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(r)].t_di);
      if (c == n - 1 && !recommunicate()) frees[static_cast<std::size_t>(r)].push_back(L.rank[static_cast<std::size_t>(r)].t_i);
    }
    all_to_all(OpKind::kDispatchAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kForward), true, c, src, dst, frees);
    if (offload_t_di())
      for (int q = 0; q < P_; ++q) {
        ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
        const Coords cc = coords(l, j, -1, chunk_coord(c), Phase::kForward);
        OpArgs a = op_at(OpKind::kOffload, cc, "offload.T_DI", RankId(q), copy_stream(q));
        a.bytes = cr.rows * M * m_.elem_bytes;
        a.data = Copy{View{cr.t_di, 0, cr.rows}, View{cr.host_di, 0, cr.rows}};
        b_.add(std::move(a));
      }
  };
  auto combine = [&](int c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(static_cast<std::size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(r)].t_do);
      dst.push_back(L.rank[static_cast<std::size_t>(r)].t_o);
    }
    all_to_all(OpKind::kCombineAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kForward), false, c, src, dst, frees);
  };
  auto after_dispatch = [&] {
    if (!scheduled()) return;
    // Alg. 2 line 7: Plan of iteration j+1 beside this block's all-to-all,
    // on this iteration's distribution (the locality of Sec. II-B).
    if (j + 1 < spec_.common.iterations)
      for (int p = 0; p < P_; ++p) {
        OpArgs a = op_at(OpKind::kPlan, co, fmt::format("plan.for_it{}", j + 1), RankId(p), streams(p).compute);
        a.flops = spec_.perf.plan_flops;
        a.data = plan_search(L.rank[static_cast<std::size_t>(p)]);
        a.extra_access = {{L.rank[static_cast<std::size_t>(p)].routing, schema::Access::kRead}};
        plan_ops_[static_cast<std::size_t>(j + 1)][static_cast<std::size_t>(l)][static_cast<std::size_t>(p)] = b_.add(std::move(a));
      }
    // Alg. 2 line 8: SubTrans1 of block l+1 beside FEC of block l.
    if (l + 1 < m_.num_layers) trans(j, l + 1, 0, trans_split(j, l + 1), "sub_trans1");
  };

  if (spec_.alternate) {
    // mpipemoe Fig. 7(a): S_1, then S_{i+1} before R_i.
    dispatch(0);
    for (int c = 0; c < n; ++c) {
      if (c + 1 < n) dispatch(c + 1);
      expert_forward(j, l, c);
      combine(c);
    }
  } else {
    // pipemoe Eq. 9-11: D_1..D_r, E_1..E_r, C_1..C_r.
    for (int c = 0; c < n; ++c) dispatch(c);
    after_dispatch();
    for (int c = 0; c < n; ++c) expert_forward(j, l, c);
    for (int c = 0; c < n; ++c) combine(c);
  }

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens;
    BufferBinding out;
    if (last && !dense) {
      out.kind = BufferBinding::Kind::kModelOutput;
      out.iteration = j;
      out.block = p;
    }
    s.y = add_buffer(b_, RankId(p), BufferTag::kActivation, op_name(co, "moe_out"), tokens, M, m_.elem_bytes, co, out);
    OpArgs a = op_at(OpKind::kUnpermute, co, "unpermute", RankId(p), streams(p).compute);
    a.bytes = s.layout.total_rows() * M * m_.elem_bytes;
    if (padded()) a.flops = einsum_flops(l, tokens);
    a.data = Unpermute{s.routing, s.layout, View{s.t_o, 0, s.layout.total_rows()}, View{s.y, 0, tokens}};
    a.free = L.fwd_slots[static_cast<std::size_t>(p)];
    if (last && !dense && !m_.attention) a.free.push_back(s.y);
    b_.add(std::move(a));
  }

  // Alg. 2 line 10: SubTrans2 of block l+1 beside FNEC of block l.
  if (scheduled() && l + 1 < m_.num_layers) trans(j, l + 1, trans_split(j, l + 1), 2 * M, "sub_trans2");

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens;
    if (m_.attention) {
      OpArgs a = op_at(OpKind::kAttention, co, "attention", RankId(p), streams(p).compute);
      a.flops = attention_forward_flops(tokens, M, m_.sequence_length, 1);
      a.data = TimingOnly{attention_work(View{s.y, 0, tokens}, tokens, M, m_.sequence_length, 1, false), {}};
      a.extra_access = {{s.y, schema::Access::kReadWrite}};
      if (last && !dense) a.free = {s.y};
      b_.add(std::move(a));
    }
    if (dense) {
      BufferBinding out;
      if (last) {
        out.kind = BufferBinding::Kind::kModelOutput;
        out.iteration = j;
        out.block = p;
      }
      s.mid = add_buffer(b_, RankId(p), BufferTag::kActivation, op_name(co, "dense_hidden"), tokens, m_.dense_hidden, m_.elem_bytes, co);
      s.z = add_buffer(b_, RankId(p), BufferTag::kActivation, op_name(co, "block_out"), tokens, M, m_.elem_bytes, co, out);
      OpArgs a = op_at(OpKind::kDenseFfn, co, "dense_ffn", RankId(p), streams(p).compute);
      a.flops = ffn_forward_flops(tokens, M, m_.dense_hidden);
      a.data = FfnForward{-1, dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(p)].params, s.y, s.mid, s.z, {RowSpan{0, tokens}}};
      if (last) a.free = {s.z};
      b_.add(std::move(a));
    } else {
      s.z = s.y;
    }
  }
}

void EpBuilder::backward(int j, int l) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, -1, Phase::kBackward);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  const int n = spec_.chunks;
  const std::int64_t agg_rows1 = scheduled() && l + 1 < m_.num_layers ? agg_split(j, l + 1) : 0;

  // Alg. 2 line 12: SubAgg1 of block l+1 beside BNEC of block l.
  if (scheduled() && l + 1 < m_.num_layers) agg(j, l + 1, 0, agg_rows1, "sub_agg1", agg_rows1 == 2 * M, Phase::kBackward);

  std::vector<BufferId> dy(static_cast<std::size_t>(P_));
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens;
    BufferId dz;
    if (last) {
      BufferBinding g;
      g.kind = BufferBinding::Kind::kOutputGrad;
      g.iteration = j;
      g.block = p;
      dz = add_buffer(b_, RankId(p), BufferTag::kActivationGrad, fmt::format("it{}.output_grad", j), tokens, M, m_.elem_bytes, co, g);
    } else {
      dz = layers_[static_cast<std::size_t>(l + 1)].rank[static_cast<std::size_t>(p)].dx;
    }
    BufferId d = dz;
    if (dense) {
      d = add_buffer(b_, RankId(p), BufferTag::kActivationGrad, op_name(co, "d_moe_out"), tokens, M, m_.elem_bytes, co);
      OpArgs a = op_at(OpKind::kDenseFfn, co, "dense_ffn", RankId(p), streams(p).compute);
      a.flops = ffn_backward_flops(tokens, M, m_.dense_hidden);
      const auto& pb = dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(p)];
      a.data = FfnBackward{-1, pb.params, pb.grads, s.y, s.mid, dz, d, {RowSpan{0, tokens}}};
      a.free = {s.y, s.mid, dz};
      b_.add(std::move(a));
    }
    if (m_.attention) {
      OpArgs a = op_at(OpKind::kAttention, co, "attention", RankId(p), streams(p).compute);
      a.flops = 2.0 * attention_forward_flops(tokens, M, m_.sequence_length, 1);
      a.data = TimingOnly{attention_work(View{d, 0, tokens}, tokens, M, m_.sequence_length, 1, true), {}};
      a.extra_access = {{d, schema::Access::kReadWrite}};
      b_.add(std::move(a));
    }
    dy[static_cast<std::size_t>(p)] = d;
  }

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens, rows = s.layout.total_rows();
    s.d_t_o = add_buffer(b_, RankId(p), BufferTag::kGradTO, op_name(co, "dT_O"), rows, M, m_.elem_bytes, co);
    s.d_t_i = add_buffer(b_, RankId(p), BufferTag::kGradTI, op_name(co, "dT_I"), rows, M, m_.elem_bytes, co);
    s.d_weights = add_buffer(b_, RankId(p), BufferTag::kRouting, op_name(co, "d_weights"), tokens, m_.top_k, 4, co);
    OpArgs a = op_at(OpKind::kUnpermute, co, "unpermute", RankId(p), streams(p).compute);
    a.bytes = 2 * rows * M * m_.elem_bytes;
    if (padded()) a.flops = 2.0 * einsum_flops(l, tokens);  // gradients of expert output and combine weights
    a.data = UnpermuteBackward{s.routing, s.layout, View{dy[static_cast<std::size_t>(p)], 0, tokens},
                               View{s.t_o, 0, rows}, View{s.d_t_o, 0, rows}, s.d_weights};
    a.free = {s.t_o};
    // The output gradient of a block without dense part is the next block's dx.
    if (dy[static_cast<std::size_t>(p)].valid()) a.free.push_back(dy[static_cast<std::size_t>(p)]);
    b_.add(std::move(a));
  }

  for (int q = 0; q < P_; ++q) {
    std::vector<BufferId> di(2), dtdo(2), dtdi(2), tm(1);
    for (int c = 0; c < n; ++c) {
      ChunkRank& cr = L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(q)];
      const Coords cc = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
      if (!reuse()) {
        cr.d_t_do = add_buffer(b_, RankId(q), BufferTag::kGradTDO, op_name(cc, "dT_DO"), cr.rows, M, m_.elem_bytes, cc);
        cr.d_t_di = add_buffer(b_, RankId(q), BufferTag::kGradTDI, op_name(cc, "dT_DI"), cr.rows, M, m_.elem_bytes, cc);
        continue;
      }
      std::int64_t max2 = 0, max1 = 0;
      for (int c2 = c % 2; c2 < n; c2 += 2)
        max2 = std::max(max2, L.chunk[static_cast<std::size_t>(c2)][static_cast<std::size_t>(q)].rows);
      for (int c2 = 0; c2 < n; ++c2)
        max1 = std::max(max1, L.chunk[static_cast<std::size_t>(c2)][static_cast<std::size_t>(q)].rows);
      const std::size_t s = static_cast<std::size_t>(c % 2);
      const Coords slot = coords(l, j, -1, c % 2, Phase::kBackward);
      if (!di[s].valid()) {
        di[s] = add_buffer(b_, RankId(q), BufferTag::kTDI, op_name(slot, "T_DI.restore.slot"), max2, M, m_.elem_bytes, slot);
        dtdo[s] = add_buffer(b_, RankId(q), BufferTag::kGradTDO, op_name(slot, "dT_DO.slot"), max2, M, m_.elem_bytes, slot);
        dtdi[s] = add_buffer(b_, RankId(q), BufferTag::kGradTDI, op_name(slot, "dT_DI.slot"), max2, M, m_.elem_bytes, slot);
      }
      if (!tm[0].valid())
        tm[0] = add_buffer(b_, RankId(q), BufferTag::kTM, op_name(co, "T_M.restore.slot"), max1, m_.expert_hidden, m_.elem_bytes, co);
      cr.r_di = di[s];
      cr.d_t_do = dtdo[s];
      cr.d_t_di = dtdi[s];
      cr.r_m = tm[0];
    }
    auto& slots = L.bwd_slots[static_cast<std::size_t>(q)];
    for (BufferId id : {di[0], di[1], dtdo[0], dtdo[1], dtdi[0], dtdi[1], tm[0]})
      if (id.valid()) slots.push_back(id);
  }

  auto combine_bwd = [&](int c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(static_cast<std::size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.rank[static_cast<std::size_t>(r)].d_t_o);
      dst.push_back(L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(r)].d_t_do);
      if (c == n - 1) frees[static_cast<std::size_t>(r)].push_back(L.rank[static_cast<std::size_t>(r)].d_t_o);
    }
    all_to_all(OpKind::kCombineAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kBackward), true, c, src, dst, frees);
  };
  auto dispatch_bwd = [&](int c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(static_cast<std::size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(r)].d_t_di);
      dst.push_back(L.rank[static_cast<std::size_t>(r)].d_t_i);
      if (!reuse()) frees[static_cast<std::size_t>(r)].push_back(L.chunk[static_cast<std::size_t>(c)][static_cast<std::size_t>(r)].d_t_di);
    }
    all_to_all(OpKind::kDispatchAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kBackward), false, c, src, dst, frees);
  };

  if (spec_.alternate) {
    // Symmetric to the forward pass (mpipemoe Sec. III-B); T_DI is restored
    // one partition ahead, T_M (one slot) just before its expert backward.
    combine_bwd(0);
    restore_t_di(j, l, 0);
    for (int c = 0; c < n; ++c) {
      if (c + 1 < n) {
        combine_bwd(c + 1);
        restore_t_di(j, l, c + 1);
      }
      restore_t_m(j, l, c);
      expert_backward(j, l, c);
      dispatch_bwd(c);
    }
  } else {
    for (int c = 0; c < n; ++c) combine_bwd(c);
    // Alg. 2 line 14: SubAgg2 of block l+1 beside BEC of block l.
    if (scheduled() && l + 1 < m_.num_layers) agg(j, l + 1, agg_rows1, 2 * M, "sub_agg2", true, Phase::kBackward);
    for (int c = 0; c < n; ++c) expert_backward(j, l, c);
    // Fig. 7 (and FasterMoE): gradients aggregated right after the expert backward.
    if (spec_.balance == Balance::kProProphet && !spec_.block_schedule) agg(j, l, 0, 2 * M, "agg", true, Phase::kBackward);
    if (spec_.balance == Balance::kFasterMoe) agg(j, l, 0, 2 * M, "shadow_reduce", true, Phase::kBackward);
    for (int c = 0; c < n; ++c) dispatch_bwd(c);
  }

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens, rows = s.layout.total_rows();
    BufferBinding g;
    g.kind = l == 0 ? BufferBinding::Kind::kInputGrad : BufferBinding::Kind::kZero;
    g.iteration = l == 0 ? j : -1;
    g.block = l == 0 ? p : -1;
    s.dx = add_buffer(b_, RankId(p), BufferTag::kActivationGrad, l == 0 ? fmt::format("it{}.input_grad", j) : op_name(co, "dx"),
                      tokens, M, m_.elem_bytes, co, g);
    OpArgs a = op_at(OpKind::kPermute, co, "permute", RankId(p), streams(p).compute);
    a.bytes = rows * M * m_.elem_bytes;
    if (padded()) a.flops = einsum_flops(l, tokens);
    a.data = PermuteBackward{s.routing, s.layout, View{s.d_t_i, 0, rows}, View{s.dx, 0, tokens}};
    a.free = L.bwd_slots[static_cast<std::size_t>(p)];
    a.free.push_back(s.d_t_i);
    b_.add(std::move(a));
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    const std::int64_t tokens = s.layout.tokens;
    const auto& gp = gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(p)];
    OpArgs a = op_at(OpKind::kGate, co, "gate", RankId(p), streams(p).compute);
    a.flops = 2.0 * gate_forward_flops(tokens, M, E_);
    a.data = GateBackward{View{s.x, 0, tokens}, gp.params, gp.grads, s.probs, s.routing, s.d_weights, View{s.dx, 0, tokens}};
    a.free = {s.x, s.probs, s.routing, s.d_weights};
    if (l == 0) a.free.push_back(s.dx);
    b_.add(std::move(a));
  }
  // Data-parallel gradients of the gate and the dense FFN (DDP-style, per layer).
  if (P_ > 1) {
    std::vector<RankId> group;
    for (int r = 0; r < P_; ++r) group.push_back(RankId(r));
    std::vector<const std::vector<ParamBuffers>*> params{&gate_[static_cast<std::size_t>(l)]};
    if (dense) params.push_back(&dense_[static_cast<std::size_t>(l)]);
    for (const auto* pv : params) {
      const CollectiveId id = b_.next_collective();
      for (int r = 0; r < P_; ++r) {
        const BufferId g = (*pv)[static_cast<std::size_t>(r)].grads;
        Collective col;
        col.id = id;
        col.kind = CollectiveKind::kAllReduce;
        col.group = group;
        col.inout = whole(b_, g);
        OpArgs a;
        a.kind = OpKind::kGradAllReduce;
        a.coords = coords(l, j, -1, -1, Phase::kBackward);
        a.name = op_name(a.coords, fmt::format("grad_all_reduce.{}", param_kind_name((*pv)[static_cast<std::size_t>(r)].slice.kind)));
        a.rank = RankId(r);
        a.stream = streams(r).comm;
        a.bytes = b_.buffer(g).bytes();
        a.data = std::move(col);
        b_.add(std::move(a));
      }
    }
  }
  // Alg. 2: block 0 has no earlier block to hide its Agg under.
  if (scheduled() && l == 0) agg(j, 0, 0, 2 * M, "agg", true, Phase::kBackward);
}

Plan EpBuilder::build() {
  home_only_ = ExpertPlacement::none(E_);
  Plan& plan = b_.plan();
  plan.iterations = spec_.common.iterations;
  plan.blocks = P_;
  plan.dims = {m_.num_layers, E_, m_.top_k, m_.model_dim, m_.expert_hidden, m_.dense_hidden, m_.elem_bytes};
  plan.config_json = spec_.config_json;
  for (int r = 0; r < P_; ++r)
    streams_.push_back({b_.stream(RankId(r), StreamRole::kCompute), b_.stream(RankId(r), StreamRole::kComm), StreamId()});
  for (int l = 0; l < m_.num_layers; ++l) {
    gate_.emplace_back();
    dense_.emplace_back();
    experts_.emplace_back();
    for (int r = 0; r < P_; ++r) {
      gate_.back().push_back(add_param(b_, RankId(r), {ParamKind::kGate, l, -1, 0, E_}, m_.model_dim,
                                       m_.elem_bytes, fmt::format("L{}.gate", l)));
      if (m_.dense_hidden > 0)
        dense_.back().push_back(add_param(b_, RankId(r), {ParamKind::kDense, l, -1, 0, m_.dense_hidden},
                                          2 * m_.model_dim, m_.elem_bytes, fmt::format("L{}.dense", l)));
    }
    for (int e = 0; e < E_; ++e)
      experts_.back().push_back(add_param(b_, RankId(home(e)), {ParamKind::kExpert, l, e, 0, m_.expert_hidden},
                                          2 * m_.model_dim, m_.elem_bytes, fmt::format("L{}.expert{}", l, e)));
  }
  layers_.resize(static_cast<std::size_t>(m_.num_layers));
  plan_ops_.assign(static_cast<std::size_t>(spec_.common.iterations),
                   std::vector<std::vector<OpId>>(static_cast<std::size_t>(m_.num_layers),
                                                  std::vector<OpId>(static_cast<std::size_t>(P_))));
  for (int j = 0; j < spec_.common.iterations; ++j) {
    for (int l = 0; l < m_.num_layers; ++l) {
      prepare(j, l);
      for (int e = 0; e < E_; ++e) {
        plan.placements.push_back({j, l, e, RankId(home(e)), "home"});
        for (int r : placement(j, l).replicas[static_cast<std::size_t>(e)])
          plan.placements.push_back({j, l, e, RankId(r), spec_.balance == Balance::kFasterMoe ? "shadow" : "replica"});
      }
    }
    for (int l = 0; l < m_.num_layers; ++l) forward(j, l);
    for (int l = m_.num_layers - 1; l >= 0; --l) backward(j, l);
    for (int r = 0; r < P_; ++r) {
      for (int l = 0; l < m_.num_layers; ++l) {
        add_sgd(b_, RankId(r), streams(r).compute, gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)], j, m_.learning_rate);
        if (m_.dense_hidden > 0)
          add_sgd(b_, RankId(r), streams(r).compute, dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)], j, m_.learning_rate);
        for (int e = r * local_; e < (r + 1) * local_; ++e)
          add_sgd(b_, RankId(r), streams(r).compute, experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)], j, m_.learning_rate);
      }
    }
  }
  for (int j = 0; j < load_.iterations; ++j)
    for (int l = 0; l < load_.layers; ++l)
      for (int s = 0; s < load_.sources; ++s)
        for (int e = 0; e < load_.experts; ++e)
          plan.loads.push_back({j, l, s, e, load_.count(j, l, s, e)});
  return b_.finish();
}

EpSpec base_spec(std::string variant, std::string json, const CommonConfig& common) {
  EpSpec s;
  s.variant = std::move(variant);
  s.config_json = std::move(json);
  s.common = common;
  return s;
}

LayerRouting layer_routing(const ExpertLoad& load, int j, int l) {
  LayerRouting r{load.sources, load.experts, {}};
  for (int s = 0; s < load.sources; ++s)
    for (int e = 0; e < load.experts; ++e) r.counts.push_back(load.count(j, l, s, e));
  return r;
}

}  // namespace
}  // namespace detail

using detail::Balance;
using detail::EpBuilder;
using detail::EpSpec;

Plan build_dpmoe(const DpMoeConfig& config, const ExpertLoad& load) {
  config.validate();
  detail::check_load(load, config.common.model, config.common.iterations, config.common.ranks, "ranks");
  EpSpec spec = detail::base_spec("dpmoe", to_json(config), config.common);
  spec.capacity_padding = config.capacity_padding;
  return EpBuilder(spec, load).build();
}

Plan build_pipemoe(const PipeMoeConfig& config, const ExpertLoad& load) {
  config.validate();
  detail::check_load(load, config.common.model, config.common.iterations, config.common.ranks, "ranks");
  EpSpec spec = detail::base_spec("pipemoe", to_json(config), config.common);
  spec.chunks = config.pipeline_degree;
  return EpBuilder(spec, load).build();
}

Plan build_mpipemoe(const MPipeMoeConfig& config, const ExpertLoad& load) {
  config.validate();
  detail::check_load(load, config.common.model, config.common.iterations, config.common.ranks, "ranks");
  EpSpec spec = detail::base_spec("mpipemoe", to_json(config), config.common);
  spec.chunks = config.partitions;
  spec.alternate = true;
  spec.strategy = config.strategy;
  return EpBuilder(spec, load).build();
}

std::vector<std::vector<ExpertPlacement>> pro_prophet_placements(const ProProphetConfig& config,
                                                                 const ExpertLoad& load) {
  const auto sizes = planner_sizes(config.common.model);
  std::vector<std::vector<ExpertPlacement>> out;
  for (int j = 0; j < config.common.iterations; ++j) {
    out.emplace_back();
    for (int l = 0; l < config.common.model.num_layers; ++l) {
      if (config.block_schedule && j == 0) {
        out.back().push_back(ExpertPlacement::none(config.common.model.num_experts));
        continue;
      }
      // Scheduled: planned during iteration j-1 on its distribution (locality).
      const int from = config.block_schedule ? j - 1 : j;
      out.back().push_back(pro_prophet_greedy(detail::layer_routing(load, from, l), config.n,
                                              config.alpha, config.model, sizes));
    }
  }
  return out;
}

Plan build_pro_prophet(const ProProphetConfig& config, const ExpertLoad& load) {
  config.validate();
  detail::check_load(load, config.common.model, config.common.iterations, config.common.ranks, "ranks");
  EpSpec spec = detail::base_spec("pro_prophet", to_json(config), config.common);
  spec.balance = Balance::kProProphet;
  spec.block_schedule = config.block_schedule;
  spec.perf = config.model;
  spec.placement = pro_prophet_placements(config, load);
  return EpBuilder(spec, load).build();
}

Plan build_fastermoe(const FasterMoeConfig& config, const ExpertLoad& load) {
  config.validate();
  detail::check_load(load, config.common.model, config.common.iterations, config.common.ranks, "ranks");
  EpSpec spec = detail::base_spec("fastermoe", to_json(config), config.common);
  spec.balance = Balance::kFasterMoe;
  spec.perf = config.model;
  const auto sizes = planner_sizes(config.common.model);
  const int P = config.common.ranks, E = config.common.model.num_experts;
  for (int j = 0; j < config.common.iterations; ++j) {
    spec.placement.emplace_back();
    for (int l = 0; l < config.common.model.num_layers; ++l) {
      if (config.shadow_experts.empty()) {
        spec.placement.back().push_back(fastermoe_shadowing(detail::layer_routing(load, j, l), config.model, sizes));
        continue;
      }
      ExpertPlacement p = ExpertPlacement::none(E);
      for (int e : config.shadow_experts) {
        if (!p.replicas[static_cast<std::size_t>(e)].empty()) continue;
        p.selected.push_back(e);
        for (int d = 0; d < P; ++d)
          if (d != e / (E / P)) p.replicas[static_cast<std::size_t>(e)].push_back(d);
      }
      spec.placement.back().push_back(std::move(p));
    }
  }
  return EpBuilder(spec, load).build();
}

}  // namespace moetrace::plan
