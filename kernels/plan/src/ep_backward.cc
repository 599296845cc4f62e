// The backward pass of one block: dense FFN and attention, unpermute, per
// chunk combine, restore (mpipemoe Table II: prefetch, re-communication or
// recompute), expert FFNs and dispatch, permute, gate, the data-parallel
// gradient all-reduce, with Pro-Prophet's Agg around them.
#include "ep_builder.h"

namespace moetrace::plan::detail {

void EpBuilder::restore_t_di(int j, int l, int c) {
  if (!reuse()) return;
  LayerState& L = layer(l);
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
  if (recommunicate()) {
    // mpipemoe S2/S4: T_DI is dispatched again from the kept T_I.
    all_to_all(OpKind::kRecommunicate, co, c, true, &RankState::t_i, &ChunkRank::r_di, true, false);
    return;
  }
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[at(c)][at(q)];
    OpArgs a = op_at(OpKind::kPrefetch, co, "prefetch.T_DI", RankId(q), copy_stream(q));
    a.bytes = cr.rows * m_.model_dim * m_.elem_bytes;
    a.data = Copy{View{cr.host_di, 0, cr.rows}, View{cr.r_di, 0, cr.rows}};
    a.free = {cr.host_di};
    b_.add(std::move(a));
  }
}

void EpBuilder::restore_t_m(int j, int l, int c) {
  if (!reuse()) return;
  LayerState& L = layer(l);
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[at(c)][at(q)];
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
  LayerState& L = layer(l);
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[at(c)][at(q)];
    for (std::size_t i = 0; i < cr.experts.size(); ++i) {
      const int e = cr.experts[i];
      OpArgs a = op_at(OpKind::kExpertFfn, co, fmt::format("expert_ffn.e{}", e), RankId(q), streams(q).compute);
      a.flops = ffn_backward_flops(ffn_rows(L, cr, i), m_.model_dim, m_.expert_hidden);
      const BufferId input = reuse() ? cr.r_di : cr.t_di;
      const BufferId middle = reuse() ? cr.r_m : cr.t_m;
      a.data = FfnBackward{e, expert_params(l, q, e), expert_grads(j, l, q, e), input, middle,
                           cr.d_t_do, cr.d_t_di, cr.spans[i], spec_.batched_experts && i > 0};
      if (i + 1 == cr.experts.size() && !reuse()) a.free = {cr.t_di, cr.t_m, cr.d_t_do};
      if (home(e) != q && c == spec_.chunks - 1) a.free.push_back(L.replica_params[at(e)][at(q)]);
      b_.add(std::move(a));
    }
  }
}

// The chunks' gradient buffers: one set per chunk, or (reuse) two ring slots
// for the restored T_DI, dT_DO and dT_DI and one for the restored T_M.
void EpBuilder::chunk_grad_buffers(int j, int l, const Coords& co) {
  LayerState& L = layer(l);
  const std::int64_t M = m_.model_dim;
  const int n = spec_.chunks;
  for (int q = 0; q < P_; ++q) {
    std::vector<BufferId> di(2), dtdo(2), dtdi(2), tm(1);
    for (int c = 0; c < n; ++c) {
      ChunkRank& cr = L.chunk[at(c)][at(q)];
      const Coords cc = coords(l, j, -1, chunk_coord(c), Phase::kBackward);
      if (!reuse()) {
        cr.d_t_do = add_tensor(q, BufferTag::kGradTDO, op_name(cc, "dT_DO"), cr.rows, M, cc);
        cr.d_t_di = add_tensor(q, BufferTag::kGradTDI, op_name(cc, "dT_DI"), cr.rows, M, cc);
        continue;
      }
      const auto [max2, max1] = slot_rows(l, q, c);
      const std::size_t s = at(c % 2);
      const Coords slot = coords(l, j, -1, c % 2, Phase::kBackward);
      if (!di[s].valid()) {
        di[s] = add_tensor(q, BufferTag::kTDI, op_name(slot, "T_DI.restore.slot"), max2, M, slot);
        dtdo[s] = add_tensor(q, BufferTag::kGradTDO, op_name(slot, "dT_DO.slot"), max2, M, slot);
        dtdi[s] = add_tensor(q, BufferTag::kGradTDI, op_name(slot, "dT_DI.slot"), max2, M, slot);
      }
      if (!tm[0].valid())
        tm[0] = add_tensor(q, BufferTag::kTM, op_name(co, "T_M.restore.slot"), max1, m_.expert_hidden, co);
      cr.r_di = di[s];
      cr.d_t_do = dtdo[s];
      cr.d_t_di = dtdi[s];
      cr.r_m = tm[0];
    }
    auto& slots = L.bwd_slots[at(q)];
    for (BufferId id : {di[0], di[1], dtdo[0], dtdo[1], dtdi[0], dtdi[1], tm[0]})
      if (id.valid()) slots.push_back(id);
  }
}

// Data-parallel gradients of the gate, the attention and the dense FFN
// (DDP-style, per layer).
void EpBuilder::grad_all_reduce(int j, int l) {
  if (P_ <= 1) return;
  const std::vector<RankId> group = world_group();
  const Coords co = coords(l, j, -1, -1, Phase::kBackward);
  // One all-reduce over every rank of each rank's `params` gradients, or,
  // without `params`, timing only: `bytes` per rank, no data moved.
  auto all_reduce = [&](const std::string& what, const std::vector<ParamBuffers>* params, std::int64_t bytes) {
    const CollectiveId id = b_.next_collective();
    const OpArgs each = op_at(OpKind::kGradAllReduce, co, what, RankId(), StreamId());
    for (int r = 0; r < P_; ++r) {
      Collective col;
      col.id = id;
      col.kind = CollectiveKind::kAllReduce;
      col.group = group;
      OpArgs a = each;
      a.rank = RankId(r);
      a.stream = streams(r).comm;
      if (params) {
        const BufferId g = (*params)[at(r)].grads;
        col.inout = whole(b_, g);
        a.bytes = b_.buffer(g).bytes();
      } else {
        col.moves_data = false;
        a.bytes = bytes;
      }
      a.data = std::move(col);
      b_.add(std::move(a));
    }
  };
  // The attention weights are data parallel like the dense FFN's: Q, K, V
  // and output projections of M x M each. The attention is timing only, so
  // is the all-reduce of its gradients.
  if (m_.attention)
    all_reduce("grad_all_reduce.attention", nullptr,
               m_.attention_ops() * 4 * m_.model_dim * m_.model_dim * m_.elem_bytes);
  std::vector<const std::vector<ParamBuffers>*> params{&gate_[at(l)]};
  if (m_.dense_hidden > 0) params.push_back(&dense_[at(l)]);
  for (const auto* pv : params)
    all_reduce(fmt::format("grad_all_reduce.{}", param_kind_name(pv->front().slice.kind)), pv, 0);
}

void EpBuilder::backward(int j, int l) {
  LayerState& L = layer(l);
  const Coords co = coords(l, j, -1, -1, Phase::kBackward);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  const int n = spec_.chunks;
  const std::int64_t agg_rows1 = scheduled() && l + 1 < m_.num_layers ? agg_split(j, l + 1) : 0;

  // Alg. 2 line 12: SubAgg1 of block l+1 beside BNEC of block l.
  if (scheduled() && l + 1 < m_.num_layers) agg(j, l + 1, 0, agg_rows1, "sub_agg1", agg_rows1 == 2 * M, Phase::kBackward);

  std::vector<BufferId> dy(at(P_));
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    const std::int64_t tokens = s.tokens;
    BufferId dz;
    if (last) {
      BufferBinding g;
      g.kind = BufferBinding::Kind::kOutputGrad;
      g.iteration = j;
      g.block = p;
      dz = add_tensor(p, BufferTag::kActivationGrad, fmt::format("it{}.output_grad", j), tokens, M, co, g);
    } else {
      dz = layer(l + 1).rank[at(p)].dx;
    }
    BufferId d = dz;
    if (dense) {
      d = add_tensor(p, BufferTag::kActivationGrad, op_name(co, "d_moe_out"), tokens, M, co);
      OpArgs a = op_at(OpKind::kDenseFfn, co, "dense_ffn", RankId(p), streams(p).compute);
      a.flops = ffn_backward_flops(tokens, M, m_.dense_hidden);
      const auto& pb = dense_[at(l)][at(p)];
      a.data = FfnBackward{-1, pb.params, pb.grads, s.y, s.mid, dz, d, {RowSpan{0, tokens}}};
      a.free = {s.y, s.mid, dz};
      b_.add(std::move(a));
    }
    for (int i = 0; i < m_.attention_ops(); ++i) {
      OpArgs a = op_at(OpKind::kAttention, co, "attention", RankId(p), streams(p).compute);
      a.flops = 2.0 * attention_forward_flops(tokens, M, m_.sequence_length, 1);
      a.data = TimingOnly{attention_work(View{d, 0, tokens}, tokens, M, m_.sequence_length, 1, true), {}};
      a.extra_access = {{d, schema::Access::kReadWrite}};
      b_.add(std::move(a));
    }
    dy[at(p)] = d;
  }

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    const std::int64_t tokens = s.tokens, rows = s.rows;
    s.d_t_o = add_tensor(p, BufferTag::kGradTO, op_name(co, "dT_O"), rows, M, co);
    s.d_t_i = add_tensor(p, BufferTag::kGradTI, op_name(co, "dT_I"), rows, M, co);
    s.d_weights = add_buffer(b_, RankId(p), BufferTag::kRouting, op_name(co, "d_weights"), tokens, m_.top_k, 4, co);
    OpArgs a = op_at(OpKind::kUnpermute, co, "unpermute", RankId(p), streams(p).compute);
    a.bytes = 2 * rows * M * m_.elem_bytes;
    if (padded()) a.flops = 2.0 * einsum_flops(l, tokens);  // gradients of expert output and combine weights
    a.data = UnpermuteBackward{s.routing, s.layout, View{dy[at(p)], 0, tokens},
                               View{s.t_o, 0, rows}, View{s.d_t_o, 0, rows}, s.d_weights};
    a.free = {s.t_o};
    // The output gradient of a block without dense part is the next block's dx.
    if (dy[at(p)].valid()) a.free.push_back(dy[at(p)]);
    b_.add(std::move(a));
  }
  chunk_grad_buffers(j, l, co);

  auto combine_bwd = [&](int c) {
    all_to_all(OpKind::kCombineAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kBackward), c, true,
               &RankState::d_t_o, &ChunkRank::d_t_do, true, false);
  };
  auto dispatch_bwd = [&](int c) {
    all_to_all(OpKind::kDispatchAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kBackward), c, false,
               &RankState::d_t_i, &ChunkRank::d_t_di, false, !reuse());
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
    RankState& s = L.rank[at(p)];
    const std::int64_t tokens = s.tokens, rows = s.rows;
    BufferBinding g;
    g.kind = l == 0 ? BufferBinding::Kind::kInputGrad : BufferBinding::Kind::kZero;
    g.iteration = l == 0 ? j : -1;
    g.block = l == 0 ? p : -1;
    s.dx = add_tensor(p, BufferTag::kActivationGrad, l == 0 ? fmt::format("it{}.input_grad", j) : op_name(co, "dx"),
                      tokens, M, co, g);
    OpArgs a = op_at(OpKind::kPermute, co, "permute", RankId(p), streams(p).compute);
    a.bytes = rows * M * m_.elem_bytes;
    if (padded()) a.flops = einsum_flops(l, tokens);
    a.data = PermuteBackward{s.routing, s.layout, View{s.d_t_i, 0, rows}, View{s.dx, 0, tokens}};
    a.free = L.bwd_slots[at(p)];
    a.free.push_back(s.d_t_i);
    b_.add(std::move(a));
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    const std::int64_t tokens = s.tokens;
    const auto& gp = gate_[at(l)][at(p)];
    OpArgs a = op_at(OpKind::kGate, co, "gate", RankId(p), streams(p).compute);
    a.flops = 2.0 * gate_forward_flops(tokens, M, E_);
    a.data = GateBackward{View{s.x, 0, tokens}, gp.params, gp.grads, s.probs, s.routing, s.d_weights, View{s.dx, 0, tokens}};
    a.free = {s.x, s.probs, s.routing, s.d_weights};
    if (l == 0) a.free.push_back(s.dx);
    b_.add(std::move(a));
  }
  grad_all_reduce(j, l);
  // Alg. 2: block 0 has no earlier block to hide its Agg under.
  if (scheduled() && l == 0) agg(j, 0, 0, 2 * M, "agg", true, Phase::kBackward);
}

}  // namespace moetrace::plan::detail
