#include "moetrace/plan/cpu_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "moetrace/schema/error.h"
#include "random.h"

namespace moetrace::plan {

Matrix param_slice(const ModelWeights& weights, const ParamSlice& s) {
  const LayerWeights& lw = weights.layers.at(static_cast<std::size_t>(s.layer));
  if (s.kind == ParamKind::kGate) {
    Matrix m = Matrix::zeros(lw.gate.rows, s.cols);
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (std::int64_t c = 0; c < s.cols; ++c) m.at(r, c) = lw.gate.at(r, s.col_begin + c);
    return m;
  }
  const ExpertWeights& w =
      s.kind == ParamKind::kExpert ? lw.experts.at(static_cast<std::size_t>(s.expert)) : lw.dense;
  const std::int64_t model_dim = w.w1.rows;
  Matrix m = Matrix::zeros(2 * model_dim, s.cols);
  for (std::int64_t i = 0; i < model_dim; ++i)
    for (std::int64_t c = 0; c < s.cols; ++c) {
      m.at(i, c) = w.w1.at(i, s.col_begin + c);
      m.at(model_dim + i, c) = w.w2.at(s.col_begin + c, i);
    }
  return m;
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class CpuExecutor {
 public:
  CpuExecutor(const Plan& plan, const ModelWeights& initial, const TrainingData& data,
              const CpuExecutionOptions& options)
      : plan_(plan), weights_(initial), data_(data), options_(options) {}

  CpuExecutionResult run();

 private:
  struct Store {
    std::vector<double> data;
    bool live = false;
    bool freed = false;
  };

  [[noreturn]] void fail(const Op& op, const std::string& what) const {
    throw Error(fmt::format("cpu executor: op {} ({}, rank {}): {}", op.id.value, op.name,
                            op.rank.value, what));
  }
  const Buffer& buf(BufferId id) const { return plan_.buffer(id); }
  Store& store(BufferId id) { return stores_[static_cast<std::size_t>(id.value)]; }
  double* at(BufferId id, std::int64_t row) {
    return store(id).data.data() + row * buf(id).cols;
  }
  double* at(const View& v, std::int64_t r) { return at(v.buffer, v.row + r); }

  void allocate(BufferId id);
  void release(const Op& op, BufferId id);
  void enter(const Op& op);
  void leave(const Op& op);
  void execute(const Op& op);
  void execute_collective(const std::vector<const Op*>& ops);

  void gate_forward(const Op& op, const GateForward& d);
  void gate_backward(const GateBackward& d);
  // Row of every routed (token, slot) in the layout, -1 where the expert is
  // not listed; checks the per-expert counts against the plan.
  std::vector<std::int64_t> layout_rows(const Op& op, BufferId routing, const RoutedLayout& layout);
  void ffn_forward(const FfnForward& d);
  void ffn_backward(const FfnBackward& d);
  void ffn_recompute(const FfnRecompute& d);
  void ffn_hidden(BufferId params, const double* x, double* mid, std::int64_t m, std::int64_t h);
  // f(t, row) for each copy of token t routed to a row of the permuted order
  // (a copy dropped by capacity has none), tokens in order, then their copies.
  template <class Data, class F>
  void each_routed_row(const Op& op, const Data& d, F&& f) {
    const auto rows = layout_rows(op, d.routing, d.layout);
    const int k = d.layout.top_k;
    for (std::int64_t t = 0; t < d.layout.tokens; ++t)
      for (int s = 0; s < k; ++s) {
        const std::int64_t row = rows[static_cast<std::size_t>(t * k + s)];
        if (row >= 0) f(t, row);
      }
  }

  const Plan& plan_;
  const ModelWeights& weights_;
  const TrainingData& data_;
  CpuExecutionOptions options_;
  std::vector<Store> stores_;
  std::vector<std::int64_t> live_bytes_;
  CpuExecutionResult result_;
};

void CpuExecutor::allocate(BufferId id) {
  Store& s = store(id);
  const Buffer& b = buf(id);
  if (s.live || s.freed)
    throw Error(fmt::format("cpu executor: buffer {} (rank {}) allocated twice", b.name, b.rank.value));
  s.live = true;
  s.data.assign(static_cast<std::size_t>(b.elements()), kNaN);
  if (b.memory == schema::MemoryKind::kDevice) {
    auto& live = live_bytes_[static_cast<std::size_t>(b.rank.value)];
    live += b.bytes();
    auto& peak = result_.peak_device_bytes[static_cast<std::size_t>(b.rank.value)];
    peak = std::max(peak, live);
  }
  using K = BufferBinding::Kind;
  const BufferBinding& bind = b.binding;
  switch (bind.kind) {
    case K::kNone:
      break;
    case K::kZero:
    case K::kGrad:
    case K::kOptimizerState:
    case K::kModelOutput:
    case K::kInputGrad:
      std::fill(s.data.begin(), s.data.end(), 0.0);
      break;
    case K::kParam: {
      const Matrix m = param_slice(weights_, bind.param);
      if (m.rows != b.rows || m.cols != b.cols)
        throw Error(fmt::format("cpu executor: parameter buffer {} is {}x{}, the model slice {}x{}", b.name,
                                b.rows, b.cols, m.rows, m.cols));
      s.data = m.data;
      break;
    }
    case K::kModelInput:
    case K::kOutputGrad: {
      const Matrix& m = bind.kind == K::kModelInput ? data_.input(bind.iteration, bind.block)
                                                    : data_.output_grad(bind.iteration, bind.block);
      if (m.rows != b.rows || m.cols != b.cols)
        throw Error(fmt::format("cpu executor: buffer {} is {}x{}, the data of (iteration {}, block {}) {}x{}",
                                b.name, b.rows, b.cols, bind.iteration, bind.block, m.rows, m.cols));
      s.data = m.data;
      break;
    }
  }
}

void CpuExecutor::release(const Op& op, BufferId id) {
  Store& s = store(id);
  const Buffer& b = buf(id);
  if (!s.live) fail(op, fmt::format("frees buffer {} that is not allocated", b.name));
  using K = BufferBinding::Kind;
  if (b.binding.kind == K::kModelOutput || b.binding.kind == K::kInputGrad) {
    BlockTensor t{b.binding.iteration, b.binding.block, b.rank, Matrix{b.rows, b.cols, s.data}};
    (b.binding.kind == K::kModelOutput ? result_.outputs : result_.input_grads).push_back(std::move(t));
  }
  if (b.memory == schema::MemoryKind::kDevice) live_bytes_[static_cast<std::size_t>(b.rank.value)] -= b.bytes();
  s.live = false;
  s.freed = true;
  s.data.clear();
  s.data.shrink_to_fit();
}

void CpuExecutor::enter(const Op& op) {
  for (BufferId id : op.alloc_before) {
    if (buf(id).rank != op.rank) fail(op, fmt::format("allocates buffer {} of another rank", buf(id).name));
    allocate(id);
  }
  for (const auto& acc : op.buffers) {
    const Buffer& b = buf(acc.buffer);
    if (b.rank != op.rank) fail(op, fmt::format("touches buffer {} of rank {}", b.name, b.rank.value));
    if (!store(acc.buffer).live)
      fail(op, fmt::format("touches buffer {} that is {}", b.name, store(acc.buffer).freed ? "freed" : "not allocated"));
  }
}

void CpuExecutor::leave(const Op& op) {
  for (BufferId id : op.free_after) release(op, id);
  ++result_.ops_executed;
}

std::vector<std::int64_t> CpuExecutor::layout_rows(const Op& op, BufferId routing,
                                                   const RoutedLayout& layout) {
  const int k = layout.top_k;
  const std::size_t n = layout.experts.size();
  // offsets[c][i]: first row of (chunk c, experts[i]).
  std::vector<std::vector<std::int64_t>> offsets(static_cast<std::size_t>(layout.num_chunks),
                                                 std::vector<std::int64_t>(n));
  for (int c = 0; c < layout.num_chunks; ++c)
    for (std::size_t i = 0; i < n; ++i) offsets[static_cast<std::size_t>(c)][i] = layout.offset(c, i);
  std::vector<int> index(static_cast<std::size_t>(plan_.dims.num_experts), -1);
  for (std::size_t i = 0; i < n; ++i) index[static_cast<std::size_t>(layout.experts[i])] = static_cast<int>(i);
  std::vector<std::int64_t> seen(n, 0);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(layout.tokens * k), -1);
  for (std::int64_t t = 0; t < layout.tokens; ++t) {
    const double* r = at(routing, t);
    for (int s = 0; s < k; ++s) {
      const auto e = static_cast<int>(r[s]);
      if (e < 0 || e >= plan_.dims.num_experts) fail(op, fmt::format("routing names expert {}", e));
      const int i = index[static_cast<std::size_t>(e)];
      if (i < 0) continue;
      const std::int64_t q = seen[static_cast<std::size_t>(i)]++;
      const std::int64_t total = layout.expert_rows[static_cast<std::size_t>(i)];
      if (q >= total) continue;  // reported below
      int c = 0;
      while (c + 1 < layout.num_chunks && layout.chunk_begin(total, c + 1) <= q) ++c;
      rows[static_cast<std::size_t>(t * k + s)] =
          offsets[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)] + q - layout.chunk_begin(total, c);
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (seen[i] != layout.expert_rows[i])
      fail(op, fmt::format("the gate routed {} rows to expert {}, the plan was built for {}", seen[i],
                           layout.experts[i], layout.expert_rows[i]));
  return rows;
}

void CpuExecutor::gate_forward(const Op& op, const GateForward& d) {
  const std::int64_t m = buf(d.x.buffer).cols;
  const int experts = static_cast<int>(buf(d.weight).cols);
  const int k = d.top_k;
  if (buf(d.probs).cols != experts || buf(d.routing).cols != 2 * k) fail(op, "gate buffers have the wrong width");
  std::vector<int> idx(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < d.x.rows; ++t) {
    const double* x = at(d.x, t);
    double* p = at(d.probs, t);
    for (int e = 0; e < experts; ++e) p[e] = 0;
    for (std::int64_t i = 0; i < m; ++i) {
      const double* w = at(d.weight, i);
      for (int e = 0; e < experts; ++e) p[e] += x[i] * w[e];
    }
    const double mx = *std::max_element(p, p + experts);
    double sum = 0;
    for (int e = 0; e < experts; ++e) {
      p[e] = std::exp(p[e] - mx);
      sum += p[e];
    }
    for (int e = 0; e < experts; ++e) p[e] /= sum;
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
    double* r = at(d.routing, t);
    for (int s = 0; s < k; ++s) {
      r[s] = idx[static_cast<std::size_t>(s)];
      r[k + s] = p[idx[static_cast<std::size_t>(s)]];
    }
  }
}

void CpuExecutor::gate_backward(const GateBackward& d) {
  const std::int64_t m = buf(d.x.buffer).cols;
  const int experts = static_cast<int>(buf(d.weight).cols);
  const int k = static_cast<int>(buf(d.d_weights).cols);
  std::vector<double> dp(static_cast<std::size_t>(experts)), dl(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < d.x.rows; ++t) {
    std::fill(dp.begin(), dp.end(), 0.0);
    const double* r = at(d.routing, t);
    const double* dw = at(d.d_weights, t);
    for (int s = 0; s < k; ++s) dp[static_cast<std::size_t>(r[s])] += dw[s];
    const double* p = at(d.probs, t);
    double dot = 0;
    for (int e = 0; e < experts; ++e) dot += p[e] * dp[static_cast<std::size_t>(e)];
    for (int e = 0; e < experts; ++e) dl[static_cast<std::size_t>(e)] = p[e] * (dp[static_cast<std::size_t>(e)] - dot);
    const double* x = at(d.x, t);
    double* dx = at(d.dx, t);
    for (std::int64_t i = 0; i < m; ++i) {
      double* g = at(d.grad, i);
      const double* w = at(d.weight, i);
      double s = 0;
      for (int e = 0; e < experts; ++e) {
        g[e] += x[i] * dl[static_cast<std::size_t>(e)];
        s += dl[static_cast<std::size_t>(e)] * w[e];
      }
      dx[i] += s;
    }
  }
}

// The FFN's hidden layer before its activation, mid = x W1, for one token
// (W1: the first m rows of `params`, h columns).
void CpuExecutor::ffn_hidden(BufferId params, const double* x, double* mid, std::int64_t m, std::int64_t h) {
  for (std::int64_t j = 0; j < h; ++j) mid[j] = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    const double* w1 = at(params, i);
    for (std::int64_t j = 0; j < h; ++j) mid[j] += x[i] * w1[j];
  }
}

void CpuExecutor::ffn_forward(const FfnForward& d) {
  const std::int64_t m = buf(d.input).cols, h = buf(d.params).cols;
  for (const RowSpan& span : d.rows)
    for (std::int64_t r = span.begin; r < span.begin + span.count; ++r) {
      double* mid = at(d.middle, r);
      double* y = at(d.output, r);
      ffn_hidden(d.params, at(d.input, r), mid, m, h);
      for (std::int64_t o = 0; o < m; ++o) {
        const double* w2t = at(d.params, m + o);
        double s = 0;
        for (std::int64_t j = 0; j < h; ++j) s += gelu(mid[j]) * w2t[j];
        y[o] = s;
      }
    }
}

void CpuExecutor::ffn_recompute(const FfnRecompute& d) {
  const std::int64_t m = buf(d.input).cols, h = buf(d.params).cols;
  for (const RowSpan& span : d.rows)
    for (std::int64_t r = span.begin; r < span.begin + span.count; ++r)
      ffn_hidden(d.params, at(d.input, r), at(d.middle, r), m, h);
}

void CpuExecutor::ffn_backward(const FfnBackward& d) {
  const std::int64_t m = buf(d.input).cols, h = buf(d.params).cols;
  std::vector<double> g(static_cast<std::size_t>(h));
  for (const RowSpan& span : d.rows)
    for (std::int64_t r = span.begin; r < span.begin + span.count; ++r) {
      const double* x = at(d.input, r);
      const double* mid = at(d.middle, r);
      const double* dy = at(d.d_output, r);
      for (std::int64_t j = 0; j < h; ++j) g[static_cast<std::size_t>(j)] = 0;
      for (std::int64_t o = 0; o < m; ++o) {
        const double* w2t = at(d.params, m + o);
        double* gw2t = at(d.grads, m + o);
        for (std::int64_t j = 0; j < h; ++j) {
          gw2t[j] += gelu(mid[j]) * dy[o];
          g[static_cast<std::size_t>(j)] += dy[o] * w2t[j];
        }
      }
      for (std::int64_t j = 0; j < h; ++j) g[static_cast<std::size_t>(j)] *= gelu_grad(mid[j]);
      double* dx = at(d.d_input, r);
      for (std::int64_t i = 0; i < m; ++i) {
        const double* w1 = at(d.params, i);
        double* gw1 = at(d.grads, i);
        double s = 0;
        for (std::int64_t j = 0; j < h; ++j) {
          gw1[j] += x[i] * g[static_cast<std::size_t>(j)];
          s += g[static_cast<std::size_t>(j)] * w1[j];
        }
        dx[i] = s;
      }
    }
}

void CpuExecutor::execute(const Op& op) {
  std::visit(
      [&](const auto& d) {
        using T = std::decay_t<decltype(d)>;
        const std::int64_t m = plan_.dims.model_dim;
        if constexpr (std::is_same_v<T, TimingOnly>) {
        } else if constexpr (std::is_same_v<T, GateForward>) {
          gate_forward(op, d);
        } else if constexpr (std::is_same_v<T, GateBackward>) {
          gate_backward(d);
        } else if constexpr (std::is_same_v<T, Permute>) {
          each_routed_row(op, d, [&](std::int64_t t, std::int64_t row) {
            std::copy(at(d.x, t), at(d.x, t) + m, at(d.out, row));
          });
        } else if constexpr (std::is_same_v<T, PermuteBackward>) {
          each_routed_row(op, d, [&](std::int64_t t, std::int64_t row) {
            const double* g = at(d.d_permuted, row);
            double* dx = at(d.dx, t);
            for (std::int64_t i = 0; i < m; ++i) dx[i] += g[i];
          });
        } else if constexpr (std::is_same_v<T, Unpermute>) {
          const auto rows = layout_rows(op, d.routing, d.layout);
          const int k = d.layout.top_k;
          for (std::int64_t t = 0; t < d.layout.tokens; ++t) {
            double* y = at(d.y, t);
            std::fill(y, y + m, 0.0);
            const double* r = at(d.routing, t);
            for (int s = 0; s < k; ++s) {
              const std::int64_t row = rows[static_cast<std::size_t>(t * k + s)];
              if (row < 0) continue;
              const double* c = at(d.combined, row);
              for (std::int64_t i = 0; i < m; ++i) y[i] += r[k + s] * c[i];
            }
          }
        } else if constexpr (std::is_same_v<T, UnpermuteBackward>) {
          const auto rows = layout_rows(op, d.routing, d.layout);
          const int k = d.layout.top_k;
          for (std::int64_t t = 0; t < d.layout.tokens; ++t) {
            const double* dy = at(d.dy, t);
            const double* r = at(d.routing, t);
            double* dw = at(d.d_weights, t);
            for (int s = 0; s < k; ++s) {
              const std::int64_t row = rows[static_cast<std::size_t>(t * k + s)];
              dw[s] = 0;
              if (row < 0) continue;
              const double* c = at(d.combined, row);
              double* dc = at(d.d_combined, row);
              for (std::int64_t i = 0; i < m; ++i) {
                dw[s] += dy[i] * c[i];
                dc[i] = r[k + s] * dy[i];
              }
            }
          }
        } else if constexpr (std::is_same_v<T, FfnForward>) {
          ffn_forward(d);
        } else if constexpr (std::is_same_v<T, FfnBackward>) {
          ffn_backward(d);
        } else if constexpr (std::is_same_v<T, FfnRecompute>) {
          ffn_recompute(d);
        } else if constexpr (std::is_same_v<T, Copy>) {
          const std::int64_t cols = buf(d.src.buffer).cols;
          if (cols != buf(d.dst.buffer).cols || d.src.rows != d.dst.rows) fail(op, "copy between different shapes");
          for (std::int64_t r = 0; r < d.src.rows; ++r) std::copy(at(d.src, r), at(d.src, r) + cols, at(d.dst, r));
        } else if constexpr (std::is_same_v<T, SgdStep>) {
          Store& g = store(d.grads);
          Store& p = store(d.params);
          const Buffer& b = buf(d.params);
          result_.grads.push_back({op.coords.iteration, op.rank, d.param, Matrix{b.rows, b.cols, g.data}});
          for (std::size_t i = 0; i < p.data.size(); ++i) {
            p.data[i] -= d.learning_rate * g.data[i];
            g.data[i] = 0;
          }
        } else if constexpr (std::is_same_v<T, Collective>) {
          fail(op, "collective executed alone");
        }
      },
      op.data);
}

void CpuExecutor::execute_collective(const std::vector<const Op*>& ops) {
  const Collective& first = *ops.front()->collective();
  for (const Op* op : ops) enter(*op);
  if (first.moves_data) {
    auto op_of = [&](RankId r) -> const Op* {
      for (const Op* op : ops)
        if (op->rank == r) return op;
      return nullptr;
    };
    auto cols_of = [&](const View& v) { return buf(v.buffer).cols; };
    if (first.kind == CollectiveKind::kAllReduce) {
      const View& v0 = first.inout;
      const std::int64_t n = v0.rows * cols_of(v0);
      std::vector<double> sum(static_cast<std::size_t>(n), 0.0);
      for (const Op* op : ops) {
        const View& v = op->collective()->inout;
        if (v.rows * cols_of(v) != n) fail(*op, "all-reduce views differ in size");
        const double* src = at(v, 0);
        for (std::int64_t i = 0; i < n; ++i) sum[static_cast<std::size_t>(i)] += src[i];
      }
      for (const Op* op : ops) std::copy(sum.begin(), sum.end(), at(op->collective()->inout, 0));
    } else {
      // Gather every send first, then deliver: a rank may send from and
      // receive into the same buffer.
      struct Message {
        const Op* to;
        const PeerTransfer* recv;
        std::vector<double> payload;
      };
      std::vector<Message> messages;
      for (const Op* op : ops)
        for (const auto& s : op->collective()->sends) {
          const Op* dst = op_of(s.peer);
          if (!dst) fail(*op, fmt::format("sends to rank {} outside the collective", s.peer.value));
          const PeerTransfer* r = nullptr;
          for (const auto& rr : dst->collective()->recvs)
            if (rr.peer == op->rank) r = &rr;
          if (!r) fail(*op, fmt::format("rank {} does not receive from it", s.peer.value));
          const std::int64_t cols = cols_of(s.view);
          if (r->view.rows != s.view.rows || cols_of(r->view) != cols)
            fail(*op, fmt::format("sends {}x{} to rank {}, which receives {}x{}", s.view.rows, cols, s.peer.value,
                                  r->view.rows, cols_of(r->view)));
          Message msg{dst, r, {}};
          if (s.view.rows > 0) msg.payload.assign(at(s.view, 0), at(s.view, 0) + s.view.rows * cols);
          messages.push_back(std::move(msg));
        }
      for (auto& msg : messages) {
        if (msg.payload.empty()) continue;
        double* dst = at(msg.recv->view, 0);
        if (first.kind == CollectiveKind::kReduce)
          for (std::size_t i = 0; i < msg.payload.size(); ++i) dst[i] += msg.payload[i];
        else
          std::copy(msg.payload.begin(), msg.payload.end(), dst);
      }
    }
  }
  for (const Op* op : ops) leave(*op);
}

CpuExecutionResult CpuExecutor::run() {
  stores_.resize(plan_.buffers.size());
  live_bytes_.assign(static_cast<std::size_t>(plan_.world_size), 0);
  result_.peak_device_bytes.assign(static_cast<std::size_t>(plan_.world_size), 0);
  for (const Buffer& b : plan_.buffers)
    if (b.persistent) allocate(b.id);

  const std::size_t n = plan_.ops.size();
  std::vector<std::vector<std::size_t>> queue(plan_.streams.size());
  for (std::size_t i = 0; i < n; ++i) queue[static_cast<std::size_t>(plan_.ops[i].stream.value)].push_back(i);
  std::vector<std::size_t> head(plan_.streams.size(), 0);
  std::map<std::int64_t, std::vector<const Op*>> collectives;
  for (const Op& op : plan_.ops)
    if (const Collective* c = op.collective()) collectives[c->id.value].push_back(&op);
  std::vector<char> done(n, 0);
  // Random priority list scheduling: a low-priority op stays unpicked while
  // anything else can run, which exposes missing dependencies far better
  // than a fresh coin at every step.
  SplitMix64 rng(options_.schedule_seed);
  std::vector<std::uint64_t> priority(n);
  for (auto& p : priority) p = rng.next();

  auto at_head = [&](const Op& op) {
    const auto s = static_cast<std::size_t>(op.stream.value);
    return head[s] < queue[s].size() && queue[s][head[s]] == static_cast<std::size_t>(op.id.value);
  };
  auto deps_done = [&](const Op& op) {
    return std::all_of(op.deps.begin(), op.deps.end(), [&](OpId d) { return done[static_cast<std::size_t>(d.value)] != 0; });
  };
  auto finish = [&](const Op& op) {
    done[static_cast<std::size_t>(op.id.value)] = 1;
    ++head[static_cast<std::size_t>(op.stream.value)];
  };

  std::size_t executed = 0;
  std::vector<std::size_t> ready;
  while (executed < n) {
    ready.clear();
    for (std::size_t s = 0; s < queue.size(); ++s) {
      if (head[s] >= queue[s].size()) continue;
      const Op& op = plan_.ops[queue[s][head[s]]];
      if (!deps_done(op)) continue;
      if (const Collective* c = op.collective()) {
        const auto& members = collectives[c->id.value];
        const bool all = std::all_of(members.begin(), members.end(),
                                     [&](const Op* m) { return at_head(*m) && deps_done(*m); });
        // One entry per collective: its lowest-indexed member.
        if (!all || members.front() != &op) continue;
      }
      ready.push_back(static_cast<std::size_t>(op.id.value));
    }
    if (ready.empty()) {
      std::string waiting;
      for (std::size_t s = 0; s < queue.size() && waiting.size() < 400; ++s)
        if (head[s] < queue[s].size()) waiting += fmt::format(" [{}: {}]", plan_.streams[s].name, plan_.ops[queue[s][head[s]]].name);
      throw Error(fmt::format("cpu executor: plan {} deadlocks after {} of {} ops; stream heads:{}", plan_.variant,
                              executed, n, waiting));
    }
    std::size_t pick = *std::min_element(ready.begin(), ready.end());
    if (options_.schedule_seed != 0)
      pick = *std::max_element(ready.begin(), ready.end(),
                               [&](std::size_t x, std::size_t y) { return priority[x] < priority[y]; });
    const Op& op = plan_.ops[pick];
    if (const Collective* c = op.collective()) {
      const auto& members = collectives[c->id.value];
      execute_collective(members);
      for (const Op* m : members) finish(*m);
      executed += members.size();
    } else {
      enter(op);
      execute(op);
      leave(op);
      finish(op);
      ++executed;
    }
  }
  for (const Buffer& b : plan_.buffers) {
    if (b.binding.kind == BufferBinding::Kind::kParam && store(b.id).live)
      result_.final_params.push_back({-1, b.rank, b.binding.param, Matrix{b.rows, b.cols, store(b.id).data}});
    if (!b.persistent && store(b.id).live)
      throw Error(fmt::format("cpu executor: buffer {} (rank {}) is never freed", b.name, b.rank.value));
  }
  return std::move(result_);
}

}  // namespace

CpuExecutionResult execute_on_cpu(const Plan& plan, const ModelWeights& initial,
                                  const TrainingData& data, const CpuExecutionOptions& options) {
  return CpuExecutor(plan, initial, data, options).run();
}

}  // namespace moetrace::plan
