// What each op of a plan enqueues on the CUDA executor (executor_impl.h):
// its kernels, cuBLAS GEMMs, copies and checks (issue() in executor_run.cc
// runs it inside the op's OpScope).
#include "executor_impl.h"

namespace moetrace::cuda {

using namespace exec;

void Executor::Impl::run_op(const plan::Op& op, const plan::TimingOnly& d) {
  if (!opt_.busy_timing_only) return;
  const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
  if (d.attention) {
    run_attention(op, *d.attention, w);
    return;
  }
  if (d.plan_search && d.plan_search->experts + d.plan_search->devices <= kernels::kPlanSearchMaxSlots) {
    const plan::PlanSearchWork& p = *d.plan_search;
    kernels::plan_search(stream(op.stream), reinterpret_cast<const float*>(view_ptr(p.routing)), p.routing.rows,
                         p.top_k, p.experts, p.devices, reinterpret_cast<int*>(ws(op, w.plan_search)));
    return;
  }
  if (!(op.flops > 0) || w.busy < 0) return;
  const BusyGemm b = busy_gemm(op.flops);
  const DType t = opt_.precision == Precision::kBf16 ? DType::kBf16 : DType::kFp32;
  for (std::int64_t r = 0; r < b.reps; ++r)
    gemm(blas(op), row_major(false, false, kBusyTile, kBusyTile, b.k), busy_a_, busy_b_, ws(op, w.busy), t,
         DType::kFp32, 1.0f, 0.0f);
}

void Executor::Impl::run_attention(const plan::Op& op, const plan::AttentionWork& a, const OpWorkspace& w) {
  const DType t = dtype(a.input.buffer);
  const std::int64_t e = dtype_bytes(t);
  const AttentionPlan p = plan_attention(a, static_cast<int>(e));
  char* area = ws(op, w.attention);
  auto ptr = [&](const AttentionOperand& o) -> char* {
    char* base = o.region == AttentionRegion::kInput ? static_cast<char*>(view_ptr(a.input))
                                                     : area + p.region_offset[static_cast<int>(o.region)];
    return base + o.offset * e;
  };
  const cudaStream_t s = stream(op.stream);
  for (const AttentionStep& st : p.steps) {
    switch (st.kind) {
      case AttentionStep::Kind::kGemm:
        if (st.batch == 1)
          gemm(blas(op), st.gemm, ptr(st.a), ptr(st.b), ptr(st.c), t, t, st.alpha, 0.0f);
        else
          gemm_strided_batched(blas(op), st.gemm, ptr(st.a), st.a.stride, ptr(st.b), st.b.stride, ptr(st.c),
                               st.c.stride, st.batch, t, t, st.alpha, 0.0f);
        break;
      case AttentionStep::Kind::kSoftmax:
        kernels::softmax_rows(s, t, ptr(st.c), st.rows, st.cols);
        break;
      case AttentionStep::Kind::kSoftmaxBackward:
        kernels::softmax_rows_backward(s, t, ptr(st.b), ptr(st.c), st.rows, st.cols);
        break;
    }
  }
}

void Executor::Impl::run_op(const plan::Op& op, const plan::GateForward& g) {
  const cudaStream_t s = stream(op.stream);
  const std::int64_t tokens = g.x.rows, M = plan_.buffer(g.x.buffer).cols;
  const int E = static_cast<int>(plan_.buffer(g.weight).cols);
  same_type(op, g.x.buffer, g.weight);
  if (plan_.buffer(g.probs).rows != tokens || plan_.buffer(g.routing).cols != 2 * g.top_k)
    throw Error(fmt::format("op {}: probs/routing buffers do not match {} tokens, top_k {}", op.name, tokens,
                            g.top_k));
  const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
  auto* logits = reinterpret_cast<float*>(ws(op, w.logits));
  gemm(blas(op), row_major(false, false, tokens, E, M), view_ptr(g.x), buf(g.weight), logits, dtype(g.x.buffer),
       DType::kFp32, 1.0f, 0.0f);
  const std::int32_t* planned = nullptr;
  if (planned_offset_[at(op.id)] >= 0)
    planned = reinterpret_cast<const std::int32_t*>(static_cast<char*>(tables_) + planned_offset_[at(op.id)]);
  unsigned long long* counts = nullptr;
  const GateSource src = gate_source(plan_, op);
  if (src.counted && src.block >= 0 && src.block < sources_ && op.coords.iteration >= 0 &&
      op.coords.iteration < plan_.iterations && op.coords.layer >= 0 && op.coords.layer < plan_.dims.num_layers)
    counts = counts_ + ((static_cast<std::int64_t>(op.coords.iteration) * plan_.dims.num_layers + op.coords.layer) *
                            sources_ + src.block) * E;
  kernels::gate_softmax_topk(s, logits, tokens, E, g.top_k, reinterpret_cast<float*>(buf(g.probs)),
                             reinterpret_cast<float*>(buf(g.routing)), planned, counts);
}

void Executor::Impl::run_op(const plan::Op& op, const plan::GateBackward& g) {
  const cudaStream_t s = stream(op.stream);
  const std::int64_t tokens = g.x.rows, M = plan_.buffer(g.x.buffer).cols;
  const int E = static_cast<int>(plan_.buffer(g.weight).cols);
  const int k = static_cast<int>(plan_.buffer(g.routing).cols / 2);
  const DType t = dtype(g.x.buffer);
  same_type(op, g.x.buffer, g.weight);
  same_type(op, g.x.buffer, g.dx.buffer);
  const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
  char* dl = ws(op, w.logits);
  kernels::gate_backward_logits(s, reinterpret_cast<const float*>(buf(g.probs)),
                                reinterpret_cast<const float*>(buf(g.routing)),
                                reinterpret_cast<const float*>(buf(g.d_weights)), tokens, E, k, dl, t);
  // grad(W_g) += x^T d(logits); dx += d(logits) W_g^T.
  gemm(blas(op), row_major(true, false, M, E, tokens), view_ptr(g.x), dl, buf(g.grad), t, dtype(g.grad), 1.0f,
       1.0f);
  gemm(blas(op), row_major(false, true, tokens, M, E), dl, buf(g.weight), view_ptr(g.dx), t, t, 1.0f, 1.0f);
}

Executor::Impl::Maps Executor::Impl::maps(const plan::Op& op, const plan::RoutedLayout& l, BufferId routing, bool count_mismatches) {
  const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
  Maps m{reinterpret_cast<std::int32_t*>(ws(op, w.positions)), reinterpret_cast<std::int32_t*>(ws(op, w.inverse))};
  if (plan_.buffer(routing).rows != l.tokens)
    throw Error(fmt::format("op {}: routing has {} rows for {} tokens", op.name, plan_.buffer(routing).rows, l.tokens));
  const auto* table =
      reinterpret_cast<const std::int64_t*>(static_cast<char*>(tables_) + table_offset_.at(at(op.id)));
  kernels::routing_maps(stream(op.stream), reinterpret_cast<const float*>(buf(routing)), l.tokens, l.top_k, table,
                        static_cast<int>(l.experts.size()), l.num_chunks, m.positions, m.inverse, l.total_rows(),
                        count_mismatches ? mismatches_ : nullptr);
  return m;
}

void Executor::Impl::run_op(const plan::Op& op, const plan::Permute& p) {
  same_type(op, p.x.buffer, p.out.buffer);
  check_rows(op, p.x, p.out, p.layout, "permute");
  const Maps m = maps(op, p.layout, p.routing, true);
  kernels::permute_rows(stream(op.stream), dtype(p.x.buffer), view_ptr(p.x), plan_.buffer(p.x.buffer).cols,
                        p.layout.top_k, m.inverse, p.out.rows, view_ptr(p.out));
}

void Executor::Impl::run_op(const plan::Op& op, const plan::PermuteBackward& p) {
  same_type(op, p.d_permuted.buffer, p.dx.buffer);
  check_rows(op, p.dx, p.d_permuted, p.layout, "permute backward");
  const Maps m = maps(op, p.layout, p.routing, false);
  kernels::permute_backward(stream(op.stream), dtype(p.dx.buffer), view_ptr(p.d_permuted),
                            plan_.buffer(p.dx.buffer).cols, m.positions, p.layout.tokens, p.layout.top_k,
                            view_ptr(p.dx));
}

void Executor::Impl::run_op(const plan::Op& op, const plan::Unpermute& u) {
  same_type(op, u.combined.buffer, u.y.buffer);
  check_rows(op, u.y, u.combined, u.layout, "unpermute");
  const Maps m = maps(op, u.layout, u.routing, false);
  kernels::unpermute(stream(op.stream), dtype(u.y.buffer), view_ptr(u.combined),
                     reinterpret_cast<const float*>(buf(u.routing)), m.positions, u.layout.tokens, u.layout.top_k,
                     plan_.buffer(u.y.buffer).cols, view_ptr(u.y));
}

void Executor::Impl::run_op(const plan::Op& op, const plan::UnpermuteBackward& u) {
  same_type(op, u.dy.buffer, u.combined.buffer);
  same_type(op, u.dy.buffer, u.d_combined.buffer);
  check_rows(op, u.dy, u.combined, u.layout, "unpermute backward");
  check_rows(op, u.dy, u.d_combined, u.layout, "unpermute backward");
  const Maps m = maps(op, u.layout, u.routing, false);
  kernels::unpermute_backward(stream(op.stream), dtype(u.dy.buffer), view_ptr(u.dy), view_ptr(u.combined),
                              reinterpret_cast<const float*>(buf(u.routing)), m.positions, m.inverse,
                              u.layout.tokens, u.layout.top_k, u.layout.total_rows(),
                              plan_.buffer(u.dy.buffer).cols, view_ptr(u.d_combined),
                              reinterpret_cast<float*>(buf(u.d_weights)));
}

std::vector<kernels::SpanBatch> Executor::Impl::span_batches(const std::vector<plan::RowSpan>& rows) {
  std::vector<kernels::SpanBatch> out;
  std::int64_t prefix = 0;
  for (const plan::RowSpan& r : rows) {
    if (r.count <= 0) continue;
    if (out.empty() || out.back().n == kernels::kMaxSpans) out.emplace_back();
    kernels::SpanBatch& b = out.back();
    b.begin[b.n] = r.begin;
    b.count[b.n] = r.count;
    b.prefix[b.n] = prefix;
    ++b.n;
    prefix += r.count;
  }
  return out;
}

Executor::Impl::FfnShape Executor::Impl::ffn_shape(const plan::Op& op, BufferId params, BufferId input) const {
  const plan::Buffer& p = plan_.buffer(params);
  if (p.rows % 2 != 0 || p.rows / 2 != plan_.buffer(input).cols)
    throw Error(fmt::format("op {}: parameters {} are {} x {}, inputs have {} columns", op.name, p.name, p.rows,
                            p.cols, plan_.buffer(input).cols));
  same_type(op, params, input);
  return {p.rows / 2, p.cols, dtype(input), dtype_bytes(dtype(input))};
}

void Executor::Impl::check_spans(const plan::Op& op, const std::vector<plan::RowSpan>& rows,
                 std::initializer_list<BufferId> buffers) const {
  for (BufferId b : buffers)
    for (const plan::RowSpan& r : rows)
      if (r.begin < 0 || r.begin + r.count > plan_.buffer(b).rows)
        throw Error(fmt::format("op {}: rows [{}, {}) are outside buffer {}", op.name, r.begin, r.begin + r.count,
                                plan_.buffer(b).name));
}

void Executor::Impl::first_gemm(const plan::Op& op, const FfnShape& f, BufferId params, BufferId input, BufferId middle,
                const kernels::SpanBatch& b) {
  std::vector<GroupedProblem> ps;
  for (int i = 0; i < b.n; ++i)
    ps.push_back({b.count[i], buf(input) + b.begin[i] * f.M * f.elem, buf(params),
                  buf(middle) + b.begin[i] * f.H * f.elem});
  grouped_gemm(blas(op), stream(op.stream), row_major(false, false, 0, f.H, f.M), ps, f.t, 1.0f, 0.0f,
               pointer_slot(op), opt_.expert_gemm == ExpertGemm::kGrouped);
}

void Executor::Impl::run_op(const plan::Op& op, const plan::FfnForward& d) {
  const FfnShape f = ffn_shape(op, d.params, d.input);
  same_type(op, d.input, d.middle);
  same_type(op, d.input, d.output);
  check_spans(op, d.rows, {d.input, d.middle, d.output});
  const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
  char* a = ws(op, w.activation);
  const char* w2t = buf(d.params) + f.M * f.H * f.elem;
  for (const kernels::SpanBatch& b : span_batches(d.rows)) {
    first_gemm(op, f, d.params, d.input, d.middle, b);
    kernels::gelu_forward(stream(op.stream), f.t, buf(d.middle), f.H, b, a);
    // output[span] = gelu(middle) W2, with W2 = (W2^T)^T stored M x H.
    std::vector<GroupedProblem> ps;
    for (int i = 0; i < b.n; ++i)
      ps.push_back({b.count[i], a + b.prefix[i] * f.H * f.elem, w2t, buf(d.output) + b.begin[i] * f.M * f.elem});
    grouped_gemm(blas(op), stream(op.stream), row_major(false, true, 0, f.M, f.H), ps, f.t, 1.0f, 0.0f,
                 pointer_slot(op), opt_.expert_gemm == ExpertGemm::kGrouped);
  }
}

void Executor::Impl::run_op(const plan::Op& op, const plan::FfnRecompute& d) {
  const FfnShape f = ffn_shape(op, d.params, d.input);
  same_type(op, d.input, d.middle);
  check_spans(op, d.rows, {d.input, d.middle});
  for (const kernels::SpanBatch& b : span_batches(d.rows)) first_gemm(op, f, d.params, d.input, d.middle, b);
}

void Executor::Impl::run_op(const plan::Op& op, const plan::FfnBackward& d) {
  const FfnShape f = ffn_shape(op, d.params, d.input);
  same_type(op, d.input, d.middle);
  same_type(op, d.input, d.d_output);
  same_type(op, d.input, d.d_input);
  check_spans(op, d.rows, {d.input, d.middle, d.d_output, d.d_input});
  if (plan_.buffer(d.grads).rows != plan_.buffer(d.params).rows ||
      plan_.buffer(d.grads).cols != plan_.buffer(d.params).cols)
    throw Error(fmt::format("op {}: gradients and parameters differ in shape", op.name));
  const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
  char* a = ws(op, w.activation);
  char* g = ws(op, w.gradient);
  const char* w1 = buf(d.params);
  const char* w2t = buf(d.params) + f.M * f.H * f.elem;
  const DType gt = dtype(d.grads);
  char* g1 = buf(d.grads);
  char* g2t = buf(d.grads) + f.M * f.H * dtype_bytes(gt);
  const cudaStream_t s = stream(op.stream);
  for (const kernels::SpanBatch& b : span_batches(d.rows)) {
    // g = (d_output W2^T) * gelu'(middle); a = gelu(middle).
    std::vector<GroupedProblem> ps;
    for (int i = 0; i < b.n; ++i)
      ps.push_back({b.count[i], buf(d.d_output) + b.begin[i] * f.M * f.elem, w2t, g + b.prefix[i] * f.H * f.elem});
    grouped_gemm(blas(op), s, row_major(false, false, 0, f.H, f.M), ps, f.t, 1.0f, 0.0f, pointer_slot(op),
                 opt_.expert_gemm == ExpertGemm::kGrouped);
    kernels::gelu_backward(s, f.t, buf(d.middle), f.H, b, a, g);
    // grad(W2)^T += d_output^T a and grad(W1) += input^T g: the spans add
    // into the same gradient, so one GEMM after the other on this stream.
    for (int i = 0; i < b.n; ++i) {
      gemm(blas(op), row_major(true, false, f.M, f.H, b.count[i]), buf(d.d_output) + b.begin[i] * f.M * f.elem,
           a + b.prefix[i] * f.H * f.elem, g2t, f.t, gt, 1.0f, 1.0f);
      gemm(blas(op), row_major(true, false, f.M, f.H, b.count[i]), buf(d.input) + b.begin[i] * f.M * f.elem,
           g + b.prefix[i] * f.H * f.elem, g1, f.t, gt, 1.0f, 1.0f);
    }
    // d_input[span] = g W1^T.
    ps.clear();
    for (int i = 0; i < b.n; ++i)
      ps.push_back({b.count[i], g + b.prefix[i] * f.H * f.elem, w1, buf(d.d_input) + b.begin[i] * f.M * f.elem});
    grouped_gemm(blas(op), s, row_major(false, true, 0, f.M, f.H), ps, f.t, 1.0f, 0.0f, pointer_slot(op),
                 opt_.expert_gemm == ExpertGemm::kGrouped);
  }
}

void Executor::Impl::run_op(const plan::Op& op, const plan::Copy& c) {
  same_type(op, c.src.buffer, c.dst.buffer);
  if (c.src.rows != c.dst.rows || row_bytes(c.src.buffer) != row_bytes(c.dst.buffer))
    throw Error(fmt::format("op {}: copy of {} rows into {} rows", op.name, c.src.rows, c.dst.rows));
  const auto bytes = static_cast<std::size_t>(c.src.rows * row_bytes(c.src.buffer));
  if (bytes == 0) return;
  MOETRACE_CUDA_CHECK(cudaMemcpyAsync(view_ptr(c.dst), view_ptr(c.src), bytes, cudaMemcpyDefault, stream(op.stream)));
}

void Executor::Impl::run_op(const plan::Op& op, const plan::SgdStep& d) {
  if (plan_.buffer(d.params).elements() != plan_.buffer(d.grads).elements() || dtype(d.grads) != DType::kFp32)
    throw Error(fmt::format("op {}: gradients do not match the parameters", op.name));
  kernels::sgd_step(stream(op.stream), dtype(d.params), buf(d.params), reinterpret_cast<float*>(buf(d.grads)),
                    plan_.buffer(d.params).elements(), static_cast<float>(d.learning_rate));
}

}  // namespace moetrace::cuda
