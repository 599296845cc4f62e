// Replicated experts (Pro-Prophet's placements, FasterMoE's shadows): the
// replicas' parameters and gradients, Trans (broadcast of a replicated
// expert's parameters from its home) and Agg (reduction of its gradients to
// its home), and Pro-Prophet's split of both around a block (Alg. 2).
#include <algorithm>
#include <cmath>

#include "ep_builder.h"

namespace moetrace::plan::detail {

BufferId EpBuilder::expert_params(int l, int q, int e) {
  if (home(e) == q) return experts_[at(l)][at(e)].params;
  return layers_[at(l)].replica_params[at(e)][at(q)];
}

BufferId EpBuilder::expert_grads(int j, int l, int q, int e) {
  if (home(e) == q) return experts_[at(l)][at(e)].grads;
  BufferId& g = layers_[at(l)].replica_grads[at(e)][at(q)];
  if (!g.valid()) {
    BufferBinding zero;
    zero.kind = BufferBinding::Kind::kZero;
    g = add_buffer(b_, RankId(q), BufferTag::kGrads, fmt::format("L{}.it{}.expert{}.replica.grads", l, j, e),
                   2 * m_.model_dim, m_.expert_hidden, m_.elem_bytes, coords(l, j, -1, -1, Phase::kBackward),
                   zero);
  }
  return g;
}

LayerRouting layer_routing(const ExpertLoad& load, int j, int l) {
  LayerRouting r{load.sources, load.experts, {}};
  r.counts.reserve(static_cast<std::size_t>(load.sources) * static_cast<std::size_t>(load.experts));
  for (int s = 0; s < load.sources; ++s)
    for (int e = 0; e < load.experts; ++e) r.counts.push_back(load.count(j, l, s, e));
  return r;
}

// pro-prophet Eq. 3-5: layer l under iteration j's placement, on the routing of iteration `from`.
LayerTimeEstimate EpBuilder::estimate(int from, int j, int l) const {
  return estimate_layer_time(placement_load(layer_routing(load_, from, l), placement(j, l)), P_, 0, 0, spec_.perf,
                             planner_sizes(m_));
}

std::int64_t EpBuilder::trans_split(int j, int l) const {
  // SubTrans1 hides under FEC, SubTrans2 under FNEC: rows in proportion.
  const auto t = estimate(std::max(0, j - 1), j, l);
  const double total = t.fec + spec_.perf.fnec_seconds;
  const double share = total > 0 ? t.fec / total : 1.0;
  return static_cast<std::int64_t>(std::llround(share * 2.0 * static_cast<double>(m_.model_dim)));
}

std::int64_t EpBuilder::agg_split(int j, int l) const {
  // SubAgg1 hides under BNEC, SubAgg2 under BEC (= 2 FEC, Eq. 3).
  const auto t = estimate(j, j, l);
  const double total = t.bec + spec_.perf.bnec_seconds;
  const double share = total > 0 ? spec_.perf.bnec_seconds / total : 0.0;
  return static_cast<std::int64_t>(std::llround(share * 2.0 * static_cast<double>(m_.model_dim)));
}

template <class PerRank>
void EpBuilder::replica_collectives(int j, int l, const Coords& co, CollectiveKind kind, OpKind op_kind,
                                    const char* what, PerRank&& per_rank) {
  const ExpertPlacement& pl = placement(j, l);
  for (int e = 0; e < E_; ++e) {
    const auto& replicas = pl.replicas[at(e)];
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
  LayerState& L = layers_[at(l)];
  const Coords co = coords(l, j, -1, -1, Phase::kForward);
  const std::int64_t bytes = (row_end - row_begin) * m_.expert_hidden * m_.elem_bytes;
  replica_collectives(j, l, co, CollectiveKind::kBroadcast, OpKind::kTrans, what,
                      [&](int e, const std::vector<int>& replicas, RankId r, Collective& col, OpArgs& a) {
    if (r.value == home(e)) {
      for (int rep : replicas)
        col.sends.push_back({RankId(rep), View{experts_[at(l)][at(e)].params, row_begin, row_end - row_begin}, bytes});
      a.bytes = bytes * static_cast<std::int64_t>(replicas.size());
    } else {
      BufferId& buf = L.replica_params[at(e)][at(r.value)];
      if (!buf.valid())
        buf = add_buffer(b_, r, BufferTag::kParams, fmt::format("L{}.it{}.expert{}.replica.params", l, j, e),
                         2 * m_.model_dim, m_.expert_hidden, m_.elem_bytes, co);
      col.recvs.push_back({RankId(home(e)), View{buf, row_begin, row_end - row_begin}, bytes});
    }
    // The placement was decided by this rank's Plan (pro-prophet Fig. 7).
    if (spec_.balance == Balance::kProProphet) {
      const OpId plan = plan_ops_[at(j)][at(l)][at(r.value)];
      if (plan.valid()) a.extra_deps.push_back(plan);
    }
  });
}

void EpBuilder::agg(int j, int l, std::int64_t row_begin, std::int64_t row_end, const char* what,
                    bool last_part, Phase phase) {
  if (row_end <= row_begin) return;
  LayerState& L = layers_[at(l)];
  const Coords co = coords(l, j, -1, -1, phase);
  const std::int64_t bytes = (row_end - row_begin) * m_.expert_hidden * m_.elem_bytes;
  replica_collectives(j, l, co, CollectiveKind::kReduce, OpKind::kAgg, what,
                      [&](int e, const std::vector<int>& replicas, RankId r, Collective& col, OpArgs& a) {
    if (r.value == home(e)) {
      for (int rep : replicas)
        col.recvs.push_back({RankId(rep), View{experts_[at(l)][at(e)].grads, row_begin, row_end - row_begin}, bytes});
    } else {
      const BufferId g = L.replica_grads[at(e)][at(r.value)];
      col.sends.push_back({RankId(home(e)), View{g, row_begin, row_end - row_begin}, bytes});
      a.bytes = bytes;
      if (last_part) a.free = {g};
    }
  });
}

}  // namespace moetrace::plan::detail
