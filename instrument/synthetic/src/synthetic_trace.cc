#include "moetrace/synthetic/synthetic_trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"

namespace moetrace::synthetic {
namespace {

using instrument::TraceWriter;

// Base durations in ns of one op at pipeline degree 1 (forward).
constexpr std::int64_t kGateNs = 40'000;
constexpr std::int64_t kPermuteNs = 20'000;
constexpr std::int64_t kAllToAllNs = 300'000;
constexpr std::int64_t kExpertNs = 400'000;
constexpr std::int64_t kUnpermuteNs = 20'000;
constexpr std::int64_t kAttentionNs = 250'000;
constexpr std::int64_t kChunkStartupNs = 15'000;  // per-op fixed cost (alpha)

int ops_per_moe_layer(const SyntheticConfig& c) { return 3 + 3 * c.chunks; }

struct RankState {
  std::int64_t compute_free = 0, comm_free = 0, cpu_free = 0;
};

instrument::WriterOptions writer_options(const SyntheticConfig& c) {
  instrument::WriterOptions o;
  o.integrity_record = c.integrity_record;
  return o;
}

class Generator {
 public:
  Generator(const std::string& path, const SyntheticConfig& c)
      : c_(c), rng_(c.seed),
        writer_(path, run_record(c), writer_options(c)) {}

  SyntheticResult run(const std::function<void(double)>& progress) {
    const auto t0 = std::chrono::steady_clock::now();
    describe_topology();
    std::vector<RankState> state(static_cast<std::size_t>(c_.ranks));
    for (int it = 0; it < c_.iterations; ++it) {
      // Collective ops end together on all ranks: schedule rank by rank and
      // align every collective to the latest participant.
      for (int layer = 0; layer < c_.layers; ++layer) emit_layer(state, it, layer, Phase::kForward);
      for (int layer = c_.layers - 1; layer >= 0; --layer) emit_layer(state, it, layer, Phase::kBackward);
      emit_expert_load(it);
      if (progress) progress(static_cast<double>(it + 1) / c_.iterations);
    }
    writer_.flush();  // everything on disk: the writer's sustained rate ends here
    const auto t_close = std::chrono::steady_clock::now();
    writer_.close();
    const auto t1 = std::chrono::steady_clock::now();
    return {events_, std::chrono::duration<double>(t1 - t0).count(),
            std::chrono::duration<double>(t1 - t_close).count()};
  }

 private:
  static instrument::RunRecord run_record(const SyntheticConfig& c) {
    instrument::RunRecord r;
    r.name = "synthetic expert-parallel run";
    r.backend = "synthetic";
    r.variant = "pipemoe";
    r.simulated = true;
    r.world_size = c.ranks;
    r.config_json = "{\"ranks\":" + std::to_string(c.ranks) + ",\"layers\":" +
                    std::to_string(c.layers) + ",\"iterations\":" + std::to_string(c.iterations) +
                    ",\"chunks\":" + std::to_string(c.chunks) + "}";
    return r;
  }

  StreamId stream(int rank, int lane) const { return StreamId(rank * 3 + lane); }

  void describe_topology() {
    for (int r = 0; r < c_.ranks; ++r) {
      writer_.add(instrument::DeviceRecord{DeviceId(r), "synthetic GPU", {}, 9, 0, 132,
                                           80LL << 30, true});
      writer_.add(instrument::RankRecord{RankId(r), DeviceId(r), r, {}, -1});
      const char* roles[] = {instrument::kRoleCompute, instrument::kRoleComm, instrument::kRoleCopy};
      const char* names[] = {"compute", "comm", "copy"};
      for (int lane = 0; lane < 3; ++lane)
        writer_.add(instrument::StreamRecord{stream(r, lane), RankId(r), DeviceId(r), -1,
                                             roles[lane], names[lane], 0});
    }
    for (int l = 0; l < c_.layers; ++l)
      writer_.add(instrument::LayerRecord{l, "moe", c_.ranks * c_.experts_per_rank, 2, 1024, 4096,
                                          8192});
    kernel_names_[0] = writer_.intern("moe_gate_softmax_topk_kernel");
    kernel_names_[1] = writer_.intern("moe_permute_tokens_kernel");
    kernel_names_[2] = writer_.intern("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)");
    kernel_names_[3] = writer_.intern("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64");
    kernel_names_[4] = writer_.intern("moe_unpermute_combine_kernel");
    kernel_names_[5] = writer_.intern("flash_attention_kernel");
    api_name_ = writer_.intern("cudaLaunchKernel");
    for (const auto& info : all_op_kinds()) op_names_.push_back(writer_.intern(info.name));
  }

  std::int64_t jitter(std::int64_t ns) {
    std::uniform_real_distribution<double> d(0.9, 1.1);
    return static_cast<std::int64_t>(static_cast<double>(ns) * d(rng_));
  }

  // Emits an op with its kernels and API calls; returns its end.
  std::int64_t emit_op(int rank, int lane, OpKind kind, int kernel_name, std::int64_t ready,
                       std::int64_t dur, RankState& s, int iteration, int layer, int chunk,
                       Phase phase, std::int64_t bytes) {
    std::int64_t& free = lane == 1 ? s.comm_free : s.compute_free;
    const std::int64_t start = std::max(ready, free);
    const std::int64_t end = start + dur;
    free = end;
    instrument::OpRangeRecord op;
    op.id = OpId(next_op_++);
    op.rank = RankId(rank);
    op.stream = stream(rank, lane);
    op.kind = kind;
    op.name = op_names_[static_cast<std::size_t>(kind)];
    op.layer = layer;
    op.iteration = iteration;
    op.micro_batch = 0;
    op.chunk = chunk;
    op.phase = phase;
    op.start_ns = start;
    op.end_ns = end;
    op.bytes = bytes;
    const std::int64_t launch = std::max(s.cpu_free, start - 20'000);
    op.launch_start_ns = launch;
    op.launch_end_ns = launch + 4'000 * c_.kernels_per_op;
    s.cpu_free = op.launch_end_ns;
    writer_.add(op);
    ++events_;
    const std::int64_t k = c_.kernels_per_op;
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t corr = ++next_corr_;
      instrument::KernelRecord kr;
      kr.rank = op.rank;
      kr.stream = op.stream;
      kr.start_ns = start + dur * i / k;
      kr.end_ns = start + dur * (i + 1) / k;
      kr.name = kernel_names_[static_cast<std::size_t>(kernel_name)];
      kr.correlation_id = corr;
      kr.grid = {132, 1, 1};
      kr.block = {256, 1, 1};
      kr.op = op.id;
      writer_.add(kr);
      ++events_;
      if (c_.api_calls) {
        instrument::ApiCallRecord api;
        api.rank = op.rank;
        api.thread_id = 1000 + rank;
        api.start_ns = launch + 4'000 * i;
        api.end_ns = api.start_ns + 3'000;
        api.name = api_name_;
        api.correlation_id = corr;
        writer_.add(api);
        ++events_;
      }
    }
    return end;
  }

  void emit_layer(std::vector<RankState>& state, int it, int layer, Phase phase) {
    const int r = c_.chunks;
    const double scale = phase == Phase::kBackward ? 2.0 : 1.0;  // backward GEMMs: twice the work
    // Per-rank pre-dispatch part, then collectives aligned across ranks.
    std::vector<std::int64_t> ready(static_cast<std::size_t>(c_.ranks));
    for (int rank = 0; rank < c_.ranks; ++rank) {
      auto& s = state[static_cast<std::size_t>(rank)];
      auto t = emit_op(rank, 0, OpKind::kAttention, 5, s.compute_free,
                       jitter(static_cast<std::int64_t>(kAttentionNs * scale)), s, it, -1, -1, phase, -1);
      t = emit_op(rank, 0, OpKind::kGate, 0, t, jitter(kGateNs), s, it, layer, -1, phase, -1);
      t = emit_op(rank, 0, OpKind::kPermute, 1, t, jitter(kPermuteNs), s, it, layer, -1, phase, -1);
      ready[static_cast<std::size_t>(rank)] = t;
      alloc_buffer(rank, layer, t);
    }
    std::int64_t dispatch_ready = *std::max_element(ready.begin(), ready.end());
    std::vector<std::int64_t> combine_end(static_cast<std::size_t>(c_.ranks), 0);
    std::vector<std::int64_t> dispatch_end(static_cast<std::size_t>(r));
    for (int ch = 0; ch < r; ++ch) {
      // Dispatch of chunk ch on every rank starts together (a collective).
      std::int64_t start = dispatch_ready;
      for (auto& s : state) start = std::max(start, s.comm_free);
      const auto dur = jitter(kAllToAllNs / r + kChunkStartupNs);
      for (int rank = 0; rank < c_.ranks; ++rank)
        emit_op(rank, 1, OpKind::kDispatchAllToAll, 2, start, dur, state[static_cast<std::size_t>(rank)],
                it, layer, ch, phase, 1 << 20);
      dispatch_end[static_cast<std::size_t>(ch)] = start + dur;
      dispatch_ready = start + dur;
    }
    // Experts of chunk ch run after its dispatch; combines follow the last dispatch.
    std::vector<std::vector<std::int64_t>> expert_end(static_cast<std::size_t>(c_.ranks));
    for (int rank = 0; rank < c_.ranks; ++rank) {
      auto& s = state[static_cast<std::size_t>(rank)];
      for (int ch = 0; ch < r; ++ch)
        expert_end[static_cast<std::size_t>(rank)].push_back(
            emit_op(rank, 0, OpKind::kExpertFfn, 3, dispatch_end[static_cast<std::size_t>(ch)],
                    jitter(static_cast<std::int64_t>(static_cast<double>(kExpertNs) * scale / r) +
                           kChunkStartupNs),
                    s, it, layer, ch, phase, -1));
    }
    std::int64_t prev = dispatch_ready;
    for (int ch = 0; ch < r; ++ch) {
      std::int64_t start = prev;
      for (int rank = 0; rank < c_.ranks; ++rank)
        start = std::max({start, expert_end[static_cast<std::size_t>(rank)][static_cast<std::size_t>(ch)],
                          state[static_cast<std::size_t>(rank)].comm_free});
      const auto dur = jitter(kAllToAllNs / r + kChunkStartupNs);
      for (int rank = 0; rank < c_.ranks; ++rank)
        combine_end[static_cast<std::size_t>(rank)] =
            emit_op(rank, 1, OpKind::kCombineAllToAll, 2, start, dur, state[static_cast<std::size_t>(rank)],
                    it, layer, ch, phase, 1 << 20);
      prev = start + dur;
    }
    for (int rank = 0; rank < c_.ranks; ++rank) {
      auto& s = state[static_cast<std::size_t>(rank)];
      auto t = emit_op(rank, 0, OpKind::kUnpermute, 4, combine_end[static_cast<std::size_t>(rank)],
                       jitter(kUnpermuteNs), s, it, layer, -1, phase, -1);
      free_buffer(rank, t);
    }
  }

  void alloc_buffer(int rank, int layer, std::int64_t t) {
    instrument::MemoryEventRecord e;
    e.rank = RankId(rank);
    e.ts_ns = t;
    e.alloc = true;
    e.address = 0x7f0000000000ULL + static_cast<std::uint64_t>(layer) * (1ULL << 24);
    e.bytes = 8LL << 20;
    writer_.add(e);
    ++events_;
    open_allocs_.push_back({rank, e.address, e.bytes});
  }

  void free_buffer(int rank, std::int64_t t) {
    for (auto it = open_allocs_.begin(); it != open_allocs_.end(); ++it)
      if (it->rank == rank) {
        instrument::MemoryEventRecord e;
        e.rank = RankId(rank);
        e.ts_ns = t;
        e.alloc = false;
        e.address = it->address;
        e.bytes = it->bytes;
        writer_.add(e);
        ++events_;
        open_allocs_.erase(it);
        return;
      }
  }

  void emit_expert_load(int it) {
    const int experts = c_.ranks * c_.experts_per_rank;
    std::vector<double> w(static_cast<std::size_t>(experts));
    for (int l = 0; l < c_.layers; ++l) {
      // Zipf weights over a layer-specific permutation of the experts.
      std::vector<int> perm(static_cast<std::size_t>(experts));
      for (int e = 0; e < experts; ++e) perm[static_cast<std::size_t>(e)] = (e * 7 + l * 3) % experts;
      double sum = 0;
      for (int e = 0; e < experts; ++e) sum += w[static_cast<std::size_t>(e)] = 1.0 / std::pow(e + 1, c_.zipf_skew);
      for (int src = 0; src < c_.ranks; ++src)
        for (int e = 0; e < experts; ++e) {
          const double share = w[static_cast<std::size_t>(e)] / sum;
          writer_.add(instrument::ExpertLoadRecord{
              it, l, src, perm[static_cast<std::size_t>(e)],
              static_cast<std::int64_t>(std::llround(share * 8192 * 2 * (0.95 + 0.1 * ((it + src) % 3) / 2.0)))});
        }
    }
  }

  struct OpenAlloc {
    int rank;
    std::uint64_t address;
    std::int64_t bytes;
  };

  SyntheticConfig c_;
  std::mt19937_64 rng_;
  TraceWriter writer_;
  std::vector<StringId> op_names_;
  StringId kernel_names_[6];
  StringId api_name_;
  std::vector<OpenAlloc> open_allocs_;
  std::int64_t next_op_ = 0, next_corr_ = 0, events_ = 0;
};

void validate(const SyntheticConfig& c) {
  if (c.ranks < 1) throw ConfigError("ranks (" + std::to_string(c.ranks) + ") must be at least 1");
  if (c.layers < 1) throw ConfigError("layers (" + std::to_string(c.layers) + ") must be at least 1");
  if (c.iterations < 1)
    throw ConfigError("iterations (" + std::to_string(c.iterations) + ") must be at least 1");
  if (c.chunks < 1) throw ConfigError("chunks (" + std::to_string(c.chunks) + ") must be at least 1");
  if (c.kernels_per_op < 1)
    throw ConfigError("kernels_per_op (" + std::to_string(c.kernels_per_op) + ") must be at least 1");
  if (c.experts_per_rank < 1)
    throw ConfigError("experts_per_rank (" + std::to_string(c.experts_per_rank) + ") must be at least 1");
}

}  // namespace

std::int64_t synthetic_event_count(const SyntheticConfig& c) {
  // Per rank, layer and phase: attention + MoE ops, each with its kernels
  // (and API calls); plus one alloc and one free.
  const std::int64_t ops = 1 + ops_per_moe_layer(c);
  const std::int64_t per_op = 1 + c.kernels_per_op * (c.api_calls ? 2 : 1);
  return static_cast<std::int64_t>(c.iterations) * c.layers * 2 * c.ranks * (ops * per_op + 2);
}

int iterations_for_events(SyntheticConfig c, std::int64_t events) {
  c.iterations = 1;
  const auto per_iteration = synthetic_event_count(c);
  return static_cast<int>(std::max<std::int64_t>(1, (events + per_iteration - 1) / per_iteration));
}

SyntheticResult write_synthetic_trace(const std::string& path, const SyntheticConfig& config,
                                      const std::function<void(double)>& progress) {
  validate(config);
  return Generator(path, config).run(progress);
}

}  // namespace moetrace::synthetic
