// P virtual ranks on one GPU: every collective is real device work between
// the ranks' own buffers on the ranks' own streams, paced by the link model
// (link_model.h), so communication overlaps computation and takes SMs from
// it as on a real system. Receivers pull (copy from the sender's view);
// senders whose bytes a receiver copies pace an empty transfer of the same
// size, so a broadcast root or a reduce sender is busy for as long as its
// link would be.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "check.h"
#include "communicator.h"
#include "kernels.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

class EmulatedCommunicator final : public Communicator {
 public:
  EmulatedCommunicator(const plan::Plan& plan, const LinkModel& link) : link_(link) {
    link_.validate();
    by_rank_.assign(static_cast<std::size_t>(std::max(plan.world_size, 1)), nullptr);
  }
  ~EmulatedCommunicator() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  const char* name() const override { return "emulated"; }
  bool runs_rank(RankId) const override { return true; }
  bool barriers() const override { return true; }

  void prepare(const ExecContext& ctx) override {
    events_.resize(by_rank_.size() + 1);  // one per rank and the first stream's (barrier_steps)
    for (cudaEvent_t& e : events_) MOETRACE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    (void)ctx;
  }

  int phases(const plan::Collective& c) const override {
    if (!c.moves_data || c.group.size() < 2) return 0;
    return c.kind == plan::CollectiveKind::kAllReduce ? 2 : 1;
  }

  void begin(const ExecContext& ctx, const std::vector<const plan::Op*>& step) override {
    std::fill(by_rank_.begin(), by_rank_.end(), nullptr);
    for (const plan::Op* op : step) by_rank_.at(static_cast<std::size_t>(op->rank.value)) = op;
    const plan::Collective& c = *step.front()->collective();
    if (c.kind == plan::CollectiveKind::kAllReduce && phases(c) > 0) {
      // The reduce-scatter target, one view's worth, on the first rank's
      // stream before the start barrier makes it visible to the others.
      const plan::View& v = c.inout;
      scratch_bytes_ = v.rows * ctx.row_bytes(v.buffer);
      scratch_stream_ = ctx.stream(step.front()->stream);
      MOETRACE_CUDA_CHECK(cudaMallocAsync(&scratch_, static_cast<std::size_t>(std::max<std::int64_t>(scratch_bytes_, 1)),
                                          scratch_stream_));
    }
    barrier(ctx, step);
  }

  void barrier(const ExecContext& ctx, const std::vector<const plan::Op*>& step) override {
    for (const BarrierStep& b : barrier_steps(static_cast<int>(step.size()))) {
      const cudaStream_t stream = ctx.stream(step.at(static_cast<std::size_t>(b.stream))->stream);
      const cudaEvent_t event = events_.at(static_cast<std::size_t>(b.event));
      if (b.kind == BarrierStep::Kind::kRecord)
        MOETRACE_CUDA_CHECK(cudaEventRecord(event, stream));
      else
        MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
    }
  }

  void end(const ExecContext& ctx, const std::vector<const plan::Op*>& step) override {
    barrier(ctx, step);
    if (scratch_ != nullptr) {
      MOETRACE_CUDA_CHECK(cudaFreeAsync(scratch_, scratch_stream_));
      scratch_ = nullptr;
    }
  }

  void launch(const ExecContext& ctx, const plan::Op& op, int phase) override {
    const plan::Collective& c = *op.collective();
    switch (c.kind) {
      case plan::CollectiveKind::kAllToAllV:
      case plan::CollectiveKind::kBroadcast:
      case plan::CollectiveKind::kSendRecv:
        pull(ctx, op);
        return;
      case plan::CollectiveKind::kReduce:
        reduce(ctx, op);
        return;
      case plan::CollectiveKind::kAllReduce:
        all_reduce(ctx, op, phase);
        return;
    }
  }

 private:
  const plan::Op& peer_op(RankId r, const plan::Op& op) const {
    const plan::Op* p = r.valid() && static_cast<std::size_t>(r.value) < by_rank_.size()
                            ? by_rank_[static_cast<std::size_t>(r.value)]
                            : nullptr;
    if (p == nullptr)
      throw Error(fmt::format("emulated communicator: op {} exchanges with rank {}, which is not in its collective",
                              op.name, r.value));
    return *p;
  }

  // The view `from` sends to `to` in its op of this collective.
  const plan::PeerTransfer& send_of(const plan::Op& from, RankId to, const plan::Op& op) const {
    for (const auto& t : from.collective()->sends)
      if (t.peer == to) return t;
    throw Error(fmt::format("emulated communicator: op {} expects data from rank {}, whose op {} sends none",
                            op.name, from.rank.value, from.name));
  }

  std::int64_t view_bytes(const ExecContext& ctx, const plan::View& v) const {
    return v.rows * ctx.row_bytes(v.buffer);
  }

  void check_match(const ExecContext& ctx, const plan::Op& op, const plan::View& dst, const plan::View& src) const {
    if (dst.rows != src.rows || ctx.row_bytes(dst.buffer) != ctx.row_bytes(src.buffer) ||
        ctx.dtype(dst.buffer) != ctx.dtype(src.buffer))
      throw Error(fmt::format("emulated communicator: op {} receives {} rows of {} bytes into {} rows of {} bytes",
                              op.name, src.rows, ctx.row_bytes(src.buffer), dst.rows, ctx.row_bytes(dst.buffer)));
  }

  void flush(const ExecContext& ctx, const plan::Op& op, kernels::SegmentBatch& batch, std::int64_t& paced) {
    kernels::paced_copy(ctx.stream(op.stream), batch, pace_params(link_, paced));
    batch = kernels::SegmentBatch{};
    paced = 0;
  }

  // Receivers copy from their peers' send views; senders pace what leaves them.
  void pull(const ExecContext& ctx, const plan::Op& op) {
    const plan::Collective& c = *op.collective();
    kernels::SegmentBatch batch;
    std::int64_t paced = 0;
    auto add = [&](const void* src, void* dst, std::int64_t bytes, bool is_paced) {
      if (bytes <= 0) return;
      if (batch.n == kernels::kMaxSegments) flush(ctx, op, batch, paced);
      batch.seg[batch.n++] = {src, dst, bytes, is_paced ? 1 : 0};
      if (is_paced) paced += bytes;
    };
    for (const auto& r : c.recvs) {
      const plan::Op& from = peer_op(r.peer, op);
      const plan::PeerTransfer& s = send_of(from, op.rank, op);
      check_match(ctx, op, r.view, s.view);
      add(ctx.view_ptr(s.view), ctx.view_ptr(r.view), view_bytes(ctx, r.view), r.peer != op.rank);
    }
    // Sends whose receiver copies them: only the sender's link time (all-to-all
    // is paced by the receive side alone, being symmetric in the papers' models).
    if (c.kind != plan::CollectiveKind::kAllToAllV)
      for (const auto& s : c.sends)
        if (s.peer != op.rank) add(nullptr, nullptr, view_bytes(ctx, s.view), true);
    flush(ctx, op, batch, paced);
  }

  // Reduce (Agg, shadow gradients): the root adds each sender's view into
  // its own; senders pace their send.
  void reduce(const ExecContext& ctx, const plan::Op& op) {
    const plan::Collective& c = *op.collective();
    const cudaStream_t s = ctx.stream(op.stream);
    for (const auto& r : c.recvs) {
      const plan::Op& from = peer_op(r.peer, op);
      const plan::PeerTransfer& snd = send_of(from, op.rank, op);
      check_match(ctx, op, r.view, snd.view);
      const DType t = ctx.dtype(r.view.buffer);
      kernels::SourceBatch srcs;
      srcs.n = 2;
      srcs.src[0] = ctx.view_ptr(r.view);
      srcs.src[1] = ctx.view_ptr(snd.view);
      const std::int64_t bytes = view_bytes(ctx, r.view);
      kernels::paced_reduce(s, t, srcs, ctx.view_ptr(r.view), bytes / dtype_bytes(t), reduce_pace_params(link_, bytes));
    }
    kernels::SegmentBatch batch;
    std::int64_t paced = 0;
    for (const auto& snd : c.sends) {
      if (snd.peer == op.rank) continue;
      const std::int64_t bytes = view_bytes(ctx, snd.view);
      if (bytes <= 0) continue;
      if (batch.n == kernels::kMaxSegments) flush(ctx, op, batch, paced);
      batch.seg[batch.n++] = {nullptr, nullptr, bytes, 1};
      paced += bytes;
    }
    if (batch.n > 0) flush(ctx, op, batch, paced);
  }

  // Ring-equivalent all-reduce: phase 0 reduce-scatter (rank i sums slice i
  // of every rank's view into the scratch), phase 1 all-gather (every rank
  // copies all slices back into its view).
  void all_reduce(const ExecContext& ctx, const plan::Op& op, int phase) {
    const plan::Collective& c = *op.collective();
    const int P = static_cast<int>(c.group.size());
    const auto it = std::find(c.group.begin(), c.group.end(), op.rank);
    if (it == c.group.end()) throw Error(fmt::format("emulated communicator: op {} is not in its group", op.name));
    const int i = static_cast<int>(it - c.group.begin());
    const DType t = ctx.dtype(c.inout.buffer);
    const std::int64_t elem = dtype_bytes(t);
    const std::int64_t n = view_bytes(ctx, c.inout) / elem;
    auto begin_of = [&](int j) { return n * j / P; };
    auto* scratch = static_cast<char*>(scratch_);
    const cudaStream_t s = ctx.stream(op.stream);
    if (phase == 0) {
      kernels::SourceBatch srcs;
      const std::int64_t b = begin_of(i), len = begin_of(i + 1) - b;
      srcs.src[srcs.n++] = static_cast<const char*>(ctx.view_ptr(c.inout)) + b * elem;
      for (RankId r : c.group) {
        if (r == op.rank) continue;
        const plan::Op& peer = peer_op(r, op);
        const plan::View& v = peer.collective()->inout;
        if (v.rows != c.inout.rows || ctx.dtype(v.buffer) != t)
          throw Error(fmt::format("emulated communicator: all-reduce op {} and {} have different views", op.name,
                                  peer.name));
        if (srcs.n == kernels::kMaxSegments)
          throw Error(fmt::format("emulated communicator: all-reduce over more than {} ranks", kernels::kMaxSegments));
        srcs.src[srcs.n++] = static_cast<const char*>(ctx.view_ptr(v)) + b * elem;
      }
      // Paced by the rank's own slice: its (P - 1) remote copies are the
      // reduce-scatter's (P - 1) / P of the buffer (all_reduce_phase_bytes).
      kernels::paced_reduce(s, t, srcs, scratch + b * elem, len, reduce_pace_params(link_, len * elem));
      return;
    }
    kernels::SegmentBatch batch;
    std::int64_t paced = 0;
    auto* view = static_cast<char*>(ctx.view_ptr(c.inout));
    for (int j = 0; j < P; ++j) {
      const std::int64_t b = begin_of(j), len = begin_of(j + 1) - b;
      if (len <= 0) continue;
      if (batch.n == kernels::kMaxSegments) flush(ctx, op, batch, paced);
      batch.seg[batch.n++] = {scratch + b * elem, view + b * elem, len * elem, j != i ? 1 : 0};
      if (j != i) paced += len * elem;
    }
    flush(ctx, op, batch, paced);
  }

  LinkModel link_;
  std::vector<const plan::Op*> by_rank_;
  std::vector<cudaEvent_t> events_;
  void* scratch_ = nullptr;
  std::int64_t scratch_bytes_ = 0;
  cudaStream_t scratch_stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_emulated_communicator(const plan::Plan& plan, const LinkModel& link) {
  return std::make_unique<EmulatedCommunicator>(plan, link);
}

}  // namespace moetrace::cuda
