// PPMoE (ppmoe Sec. 3.3): expert parallelism inside a tensor-parallel group,
// 1F1B pipeline stages, data-parallel replicas.
#include <algorithm>

#include "build_common.h"
#include "moetrace/plan/builders.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace detail {
namespace {

class PpMoeBuilder {
 public:
  PpMoeBuilder(const PpMoeConfig& config, const ExpertLoad& load)
      : c_(config),
        load_(load),
        m_(config.common.model),
        D_(config.data_parallel()),
        S_(config.pipeline_stages),
        T_(config.tensor_parallel),
        MB_(config.micro_batches),
        E_(m_.num_experts),
        local_(E_ / T_),
        per_stage_(m_.num_layers / S_),
        b_("ppmoe", config.common.ranks) {}

  Plan build();

 private:
  // Activations of one (iteration, dp group, micro-batch, layer) on one TP rank.
  struct LayerAct {
    RoutedLayout layout;  // this TP rank's experts (index_slice / index_assign)
    BufferId x, probs, routing, t_di, t_m, t_do, y, mid, z, dx;
  };
  // One (d, m) flow through the stages: [layer][t].
  struct Flow {
    std::vector<std::vector<LayerAct>> act;
    std::vector<BufferId> stage_input;      // [t] recv buffer of the current stage's first layer
    std::vector<BufferId> stage_out_grad;   // [t] recv buffer of the current stage's last layer
  };

  int rank(int d, int s, int t) const { return (d * S_ + s) * T_ + t; }
  int stage_of(int r) const { return (r / T_) % S_; }
  int block(int d, int m) const { return d * MB_ + m; }
  std::vector<RankId> tp_group(int d, int s) const {
    std::vector<RankId> g;
    for (int t = 0; t < T_; ++t) g.push_back(RankId(rank(d, s, t)));
    return g;
  }
  RankStreams& streams(int r) { return streams_[static_cast<std::size_t>(r)]; }
  Flow& flow(int d, int m) { return flows_[static_cast<std::size_t>(block(d, m))]; }
  // A buffer that holds `kind` (the model's input or output, or their
  // gradients) of micro-batch m of group d in iteration j.
  BufferBinding bound(BufferBinding::Kind kind, int j, int d, int m) const {
    BufferBinding b;
    b.kind = kind;
    b.iteration = j;
    b.block = block(d, m);
    return b;
  }
  // The sizes one micro-batch's forward and backward work with: the model
  // dimension M, its tokens, and the dense FFN's hidden slice per TP rank.
  struct Sizes {
    std::int64_t M, tokens;
    bool dense;
    std::int64_t F;
  };
  // The rows of this TP rank's i-th local expert in `layout` (none where it
  // has no tokens).
  static std::vector<RowSpan> expert_spans(const RoutedLayout& layout, int i) {
    const auto e = static_cast<std::size_t>(i);
    if (layout.expert_rows[e] <= 0) return {};
    return {RowSpan{layout.offset(0, e), layout.expert_rows[e]}};
  }
  Sizes sizes(int j, int d, int m) const {
    return {m_.model_dim, load_.tokens_of(j, block(d, m)), m_.dense_hidden > 0, m_.dense_hidden / T_};
  }

  void all_reduce(OpKind kind, const Coords& co, const std::string& what, const std::vector<RankId>& group,
                  const std::vector<BufferId>& views, std::int64_t bytes, bool moves_data,
                  const std::vector<std::vector<BufferId>>& frees = {});
  // The stream of rank r's point-to-point traffic with rank `peer` of the
  // previous or next stage (see build()).
  StreamId p2p_stream(int r, int peer) const {
    const auto i = static_cast<std::size_t>(r);
    return stage_of(peer) > stage_of(r) ? p2p_next_[i] : p2p_prev_[i];
  }
  void send_recv(const Coords& co, const std::string& what, int from, int to, BufferId src, BufferId dst,
                 bool free_src);
  void forward(int j, int d, int s, int m);
  void backward(int j, int d, int s, int m);

  const PpMoeConfig& c_;
  const ExpertLoad& load_;
  const ModelShape& m_;
  const int D_, S_, T_, MB_, E_, local_, per_stage_;
  PlanBuilder b_;
  std::vector<RankStreams> streams_;
  std::vector<StreamId> p2p_prev_, p2p_next_;  // [rank]; invalid on the first / last stage
  // [layer][rank] parameters; experts_[layer][rank][i] the i-th local expert.
  std::vector<std::vector<ParamBuffers>> gate_, dense_;
  std::vector<std::vector<std::vector<ParamBuffers>>> experts_;
  std::vector<Flow> flows_;
};

void PpMoeBuilder::all_reduce(OpKind kind, const Coords& co, const std::string& what,
                              const std::vector<RankId>& group, const std::vector<BufferId>& views,
                              std::int64_t bytes, bool moves_data,
                              const std::vector<std::vector<BufferId>>& frees) {
  if (group.size() < 2) return;
  const CollectiveId id = b_.next_collective();
  for (std::size_t i = 0; i < group.size(); ++i) {
    Collective col;
    col.id = id;
    col.kind = CollectiveKind::kAllReduce;
    col.group = group;
    col.moves_data = moves_data;
    if (moves_data) col.inout = whole(b_, views[i]);
    OpArgs a = op_at(kind, co, what, group[i], streams(group[i].value).comm);
    // A timing-only all-reduce still reduces the views in place: it follows
    // their producer and precedes their next user.
    if (!moves_data && !views.empty()) a.extra_access = {{views[i], schema::Access::kReadWrite}};
    a.bytes = bytes;
    a.data = std::move(col);
    if (!frees.empty()) a.free = frees[i];
    b_.add(std::move(a));
  }
}

void PpMoeBuilder::send_recv(const Coords& co, const std::string& what, int from, int to, BufferId src,
                             BufferId dst, bool free_src) {
  const CollectiveId id = b_.next_collective();
  const std::int64_t rows = b_.buffer(src).rows;
  const std::int64_t bytes = b_.buffer(src).bytes();
  const std::vector<RankId> group{RankId(std::min(from, to)), RankId(std::max(from, to))};
  for (int r : {from, to}) {
    Collective col;
    col.id = id;
    col.kind = CollectiveKind::kSendRecv;
    col.group = group;
    OpArgs a;
    a.coords = co;
    a.rank = RankId(r);
    a.stream = p2p_stream(r, r == from ? to : from);
    if (r == from) {
      col.sends.push_back({RankId(to), View{src, 0, rows}, bytes});
      a.kind = OpKind::kPipelineSend;
      a.name = op_name(co, what + ".send");
      a.bytes = bytes;
      if (free_src) a.free = {src};
    } else {
      col.recvs.push_back({RankId(from), View{dst, 0, rows}, bytes});
      a.kind = OpKind::kPipelineRecv;
      a.name = op_name(co, what + ".recv");
    }
    a.data = std::move(col);
    b_.add(std::move(a));
  }
}

void PpMoeBuilder::forward(int j, int d, int s, int m) {
  Flow& f = flow(d, m);
  const auto [M, tokens, dense, F] = sizes(j, d, m);
  for (int l = s * per_stage_; l < (s + 1) * per_stage_; ++l) {
    const Coords co = coords(l, j, m, -1, Phase::kForward);
    const bool last = l == m_.num_layers - 1;
    auto& acts = f.act[static_cast<std::size_t>(l)];
    for (int t = 0; t < T_; ++t) {
      const int r = rank(d, s, t);
      LayerAct& a = acts[static_cast<std::size_t>(t)];
      if (l == s * per_stage_) {
        if (s == 0) {
          const BufferBinding in = bound(BufferBinding::Kind::kModelInput, j, d, m);
          a.x = add_buffer(b_, RankId(r), BufferTag::kActivation, fmt::format("it{}.mb{}.input", j, m), tokens, M,
                           m_.elem_bytes, co, in);
        } else {
          a.x = f.stage_input[static_cast<std::size_t>(t)];
        }
      } else {
        a.x = f.act[static_cast<std::size_t>(l - 1)][static_cast<std::size_t>(t)].z;
      }
      // Every TP rank gates the same tokens identically (Sec. 3.3.1).
      a.probs = add_buffer(b_, RankId(r), BufferTag::kRouting, op_name(co, "probs"), tokens, E_, 4, co);
      a.routing = add_buffer(b_, RankId(r), BufferTag::kRouting, op_name(co, "routing"), tokens, 2 * m_.top_k, 4, co);
      OpArgs g = op_at(OpKind::kGate, co, "gate", RankId(r), streams(r).compute);
      g.flops = gate_forward_flops(tokens, M, E_);
      g.data = GateForward{View{a.x, 0, tokens}, gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)].params,
                           a.probs, a.routing, m_.top_k};
      b_.add(std::move(g));

      a.layout.tokens = tokens;
      a.layout.top_k = m_.top_k;
      a.layout.num_chunks = 1;
      for (int i = 0; i < local_; ++i) {
        a.layout.experts.push_back(t * local_ + i);
        a.layout.expert_rows.push_back(load_.count(j, l, block(d, m), t * local_ + i));
      }
      const std::int64_t rows = a.layout.total_rows();
      a.t_di = add_buffer(b_, RankId(r), BufferTag::kTDI, op_name(co, "T_DI"), rows, M, m_.elem_bytes, co);
      a.t_m = add_buffer(b_, RankId(r), BufferTag::kTM, op_name(co, "T_M"), rows, m_.expert_hidden, m_.elem_bytes, co);
      a.t_do = add_buffer(b_, RankId(r), BufferTag::kTDO, op_name(co, "T_DO"), rows, M, m_.elem_bytes, co);
      // Alg. 1: index_select of the tokens of each local expert.
      OpArgs p = op_at(OpKind::kIndexSlice, co, "index_slice", RankId(r), streams(r).compute);
      p.bytes = rows * M * m_.elem_bytes;
      p.data = Permute{View{a.x, 0, tokens}, a.routing, a.layout, View{a.t_di, 0, rows}};
      b_.add(std::move(p));
      for (int i = 0; i < local_; ++i) {
        const int e = t * local_ + i;
        const std::int64_t n = a.layout.expert_rows[static_cast<std::size_t>(i)];
        const std::vector<RowSpan> spans = expert_spans(a.layout, i);
        OpArgs x = op_at(OpKind::kExpertFfn, co, fmt::format("expert_ffn.e{}", e), RankId(r), streams(r).compute);
        x.flops = ffn_forward_flops(n, M, m_.expert_hidden);
        x.data = FfnForward{e, experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)][static_cast<std::size_t>(i)].params,
                            a.t_di, a.t_m, a.t_do, spans};
        b_.add(std::move(x));
      }
      const BufferBinding out = last && !dense ? bound(BufferBinding::Kind::kModelOutput, j, d, m) : BufferBinding{};
      a.y = add_buffer(b_, RankId(r), BufferTag::kActivation, op_name(co, "moe_out"), tokens, M, m_.elem_bytes, co, out);
      // Alg. 1: output_hidden_states[indices] = expert_outputs (weighted),
      // zeros for the other ranks' experts; the all-reduce sums them.
      OpArgs u = op_at(OpKind::kUnpermute, co, "index_assign", RankId(r), streams(r).compute);
      u.bytes = rows * M * m_.elem_bytes;
      u.data = Unpermute{a.routing, a.layout, View{a.t_do, 0, rows}, View{a.y, 0, tokens}};
      if (last && !dense && !m_.attention && T_ == 1) u.free = {a.y};
      b_.add(std::move(u));
    }
    std::vector<BufferId> ys;
    std::vector<std::vector<BufferId>> frees(static_cast<std::size_t>(T_));
    for (int t = 0; t < T_; ++t) {
      ys.push_back(acts[static_cast<std::size_t>(t)].y);
      if (last && !dense && !m_.attention) frees[static_cast<std::size_t>(t)].push_back(acts[static_cast<std::size_t>(t)].y);
    }
    all_reduce(OpKind::kMoeAllReduce, co, "moe_all_reduce", tp_group(d, s), ys, tokens * M * m_.elem_bytes, true, frees);

    for (int i = 0; i < m_.attention_ops(); ++i) {
      for (int t = 0; t < T_; ++t) {
        const int r = rank(d, s, t);
        OpArgs a = op_at(OpKind::kAttention, co, "attention", RankId(r), streams(r).compute);
        a.flops = attention_forward_flops(tokens, M, m_.sequence_length, T_);
        a.data = TimingOnly{attention_work(View{acts[static_cast<std::size_t>(t)].y, 0, tokens}, tokens, M,
                                           m_.sequence_length, T_, false),
                            {}};
        a.extra_access = {{acts[static_cast<std::size_t>(t)].y, schema::Access::kReadWrite}};
        if (last && !dense && i + 1 == m_.attention_ops() && T_ == 1) a.free = {acts[static_cast<std::size_t>(t)].y};
        b_.add(std::move(a));
      }
      // Megatron's attention output all-reduce (the row-parallel output
      // projection's g, ppmoe Sec. 3.1.3): it sums the attention's output, so
      // it runs after the attention and before whatever reads that output.
      // Timing only, like the attention.
      std::vector<BufferId> outs;
      std::vector<std::vector<BufferId>> out_frees(static_cast<std::size_t>(T_));
      for (int t = 0; t < T_; ++t) {
        outs.push_back(acts[static_cast<std::size_t>(t)].y);
        if (last && !dense && i + 1 == m_.attention_ops()) out_frees[static_cast<std::size_t>(t)].push_back(outs.back());
      }
      all_reduce(OpKind::kTensorParallelAllReduce, co, "tp_all_reduce.attention", tp_group(d, s), outs,
                 tokens * M * m_.elem_bytes, false, out_frees);
    }
    for (int t = 0; t < T_; ++t) {
      LayerAct& a = acts[static_cast<std::size_t>(t)];
      const int r = rank(d, s, t);
      if (!dense) {
        a.z = a.y;
        continue;
      }
      const BufferBinding out = last ? bound(BufferBinding::Kind::kModelOutput, j, d, m) : BufferBinding{};
      a.mid = add_buffer(b_, RankId(r), BufferTag::kActivation, op_name(co, "dense_hidden"), tokens, F, m_.elem_bytes, co);
      a.z = add_buffer(b_, RankId(r), BufferTag::kActivation, op_name(co, "block_out"), tokens, M, m_.elem_bytes, co, out);
      // Megatron column/row split (ppmoe 3.1.3): partial output, then g's all-reduce.
      OpArgs x = op_at(OpKind::kDenseFfn, co, "dense_ffn", RankId(r), streams(r).compute);
      x.flops = ffn_forward_flops(tokens, M, F);
      x.data = FfnForward{-1, dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)].params, a.y, a.mid, a.z, {RowSpan{0, tokens}}};
      if (last && T_ == 1) x.free = {a.z};
      b_.add(std::move(x));
    }
    if (dense) {
      std::vector<BufferId> zs;
      std::vector<std::vector<BufferId>> fr(static_cast<std::size_t>(T_));
      for (int t = 0; t < T_; ++t) {
        zs.push_back(acts[static_cast<std::size_t>(t)].z);
        if (last) fr[static_cast<std::size_t>(t)].push_back(acts[static_cast<std::size_t>(t)].z);
      }
      all_reduce(OpKind::kTensorParallelAllReduce, co, "tp_all_reduce.dense_ffn", tp_group(d, s), zs,
                 tokens * M * m_.elem_bytes, true, fr);
    }
    if (l == (s + 1) * per_stage_ - 1 && s + 1 < S_) {
      for (int t = 0; t < T_; ++t) {
        const int to = rank(d, s + 1, t);
        BufferId dst = add_buffer(b_, RankId(to), BufferTag::kActivation, fmt::format("L{}.it{}.mb{}.stage_input", l + 1, j, m),
                                  tokens, M, m_.elem_bytes, coords(l + 1, j, m, -1, Phase::kForward));
        f.stage_input[static_cast<std::size_t>(t)] = dst;
        // The output stays for nothing else on this stage: it leaves with the send.
        send_recv(co, "pipeline", rank(d, s, t), to, acts[static_cast<std::size_t>(t)].z, dst, true);
      }
    }
  }
}

void PpMoeBuilder::backward(int j, int d, int s, int m) {
  Flow& f = flow(d, m);
  const auto [M, tokens, dense, F] = sizes(j, d, m);
  for (int l = (s + 1) * per_stage_ - 1; l >= s * per_stage_; --l) {
    const Coords co = coords(l, j, m, -1, Phase::kBackward);
    auto& acts = f.act[static_cast<std::size_t>(l)];
    std::vector<BufferId> dy(static_cast<std::size_t>(T_));
    for (int t = 0; t < T_; ++t) {
      const int r = rank(d, s, t);
      LayerAct& a = acts[static_cast<std::size_t>(t)];
      BufferId dz;
      if (l == m_.num_layers - 1) {
        const BufferBinding g = bound(BufferBinding::Kind::kOutputGrad, j, d, m);
        dz = add_buffer(b_, RankId(r), BufferTag::kActivationGrad, fmt::format("it{}.mb{}.output_grad", j, m), tokens, M,
                        m_.elem_bytes, co, g);
      } else if (l == (s + 1) * per_stage_ - 1) {
        dz = f.stage_out_grad[static_cast<std::size_t>(t)];
      } else {
        dz = f.act[static_cast<std::size_t>(l + 1)][static_cast<std::size_t>(t)].dx;
      }
      dy[static_cast<std::size_t>(t)] = dz;
      if (!dense) continue;
      dy[static_cast<std::size_t>(t)] =
          add_buffer(b_, RankId(r), BufferTag::kActivationGrad, op_name(co, "d_moe_out"), tokens, M, m_.elem_bytes, co);
      const auto& pb = dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)];
      OpArgs x = op_at(OpKind::kDenseFfn, co, "dense_ffn", RankId(r), streams(r).compute);
      x.flops = ffn_backward_flops(tokens, M, F);
      x.data = FfnBackward{-1, pb.params, pb.grads, a.y, a.mid, dz, dy[static_cast<std::size_t>(t)], {RowSpan{0, tokens}}};
      x.free = {a.y, a.mid, dz};
      b_.add(std::move(x));
    }
    // f's backward: the partial input gradients are summed over the TP group.
    if (dense)
      all_reduce(OpKind::kTensorParallelAllReduce, co, "tp_all_reduce.dense_ffn", tp_group(d, s), dy,
                 tokens * M * m_.elem_bytes, true);
    for (int i = 0; i < m_.attention_ops(); ++i) {
      for (int t = 0; t < T_; ++t) {
        const int r = rank(d, s, t);
        OpArgs a = op_at(OpKind::kAttention, co, "attention", RankId(r), streams(r).compute);
        a.flops = 2.0 * attention_forward_flops(tokens, M, m_.sequence_length, T_);
        a.data = TimingOnly{attention_work(View{dy[static_cast<std::size_t>(t)], 0, tokens}, tokens, M,
                                           m_.sequence_length, T_, true),
                            {}};
        a.extra_access = {{dy[static_cast<std::size_t>(t)], schema::Access::kReadWrite}};
        b_.add(std::move(a));
      }
      // The attention's input gradient, summed over the TP group (f's backward).
      all_reduce(OpKind::kTensorParallelAllReduce, co, "tp_all_reduce.attention", tp_group(d, s), dy,
                 tokens * M * m_.elem_bytes, false);
    }
    for (int t = 0; t < T_; ++t) {
      const int r = rank(d, s, t);
      LayerAct& a = acts[static_cast<std::size_t>(t)];
      const std::int64_t rows = a.layout.total_rows();
      const BufferId d_t_do = add_buffer(b_, RankId(r), BufferTag::kGradTDO, op_name(co, "dT_DO"), rows, M, m_.elem_bytes, co);
      const BufferId d_t_di = add_buffer(b_, RankId(r), BufferTag::kGradTDI, op_name(co, "dT_DI"), rows, M, m_.elem_bytes, co);
      const BufferId d_weights = add_buffer(b_, RankId(r), BufferTag::kRouting, op_name(co, "d_weights"), tokens, m_.top_k, 4, co);
      OpArgs u = op_at(OpKind::kUnpermute, co, "index_assign", RankId(r), streams(r).compute);
      u.bytes = 2 * rows * M * m_.elem_bytes;
      u.data = UnpermuteBackward{a.routing, a.layout, View{dy[static_cast<std::size_t>(t)], 0, tokens},
                                 View{a.t_do, 0, rows}, View{d_t_do, 0, rows}, d_weights};
      u.free = {a.t_do, dy[static_cast<std::size_t>(t)]};
      b_.add(std::move(u));
      for (int i = 0; i < local_; ++i) {
        const int e = t * local_ + i;
        const std::int64_t n = a.layout.expert_rows[static_cast<std::size_t>(i)];
        const std::vector<RowSpan> spans = expert_spans(a.layout, i);
        const auto& pb = experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        OpArgs x = op_at(OpKind::kExpertFfn, co, fmt::format("expert_ffn.e{}", e), RankId(r), streams(r).compute);
        x.flops = ffn_backward_flops(n, M, m_.expert_hidden);
        x.data = FfnBackward{e, pb.params, pb.grads, a.t_di, a.t_m, d_t_do, d_t_di, spans};
        if (i + 1 == local_) x.free = {a.t_di, a.t_m, d_t_do};
        b_.add(std::move(x));
      }
      BufferBinding g;
      g.kind = l == 0 ? BufferBinding::Kind::kInputGrad : BufferBinding::Kind::kZero;
      g.iteration = l == 0 ? j : -1;
      g.block = l == 0 ? block(d, m) : -1;
      a.dx = add_buffer(b_, RankId(r), BufferTag::kActivationGrad,
                        l == 0 ? fmt::format("it{}.mb{}.input_grad", j, m) : op_name(co, "dx"), tokens, M, m_.elem_bytes, co, g);
      OpArgs p = op_at(OpKind::kIndexSlice, co, "index_slice", RankId(r), streams(r).compute);
      p.bytes = rows * M * m_.elem_bytes;
      p.data = PermuteBackward{a.routing, a.layout, View{d_t_di, 0, rows}, View{a.dx, 0, tokens}};
      p.free = {d_t_di};
      b_.add(std::move(p));
      const auto& gp = gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)];
      OpArgs gb = op_at(OpKind::kGate, co, "gate", RankId(r), streams(r).compute);
      gb.flops = 2.0 * gate_forward_flops(tokens, M, E_);
      // d_weights holds only this rank's experts: partial gate gradients,
      // completed by the all-reduces below.
      gb.data = GateBackward{View{a.x, 0, tokens}, gp.params, gp.grads, a.probs, a.routing, d_weights, View{a.dx, 0, tokens}};
      gb.free = {a.x, a.probs, a.routing, d_weights};
      if (l == 0 && T_ == 1) gb.free.push_back(a.dx);
      b_.add(std::move(gb));
    }
    // copy_to_tensor_parallel_region's backward (Alg. 1): sum of the partial dx.
    std::vector<BufferId> dxs;
    std::vector<std::vector<BufferId>> fr(static_cast<std::size_t>(T_));
    for (int t = 0; t < T_; ++t) {
      dxs.push_back(acts[static_cast<std::size_t>(t)].dx);
      if (l == 0) fr[static_cast<std::size_t>(t)].push_back(acts[static_cast<std::size_t>(t)].dx);
    }
    all_reduce(OpKind::kMoeAllReduce, co, "moe_all_reduce", tp_group(d, s), dxs, tokens * M * m_.elem_bytes, true, fr);
    if (l == s * per_stage_ && s > 0) {
      for (int t = 0; t < T_; ++t) {
        const int to = rank(d, s - 1, t);
        BufferId dst = add_buffer(b_, RankId(to), BufferTag::kActivationGrad, fmt::format("L{}.it{}.mb{}.stage_out_grad", l - 1, j, m),
                                  tokens, M, m_.elem_bytes, coords(l - 1, j, m, -1, Phase::kBackward));
        f.stage_out_grad[static_cast<std::size_t>(t)] = dst;
        send_recv(co, "pipeline", rank(d, s, t), to, acts[static_cast<std::size_t>(t)].dx, dst, true);
      }
    }
  }
}

Plan PpMoeBuilder::build() {
  Plan& plan = b_.plan();
  plan.iterations = c_.common.iterations;
  plan.blocks = D_ * MB_;
  plan.dims = {m_.num_layers, E_, m_.top_k, m_.model_dim, m_.expert_hidden, m_.dense_hidden, m_.elem_bytes};
  plan.config_json = to_json(c_);
  const int P = c_.common.ranks;
  for (int r = 0; r < P; ++r)
    streams_.push_back({b_.stream(RankId(r), StreamRole::kCompute), b_.stream(RankId(r), StreamRole::kComm), StreamId()});
  // Point-to-point streams: one per pair of neighbouring stages, shared by
  // both directions, as PyTorch's ProcessGroupNCCL keys the communicator and
  // NCCL stream of an unbatched send / recv by the pair of ranks
  // ("low:high", getKeySendRecv), and as DeepSpeed's pipeline engine
  // (runtime/pipe/p2p.py) gives each pair of adjacent stages its own group.
  // A stage's receives from the previous stage therefore never queue ahead of
  // its own sends to the next one: stage s + 1 starts a micro-batch's forward
  // right after stage s's forward and send, as in the 1F1B schedule of
  // Megatron-Core (pipeline_parallel/schedules.py,
  // forward_backward_pipelining_without_interleaving: recv_forward,
  // forward_step, send_forward per warm-up micro-batch) and ppmoe Fig. 2.
  // Both ends of a pair add its ops in the same order (send_recv adds the two
  // halves together), so no pair stream waits on a later transfer. Megatron-LM
  // v2.6, PPMoE's code base (ppmoe Sec. 4.1), batches each exchange
  // (batch_isend_irecv) and waits for it before computing on; here a send
  // overlaps the computation after it (BENCHMARKS.md bounds what that costs).
  p2p_prev_.assign(static_cast<std::size_t>(P), StreamId());
  p2p_next_ = p2p_prev_;
  for (int r = 0; r < P; ++r) {
    if (stage_of(r) > 0) p2p_prev_[static_cast<std::size_t>(r)] = b_.stream(RankId(r), StreamRole::kComm, "p2p_prev_stage");
    if (stage_of(r) + 1 < S_) p2p_next_[static_cast<std::size_t>(r)] = b_.stream(RankId(r), StreamRole::kComm, "p2p_next_stage");
  }
  gate_.assign(static_cast<std::size_t>(m_.num_layers), std::vector<ParamBuffers>(static_cast<std::size_t>(P)));
  dense_ = gate_;
  experts_.assign(static_cast<std::size_t>(m_.num_layers), std::vector<std::vector<ParamBuffers>>(static_cast<std::size_t>(P)));
  for (int l = 0; l < m_.num_layers; ++l) {
    const int s = l / per_stage_;
    for (int d = 0; d < D_; ++d)
      for (int t = 0; t < T_; ++t) {
        const int r = rank(d, s, t);
        gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)] =
            add_param(b_, RankId(r), {ParamKind::kGate, l, -1, 0, E_}, m_.model_dim, m_.elem_bytes, fmt::format("L{}.gate", l));
        if (m_.dense_hidden > 0) {
          const std::int64_t F = m_.dense_hidden / T_;
          dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)] =
              add_param(b_, RankId(r), {ParamKind::kDense, l, -1, t * F, F}, 2 * m_.model_dim, m_.elem_bytes,
                        fmt::format("L{}.dense.tp{}", l, t));
        }
        for (int i = 0; i < local_; ++i) {
          const int e = t * local_ + i;
          experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)].push_back(
              add_param(b_, RankId(r), {ParamKind::kExpert, l, e, 0, m_.expert_hidden}, 2 * m_.model_dim, m_.elem_bytes,
                        fmt::format("L{}.expert{}", l, e)));
        }
      }
  }
  for (int j = 0; j < c_.common.iterations; ++j) {
    for (int l = 0; l < m_.num_layers; ++l)
      for (int e = 0; e < E_; ++e)
        for (int d = 0; d < D_; ++d)
          plan.placements.push_back({j, l, e, RankId(rank(d, l / per_stage_, e / local_)), "home"});
    flows_.assign(static_cast<std::size_t>(D_ * MB_), Flow{});
    for (auto& f : flows_) {
      f.act.assign(static_cast<std::size_t>(m_.num_layers), std::vector<LayerAct>(static_cast<std::size_t>(T_)));
      f.stage_input.assign(static_cast<std::size_t>(T_), BufferId());
      f.stage_out_grad.assign(static_cast<std::size_t>(T_), BufferId());
    }
    // 1F1B (ppmoe Fig. 2): stage s runs min(S-s-1, MB) warm-up forwards, then
    // alternates one forward and one backward, then drains the backwards.
    struct Task {
      bool forward;
      int m;
    };
    std::vector<std::vector<std::vector<Task>>> tasks(static_cast<std::size_t>(D_), std::vector<std::vector<Task>>(static_cast<std::size_t>(S_)));
    for (int d = 0; d < D_; ++d)
      for (int s = 0; s < S_; ++s) {
        auto& q = tasks[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)];
        const int warm = std::min(S_ - s - 1, MB_);
        for (int m = 0; m < warm; ++m) q.push_back({true, m});
        for (int i = 0; i < MB_ - warm; ++i) {
          q.push_back({true, warm + i});
          q.push_back({false, i});
        }
        for (int m = MB_ - warm; m < MB_; ++m) q.push_back({false, m});
      }
    // Emit in an order every dependency respects: a forward after the
    // previous stage's, a backward after the next stage's.
    std::vector<std::vector<std::vector<char>>> fdone(static_cast<std::size_t>(D_), std::vector<std::vector<char>>(static_cast<std::size_t>(S_), std::vector<char>(static_cast<std::size_t>(MB_), 0)));
    auto bdone = fdone;
    std::vector<std::vector<std::size_t>> next(static_cast<std::size_t>(D_), std::vector<std::size_t>(static_cast<std::size_t>(S_), 0));
    bool progress = true;
    while (progress) {
      progress = false;
      for (int d = 0; d < D_; ++d)
        for (int s = 0; s < S_; ++s) {
          auto& q = tasks[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)];
          auto& i = next[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)];
          while (i < q.size()) {
            const Task task = q[i];
            const bool ready = task.forward
                                   ? (s == 0 || fdone[static_cast<std::size_t>(d)][static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(task.m)])
                                   : (s == S_ - 1 || bdone[static_cast<std::size_t>(d)][static_cast<std::size_t>(s + 1)][static_cast<std::size_t>(task.m)]);
            if (!ready) break;
            if (task.forward) {
              forward(j, d, s, task.m);
              fdone[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)][static_cast<std::size_t>(task.m)] = 1;
            } else {
              backward(j, d, s, task.m);
              bdone[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)][static_cast<std::size_t>(task.m)] = 1;
            }
            ++i;
            progress = true;
          }
        }
    }
    // Gradient synchronisation (Sec. 3.3.4): the gate over every rank that
    // holds the layer (its TP ranks saw partial d_weights), experts and dense
    // slices over the data-parallel replicas.
    for (int l = 0; l < m_.num_layers; ++l) {
      const int s = l / per_stage_;
      const Coords co = coords(l, j, -1, -1, Phase::kBackward);
      std::vector<RankId> all;
      std::vector<BufferId> gates;
      for (int d = 0; d < D_; ++d)
        for (int t = 0; t < T_; ++t) {
          all.push_back(RankId(rank(d, s, t)));
          gates.push_back(gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(rank(d, s, t))].grads);
        }
      all_reduce(OpKind::kGradAllReduce, co, "grad_all_reduce.gate", all, gates, b_.buffer(gates.front()).bytes(), true);
      for (int t = 0; t < T_; ++t) {
        std::vector<RankId> dp;
        for (int d = 0; d < D_; ++d) dp.push_back(RankId(rank(d, s, t)));
        if (m_.dense_hidden > 0) {
          std::vector<BufferId> g;
          for (int d = 0; d < D_; ++d) g.push_back(dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(rank(d, s, t))].grads);
          all_reduce(OpKind::kGradAllReduce, co, "grad_all_reduce.dense", dp, g, b_.buffer(g.front()).bytes(), true);
        }
        // This rank's slice of the attention weights (4 M^2 per attention,
        // split over the TP group), timing only like the attention.
        if (m_.attention)
          all_reduce(OpKind::kGradAllReduce, co, "grad_all_reduce.attention", dp, {},
                     m_.attention_ops() * 4 * m_.model_dim * m_.model_dim / T_ * m_.elem_bytes, false);
        for (int i = 0; i < local_; ++i) {
          std::vector<BufferId> g;
          for (int d = 0; d < D_; ++d)
            g.push_back(experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(rank(d, s, t))][static_cast<std::size_t>(i)].grads);
          all_reduce(OpKind::kGradAllReduce, co, fmt::format("grad_all_reduce.expert{}", t * local_ + i), dp, g,
                     b_.buffer(g.front()).bytes(), true);
        }
      }
    }
    for (int r = 0; r < P; ++r)
      for (int l = 0; l < m_.num_layers; ++l) {
        if (l / per_stage_ != (r / T_) % S_) continue;
        add_sgd(b_, RankId(r), streams(r).compute, gate_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)], j, m_.learning_rate);
        if (m_.dense_hidden > 0)
          add_sgd(b_, RankId(r), streams(r).compute, dense_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)], j, m_.learning_rate);
        for (const auto& e : experts_[static_cast<std::size_t>(l)][static_cast<std::size_t>(r)])
          add_sgd(b_, RankId(r), streams(r).compute, e, j, m_.learning_rate);
      }
  }
  for (int j = 0; j < load_.iterations; ++j)
    for (int l = 0; l < load_.layers; ++l)
      for (int s = 0; s < load_.sources; ++s)
        for (int e = 0; e < load_.experts; ++e) plan.loads.push_back({j, l, s, e, load_.count(j, l, s, e)});
  return b_.finish();
}

}  // namespace
}  // namespace detail

Plan build_ppmoe(const PpMoeConfig& config, const ExpertLoad& load) {
  config.validate();
  detail::check_load(load, config.common.model, config.common.iterations,
                     config.data_parallel() * config.micro_batches, "data_parallel x micro_batches");
  return detail::PpMoeBuilder(config, load).build();
}

}  // namespace moetrace::plan
