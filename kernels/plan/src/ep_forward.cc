// The forward pass of one block: gate, permute, per chunk dispatch, expert
// FFNs and combine (pipemoe Eq. 9-11, or mpipemoe's alternation), unpermute,
// attention and the dense FFN, with Pro-Prophet's Plan and Trans around them.
#include "ep_builder.h"

namespace moetrace::plan::detail {

void EpBuilder::gates(int j, int l, const Coords& co) {
  LayerState& L = layer(l);
  const std::int64_t M = m_.model_dim;
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    if (l == 0) {
      BufferBinding in;
      in.kind = BufferBinding::Kind::kModelInput;
      in.iteration = j;
      in.block = p;
      s.x = add_tensor(p, BufferTag::kActivation, fmt::format("it{}.input", j), s.tokens, M, co, in);
    } else {
      s.x = layer(l - 1).rank[at(p)].z;
    }
    s.probs = add_buffer(b_, RankId(p), BufferTag::kRouting, op_name(co, "probs"), s.tokens, E_, 4, co);
    s.routing = add_buffer(b_, RankId(p), BufferTag::kRouting, op_name(co, "routing"), s.tokens, 2 * m_.top_k, 4, co);
    OpArgs a = op_at(OpKind::kGate, co, "gate", RankId(p), streams(p).compute);
    a.flops = gate_forward_flops(s.tokens, M, E_);
    a.data = GateForward{View{s.x, 0, s.tokens}, gate_[at(l)][at(p)].params, s.probs, s.routing, m_.top_k};
    b_.add(std::move(a));
  }
}

std::pair<std::int64_t, std::int64_t> EpBuilder::slot_rows(int l, int q, int c) const {
  const auto& chunks = layers_[at(l)].chunk;
  std::int64_t same_parity = 0, all = 0;
  for (int c2 = 0; c2 < spec_.chunks; ++c2) {
    const std::int64_t rows = chunks[at(c2)][at(q)].rows;
    if (c2 % 2 == c % 2) same_parity = std::max(same_parity, rows);
    all = std::max(all, rows);
  }
  return {same_parity, all};
}

// Chunk buffers: one set per chunk, or (mpipemoe reuse, Eq. 5) two ring
// slots for T_DI and T_DO and one for T_M, sized for their largest chunk.
void EpBuilder::chunk_buffers(int j, int l, const Coords& co) {
  LayerState& L = layer(l);
  const std::int64_t M = m_.model_dim, H = m_.expert_hidden;
  const int n = spec_.chunks;
  for (int q = 0; q < P_; ++q) {
    std::vector<BufferId> di_slot(2), do_slot(2), m_slot(1);
    for (int c = 0; c < n; ++c) {
      ChunkRank& cr = L.chunk[at(c)][at(q)];
      const Coords cc = coords(l, j, -1, chunk_coord(c), Phase::kForward);
      if (!reuse()) {
        cr.t_di = add_tensor(q, BufferTag::kTDI, op_name(cc, "T_DI"), cr.rows, M, cc);
        cr.t_m = add_tensor(q, BufferTag::kTM, op_name(cc, "T_M"), cr.rows, H, cc);
        cr.t_do = add_tensor(q, BufferTag::kTDO, op_name(cc, "T_DO"), cr.rows, M, cc);
        // Chunks are views of one T_DO tensor (mpipemoe Eq. 2/4): it lives
        // until the layer's output is combined.
        L.fwd_slots[at(q)].push_back(cr.t_do);
        continue;
      }
      const auto [max2, max1] = slot_rows(l, q, c);
      const Coords slot = coords(l, j, -1, c % 2, Phase::kForward);
      const std::size_t s = at(c % 2);
      if (!di_slot[s].valid()) {
        di_slot[s] = add_tensor(q, BufferTag::kTDI, op_name(slot, "T_DI.slot"), max2, M, slot);
        do_slot[s] = add_tensor(q, BufferTag::kTDO, op_name(slot, "T_DO.slot"), max2, M, slot);
      }
      if (!m_slot[0].valid()) m_slot[0] = add_tensor(q, BufferTag::kTM, op_name(co, "T_M.slot"), max1, H, co);
      cr.t_di = di_slot[s];
      cr.t_do = do_slot[s];
      cr.t_m = m_slot[0];
      const BufferBinding none;
      if (offload_t_di())
        cr.host_di = add_buffer(b_, RankId(q), BufferTag::kHostOffload, op_name(cc, "T_DI.host"), cr.rows, M,
                                m_.elem_bytes, cc, none, schema::MemoryKind::kPinnedHost);
      if (offload_t_m())
        cr.host_m = add_buffer(b_, RankId(q), BufferTag::kHostOffload, op_name(cc, "T_M.host"), cr.rows, H,
                               m_.elem_bytes, cc, none, schema::MemoryKind::kPinnedHost);
    }
    auto& slots = L.fwd_slots[at(q)];
    for (BufferId id : {di_slot[0], di_slot[1], do_slot[0], do_slot[1], m_slot[0]})
      if (id.valid()) slots.push_back(id);
  }
}

void EpBuilder::expert_forward(int j, int l, int c) {
  LayerState& L = layer(l);
  const Coords co = coords(l, j, -1, chunk_coord(c), Phase::kForward);
  for (int q = 0; q < P_; ++q) {
    ChunkRank& cr = L.chunk[at(c)][at(q)];
    for (std::size_t i = 0; i < cr.experts.size(); ++i) {
      const int e = cr.experts[i];
      OpArgs a = op_at(OpKind::kExpertFfn, co, fmt::format("expert_ffn.e{}", e), RankId(q), streams(q).compute);
      a.flops = ffn_forward_flops(ffn_rows(L, cr, i), m_.model_dim, m_.expert_hidden);
      a.data = FfnForward{e, expert_params(l, q, e), cr.t_di, cr.t_m, cr.t_do, cr.spans[i], spec_.batched_experts && i > 0};
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

// What a rank must learn of the other ranks' counts before its dispatch,
// each a timing-only collective after the gate (it reads the routing) on
// the comm stream, ahead of the dispatch; its startup is what it costs:
// - FastMoE's prepare_forward (fmoe/functions.py, expert_exchange: each peer
//   gets this rank's E/P counts for its experts) and, with FasterMoE's
//   shadowing, the policy's all_gather of every rank's E counts
//   (fastermoe/shadow_policy.py, global_policy), both before the scatter
//   (FasterMoeConfig::count_exchange);
// - Pro-Prophet: its all-to-all moves each (source, expert) block unpadded
//   (Eq. 1 counts the inputs received), so a rank learns what it receives
//   by an exchange of counts before it, the exchange expert_exchange is;
//   the paper's code is not public, so this is the least such a dispatch
//   needs, not a reading of its code;
// - DeepSpeed-MoE without dropping tokens (capacity_padding): top1gating /
//   top2gating all-reduce the largest expert count with MAX over the
//   expert-parallel group (deepspeed/moe/sharded_moe.py, drop_tokens=False)
//   and read it on the host (int(...)) before the dispatch einsum.
void EpBuilder::count_exchange(int l, const Coords& co) {
  LayerState& L = layer(l);
  const std::int64_t count_bytes = 8;  // int64 counts
  struct Sync {
    const char* what;
    CollectiveKind kind;
    OpKind op;
    std::int64_t bytes;  // a rank sends
  };
  std::vector<Sync> syncs;
  // (FasterMoE's as before at any P; the others need peers to learn from.)
  const bool peers = P_ > 1;
  if (spec_.count_exchange || (peers && spec_.balance == Balance::kProProphet))
    syncs.push_back({"count_exchange", CollectiveKind::kAllToAllV, OpKind::kDispatchAllToAll,
                     (P_ - 1) * local_ * count_bytes});
  if (spec_.count_exchange)
    syncs.push_back({"count_all_gather", CollectiveKind::kAllToAllV, OpKind::kDispatchAllToAll,
                     (P_ - 1) * E_ * count_bytes});
  if (peers && padded())
    syncs.push_back({"capacity_all_reduce", CollectiveKind::kAllReduce, OpKind::kMoeAllReduce, count_bytes});
  const std::vector<RankId> group = world_group();
  for (const Sync& sync : syncs) {
    const CollectiveId id = b_.next_collective();
    for (int p = 0; p < P_; ++p) {
      Collective col;
      col.id = id;
      col.kind = sync.kind;
      col.group = group;
      col.moves_data = false;
      OpArgs a = op_at(sync.op, co, sync.what, RankId(p), streams(p).comm);
      a.bytes = sync.bytes;
      a.data = std::move(col);
      a.extra_access = {{L.rank[at(p)].routing, schema::Access::kRead}};
      b_.add(std::move(a));
    }
  }
}

// Attention and the dense FFN after the combined MoE output y.
void EpBuilder::block_output(int j, int l, const Coords& co) {
  LayerState& L = layer(l);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    const std::int64_t tokens = s.tokens;
    for (int i = 0; i < m_.attention_ops(); ++i) {
      OpArgs a = op_at(OpKind::kAttention, co, "attention", RankId(p), streams(p).compute);
      a.flops = attention_forward_flops(tokens, M, m_.sequence_length, 1);
      a.data = TimingOnly{attention_work(View{s.y, 0, tokens}, tokens, M, m_.sequence_length, 1, false), {}};
      a.extra_access = {{s.y, schema::Access::kReadWrite}};
      if (last && !dense && i + 1 == m_.attention_ops()) a.free = {s.y};
      b_.add(std::move(a));
    }
    if (dense) {
      BufferBinding out;
      if (last) {
        out.kind = BufferBinding::Kind::kModelOutput;
        out.iteration = j;
        out.block = p;
      }
      s.mid = add_tensor(p, BufferTag::kActivation, op_name(co, "dense_hidden"), tokens, m_.dense_hidden, co);
      s.z = add_tensor(p, BufferTag::kActivation, op_name(co, "block_out"), tokens, M, co, out);
      OpArgs a = op_at(OpKind::kDenseFfn, co, "dense_ffn", RankId(p), streams(p).compute);
      a.flops = ffn_forward_flops(tokens, M, m_.dense_hidden);
      a.data = FfnForward{-1, dense_[at(l)][at(p)].params, s.y, s.mid, s.z, {RowSpan{0, tokens}}};
      if (last) a.free = {s.z};
      b_.add(std::move(a));
    } else {
      s.z = s.y;
    }
  }
}

void EpBuilder::forward(int j, int l) {
  LayerState& L = layer(l);
  const Coords co = coords(l, j, -1, -1, Phase::kForward);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  const int n = spec_.chunks;

  // Pro-Prophet Alg. 2: block 0 has no earlier block to hide its Trans.
  if (scheduled() && l == 0) trans(j, 0, 0, 2 * M, "trans");
  gates(j, l, co);
  count_exchange(l, co);

  std::vector<OpId> plan_now(at(P_));
  if (spec_.balance == Balance::kProProphet && !spec_.block_schedule) {
    // Unscheduled (Fig. 7): Plan on this iteration's gate output, then Trans.
    for (int p = 0; p < P_; ++p) {
      OpArgs a = op_at(OpKind::kPlan, co, "plan", RankId(p), streams(p).compute);
      a.flops = spec_.perf.plan_flops;
      a.data = plan_search(L.rank[at(p)]);
      a.extra_access = {{L.rank[at(p)].routing, schema::Access::kRead}};
      plan_now[at(p)] = b_.add(std::move(a));
      plan_ops_[at(j)][at(l)][at(p)] = plan_now[at(p)];
    }
    trans(j, l, 0, 2 * M, "trans");
  } else if (spec_.balance == Balance::kFasterMoe) {
    trans(j, l, 0, 2 * M, "shadow_broadcast");
  }

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    s.t_i = add_tensor(p, BufferTag::kTI, op_name(co, "T_I"), s.rows, M, co);
    s.t_o = add_tensor(p, BufferTag::kTO, op_name(co, "T_O"), s.rows, M, co);
    OpArgs a = op_at(OpKind::kPermute, co, "permute", RankId(p), streams(p).compute);
    a.bytes = s.rows * M * m_.elem_bytes;
    if (padded()) a.flops = einsum_flops(l, s.tokens);
    a.data = Permute{View{s.x, 0, s.tokens}, s.routing, s.layout, View{s.t_i, 0, s.rows}};
    if (plan_now[at(p)].valid()) a.extra_deps.push_back(plan_now[at(p)]);
    b_.add(std::move(a));
  }
  chunk_buffers(j, l, co);

  auto dispatch = [&](int c) {
    const Coords cc = coords(l, j, -1, chunk_coord(c), Phase::kForward);
    all_to_all(OpKind::kDispatchAllToAll, cc, c, true, &RankState::t_i, &ChunkRank::t_di, !recommunicate(), false);
    if (offload_t_di())
      for (int q = 0; q < P_; ++q) {
        ChunkRank& cr = L.chunk[at(c)][at(q)];
        OpArgs a = op_at(OpKind::kOffload, cc, "offload.T_DI", RankId(q), copy_stream(q));
        a.bytes = cr.rows * M * m_.elem_bytes;
        a.data = Copy{View{cr.t_di, 0, cr.rows}, View{cr.host_di, 0, cr.rows}};
        b_.add(std::move(a));
      }
  };
  auto combine = [&](int c) {
    all_to_all(OpKind::kCombineAllToAll, coords(l, j, -1, chunk_coord(c), Phase::kForward), c, false,
               &RankState::t_o, &ChunkRank::t_do, false, false);
  };
  auto after_dispatch = [&] {
    if (!scheduled()) return;
    // Alg. 2 line 7: Plan of iteration j+1 beside this block's all-to-all,
    // on this iteration's distribution (the locality of Sec. II-B).
    if (j + 1 < spec_.common.iterations)
      for (int p = 0; p < P_; ++p) {
        OpArgs a = op_at(OpKind::kPlan, co, fmt::format("plan.for_it{}", j + 1), RankId(p), streams(p).compute);
        a.flops = spec_.perf.plan_flops;
        a.data = plan_search(L.rank[at(p)]);
        a.extra_access = {{L.rank[at(p)].routing, schema::Access::kRead}};
        plan_ops_[at(j + 1)][at(l)][at(p)] = b_.add(std::move(a));
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
    RankState& s = L.rank[at(p)];
    BufferBinding out;
    if (last && !dense) {
      out.kind = BufferBinding::Kind::kModelOutput;
      out.iteration = j;
      out.block = p;
    }
    s.y = add_tensor(p, BufferTag::kActivation, op_name(co, "moe_out"), s.tokens, M, co, out);
    OpArgs a = op_at(OpKind::kUnpermute, co, "unpermute", RankId(p), streams(p).compute);
    a.bytes = s.rows * M * m_.elem_bytes;
    if (padded()) a.flops = einsum_flops(l, s.tokens);
    a.data = Unpermute{s.routing, s.layout, View{s.t_o, 0, s.rows}, View{s.y, 0, s.tokens}};
    a.free = L.fwd_slots[at(p)];
    if (last && !dense && !m_.attention) a.free.push_back(s.y);
    b_.add(std::move(a));
  }

  // Alg. 2 line 10: SubTrans2 of block l+1 beside FNEC of block l.
  if (scheduled() && l + 1 < m_.num_layers) trans(j, l + 1, trans_split(j, l + 1), 2 * M, "sub_trans2");
  block_output(j, l, co);
}

}  // namespace moetrace::plan::detail
