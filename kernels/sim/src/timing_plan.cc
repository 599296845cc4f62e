// Mirrors kernels/plan/src/build_expert_parallel.cc (EpBuilder with chunks,
// no reuse, no balancing) op for op; see timing_plan.h. Where that file
// changes its schedule, this one must follow (timing_plan_test fails first).
#include "moetrace/sim/timing_plan.h"

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "moetrace/schema/error.h"

namespace moetrace::sim {

using namespace plan;  // NOLINT: this file speaks the plan IR throughout
using BufferTag = plan::BufferTag;  // not the strong-id tag of ids.h

namespace {

// FLOP counts of build_common.h (2 per multiply-add; backward = 2 x forward).
double ffn_forward_flops(std::int64_t rows, std::int64_t m, std::int64_t h) {
  return 4.0 * static_cast<double>(rows) * static_cast<double>(m) * static_cast<double>(h);
}
double gate_forward_flops(std::int64_t tokens, std::int64_t m, int experts) {
  return 2.0 * static_cast<double>(tokens) * static_cast<double>(m) * experts;
}
double attention_forward_flops(std::int64_t tokens, std::int64_t m, std::int64_t seq) {
  return static_cast<double>(tokens) *
         (8.0 * static_cast<double>(m) * static_cast<double>(m) + 4.0 * static_cast<double>(seq) * static_cast<double>(m));
}
double optimizer_flops(std::int64_t elements) { return 12.0 * static_cast<double>(elements); }

Coords coords(int layer, int iteration, int chunk, Phase phase) {
  Coords c;
  c.layer = layer;
  c.iteration = iteration;
  c.chunk = chunk;
  c.phase = phase;
  return c;
}

std::string op_name(const Coords& c, std::string_view what) {
  std::string s = fmt::format("L{}.it{}.{}", c.layer, c.iteration, what);
  if (c.chunk >= 0) s += fmt::format(".c{}", c.chunk);
  if (c.phase == Phase::kBackward) s += ".bwd";
  return s;
}

struct ParamBuffers {
  BufferId params, grads;
  ParamSlice slice;
};

struct OpArgs {
  OpKind kind = OpKind::kOtherOp;
  std::string name;
  RankId rank;
  StreamId stream;
  Coords coords;
  double flops = 0;
  std::int64_t bytes = 0;
  OpData data = TimingOnly{};
  std::vector<BufferAccess> extra_access;
  std::vector<BufferId> free;
};

// Faults in the pages of byte ranges on another thread, so that the thread
// filling them finds them mapped (at 1024 ranks the plan's arrays are
// ~600 MB: 150,000 page faults, ~0.3 s on the thread that builds). The
// kernel maps the pages without writing them (MADV_POPULATE_WRITE, Linux
// 5.14), so the ranges may be in use meanwhile; where it cannot, nothing
// happens. Joined by the destructor.
class Prefault {
 public:
  using Range = std::pair<const void*, const void*>;
  Prefault() = default;
  explicit Prefault(const std::vector<Range>& ranges) {
#ifdef MADV_POPULATE_WRITE
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> pages;
    std::uintptr_t total = 0;
    for (const auto& [begin, end] : ranges) {
      const auto first = (reinterpret_cast<std::uintptr_t>(begin) + page - 1) / page * page;
      const auto last = reinterpret_cast<std::uintptr_t>(end) / page * page;
      if (last > first) {
        pages.emplace_back(first, last);
        total += last - first;
      }
    }
    if (total >= (16u << 20))  // only where it pays for a thread
      thread_ = std::thread([pages = std::move(pages)] {
        for (const auto& [first, last] : pages)
          madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE);
      });
#else
    (void)ranges;
#endif
  }
  Prefault& operator=(Prefault&& other) {
    join();
    thread_ = std::move(other.thread_);
    return *this;
  }
  ~Prefault() { join(); }

 private:
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::thread thread_;
};

// The unused capacity of a vector, as a Prefault range.
template <class T>
Prefault::Range spare_capacity(const std::vector<T>& v) {
  return {v.data() + v.size(), v.data() + v.capacity()};
}

// The hazard bookkeeping of kernels/plan's PlanBuilder: deps from buffer
// accesses (RAW, WAR, WAW), first access allocates, a free waits for every
// earlier access.
class Builder {
 public:
  Builder(std::string variant, int world) {
    plan_.variant = std::move(variant);
    plan_.world_size = world;
  }
  Plan& plan() { return plan_; }
  Plan finish_plan() {
    prefault_ = {};
    return std::move(plan_);
  }
  void reserve(std::size_t ops, std::size_t buffers) {
    plan_.ops.reserve(ops);
    plan_.buffers.reserve(buffers);
    hazards_.reserve(buffers);
    prefault_ = Prefault({spare_capacity(plan_.ops), spare_capacity(plan_.buffers), spare_capacity(hazards_)});
  }

  StreamId add_stream(RankId rank, StreamRole role) {
    Stream s;
    s.id = StreamId(static_cast<std::int32_t>(plan_.streams.size()));
    s.rank = rank;
    s.role = role;
    s.name = fmt::format("rank{}.{}", rank.value, stream_role_name(role));
    plan_.streams.push_back(s);
    return s.id;
  }

  BufferId add_buffer(Buffer b) {
    b.id = BufferId(static_cast<std::int64_t>(plan_.buffers.size()));
    Hazard h;
    h.persistent = b.persistent;
    h.bound = b.binding.kind != BufferBinding::Kind::kNone;
    hazards_.push_back(std::move(h));
    plan_.buffers.push_back(std::move(b));
    return plan_.buffers.back().id;
  }
  const Buffer& buffer(BufferId id) const { return plan_.buffers[static_cast<std::size_t>(id.value)]; }

  OpId add(OpArgs a) {
    Op op;
    op.id = OpId(static_cast<std::int64_t>(plan_.ops.size()));
    op.kind = a.kind;
    op.name = std::move(a.name);
    op.rank = a.rank;
    op.stream = a.stream;
    op.coords = a.coords;
    op.flops = a.flops;
    op.bytes = a.bytes;
    op.buffers = data_accesses(a.data);
    for (const auto& extra : a.extra_access) {
      auto it = std::find_if(op.buffers.begin(), op.buffers.end(),
                             [&](const BufferAccess& x) { return x.buffer == extra.buffer; });
      if (it == op.buffers.end()) op.buffers.push_back(extra);
      else if (it->access != extra.access) it->access = schema::Access::kReadWrite;
    }
    op.data = std::move(a.data);
    std::vector<OpId> deps;
    auto depend_on = [&](OpId d) {
      if (d.valid()) deps.push_back(d);
    };
    for (const auto& acc : op.buffers) {
      // Only the (small) hazard record is read here: the Buffer itself is
      // cold, and touching it cost a cache miss per access.
      Hazard& h = hazards_[static_cast<std::size_t>(acc.buffer.value)];
      const bool writes = acc.access != schema::Access::kRead;
      depend_on(h.last_writer);
      if (writes)
        for (OpId r : h.readers) depend_on(r);
      bool acts_as_writer = writes;
      if (!h.persistent && !h.allocated) {
        h.allocated = true;
        op.alloc_before.push_back(acc.buffer);
        if (h.bound) acts_as_writer = true;
      }
      if (acts_as_writer) {
        h.last_writer = op.id;
        h.readers.clear();
      } else {
        h.readers.push_back(op.id);
      }
    }
    for (BufferId f : a.free) {
      Hazard& h = hazards_[static_cast<std::size_t>(f.value)];
      if (h.last_writer != op.id) depend_on(h.last_writer);
      for (OpId r : h.readers) depend_on(r);
      h.freed = true;
      // A freed buffer is never touched again: drop its bookkeeping.
      std::vector<OpId>().swap(h.readers);
    }
    op.free_after = std::move(a.free);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    deps.erase(std::remove(deps.begin(), deps.end(), op.id), deps.end());
    op.deps = std::move(deps);
    plan_.ops.push_back(std::move(op));
    return plan_.ops.back().id;
  }

 private:
  struct Hazard {
    OpId last_writer;
    std::vector<OpId> readers;
    bool allocated = false;
    bool freed = false;
    bool persistent = false;  // copies of the buffer's flags
    bool bound = false;
  };
  Plan plan_;
  std::vector<Hazard> hazards_;
  Prefault prefault_;
};

class TimingPlanBuilder {
 public:
  TimingPlanBuilder(const RunSpec& spec, const ExpertLoad& load, std::int64_t max_load_entries)
      : spec_(spec),
        load_(load),
        m_(spec.common.model),
        P_(spec.common.ranks),
        E_(m_.num_experts),
        local_(E_ / P_),
        n_(spec.variant == "pipemoe" ? spec.pipeline_degree : 1),
        max_load_entries_(max_load_entries),
        b_(spec.variant, P_) {}

  Plan build();

 private:
  struct RankState {
    std::int64_t tokens = 0, rows = 0;
    BufferId x, probs, routing, t_i, t_o, y, mid, z, d_t_o, d_t_i, dx, d_weights;
  };
  struct ChunkRank {
    std::int64_t rows = 0;           // received (T_DI rows)
    std::int64_t send_local = 0;     // rows this rank keeps (its own experts)
    std::int64_t send_remote = 0;    // rows it sends to other ranks (as a source)
    std::int64_t recv_remote = 0;    // rows it receives from other ranks (as an expert host)
    std::vector<std::int64_t> expert_rows;  // [local expert index]
    BufferId t_di, t_m, t_do, d_t_do, d_t_di;
  };
  struct LayerState {
    std::vector<RankState> rank;
    std::vector<std::vector<ChunkRank>> chunk;  // [c][q]
    std::vector<std::vector<BufferId>> fwd_slots;
  };

  int chunk_coord(int c) const { return n_ > 1 ? c : -1; }
  BufferId add_buffer(RankId rank, BufferTag tag, std::string name, std::int64_t rows, std::int64_t cols,
                      int elem_bytes, const Coords& c, BufferBinding binding = {}) {
    Buffer buf;
    buf.rank = rank;
    buf.tag = tag;
    buf.name = std::move(name);
    buf.rows = rows;
    buf.cols = cols;
    buf.elem_bytes = elem_bytes;
    buf.layer = c.layer;
    buf.iteration = c.iteration;
    buf.micro_batch = c.micro_batch;
    buf.chunk = c.chunk;
    buf.binding = binding;
    return b_.add_buffer(std::move(buf));
  }
  ParamBuffers add_param(RankId rank, const ParamSlice& slice, std::int64_t rows, const std::string& name);
  void add_sgd(RankId rank, const ParamBuffers& p, int iteration);
  void prepare(int j, int l);
  void all_to_all(OpKind kind, const Coords& c, bool to_experts, int chunk, const std::vector<BufferId>& src,
                  const std::vector<BufferId>& dst, const std::vector<std::vector<BufferId>>& frees);
  void forward(int j, int l);
  void backward(int j, int l);

  const RunSpec& spec_;
  const ExpertLoad& load_;
  const ModelShape& m_;
  const int P_, E_, local_, n_;
  const std::int64_t max_load_entries_;
  // split_[cnt * n_ + c]: rows of chunk c of a (source, expert) pair with cnt
  // rows (pipemoe Eq. 5), for cnt below the tokens of a source.
  std::vector<std::int64_t> split_;
  std::vector<int> expert_rank_;  // [expert]: the rank that hosts it
  std::int64_t next_collective_ = 0;
  Builder b_;
  std::vector<StreamId> compute_, comm_;
  std::vector<std::vector<ParamBuffers>> gate_, dense_, experts_;
  std::vector<LayerState> layers_;
};

ParamBuffers TimingPlanBuilder::add_param(RankId rank, const ParamSlice& slice, std::int64_t rows,
                                          const std::string& name) {
  ParamBuffers p;
  p.slice = slice;
  auto make = [&](BufferTag tag, BufferBinding::Kind kind, const char* suffix) {
    Buffer buf;
    buf.rank = rank;
    buf.tag = tag;
    buf.name = name + suffix;
    buf.rows = rows;
    buf.cols = slice.cols;
    buf.elem_bytes = m_.elem_bytes;
    buf.layer = slice.layer;
    buf.persistent = true;
    buf.binding.kind = kind;
    buf.binding.param = slice;
    return b_.add_buffer(std::move(buf));
  };
  p.params = make(BufferTag::kParams, BufferBinding::Kind::kParam, ".params");
  p.grads = make(BufferTag::kGrads, BufferBinding::Kind::kGrad, ".grads");
  make(BufferTag::kOptimizer, BufferBinding::Kind::kOptimizerState, ".adam_m");
  make(BufferTag::kOptimizer, BufferBinding::Kind::kOptimizerState, ".adam_v");
  return p;
}

void TimingPlanBuilder::add_sgd(RankId rank, const ParamBuffers& p, int iteration) {
  const Buffer& buf = b_.buffer(p.params);
  OpArgs a;
  a.kind = OpKind::kOptimizer;
  a.coords = coords(p.slice.layer, iteration, -1, Phase::kOther);
  a.name = fmt::format("L{}.it{}.optimizer.{}", p.slice.layer, iteration, buf.name);
  a.rank = rank;
  a.stream = compute_[static_cast<std::size_t>(rank.value)];
  a.flops = optimizer_flops(buf.elements());
  a.data = SgdStep{p.params, p.grads, p.slice, m_.learning_rate};
  b_.add(std::move(a));
}

// Per-rank totals of pipemoe Eq. 5's chunking: chunk c holds rows
// [floor(n c / r), floor(n (c+1) / r)) of each (source, expert) pair.
void TimingPlanBuilder::prepare(int j, int l) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  L.rank.assign(static_cast<std::size_t>(P_), RankState{});
  L.chunk.assign(static_cast<std::size_t>(n_), std::vector<ChunkRank>(static_cast<std::size_t>(P_)));
  L.fwd_slots.assign(static_cast<std::size_t>(P_), {});
  for (int c = 0; c < n_; ++c)
    for (auto& cr : L.chunk[static_cast<std::size_t>(c)]) cr.expert_rows.assign(static_cast<std::size_t>(local_), 0);
  // This loop visits every (source, expert, chunk): 134 M times at 1024 ranks
  // with r = 4. It accumulates into flat arrays indexed [x * n + c] (a few
  // tens of KB, cache resident), takes chunk sizes from a table rather than
  // two divisions each, and fills the ChunkRank structs once at the end.
  const auto rows_of_chunk = [this](std::int64_t cnt, int c) {
    if (cnt < static_cast<std::int64_t>(split_.size()) / n_) return split_[static_cast<std::size_t>(cnt * n_ + c)];
    return chunk_rows(cnt, c, n_);
  };
  const auto n = static_cast<std::size_t>(n_);
  std::vector<std::int64_t> expert_rows(static_cast<std::size_t>(E_) * n, 0), recv_remote(static_cast<std::size_t>(P_) * n, 0);
  std::vector<std::int64_t> send_local(n), send_remote(n);
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[static_cast<std::size_t>(p)];
    s.tokens = load_.tokens_of(j, p);
    const std::int64_t* counts = load_.source_counts(j, l, p);
    std::fill(send_local.begin(), send_local.end(), 0);
    std::fill(send_remote.begin(), send_remote.end(), 0);
    for (int e = 0; e < E_; ++e) {
      const std::int64_t cnt = counts[e];
      if (cnt == 0) continue;
      s.rows += cnt;
      const int q = expert_rank_[static_cast<std::size_t>(e)];
      std::int64_t* to_expert = &expert_rows[static_cast<std::size_t>(e) * n];
      if (q == p) {
        for (std::size_t c = 0; c < n; ++c) {
          const std::int64_t rows = rows_of_chunk(cnt, static_cast<int>(c));
          to_expert[c] += rows;
          send_local[c] += rows;
        }
      } else {
        std::int64_t* to_rank = &recv_remote[static_cast<std::size_t>(q) * n];
        for (std::size_t c = 0; c < n; ++c) {
          const std::int64_t rows = rows_of_chunk(cnt, static_cast<int>(c));
          to_expert[c] += rows;
          to_rank[c] += rows;
          send_remote[c] += rows;
        }
      }
    }
    for (std::size_t c = 0; c < n; ++c) {
      ChunkRank& from = L.chunk[c][static_cast<std::size_t>(p)];
      from.send_local = send_local[c];
      from.send_remote = send_remote[c];
    }
  }
  for (std::size_t c = 0; c < n; ++c)
    for (int q = 0; q < P_; ++q) {
      ChunkRank& to = L.chunk[c][static_cast<std::size_t>(q)];
      to.recv_remote = recv_remote[static_cast<std::size_t>(q) * n + c];
      to.rows = 0;
      for (int i = 0; i < local_; ++i) {
        const std::int64_t rows = expert_rows[static_cast<std::size_t>(q * local_ + i) * n + c];
        to.expert_rows[static_cast<std::size_t>(i)] = rows;
        to.rows += rows;
      }
    }
}

void TimingPlanBuilder::all_to_all(OpKind kind, const Coords& c, bool to_experts, int chunk,
                                   const std::vector<BufferId>& src, const std::vector<BufferId>& dst,
                                   const std::vector<std::vector<BufferId>>& frees) {
  LayerState& L = layers_[static_cast<std::size_t>(c.layer)];
  const CollectiveId id(next_collective_++);
  const std::int64_t row_bytes = m_.model_dim * m_.elem_bytes;
  const std::string name = op_name(c, op_kind_name(kind));
  for (int r = 0; r < P_; ++r) {
    const ChunkRank& cr = L.chunk[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(r)];
    // As a source this rank sends send_remote rows and gets them back; as an
    // expert host it receives recv_remote rows and returns them.
    const std::int64_t out_remote = to_experts ? cr.send_remote : cr.recv_remote;
    const std::int64_t in_remote = to_experts ? cr.recv_remote : cr.send_remote;
    Collective col;
    col.id = id;
    col.kind = CollectiveKind::kAllToAllV;
    col.sends = {{RankId(r), View{src[static_cast<std::size_t>(r)], 0, cr.send_local}, cr.send_local * row_bytes},
                 {RankId(), View{src[static_cast<std::size_t>(r)], 0, out_remote}, out_remote * row_bytes}};
    col.recvs = {{RankId(r), View{dst[static_cast<std::size_t>(r)], 0, cr.send_local}, cr.send_local * row_bytes},
                 {RankId(), View{dst[static_cast<std::size_t>(r)], 0, in_remote}, in_remote * row_bytes}};
    OpArgs a;
    a.kind = kind;
    a.coords = c;
    a.name = name;
    a.rank = RankId(r);
    a.stream = comm_[static_cast<std::size_t>(r)];
    a.bytes = out_remote * row_bytes;
    a.data = std::move(col);
    if (!frees.empty()) a.free = frees[static_cast<std::size_t>(r)];
    b_.add(std::move(a));
  }
}

void TimingPlanBuilder::forward(int j, int l) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, Phase::kForward);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  const auto R = [](int i) { return static_cast<std::size_t>(i); };

  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    if (l == 0) {
      BufferBinding in;
      in.kind = BufferBinding::Kind::kModelInput;
      in.iteration = j;
      in.block = p;
      s.x = add_buffer(RankId(p), BufferTag::kActivation, fmt::format("it{}.input", j), s.tokens, M, m_.elem_bytes, co,
                       in);
    } else {
      s.x = layers_[R(l - 1)].rank[R(p)].z;
    }
    s.probs = add_buffer(RankId(p), BufferTag::kRouting, op_name(co, "probs"), s.tokens, E_, 4, co);
    s.routing = add_buffer(RankId(p), BufferTag::kRouting, op_name(co, "routing"), s.tokens, 2 * m_.top_k, 4, co);
    OpArgs a;
    a.kind = OpKind::kGate;
    a.coords = co;
    a.name = op_name(co, "gate");
    a.rank = RankId(p);
    a.stream = compute_[R(p)];
    a.flops = gate_forward_flops(s.tokens, M, E_);
    a.data = GateForward{View{s.x, 0, s.tokens}, gate_[R(l)][R(p)].params, s.probs, s.routing, m_.top_k};
    b_.add(std::move(a));
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    s.t_i = add_buffer(RankId(p), BufferTag::kTI, op_name(co, "T_I"), s.rows, M, m_.elem_bytes, co);
    s.t_o = add_buffer(RankId(p), BufferTag::kTO, op_name(co, "T_O"), s.rows, M, m_.elem_bytes, co);
    OpArgs a;
    a.kind = OpKind::kPermute;
    a.coords = co;
    a.name = op_name(co, "permute");
    a.rank = RankId(p);
    a.stream = compute_[R(p)];
    a.bytes = s.rows * M * m_.elem_bytes;
    a.data = Permute{View{s.x, 0, s.tokens}, s.routing, RoutedLayout{}, View{s.t_i, 0, s.rows}};
    b_.add(std::move(a));
  }
  for (int q = 0; q < P_; ++q)
    for (int c = 0; c < n_; ++c) {
      ChunkRank& cr = L.chunk[R(c)][R(q)];
      const Coords cc = coords(l, j, chunk_coord(c), Phase::kForward);
      cr.t_di = add_buffer(RankId(q), BufferTag::kTDI, op_name(cc, "T_DI"), cr.rows, M, m_.elem_bytes, cc);
      cr.t_m = add_buffer(RankId(q), BufferTag::kTM, op_name(cc, "T_M"), cr.rows, m_.expert_hidden, m_.elem_bytes, cc);
      cr.t_do = add_buffer(RankId(q), BufferTag::kTDO, op_name(cc, "T_DO"), cr.rows, M, m_.elem_bytes, cc);
      L.fwd_slots[R(q)].push_back(cr.t_do);
    }
  // pipemoe Eq. 9-11: D_1..D_r, E_1..E_r, C_1..C_r.
  for (int c = 0; c < n_; ++c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(R(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.rank[R(r)].t_i);
      dst.push_back(L.chunk[R(c)][R(r)].t_di);
      if (c == n_ - 1) frees[R(r)].push_back(L.rank[R(r)].t_i);
    }
    all_to_all(OpKind::kDispatchAllToAll, coords(l, j, chunk_coord(c), Phase::kForward), true, c, src, dst, frees);
  }
  for (int c = 0; c < n_; ++c) {
    const Coords cc = coords(l, j, chunk_coord(c), Phase::kForward);
    for (int q = 0; q < P_; ++q) {
      const ChunkRank& cr = L.chunk[R(c)][R(q)];
      for (int i = 0; i < local_; ++i) {
        const int e = q * local_ + i;
        OpArgs a;
        a.kind = OpKind::kExpertFfn;
        a.coords = cc;
        a.name = op_name(cc, fmt::format("expert_ffn.e{}", e));
        a.rank = RankId(q);
        a.stream = compute_[R(q)];
        a.flops = ffn_forward_flops(cr.expert_rows[R(i)], M, m_.expert_hidden);
        a.data = FfnForward{e, experts_[R(l)][R(e)].params, cr.t_di, cr.t_m, cr.t_do, {}};
        b_.add(std::move(a));
      }
    }
  }
  for (int c = 0; c < n_; ++c) {
    std::vector<BufferId> src, dst;
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.chunk[R(c)][R(r)].t_do);
      dst.push_back(L.rank[R(r)].t_o);
    }
    all_to_all(OpKind::kCombineAllToAll, coords(l, j, chunk_coord(c), Phase::kForward), false, c, src, dst, {});
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    BufferBinding out;
    if (last && !dense) {
      out.kind = BufferBinding::Kind::kModelOutput;
      out.iteration = j;
      out.block = p;
    }
    s.y = add_buffer(RankId(p), BufferTag::kActivation, op_name(co, "moe_out"), s.tokens, M, m_.elem_bytes, co, out);
    OpArgs a;
    a.kind = OpKind::kUnpermute;
    a.coords = co;
    a.name = op_name(co, "unpermute");
    a.rank = RankId(p);
    a.stream = compute_[R(p)];
    a.bytes = s.rows * M * m_.elem_bytes;
    a.data = Unpermute{s.routing, RoutedLayout{}, View{s.t_o, 0, s.rows}, View{s.y, 0, s.tokens}};
    a.free = L.fwd_slots[R(p)];
    if (last && !dense && !m_.attention) a.free.push_back(s.y);
    b_.add(std::move(a));
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    if (m_.attention) {
      OpArgs a;
      a.kind = OpKind::kAttention;
      a.coords = co;
      a.name = op_name(co, "attention");
      a.rank = RankId(p);
      a.stream = compute_[R(p)];
      a.flops = attention_forward_flops(s.tokens, M, m_.sequence_length);
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
      s.mid = add_buffer(RankId(p), BufferTag::kActivation, op_name(co, "dense_hidden"), s.tokens, m_.dense_hidden,
                         m_.elem_bytes, co);
      s.z = add_buffer(RankId(p), BufferTag::kActivation, op_name(co, "block_out"), s.tokens, M, m_.elem_bytes, co, out);
      OpArgs a;
      a.kind = OpKind::kDenseFfn;
      a.coords = co;
      a.name = op_name(co, "dense_ffn");
      a.rank = RankId(p);
      a.stream = compute_[R(p)];
      a.flops = ffn_forward_flops(s.tokens, M, m_.dense_hidden);
      a.data = FfnForward{-1, dense_[R(l)][R(p)].params, s.y, s.mid, s.z, {}};
      if (last) a.free = {s.z};
      b_.add(std::move(a));
    } else {
      s.z = s.y;
    }
  }
}

void TimingPlanBuilder::backward(int j, int l) {
  LayerState& L = layers_[static_cast<std::size_t>(l)];
  const Coords co = coords(l, j, -1, Phase::kBackward);
  const bool dense = m_.dense_hidden > 0;
  const bool last = l == m_.num_layers - 1;
  const std::int64_t M = m_.model_dim;
  const auto R = [](int i) { return static_cast<std::size_t>(i); };

  std::vector<BufferId> dy(R(P_));
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    BufferId dz;
    if (last) {
      BufferBinding g;
      g.kind = BufferBinding::Kind::kOutputGrad;
      g.iteration = j;
      g.block = p;
      dz = add_buffer(RankId(p), BufferTag::kActivationGrad, fmt::format("it{}.output_grad", j), s.tokens, M,
                      m_.elem_bytes, co, g);
    } else {
      dz = layers_[R(l + 1)].rank[R(p)].dx;
    }
    BufferId d = dz;
    if (dense) {
      d = add_buffer(RankId(p), BufferTag::kActivationGrad, op_name(co, "d_moe_out"), s.tokens, M, m_.elem_bytes, co);
      OpArgs a;
      a.kind = OpKind::kDenseFfn;
      a.coords = co;
      a.name = op_name(co, "dense_ffn");
      a.rank = RankId(p);
      a.stream = compute_[R(p)];
      a.flops = 2.0 * ffn_forward_flops(s.tokens, M, m_.dense_hidden);
      const auto& pb = dense_[R(l)][R(p)];
      a.data = FfnBackward{-1, pb.params, pb.grads, s.y, s.mid, dz, d, {}};
      a.free = {s.y, s.mid, dz};
      b_.add(std::move(a));
    }
    if (m_.attention) {
      OpArgs a;
      a.kind = OpKind::kAttention;
      a.coords = co;
      a.name = op_name(co, "attention");
      a.rank = RankId(p);
      a.stream = compute_[R(p)];
      a.flops = 2.0 * attention_forward_flops(s.tokens, M, m_.sequence_length);
      a.extra_access = {{d, schema::Access::kReadWrite}};
      b_.add(std::move(a));
    }
    dy[R(p)] = d;
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    s.d_t_o = add_buffer(RankId(p), BufferTag::kGradTO, op_name(co, "dT_O"), s.rows, M, m_.elem_bytes, co);
    s.d_t_i = add_buffer(RankId(p), BufferTag::kGradTI, op_name(co, "dT_I"), s.rows, M, m_.elem_bytes, co);
    s.d_weights = add_buffer(RankId(p), BufferTag::kRouting, op_name(co, "d_weights"), s.tokens, m_.top_k, 4, co);
    OpArgs a;
    a.kind = OpKind::kUnpermute;
    a.coords = co;
    a.name = op_name(co, "unpermute");
    a.rank = RankId(p);
    a.stream = compute_[R(p)];
    a.bytes = 2 * s.rows * M * m_.elem_bytes;
    a.data = UnpermuteBackward{s.routing, RoutedLayout{}, View{dy[R(p)], 0, s.tokens}, View{s.t_o, 0, s.rows},
                               View{s.d_t_o, 0, s.rows}, s.d_weights};
    a.free = {s.t_o};
    if (dy[R(p)].valid()) a.free.push_back(dy[R(p)]);
    b_.add(std::move(a));
  }
  for (int q = 0; q < P_; ++q)
    for (int c = 0; c < n_; ++c) {
      ChunkRank& cr = L.chunk[R(c)][R(q)];
      const Coords cc = coords(l, j, chunk_coord(c), Phase::kBackward);
      cr.d_t_do = add_buffer(RankId(q), BufferTag::kGradTDO, op_name(cc, "dT_DO"), cr.rows, M, m_.elem_bytes, cc);
      cr.d_t_di = add_buffer(RankId(q), BufferTag::kGradTDI, op_name(cc, "dT_DI"), cr.rows, M, m_.elem_bytes, cc);
    }
  for (int c = 0; c < n_; ++c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(R(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.rank[R(r)].d_t_o);
      dst.push_back(L.chunk[R(c)][R(r)].d_t_do);
      if (c == n_ - 1) frees[R(r)].push_back(L.rank[R(r)].d_t_o);
    }
    all_to_all(OpKind::kCombineAllToAll, coords(l, j, chunk_coord(c), Phase::kBackward), true, c, src, dst, frees);
  }
  for (int c = 0; c < n_; ++c) {
    const Coords cc = coords(l, j, chunk_coord(c), Phase::kBackward);
    for (int q = 0; q < P_; ++q) {
      const ChunkRank& cr = L.chunk[R(c)][R(q)];
      for (int i = 0; i < local_; ++i) {
        const int e = q * local_ + i;
        OpArgs a;
        a.kind = OpKind::kExpertFfn;
        a.coords = cc;
        a.name = op_name(cc, fmt::format("expert_ffn.e{}", e));
        a.rank = RankId(q);
        a.stream = compute_[R(q)];
        a.flops = 2.0 * ffn_forward_flops(cr.expert_rows[R(i)], M, m_.expert_hidden);
        const auto& pb = experts_[R(l)][R(e)];
        a.data = FfnBackward{e, pb.params, pb.grads, cr.t_di, cr.t_m, cr.d_t_do, cr.d_t_di, {}};
        if (i + 1 == local_) a.free = {cr.t_di, cr.t_m, cr.d_t_do};
        b_.add(std::move(a));
      }
    }
  }
  for (int c = 0; c < n_; ++c) {
    std::vector<BufferId> src, dst;
    std::vector<std::vector<BufferId>> frees(R(P_));
    for (int r = 0; r < P_; ++r) {
      src.push_back(L.chunk[R(c)][R(r)].d_t_di);
      dst.push_back(L.rank[R(r)].d_t_i);
      frees[R(r)].push_back(L.chunk[R(c)][R(r)].d_t_di);
    }
    all_to_all(OpKind::kDispatchAllToAll, coords(l, j, chunk_coord(c), Phase::kBackward), false, c, src, dst, frees);
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    BufferBinding g;
    g.kind = l == 0 ? BufferBinding::Kind::kInputGrad : BufferBinding::Kind::kZero;
    g.iteration = l == 0 ? j : -1;
    g.block = l == 0 ? p : -1;
    s.dx = add_buffer(RankId(p), BufferTag::kActivationGrad, l == 0 ? fmt::format("it{}.input_grad", j) : op_name(co, "dx"),
                      s.tokens, M, m_.elem_bytes, co, g);
    OpArgs a;
    a.kind = OpKind::kPermute;
    a.coords = co;
    a.name = op_name(co, "permute");
    a.rank = RankId(p);
    a.stream = compute_[R(p)];
    a.bytes = s.rows * M * m_.elem_bytes;
    a.data = PermuteBackward{s.routing, RoutedLayout{}, View{s.d_t_i, 0, s.rows}, View{s.dx, 0, s.tokens}};
    a.free = {s.d_t_i};
    b_.add(std::move(a));
  }
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[R(p)];
    const auto& gp = gate_[R(l)][R(p)];
    OpArgs a;
    a.kind = OpKind::kGate;
    a.coords = co;
    a.name = op_name(co, "gate");
    a.rank = RankId(p);
    a.stream = compute_[R(p)];
    a.flops = 2.0 * gate_forward_flops(s.tokens, M, E_);
    a.data = GateBackward{View{s.x, 0, s.tokens}, gp.params, gp.grads, s.probs, s.routing, s.d_weights,
                          View{s.dx, 0, s.tokens}};
    a.free = {s.x, s.probs, s.routing, s.d_weights};
    if (l == 0) a.free.push_back(s.dx);
    b_.add(std::move(a));
  }
  // Data-parallel gradients of the gate and the dense FFN (one all-reduce
  // each); the group (every rank) is left implicit.
  if (P_ > 1) {
    std::vector<const std::vector<ParamBuffers>*> params{&gate_[R(l)]};
    if (dense) params.push_back(&dense_[R(l)]);
    for (const auto* pv : params) {
      const CollectiveId id(next_collective_++);
      for (int r = 0; r < P_; ++r) {
        const BufferId g = (*pv)[R(r)].grads;
        Collective col;
        col.id = id;
        col.kind = CollectiveKind::kAllReduce;
        col.inout = View{g, 0, b_.buffer(g).rows};
        OpArgs a;
        a.kind = OpKind::kGradAllReduce;
        a.coords = coords(l, j, -1, Phase::kBackward);
        a.name = op_name(a.coords, fmt::format("grad_all_reduce.{}", param_kind_name((*pv)[R(r)].slice.kind)));
        a.rank = RankId(r);
        a.stream = comm_[R(r)];
        a.bytes = b_.buffer(g).bytes();
        a.data = std::move(col);
        b_.add(std::move(a));
      }
    }
  }
}

}  // namespace

bool timing_plan_supported(const RunSpec& spec) {
  return (spec.variant == "dpmoe" && !spec.capacity_padding) || spec.variant == "pipemoe";
}

Plan TimingPlanBuilder::build() {
  Plan& plan = b_.plan();
  plan.iterations = spec_.common.iterations;
  plan.blocks = P_;
  plan.dims = {m_.num_layers, E_, m_.top_k, m_.model_dim, m_.expert_hidden, m_.dense_hidden, m_.elem_bytes};
  plan.config_json = spec_.to_json();
  for (int r = 0; r < P_; ++r) {
    compute_.push_back(b_.add_stream(RankId(r), StreamRole::kCompute));
    comm_.push_back(b_.add_stream(RankId(r), StreamRole::kComm));
  }
  const auto R = [](int i) { return static_cast<std::size_t>(i); };
  for (int l = 0; l < m_.num_layers; ++l) {
    gate_.emplace_back();
    dense_.emplace_back();
    experts_.emplace_back();
    for (int r = 0; r < P_; ++r) {
      gate_.back().push_back(add_param(RankId(r), {ParamKind::kGate, l, -1, 0, E_}, m_.model_dim, fmt::format("L{}.gate", l)));
      if (m_.dense_hidden > 0)
        dense_.back().push_back(add_param(RankId(r), {ParamKind::kDense, l, -1, 0, m_.dense_hidden}, 2 * m_.model_dim,
                                          fmt::format("L{}.dense", l)));
    }
    for (int e = 0; e < E_; ++e)
      experts_.back().push_back(add_param(RankId(e / local_), {ParamKind::kExpert, l, e, 0, m_.expert_hidden},
                                          2 * m_.model_dim, fmt::format("L{}.expert{}", l, e)));
  }
  layers_.resize(R(m_.num_layers));
  const std::size_t params = plan.buffers.size();  // persistent; the rest is per iteration
  for (int e = 0; e < E_; ++e) expert_rank_.push_back(e / local_);
  std::int64_t most = 0;  // a pair's count is at most its source's tokens
  for (int j = 0; j < load_.iterations; ++j)
    for (int p = 0; p < load_.sources; ++p) most = std::max(most, load_.tokens_of(j, p));
  most = std::min<std::int64_t>(most, 1 << 16);
  for (std::int64_t cnt = 0; cnt <= most; ++cnt)
    for (int c = 0; c < n_; ++c) split_.push_back(chunk_rows(cnt, c, n_));
  for (int j = 0; j < spec_.common.iterations; ++j) {
    for (int l = 0; l < m_.num_layers; ++l) {
      prepare(j, l);
      for (int e = 0; e < E_; ++e) plan.placements.push_back({j, l, e, RankId(e / local_), "home"});
    }
    for (int l = 0; l < m_.num_layers; ++l) forward(j, l);
    for (int l = m_.num_layers - 1; l >= 0; --l) backward(j, l);
    for (int r = 0; r < P_; ++r)
      for (int l = 0; l < m_.num_layers; ++l) {
        add_sgd(RankId(r), gate_[R(l)][R(r)], j);
        if (m_.dense_hidden > 0) add_sgd(RankId(r), dense_[R(l)][R(r)], j);
        for (int e = r * local_; e < (r + 1) * local_; ++e) add_sgd(RankId(r), experts_[R(l)][R(e)], j);
      }
    if (j == 0) {
      // Every iteration adds as many ops and buffers as the first: size the
      // plan once rather than grow it (moving a million ops) by doubling.
      const auto iterations = static_cast<std::size_t>(spec_.common.iterations);
      b_.reserve(plan.ops.size() * iterations, params + (plan.buffers.size() - params) * iterations);
    }
  }
  const std::int64_t entries = static_cast<std::int64_t>(load_.iterations) * load_.layers * load_.sources * load_.experts;
  for (int j = 0; j < load_.iterations; ++j)
    for (int l = 0; l < load_.layers; ++l) {
      if (entries <= max_load_entries_) {
        for (int s = 0; s < load_.sources; ++s)
          for (int e = 0; e < load_.experts; ++e) plan.loads.push_back({j, l, s, e, load_.count(j, l, s, e)});
      } else {
        const auto totals = load_.expert_totals(j, l);
        for (int e = 0; e < load_.experts; ++e) plan.loads.push_back({j, l, -1, e, totals[R(e)]});
      }
    }
  return b_.finish_plan();
}

Plan build_timing_plan(const RunSpec& spec, const ExpertLoad& load, std::int64_t max_load_entries) {
  if (!timing_plan_supported(spec))
    throw ConfigError(fmt::format("variant {} has no timing-only plan builder (dpmoe and pipemoe have one)",
                                  spec.variant));
  spec.validate();
  if (load.sources != spec.common.ranks || load.experts != spec.common.model.num_experts ||
      load.layers != spec.common.model.num_layers || load.iterations != spec.common.iterations)
    throw ConfigError("the expert load does not match the configuration (sources, experts, layers, iterations)");
  return TimingPlanBuilder(spec, load, max_load_entries).build();
}

}  // namespace moetrace::sim
