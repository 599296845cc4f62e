#include "moetrace/plan/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "build_common.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {

using detail::OpArgs;
using detail::PlanBuilder;

void CalibrationConfig::validate() const {
  auto fail = [](const std::string& m) { throw ConfigError(m); };
  if (ranks < 1) fail(fmt::format("calibration.ranks ({}) must be at least 1", ranks));
  if (model_dim < 1) fail(fmt::format("calibration.model_dim ({}) must be at least 1", model_dim));
  if (expert_hidden < 1) fail(fmt::format("calibration.expert_hidden ({}) must be at least 1", expert_hidden));
  if (elem_bytes < 1) fail(fmt::format("calibration.elem_bytes ({}) must be at least 1", elem_bytes));
  if (min_rows < 1 || max_rows < min_rows)
    fail(fmt::format("calibration rows [{}, {}] must satisfy 1 <= min_rows <= max_rows", min_rows, max_rows));
  if (min_peer_rows < 1 || max_peer_rows < min_peer_rows)
    fail(fmt::format("calibration peer rows [{}, {}] must satisfy 1 <= min_peer_rows <= max_peer_rows",
                     min_peer_rows, max_peer_rows));
  if (repeats < 1) fail(fmt::format("calibration.repeats ({}) must be at least 1", repeats));
  for (int g : group_sizes)
    if (g < 2 || g > ranks) fail(fmt::format("calibration group size {} must be in [2, ranks = {}]", g, ranks));
  if (routing_ops) {
    if (experts < 1) fail(fmt::format("calibration.experts ({}) must be at least 1", experts));
    if (top_k < 1 || top_k > experts)
      fail(fmt::format("calibration.top_k ({}) must be in [1, experts = {}]", top_k, experts));
  }
}

std::vector<int> CalibrationConfig::groups() const {
  if (!group_sizes.empty()) {
    auto g = group_sizes;
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end()), g.end());
    return g;
  }
  std::vector<int> g;
  for (int s = 2; s <= ranks; s *= 2) g.push_back(s);
  if (ranks >= 2 && (g.empty() || g.back() != ranks)) g.push_back(ranks);
  return g;
}

ModelShape calibration_model_shape(const CalibrationConfig& c) {
  ModelShape m;
  m.num_layers = 1;
  m.num_experts = std::max(1, c.ranks);
  m.top_k = 1;
  if (c.routing_ops) {
    m.num_experts = std::max(m.num_experts, c.experts);
    m.top_k = c.top_k;
  }
  m.model_dim = c.model_dim;
  m.expert_hidden = c.expert_hidden;
  m.elem_bytes = c.elem_bytes;
  return m;
}

namespace {

std::vector<std::int64_t> doubling(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = lo; x <= hi; x *= 2) v.push_back(x);
  if (v.back() != hi) v.push_back(hi);
  return v;
}

class CalibrationBuilder {
 public:
  explicit CalibrationBuilder(const CalibrationConfig& c) : c_(c), b_("calibration", c.ranks) {
    const std::int64_t M = c.model_dim, H = c.expert_hidden;
    const int P = c.ranks;
    peer_slots_ = P;
    ar_rows_ = std::max<std::int64_t>(c.max_peer_rows * std::max(1, P - 1), 1);
    last_.resize(static_cast<std::size_t>(P));
    for (int q = 0; q < P; ++q) {
      Rank r;
      r.compute = b_.stream(RankId(q), StreamRole::kCompute);
      r.comm = b_.stream(RankId(q), StreamRole::kComm);
      r.copy = b_.stream(RankId(q), StreamRole::kCopy);
      const ParamSlice slice{ParamKind::kExpert, 0, q, 0, H};
      const auto p = detail::add_param(b_, RankId(q), slice, 2 * M, c.elem_bytes, fmt::format("calib.rank{}.expert", q));
      r.params = p.params;
      r.grads = p.grads;
      r.x = persistent(q, BufferTag::kTDI, "x", c.max_rows, M);
      r.mid = persistent(q, BufferTag::kTM, "mid", c.max_rows, H);
      r.y = persistent(q, BufferTag::kTDO, "y", c.max_rows, M);
      r.dy = persistent(q, BufferTag::kGradTDO, "dy", c.max_rows, M);
      r.dx = persistent(q, BufferTag::kGradTDI, "dx", c.max_rows, M);
      r.send = persistent(q, BufferTag::kTI, "send", peer_slots_ * c.max_peer_rows, M);
      r.recv = persistent(q, BufferTag::kTO, "recv", peer_slots_ * c.max_peer_rows, M);
      r.ar = persistent(q, BufferTag::kWorkspace, "all_reduce", ar_rows_, M);
      r.dev = persistent(q, BufferTag::kWorkspace, "copy", c.max_rows, M);
      r.host = persistent(q, BufferTag::kHostOffload, "host", c.max_rows, M, schema::MemoryKind::kPinnedHost);
      if (c.routing_ops) {
        // Zero, not the model's W_g: the routing must not depend on values (see the header).
        r.gate_w = persistent(q, BufferTag::kParams, "gate", M, c.experts);
        r.gate_grad = persistent(q, BufferTag::kGrads, "gate.grads", M, c.experts);
        // tokens x top_k rows: what permute writes is what unpermute
        // combines (no expert between them), and one gradient buffer serves
        // both backward ops.
        const std::int64_t routed = c.max_rows * c.top_k;
        r.permuted = persistent(q, BufferTag::kTI, "permuted", routed, M);
        r.d_permuted = persistent(q, BufferTag::kGradTI, "d_permuted", routed, M);
      }
      ranks_.push_back(r);
    }
  }

  Plan build() {
    const int P = c_.ranks;
    for (int rep = 0; rep < c_.repeats; ++rep)
      for (std::int64_t rows : doubling(c_.min_rows, c_.max_rows)) {
        for (int q = 0; q < P; ++q) join(q, {ffn(q, rows, Phase::kForward)});
        if (c_.backward)
          for (int q = 0; q < P; ++q) join(q, {ffn(q, rows, Phase::kBackward)});
      }
    if (c_.routing_ops)
      for (int rep = 0; rep < c_.repeats; ++rep)
        for (std::int64_t rows : doubling(c_.min_rows, c_.max_rows))
          for (int q = 0; q < P; ++q) routing_ops(q, rows);
    for (int g : c_.groups())
      for (int rep = 0; rep < c_.repeats; ++rep)
        for (std::int64_t rows : doubling(c_.min_peer_rows, c_.max_peer_rows)) {
          join_group(g, all_to_all(g, rows));
          if (c_.all_reduce) join_group(g, all_reduce(g, std::min(ar_rows_, rows * (g - 1))));
        }
    if (c_.copies)
      for (int rep = 0; rep < c_.repeats; ++rep)
        for (std::int64_t rows : doubling(c_.min_rows, c_.max_rows))
          for (int q = 0; q < P; ++q) {
            join(q, {copy(q, rows, true)});
            join(q, {copy(q, rows, false)});
          }
    if (c_.interference && P >= 2) interference();
    Plan& plan = b_.plan();
    plan.iterations = 1;
    plan.blocks = P;
    const ModelShape shape = calibration_model_shape(c_);
    plan.dims = {shape.num_layers, shape.num_experts, shape.top_k, shape.model_dim, shape.expert_hidden, 0,
                 shape.elem_bytes};
    plan.config_json = fmt::format(
        R"({{"calibration":{{"ranks":{},"model_dim":{},"expert_hidden":{},"elem_bytes":{},"rows":[{},{}],"peer_rows":[{},{}],"repeats":{}{}}}}})",
        P, c_.model_dim, c_.expert_hidden, c_.elem_bytes, c_.min_rows, c_.max_rows, c_.min_peer_rows,
        c_.max_peer_rows, c_.repeats,
        c_.routing_ops ? fmt::format(R"(,"routing":{{"experts":{},"top_k":{}}})", c_.experts, c_.top_k) : "");
    for (int q = 0; q < P; ++q) plan.placements.push_back({0, 0, q, RankId(q), "home"});
    return b_.finish();
  }

 private:
  struct Rank {
    StreamId compute, comm, copy;
    BufferId params, grads, x, mid, y, dy, dx, send, recv, ar, dev, host;
    BufferId gate_w, gate_grad, permuted, d_permuted;  // routing ops
  };
  // A gate's outputs have its token count as rows: one set per (rank, size).
  struct RoutingBuffers {
    BufferId probs, routing, d_weights;
  };
  enum Class { kComp = 0, kComm = 1, kMem = 2 };

  BufferId persistent(int q, BufferTag tag, const std::string& what, std::int64_t rows, std::int64_t cols,
                      schema::MemoryKind kind = schema::MemoryKind::kDevice) {
    Buffer buf;
    buf.rank = RankId(q);
    buf.tag = tag;
    buf.name = fmt::format("calib.rank{}.{}", q, what);
    buf.rows = rows;
    buf.cols = cols;
    buf.elem_bytes = tag == BufferTag::kRouting ? 4 : c_.elem_bytes;  // ids, probabilities, weights: fp32
    buf.memory = kind;
    buf.persistent = true;
    buf.binding.kind = BufferBinding::Kind::kZero;
    return b_.add_buffer(std::move(buf));
  }

  Coords sample() {
    Coords c;
    c.layer = -1;
    c.iteration = 0;
    c.chunk = next_sample_++;
    c.phase = Phase::kForward;
    return c;
  }

  // Ops of rank q wait for everything the rank ran before.
  void join(int q, std::vector<OpId> ops) { last_[static_cast<std::size_t>(q)] = std::move(ops); }
  void join_group(int g, const std::vector<OpId>& per_rank) {
    for (int q = 0; q < g; ++q) join(q, {per_rank[static_cast<std::size_t>(q)]});
  }
  std::vector<OpId> after(int q) const { return last_[static_cast<std::size_t>(q)]; }

  // A sample op of rank q on `stream`: its own coordinates, and a name
  // "calib.WHAT.rowsN.sK" (".bwd" after a backward one's).
  OpArgs sample_op(int q, OpKind kind, std::string_view what, std::int64_t rows, Phase phase, StreamId stream) {
    Coords co = sample();
    co.phase = phase;
    OpArgs a;
    a.kind = kind;
    a.coords = co;
    a.name = fmt::format("calib.{}.rows{}.s{}{}", what, rows, co.chunk, phase == Phase::kBackward ? ".bwd" : "");
    a.rank = RankId(q);
    a.stream = stream;
    return a;
  }

  OpId ffn(int q, std::int64_t rows, Phase phase, std::vector<OpId> deps = {}, bool chain = true) {
    const Rank& r = ranks_[static_cast<std::size_t>(q)];
    OpArgs a = sample_op(q, OpKind::kExpertFfn, "ffn", rows, phase, r.compute);
    const std::vector<RowSpan> spans = {RowSpan{0, rows}};
    if (phase == Phase::kForward) {
      a.flops = ffn_forward_flops(rows, c_.model_dim, c_.expert_hidden);
      a.data = FfnForward{q, r.params, r.x, r.mid, r.y, spans};
    } else {
      a.flops = ffn_backward_flops(rows, c_.model_dim, c_.expert_hidden);
      a.data = FfnBackward{q, r.params, r.grads, r.x, r.mid, r.dy, r.dx, spans};
    }
    a.extra_deps = chain ? after(q) : std::vector<OpId>{};
    for (OpId d : deps) a.extra_deps.push_back(d);
    return b_.add(std::move(a));
  }

  const RoutingBuffers& routing_buffers(int q, std::int64_t rows) {
    auto [it, fresh] = routing_.try_emplace({q, rows});
    if (fresh) {
      const std::string at = fmt::format("rows{}", rows);
      it->second = {persistent(q, BufferTag::kRouting, "probs." + at, rows, c_.experts),
                    persistent(q, BufferTag::kRouting, "routing." + at, rows, 2 * c_.top_k),
                    persistent(q, BufferTag::kRouting, "d_weights." + at, rows, c_.top_k)};
    }
    return it->second;
  }

  // Where a zero gate routes `rows` tokens: every token to experts 0 ..
  // top_k-1 (all experts listed, as a one-rank workload lists them).
  RoutedLayout tied_layout(std::int64_t rows) const {
    RoutedLayout l;
    l.tokens = rows;
    l.top_k = c_.top_k;
    for (int e = 0; e < c_.experts; ++e) {
      l.experts.push_back(e);
      l.expert_rows.push_back(e < c_.top_k ? rows : 0);
    }
    return l;
  }

  // One op of rank q on its compute stream, after everything the rank ran before.
  void lone(int q, OpKind kind, const char* what, std::int64_t rows, Phase phase, double flops, std::int64_t bytes,
            OpData data) {
    OpArgs a = sample_op(q, kind, what, rows, phase, ranks_[static_cast<std::size_t>(q)].compute);
    a.flops = flops;
    a.bytes = bytes;
    a.data = std::move(data);
    a.extra_deps = after(q);
    join(q, {b_.add(std::move(a))});
  }

  // Gate, permute, unpermute on `rows` tokens, then their backward passes,
  // with the FLOPs and bytes the expert-parallel builders give them
  // (ep_forward.cc, ep_backward.cc: index-based permutes).
  void routing_ops(int q, std::int64_t rows) {
    const Rank& r = ranks_[static_cast<std::size_t>(q)];
    const RoutingBuffers& rb = routing_buffers(q, rows);
    const RoutedLayout l = tied_layout(rows);
    const std::int64_t routed = l.total_rows();
    const std::int64_t moved = routed * c_.model_dim * c_.elem_bytes;
    const double gate_flops = gate_forward_flops(rows, c_.model_dim, c_.experts);
    const View x{r.x, 0, rows}, y{r.y, 0, rows};
    lone(q, OpKind::kGate, "gate", rows, Phase::kForward, gate_flops, 0,
         GateForward{x, r.gate_w, rb.probs, rb.routing, c_.top_k});
    lone(q, OpKind::kPermute, "permute", rows, Phase::kForward, 0, moved,
         Permute{x, rb.routing, l, View{r.permuted, 0, routed}});
    lone(q, OpKind::kUnpermute, "unpermute", rows, Phase::kForward, 0, moved,
         Unpermute{rb.routing, l, View{r.permuted, 0, routed}, y});
    if (!c_.backward) return;
    lone(q, OpKind::kUnpermute, "unpermute", rows, Phase::kBackward, 0, 2 * moved,
         UnpermuteBackward{rb.routing, l, View{r.dy, 0, rows}, View{r.permuted, 0, routed},
                           View{r.d_permuted, 0, routed}, rb.d_weights});
    lone(q, OpKind::kPermute, "permute", rows, Phase::kBackward, 0, moved,
         PermuteBackward{rb.routing, l, View{r.d_permuted, 0, routed}, View{r.dx, 0, rows}});
    lone(q, OpKind::kGate, "gate", rows, Phase::kBackward, 2.0 * gate_flops, 0,
         GateBackward{x, r.gate_w, r.gate_grad, rb.probs, rb.routing, rb.d_weights, View{r.dx, 0, rows}});
  }

  // One collective of `kind` among ranks [0, g): an op of `op_kind` on each
  // member's comm stream, after `deps` (default: the rank's previous op);
  // `fill(q, r, col, a)` gives member q its views and bytes.
  template <typename Fill>
  std::vector<OpId> collective(int g, std::int64_t rows, CollectiveKind kind, OpKind op_kind, std::string_view what,
                               const std::vector<std::vector<OpId>>& deps, Fill fill) {
    const CollectiveId id = b_.next_collective();
    const Coords co = sample();
    std::vector<RankId> group;
    for (int q = 0; q < g; ++q) group.push_back(RankId(q));
    std::vector<OpId> out;
    for (int q = 0; q < g; ++q) {
      const Rank& r = ranks_[static_cast<std::size_t>(q)];
      Collective col;
      col.id = id;
      col.kind = kind;
      col.group = group;
      OpArgs a;
      a.kind = op_kind;
      a.coords = co;
      a.name = fmt::format("calib.{}.g{}.rows{}.s{}", what, g, rows, co.chunk);
      a.rank = RankId(q);
      a.stream = r.comm;
      fill(q, r, col, a);
      a.data = std::move(col);
      a.extra_deps = deps.empty() ? after(q) : deps[static_cast<std::size_t>(q)];
      out.push_back(b_.add(std::move(a)));
    }
    return out;
  }

  // All-to-all among ranks [0, g): `rows` rows of M elements to every other member.
  std::vector<OpId> all_to_all(int g, std::int64_t rows, const std::vector<std::vector<OpId>>& deps = {}) {
    const std::int64_t row_bytes = c_.model_dim * c_.elem_bytes;
    return collective(g, rows, CollectiveKind::kAllToAllV, OpKind::kDispatchAllToAll, "all_to_all", deps,
                      [&](int q, const Rank& r, Collective& col, OpArgs& a) {
                        for (int p = 0; p < g; ++p) {
                          if (p == q) continue;
                          col.sends.push_back({RankId(p), View{r.send, p * c_.max_peer_rows, rows}, rows * row_bytes});
                          col.recvs.push_back({RankId(p), View{r.recv, p * c_.max_peer_rows, rows}, rows * row_bytes});
                        }
                        a.bytes = (g - 1) * rows * row_bytes;
                      });
  }

  std::vector<OpId> all_reduce(int g, std::int64_t rows) {
    return collective(g, rows, CollectiveKind::kAllReduce, OpKind::kGradAllReduce, "all_reduce", {},
                      [&](int, const Rank& r, Collective& col, OpArgs& a) {
                        col.inout = View{r.ar, 0, rows};
                        a.bytes = rows * c_.model_dim * c_.elem_bytes;
                      });
  }

  OpId copy(int q, std::int64_t rows, bool offload, std::vector<OpId> deps = {}, bool chain = true) {
    const Rank& r = ranks_[static_cast<std::size_t>(q)];
    OpArgs a = sample_op(q, offload ? OpKind::kOffload : OpKind::kPrefetch, offload ? "offload" : "prefetch", rows,
                         Phase::kForward, r.copy);
    a.bytes = rows * c_.model_dim * c_.elem_bytes;
    a.data = offload ? Copy{View{r.dev, 0, rows}, View{r.host, 0, rows}} : Copy{View{r.host, 0, rows}, View{r.dev, 0, rows}};
    a.extra_deps = chain ? after(q) : std::vector<OpId>{};
    for (OpId d : deps) a.extra_deps.push_back(d);
    return b_.add(std::move(a));
  }

  // --- interference -------------------------------------------------------

  double flops_per_row() const { return 4.0 * static_cast<double>(c_.model_dim * c_.expert_hidden); }
  double row_bytes() const { return static_cast<double>(c_.model_dim * c_.elem_bytes); }

  // Estimated seconds of one op of a class at its largest size.
  double longest(Class k) const {
    const auto& e = c_.estimates;
    switch (k) {
      case kComp: return 2 * e.gemm_alpha_s + e.gemm_seconds_per_flop * flops_per_row() * static_cast<double>(c_.max_rows);
      case kComm:
        return e.all_to_all_alpha_s + e.all_to_all_seconds_per_byte * row_bytes() * static_cast<double>(c_.max_peer_rows) *
                                          (c_.ranks - 1);
      case kMem: return e.copy_alpha_s + e.copy_seconds_per_byte * row_bytes() * static_cast<double>(c_.max_rows);
    }
    return 0;
  }

  // Size (rows; rows per peer for all-to-alls) of an op of class k lasting about `seconds`.
  std::int64_t rows_for(Class k, double seconds) const {
    const auto& e = c_.estimates;
    double rows = 1;
    std::int64_t lo = 1, hi = c_.max_rows;
    switch (k) {
      case kComp: rows = (seconds - 2 * e.gemm_alpha_s) / (e.gemm_seconds_per_flop * flops_per_row()); break;
      case kComm:
        rows = (seconds - e.all_to_all_alpha_s) / (e.all_to_all_seconds_per_byte * row_bytes() * (c_.ranks - 1));
        hi = c_.max_peer_rows;
        break;
      case kMem: rows = (seconds - e.copy_alpha_s) / (e.copy_seconds_per_byte * row_bytes()); break;
    }
    if (!std::isfinite(rows)) rows = static_cast<double>(hi);
    return std::clamp(static_cast<std::int64_t>(rows), lo, hi);
  }

  // One op of class k on every rank (collectives over all ranks), each
  // waiting for deps[q]; returns the ops per rank.
  std::vector<OpId> op_of(Class k, std::int64_t rows, const std::vector<std::vector<OpId>>& deps) {
    const int P = c_.ranks;
    std::vector<OpId> out;
    if (k == kComm) return all_to_all(P, rows, deps);
    for (int q = 0; q < P; ++q)
      out.push_back(k == kComp ? ffn(q, rows, Phase::kForward, deps[static_cast<std::size_t>(q)], false)
                               : copy(q, rows, true, deps[static_cast<std::size_t>(q)], false));
    return out;
  }

  // A long op of class `target`'s partner... : long op of class L, and K
  // ops of each class in `shorts` back to back on their streams, all
  // starting after the rank's previous work.
  void scenario(Class long_class, const std::vector<Class>& shorts) {
    constexpr int K = 4;
    const int P = c_.ranks;
    std::vector<std::vector<OpId>> start(static_cast<std::size_t>(P));
    for (int q = 0; q < P; ++q) start[static_cast<std::size_t>(q)] = after(q);
    const double D = longest(long_class);
    const auto long_rows = long_class == kComm ? c_.max_peer_rows : c_.max_rows;
    std::vector<std::vector<OpId>> ends(static_cast<std::size_t>(P));
    auto add_end = [&](const std::vector<OpId>& ops) {
      for (int q = 0; q < P; ++q) ends[static_cast<std::size_t>(q)].push_back(ops[static_cast<std::size_t>(q)]);
    };
    add_end(op_of(long_class, long_rows, start));
    for (Class s : shorts) {
      const auto rows = rows_for(s, 0.9 * D / K);
      std::vector<std::vector<OpId>> prev = start;
      for (int i = 0; i < K; ++i) {
        auto ops = op_of(s, rows, prev);
        for (int q = 0; q < P; ++q) prev[static_cast<std::size_t>(q)] = {ops[static_cast<std::size_t>(q)]};
        if (i == K - 1) add_end(ops);
      }
    }
    for (int q = 0; q < P; ++q) join(q, ends[static_cast<std::size_t>(q)]);
  }

  void interference() {
    for (int rep = 0; rep < c_.repeats; ++rep) {
      scenario(kComp, {kComm});
      scenario(kComm, {kComp});
      if (c_.copies) {
        scenario(kComp, {kMem});
        scenario(kMem, {kComp});
        scenario(kComm, {kMem});
        scenario(kMem, {kComm});
        scenario(kComp, {kComm, kMem});
        scenario(kComm, {kComp, kMem});
        scenario(kMem, {kComp, kComm});
      }
    }
  }

  const CalibrationConfig& c_;
  PlanBuilder b_;
  std::vector<Rank> ranks_;
  std::vector<std::vector<OpId>> last_;
  std::map<std::pair<int, std::int64_t>, RoutingBuffers> routing_;
  int peer_slots_ = 1;
  std::int64_t ar_rows_ = 1;
  int next_sample_ = 0;
};

}  // namespace

Plan build_calibration(const CalibrationConfig& c) {
  c.validate();
  return CalibrationBuilder(c).build();
}

}  // namespace moetrace::plan
