// The CUDA executor (executor.h). The host walks issue_order once; for each
// op it enqueues, on the op's stream: the event waits plan_waits chose, the
// allocations (cudaMallocAsync, or a region of the pinned arena) and their
// initial values, the op's kernels / cuBLAS calls / copies / collective,
// then captures, frees (cudaFreeAsync) and the op's completion event.
// Everything an op enqueues happens inside its OpScope (NVTX range +
// CUPTI external correlation id), so the trace attributes it to the op.
#include "moetrace/cuda/executor.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <set>

#include "check.h"
#include "communicator.h"
#include "gemm.h"
#include "kernels.h"
#include "moetrace/cuda/device_probe.h"
#include "moetrace/cuda/host_data.h"
#include "moetrace/cuda/schedule.h"
#include "moetrace/cupti/collector.h"
#include "moetrace/plan/cpu_executor.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {

const char* communicator_name(CommunicatorKind k) { return k == CommunicatorKind::kNccl ? "nccl" : "emulated"; }

CommunicatorKind parse_communicator(std::string_view s) {
  if (s == "emulated") return CommunicatorKind::kEmulated;
  if (s == "nccl") return CommunicatorKind::kNccl;
  throw ConfigError(fmt::format("communicator ({}) must be emulated or nccl", s));
}

namespace {

std::size_t at(OpId id) { return static_cast<std::size_t>(id.value); }
std::size_t at(BufferId id) { return static_cast<std::size_t>(id.value); }
std::size_t at(StreamId id) { return static_cast<std::size_t>(id.value); }

constexpr std::size_t kBlasWorkspace = 32u << 20;  // cuBLAS's recommendation for Hopper

// A timing-only op known only by its FLOPs: busy GEMMs stand in for it.
bool busy_fallback(const plan::Op& op) {
  const auto* t = std::get_if<plan::TimingOnly>(&op.data);
  if (t == nullptr || t->attention) return false;
  if (t->plan_search && t->plan_search->experts + t->plan_search->devices <= kernels::kPlanSearchMaxSlots)
    return false;
  return op.flops > 0;
}

bool uses_blas(const plan::Op& op, bool busy) {
  return std::holds_alternative<plan::GateForward>(op.data) ||
         std::holds_alternative<plan::GateBackward>(op.data) ||
         std::holds_alternative<plan::FfnForward>(op.data) ||
         std::holds_alternative<plan::FfnBackward>(op.data) ||
         std::holds_alternative<plan::FfnRecompute>(op.data) ||
         (busy && (busy_fallback(op) || (std::holds_alternative<plan::TimingOnly>(op.data) &&
                                         std::get<plan::TimingOnly>(op.data).attention)));
}

cupti::OpLabel label_of(const plan::Op& op) {
  cupti::OpLabel l;
  l.name = op.name;
  l.op = op.id;
  l.rank = op.rank;
  l.stream = op.stream;
  l.kind = op.kind;
  l.layer = op.coords.layer;
  l.iteration = op.coords.iteration;
  l.micro_batch = op.coords.micro_batch;
  l.chunk = op.coords.chunk;
  l.phase = op.coords.phase;
  l.flops = op.flops;
  l.bytes = op.bytes;
  if (const auto* c = op.collective(); c != nullptr && c->kind == plan::CollectiveKind::kSendRecv) {
    if (!c->sends.empty()) l.peer = c->sends.front().peer;
    else if (!c->recvs.empty()) l.peer = c->recvs.front().peer;
  }
  return l;
}

// A parameter buffer's initial values (plan::param_slice), checked against its shape.
plan::Matrix checked_param_slice(const plan::ModelWeights& w, const plan::Buffer& b) {
  plan::Matrix m = plan::param_slice(w, b.binding.param);
  if (m.rows != b.rows || m.cols != b.cols)
    throw Error(fmt::format("buffer {} is {} x {} but its parameter slice is {} x {}", b.name, b.rows, b.cols,
                            m.rows, m.cols));
  return m;
}

// Pinned host memory that frees itself.
struct PinnedBlock {
  void* ptr = nullptr;
  PinnedBlock() = default;
  explicit PinnedBlock(std::size_t bytes) {
    if (bytes > 0) MOETRACE_CUDA_CHECK(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault));
  }
  ~PinnedBlock() {
    if (ptr != nullptr) cudaFreeHost(ptr);
  }
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  PinnedBlock(PinnedBlock&& o) noexcept : ptr(o.ptr) { o.ptr = nullptr; }
  PinnedBlock& operator=(PinnedBlock&& o) noexcept {
    std::swap(ptr, o.ptr);
    return *this;
  }
};

}  // namespace

struct Executor::Impl final : ExecContext {
  const plan::Plan& plan_;
  ExecutorOptions opt_;
  int device_ = 0;
  std::optional<LaunchEnv> env_;
  std::unique_ptr<Communicator> comm_;
  std::vector<IssueStep> order_;
  WaitPlan waits_;
  HostArenaPlan arena_;
  std::vector<DType> dtype_;
  std::vector<std::int64_t> bytes_;
  std::vector<void*> ptr_;
  std::vector<std::int64_t> alloc_ns_, free_ns_;
  std::vector<std::uint64_t> address_;
  std::vector<cudaStream_t> streams_;
  std::vector<cublasHandle_t> blas_;
  std::vector<void*> blas_ws_;
  std::vector<void*> workspace_;
  std::vector<std::int64_t> workspace_bytes_;
  std::vector<cudaEvent_t> done_;
  std::vector<cudaEvent_t> freed_;
  void* tables_ = nullptr;
  std::vector<std::int64_t> table_offset_, planned_offset_;
  unsigned long long* counts_ = nullptr;
  unsigned long long* mismatches_ = nullptr;
  int sources_ = 1;
  PinnedBlock arena_block_;
  void* busy_a_ = nullptr;
  void* busy_b_ = nullptr;
  std::int64_t fixed_bytes_ = 0, live_bytes_ = 0, peak_bytes_ = 0;
  std::int64_t waits_issued_ = 0;
  // Per run:
  cupti::Collector* collector_ = nullptr;
  PinnedBlock staging_;
  std::vector<std::int64_t> staging_offset_;
  std::vector<std::int64_t> draw_first_;  // drawn inputs: index of the first normal, else -1
  std::uint64_t draw_seed_ = 0;
  PinnedBlock capture_;
  std::vector<std::int64_t> capture_offset_;

  Impl(const plan::Plan& plan, ExecutorOptions opt) : plan_(plan), opt_(std::move(opt)) {}

  ~Impl() override {
    cudaDeviceSynchronize();
    for (std::size_t b = 0; b < ptr_.size(); ++b) release_buffer(b);
    for (cudaEvent_t e : done_)
      if (e != nullptr) cudaEventDestroy(e);
    for (cudaEvent_t e : freed_)
      if (e != nullptr) cudaEventDestroy(e);
    for (cublasHandle_t h : blas_)
      if (h != nullptr) cublasDestroy(h);
    for (void* p : blas_ws_)
      if (p != nullptr) cudaFree(p);
    for (void* p : workspace_)
      if (p != nullptr) cudaFree(p);
    for (void* p : {tables_, static_cast<void*>(counts_), static_cast<void*>(mismatches_), busy_a_, busy_b_})
      if (p != nullptr) cudaFree(p);
    comm_.reset();
    for (cudaStream_t s : streams_)
      if (s != nullptr) cudaStreamDestroy(s);
  }

  // Frees whatever is still allocated for buffer b (end of run, errors).
  void release_buffer(std::size_t b) {
    if (ptr_[b] == nullptr) return;
    const plan::Buffer& buf = plan_.buffers[b];
    if (buf.memory != schema::MemoryKind::kPinnedHost) cudaFree(ptr_[b]);
    ptr_[b] = nullptr;
  }

  bool runs(RankId r) const { return comm_->runs_rank(r); }

  // ---- ExecContext
  const plan::Plan& plan() const override { return plan_; }
  cudaStream_t stream(StreamId id) const override {
    cudaStream_t s = streams_.at(at(id));
    if (s == nullptr) throw Error(fmt::format("stream {} is not executed by this process", id.value));
    return s;
  }
  DType dtype(BufferId b) const override { return dtype_.at(at(b)); }
  std::int64_t row_bytes(BufferId b) const override {
    return plan_.buffer(b).cols * dtype_bytes(dtype_.at(at(b)));
  }
  void* view_ptr(const plan::View& v) const override {
    void* p = ptr_.at(at(v.buffer));
    if (p == nullptr)
      throw Error(fmt::format("buffer {} is used while not allocated", plan_.buffer(v.buffer).name));
    if (v.row < 0 || v.row + v.rows > plan_.buffer(v.buffer).rows)
      throw Error(fmt::format("rows [{}, {}) are outside buffer {} ({} rows)", v.row, v.row + v.rows,
                              plan_.buffer(v.buffer).name, plan_.buffer(v.buffer).rows));
    return static_cast<char*>(p) + v.row * row_bytes(v.buffer);
  }
  char* buf(BufferId b) const { return static_cast<char*>(view_ptr(plan::View{b, 0, 0})); }

  // ---- setup
  void setup() {
    const auto devices = probe_devices();
    if (plan_.dims.top_k > kernels::kMaxTopK)
      throw ConfigError(fmt::format("top_k ({}) is above the executor's limit of {}", plan_.dims.top_k,
                                    kernels::kMaxTopK));
    // The gate picks top_k distinct experts (its kernel relies on it).
    if (plan_.dims.top_k > plan_.dims.num_experts)
      throw ConfigError(fmt::format("top_k ({}) is greater than num_experts ({})", plan_.dims.top_k,
                                    plan_.dims.num_experts));
    if (opt_.communicator == CommunicatorKind::kNccl) {
      env_ = opt_.launch ? opt_.launch : launch_env_from_process();
      if (!env_) env_ = LaunchEnv{0, 1, 0, "none", ""};
    }
    device_ = opt_.device >= 0 ? opt_.device
                               : (env_ ? env_->local_rank % static_cast<int>(devices.size()) : 0);
    if (device_ >= static_cast<int>(devices.size()))
      throw ConfigError(fmt::format("device ({}) is not one of the {} visible GPUs", device_, devices.size()));
    MOETRACE_CUDA_CHECK(cudaSetDevice(device_));
    MOETRACE_CUDA_CHECK(cudaFree(nullptr));  // create the context now, not inside the first op
    cudaMemPool_t pool = nullptr;
    MOETRACE_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    const MemPoolPolicy policy = mem_pool_policy();
    if (policy.keep_freed_blocks) {
      std::uint64_t keep = UINT64_MAX;  // freed blocks stay in the pool for reuse
      MOETRACE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    auto reuse = [&](cudaMemPoolAttr attr, bool on) {
      int v = on ? 1 : 0;
      MOETRACE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, attr, &v));
    };
    reuse(cudaMemPoolReuseFollowEventDependencies, policy.follow_event_dependencies);
    reuse(cudaMemPoolReuseAllowOpportunistic, policy.allow_opportunistic);
    reuse(cudaMemPoolReuseAllowInternalDependencies, policy.allow_internal_dependencies);

    if (opt_.communicator == CommunicatorKind::kNccl)
      comm_ = make_nccl_communicator(plan_, *env_, unique_id_path(opt_.nccl_id_file, [](const char* n) {
                                       return std::getenv(n);
                                     }),
                                     opt_.nccl_id_timeout);
    else
      comm_ = make_emulated_communicator(plan_, opt_.link);
    const RankFilter filter = [this](RankId r) { return runs(r); };
    order_ = issue_order(plan_, filter, /*ordered_collectives=*/!comm_->barriers());
    waits_ = plan_waits(plan_, order_, comm_->barriers());

    const std::size_t nb = plan_.buffers.size();
    dtype_.resize(nb);
    bytes_.resize(nb);
    for (std::size_t b = 0; b < nb; ++b) {
      dtype_[b] = buffer_dtype(plan_.buffers[b], opt_.precision);
      bytes_[b] = buffer_bytes(plan_.buffers[b], opt_.precision);
    }
    ptr_.assign(nb, nullptr);
    alloc_ns_.assign(nb, -1);
    free_ns_.assign(nb, -1);
    address_.assign(nb, 0);
    arena_ = plan_host_arena(plan_, order_, filter, [this](const plan::Buffer& b) { return bytes_[at(b.id)]; });
    arena_block_ = PinnedBlock(static_cast<std::size_t>(arena_.bytes));

    // Streams, in the plan's priorities (clamped to the device's range).
    int least = 0, greatest = 0;
    MOETRACE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    streams_.assign(plan_.streams.size(), nullptr);
    for (const plan::Stream& st : plan_.streams) {
      if (!runs(st.rank)) continue;
      const int prio = std::clamp(st.priority, greatest, least);
      MOETRACE_CUDA_CHECK(cudaStreamCreateWithPriority(&streams_[at(st.id)], cudaStreamNonBlocking, prio));
    }
    // Per-stream workspaces and cuBLAS handles.
    workspace_bytes_.assign(plan_.streams.size(), 0);
    std::vector<bool> blas(plan_.streams.size(), false);
    bool busy = false;
    std::vector<bool> attention(plan_.streams.size(), false);
    for (const IssueStep& step : order_)
      for (OpId x : step.ops) {
        const plan::Op& op = plan_.op(x);
        workspace_bytes_[at(op.stream)] =
            std::max(workspace_bytes_[at(op.stream)], op_workspace(plan_, op, opt_.precision).bytes);
        if (uses_blas(op, opt_.busy_timing_only)) blas[at(op.stream)] = true;
        busy = busy || (opt_.busy_timing_only && busy_fallback(op));
        if (const auto* t = std::get_if<plan::TimingOnly>(&op.data); t != nullptr && t->attention)
          attention[at(op.stream)] = true;
      }
    workspace_.assign(plan_.streams.size(), nullptr);
    blas_.assign(plan_.streams.size(), nullptr);
    blas_ws_.assign(plan_.streams.size(), nullptr);
    for (std::size_t s = 0; s < plan_.streams.size(); ++s) {
      if (streams_[s] == nullptr) continue;
      if (workspace_bytes_[s] > 0) {
        MOETRACE_CUDA_CHECK(cudaMalloc(&workspace_[s], static_cast<std::size_t>(workspace_bytes_[s])));
        fixed_bytes_ += workspace_bytes_[s];
        // Attention reads weights and activations from scratch: finite
        // values, not whatever the allocation held.
        if (attention[s] && opt_.busy_timing_only)
          kernels::fill_normal(streams_[s], DType::kBf16, workspace_[s], workspace_bytes_[s] / 2, 1, 0);
      }
      if (!blas[s]) continue;
      MOETRACE_CUBLAS_CHECK(cublasCreate(&blas_[s]));
      MOETRACE_CUBLAS_CHECK(cublasSetStream(blas_[s], streams_[s]));
      MOETRACE_CUDA_CHECK(cudaMalloc(&blas_ws_[s], kBlasWorkspace));
      fixed_bytes_ += static_cast<std::int64_t>(kBlasWorkspace);
      MOETRACE_CUBLAS_CHECK(cublasSetWorkspace(blas_[s], blas_ws_[s], kBlasWorkspace));
      // fp32 means fp32: no TF32, no reduced-precision reductions.
      MOETRACE_CUBLAS_CHECK(cublasSetMathMode(
          blas_[s], opt_.precision == Precision::kFp32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
    }
    if (busy) {
      const std::size_t n = static_cast<std::size_t>(kBusyTile * kBusyMaxK) *
                            static_cast<std::size_t>(opt_.precision == Precision::kBf16 ? 2 : 4);
      MOETRACE_CUDA_CHECK(cudaMalloc(&busy_a_, n));
      MOETRACE_CUDA_CHECK(cudaMalloc(&busy_b_, n));
      MOETRACE_CUDA_CHECK(cudaMemset(busy_a_, 0, n));
      MOETRACE_CUDA_CHECK(cudaMemset(busy_b_, 0, n));
      fixed_bytes_ += 2 * static_cast<std::int64_t>(n);
    }
    // Events: completion of ops others wait for; frees of reused pinned regions.
    done_.assign(plan_.ops.size(), nullptr);
    for (std::size_t i = 0; i < plan_.ops.size(); ++i)
      if (waits_.needs_event[i]) MOETRACE_CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
    freed_.assign(nb, nullptr);
    for (std::size_t b = 0; b < nb; ++b)
      for (BufferId r : arena_.reuse_waits[b])
        if (freed_[at(r)] == nullptr)
          MOETRACE_CUDA_CHECK(cudaEventCreateWithFlags(&freed_[at(r)], cudaEventDisableTiming));
    upload_tables();
    const std::size_t counts = static_cast<std::size_t>(plan_.iterations) *
                               static_cast<std::size_t>(std::max(plan_.dims.num_layers, 1)) *
                               static_cast<std::size_t>(sources_) *
                               static_cast<std::size_t>(std::max(plan_.dims.num_experts, 1));
    MOETRACE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&counts_), std::max<std::size_t>(counts, 1) * 8));
    MOETRACE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&mismatches_), 8));
    comm_->prepare(*this);
    MOETRACE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Layout tables of the permute family and planned routing, in one upload.
  void upload_tables() {
    std::vector<std::int64_t> host;
    table_offset_.assign(plan_.ops.size(), -1);
    planned_offset_.assign(plan_.ops.size(), -1);
    for (const auto& e : plan_.loads) sources_ = std::max(sources_, e.source + 1);
    sources_ = std::max(sources_, plan_.blocks);
    auto put_layout = [&](const plan::Op& op, const plan::RoutedLayout& l) {
      table_offset_[at(op.id)] = static_cast<std::int64_t>(host.size()) * 8;
      const auto t = layout_table(l);
      host.insert(host.end(), t.begin(), t.end());
    };
    for (const IssueStep& step : order_)
      for (OpId x : step.ops) {
        const plan::Op& op = plan_.op(x);
        std::visit(
            [&](const auto& d) {
              using T = std::decay_t<decltype(d)>;
              if constexpr (std::is_same_v<T, plan::Permute> || std::is_same_v<T, plan::PermuteBackward> ||
                            std::is_same_v<T, plan::Unpermute> || std::is_same_v<T, plan::UnpermuteBackward>) {
                put_layout(op, d.layout);
              } else if constexpr (std::is_same_v<T, plan::GateForward>) {
                if (opt_.routing == RoutingMode::kPlanned) put_planned(op, d, host);
              }
            },
            op.data);
      }
    if (host.empty()) host.push_back(0);
    MOETRACE_CUDA_CHECK(cudaMalloc(&tables_, host.size() * 8));
    MOETRACE_CUDA_CHECK(cudaMemcpy(tables_, host.data(), host.size() * 8, cudaMemcpyHostToDevice));
    fixed_bytes_ += static_cast<std::int64_t>(host.size()) * 8;
  }

  void put_planned(const plan::Op& op, const plan::GateForward& g, std::vector<std::int64_t>& host) {
    const GateSource src = gate_source(plan_, op);
    const int it = op.coords.iteration, layer = op.coords.layer;
    const std::int64_t tokens = g.x.rows;
    std::vector<std::int32_t> ids;
    auto found = opt_.routing_table.find({it, layer, src.block});
    if (found != opt_.routing_table.end()) {
      ids = found->second;
      if (static_cast<std::int64_t>(ids.size()) != tokens * g.top_k)
        throw Error(fmt::format("routing table of iteration {} layer {} block {} has {} ids, expected {}", it,
                                layer, src.block, ids.size(), tokens * g.top_k));
      for (std::int32_t e : ids)
        if (e < 0 || e >= plan_.dims.num_experts)
          throw Error(fmt::format("routing table of iteration {} layer {}: expert {} out of range", it, layer, e));
    } else {
      std::vector<std::int64_t> counts(static_cast<std::size_t>(plan_.dims.num_experts), 0);
      bool any = false;
      for (const auto& e : plan_.loads)
        if (e.iteration == it && e.layer == layer && e.source == src.block && e.expert >= 0 &&
            e.expert < plan_.dims.num_experts) {
          counts[static_cast<std::size_t>(e.expert)] = e.tokens;
          any = true;
        }
      if (!any)
        throw Error(fmt::format("planned routing: the plan has no load for iteration {} layer {} source {}", it,
                                layer, src.block));
      ids = planned_assignment(counts, tokens, g.top_k);
    }
    // int32 ids, packed two per int64 slot.
    planned_offset_[at(op.id)] = static_cast<std::int64_t>(host.size()) * 8;
    const std::size_t words = (ids.size() + 1) / 2;
    const std::size_t at0 = host.size();
    host.resize(at0 + words, 0);
    std::memcpy(host.data() + at0, ids.data(), ids.size() * 4);
  }

  // ---- run
  // Exactly one of `data` (host matrices, staged) and `drawn` (drawn on the device) is given.
  RunResult run(const plan::ModelWeights& weights, const plan::TrainingData* data, const RandomTrainingData* drawn,
                cupti::Collector* collector) {
    collector_ = collector;
    RunResult result;
    const std::size_t nb = plan_.buffers.size();
    std::fill(alloc_ns_.begin(), alloc_ns_.end(), -1);
    std::fill(free_ns_.begin(), free_ns_.end(), -1);
    if (collector_ != nullptr) {
      for (const plan::Stream& st : plan_.streams) {
        if (streams_[at(st.id)] == nullptr) continue;
        instrument::StreamRecord r;
        r.id = st.id;
        r.rank = st.rank;
        r.device = DeviceId(device_);
        r.role = std::string(plan::stream_role_name(st.role));
        r.name = st.name;
        r.priority = st.priority;
        collector_->map_stream(streams_[at(st.id)], r);
      }
      collector_->map_device(device_, env_ ? RankId(env_->rank) : RankId(0));
    }
    const std::size_t counts = static_cast<std::size_t>(plan_.iterations) *
                               static_cast<std::size_t>(std::max(plan_.dims.num_layers, 1)) *
                               static_cast<std::size_t>(sources_) *
                               static_cast<std::size_t>(std::max(plan_.dims.num_experts, 1));
    MOETRACE_CUDA_CHECK(cudaMemset(counts_, 0, std::max<std::size_t>(counts, 1) * 8));
    MOETRACE_CUDA_CHECK(cudaMemset(mismatches_, 0, 8));

    // Persistent buffers: allocated and initialised before the first op.
    live_bytes_ = 0;
    peak_bytes_ = 0;
    std::int64_t persistent_bytes = 0;
    for (const plan::Buffer& b : plan_.buffers) {
      if (!b.persistent || !runs(b.rank)) continue;
      allocate_persistent(b, weights);
      persistent_bytes += bytes_[at(b.id)];
    }
    stage_inputs(data, drawn, weights);
    prepare_capture();
    MOETRACE_CUDA_CHECK(cudaDeviceSynchronize());

    const auto t0 = std::chrono::steady_clock::now();
    result.start_ns = collector_ != nullptr ? cupti::Collector::timestamp_ns() : 0;
    waits_issued_ = 0;
    for (const IssueStep& step : order_) issue(step);
    MOETRACE_CUDA_CHECK(cudaDeviceSynchronize());
    result.end_ns = collector_ != nullptr ? cupti::Collector::timestamp_ns() : 0;
    result.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    result.host_waits = waits_issued_;

    // Buffers still allocated (the plan frees every transient one; be safe).
    for (std::size_t b = 0; b < nb; ++b)
      if (ptr_[b] != nullptr && !plan_.buffers[b].persistent) {
        capture_now(b);
        release_buffer(b);
      }
    read_back_load(result);
    result.routing_mismatches = 0;
    unsigned long long mism = 0;
    MOETRACE_CUDA_CHECK(cudaMemcpy(&mism, mismatches_, 8, cudaMemcpyDeviceToHost));
    result.routing_mismatches = static_cast<std::int64_t>(mism);
    collect_captures(result);
    if (opt_.capture_results) read_back_params(result);
    result.device_bytes_peak = fixed_bytes_ + persistent_bytes + peak_bytes_;
    result.transient_bytes_peak = peak_bytes_;
    result.pinned_arena_bytes = arena_.bytes;
    if (collector_ != nullptr) write_buffers(result);
    for (std::size_t b = 0; b < nb; ++b)
      if (plan_.buffers[b].persistent) release_buffer(b);
    collector_ = nullptr;
    return result;
  }

  std::int64_t now_ns() const { return collector_ != nullptr ? cupti::Collector::timestamp_ns() : -1; }

  void allocate_persistent(const plan::Buffer& b, const plan::ModelWeights& weights) {
    const std::size_t i = at(b.id);
    const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(bytes_[i], 1));
    if (b.memory == schema::MemoryKind::kPinnedHost) {
      ptr_[i] = static_cast<char*>(arena_block_.ptr) + arena_.offset[i];
    } else {
      MOETRACE_CUDA_CHECK(cudaMalloc(&ptr_[i], bytes));
    }
    alloc_ns_[i] = now_ns();
    address_[i] = reinterpret_cast<std::uint64_t>(ptr_[i]);
    if (collector_ != nullptr) collector_->note_allocation(reinterpret_cast<std::uint64_t>(ptr_[i]), b.id);
    if (b.binding.kind == plan::BufferBinding::Kind::kParam) {
      const plan::Matrix m = checked_param_slice(weights, b);
      std::vector<char> host(static_cast<std::size_t>(bytes_[i]));
      to_device_type(m.data.data(), b.elements(), dtype_[i], host.data());
      MOETRACE_CUDA_CHECK(cudaMemcpy(ptr_[i], host.data(), host.size(), cudaMemcpyDefault));
    } else {
      MOETRACE_CUDA_CHECK(cudaMemset(ptr_[i], 0, bytes));
    }
  }

  // Inputs, output gradients (and any transient parameter copy) of this
  // process, converted to their device type in pinned memory once; with
  // `drawn`, inputs and output gradients are not staged but drawn on the
  // device at allocation (draw_first_: their first normal's index).
  void stage_inputs(const plan::TrainingData* data, const RandomTrainingData* drawn,
                    const plan::ModelWeights& weights) {
    staging_offset_.assign(plan_.buffers.size(), -1);
    draw_first_.assign(plan_.buffers.size(), -1);
    draw_seed_ = drawn != nullptr ? drawn->seed : 0;
    std::int64_t total = 0;
    using K = plan::BufferBinding::Kind;
    for (const plan::Buffer& b : plan_.buffers) {
      if (b.persistent || !runs(b.rank)) continue;
      const K k = b.binding.kind;
      if (k != K::kModelInput && k != K::kOutputGrad && k != K::kParam) continue;
      if (drawn != nullptr && k != K::kParam) {
        const int block = b.binding.block;
        if (block < 0 || block >= static_cast<int>(drawn->tokens.size()) ||
            b.rows != drawn->tokens[static_cast<std::size_t>(block)] || b.cols != drawn->model_dim)
          throw Error(fmt::format("buffer {} is {} x {} but its data of block {} is not", b.name, b.rows, b.cols,
                                  block));
        draw_first_[at(b.id)] = static_cast<std::int64_t>(
            training_normal_offset(*drawn, k == K::kOutputGrad, b.binding.iteration, block));
        continue;
      }
      staging_offset_[at(b.id)] = total;
      total += (bytes_[at(b.id)] + 255) / 256 * 256;
    }
    staging_ = PinnedBlock(static_cast<std::size_t>(total));
    for (const plan::Buffer& b : plan_.buffers) {
      const std::int64_t off = staging_offset_[at(b.id)];
      if (off < 0) continue;
      char* dst = static_cast<char*>(staging_.ptr) + off;
      const K k = b.binding.kind;
      if (k == K::kParam) {
        const plan::Matrix m = checked_param_slice(weights, b);
        to_device_type(m.data.data(), b.elements(), dtype_[at(b.id)], dst);
        continue;
      }
      const int it = b.binding.iteration, block = b.binding.block;
      if (it < 0 || it >= data->iterations || block < 0 || block >= data->blocks)
        throw Error(fmt::format("buffer {} wants data of iteration {} block {}, the training data has {} x {}",
                                b.name, it, block, data->iterations, data->blocks));
      const plan::Matrix& m = k == K::kModelInput ? data->input(it, block) : data->output_grad(it, block);
      if (m.rows != b.rows || m.cols != b.cols)
        throw Error(fmt::format("buffer {} is {} x {} but its data is {} x {}", b.name, b.rows, b.cols, m.rows,
                                m.cols));
      to_device_type(m.data.data(), b.elements(), dtype_[at(b.id)], dst);
    }
  }

  void prepare_capture() {
    capture_offset_.assign(plan_.buffers.size(), -1);
    if (!opt_.capture_results) return;
    std::int64_t total = 0;
    using K = plan::BufferBinding::Kind;
    for (const plan::Buffer& b : plan_.buffers) {
      if (!runs(b.rank) || (b.binding.kind != K::kModelOutput && b.binding.kind != K::kInputGrad)) continue;
      capture_offset_[at(b.id)] = total;
      total += (bytes_[at(b.id)] + 255) / 256 * 256;
    }
    capture_ = PinnedBlock(static_cast<std::size_t>(total));
  }

  void capture_now(std::size_t b) {
    if (capture_offset_.empty() || capture_offset_[b] < 0 || ptr_[b] == nullptr) return;
    MOETRACE_CUDA_CHECK(cudaMemcpy(static_cast<char*>(capture_.ptr) + capture_offset_[b], ptr_[b],
                                   static_cast<std::size_t>(bytes_[b]), cudaMemcpyDefault));
  }

  // ---- issue
  void issue(const IssueStep& step) {
    if (!step.collective) {
      const plan::Op& op = plan_.op(step.ops.front());
      {
        cupti::OpScope scope(label_of(op));
        prologue(op);
        execute(op);
      }
      epilogue(op);
      return;
    }
    std::vector<const plan::Op*> ops;
    std::vector<cupti::OpLabel> labels;
    for (OpId x : step.ops) {
      ops.push_back(&plan_.op(x));
      labels.push_back(label_of(plan_.op(x)));
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      cupti::OpScope scope(labels[i]);
      prologue(*ops[i]);
    }
    const plan::Collective& c = *ops.front()->collective();
    comm_->begin(*this, ops);
    const int phases = comm_->phases(c);
    for (int ph = 0; ph < phases; ++ph) {
      if (ph > 0) comm_->barrier(*this, ops);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        cupti::OpScope scope(labels[i]);
        comm_->launch(*this, *ops[i], ph);
      }
    }
    comm_->end(*this, ops);
    for (const plan::Op* op : ops) epilogue(*op);
  }

  void prologue(const plan::Op& op) {
    const cudaStream_t s = stream(op.stream);
    for (OpId d : waits_.waits[at(op.id)]) {
      MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(s, done_[at(d)], 0));
      ++waits_issued_;
    }
    using K = plan::BufferBinding::Kind;
    for (BufferId id : op.alloc_before) {
      const std::size_t b = at(id);
      const plan::Buffer& buf = plan_.buffers[b];
      if (ptr_[b] != nullptr) throw Error(fmt::format("op {} allocates buffer {} twice", op.name, buf.name));
      const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(bytes_[b], 1));
      if (buf.memory == schema::MemoryKind::kPinnedHost) {
        ptr_[b] = static_cast<char*>(arena_block_.ptr) + arena_.offset[b];
        for (BufferId r : arena_.reuse_waits[b]) {
          MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(s, freed_[at(r)], 0));
          ++waits_issued_;
        }
      } else {
        MOETRACE_CUDA_CHECK(cudaMallocAsync(&ptr_[b], bytes, s));
        live_bytes_ += bytes_[b];
        peak_bytes_ = std::max(peak_bytes_, live_bytes_);
      }
      alloc_ns_[b] = now_ns();
      address_[b] = reinterpret_cast<std::uint64_t>(ptr_[b]);
      if (collector_ != nullptr) collector_->note_allocation(reinterpret_cast<std::uint64_t>(ptr_[b]), id);
      switch (buf.binding.kind) {
        case K::kZero:
        case K::kGrad:
        case K::kOptimizerState:
        case K::kInputGrad:  // accumulated into by the permute backward
          MOETRACE_CUDA_CHECK(cudaMemsetAsync(ptr_[b], 0, bytes, s));
          break;
        case K::kModelInput:
        case K::kOutputGrad:
        case K::kParam:
          if (draw_first_[b] >= 0) {
            kernels::fill_normal(s, dtype_[b], ptr_[b], buf.elements(), draw_seed_,
                                 static_cast<std::uint64_t>(draw_first_[b]));
            break;
          }
          MOETRACE_CUDA_CHECK(cudaMemcpyAsync(ptr_[b], static_cast<char*>(staging_.ptr) + staging_offset_[b],
                                              static_cast<std::size_t>(bytes_[b]), cudaMemcpyHostToDevice, s));
          break;
        case K::kNone:
        case K::kModelOutput:
          break;
      }
    }
  }

  void epilogue(const plan::Op& op) {
    const cudaStream_t s = stream(op.stream);
    for (BufferId id : op.free_after) {
      const std::size_t b = at(id);
      if (ptr_[b] == nullptr) throw Error(fmt::format("op {} frees buffer {} that is not allocated", op.name,
                                                      plan_.buffers[b].name));
      if (!capture_offset_.empty() && capture_offset_[b] >= 0)
        MOETRACE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(capture_.ptr) + capture_offset_[b], ptr_[b],
                                            static_cast<std::size_t>(bytes_[b]), cudaMemcpyDeviceToHost, s));
      if (plan_.buffers[b].memory == schema::MemoryKind::kPinnedHost) {
        if (freed_[b] != nullptr) MOETRACE_CUDA_CHECK(cudaEventRecord(freed_[b], s));
      } else {
        MOETRACE_CUDA_CHECK(cudaFreeAsync(ptr_[b], s));
        live_bytes_ -= bytes_[b];
      }
      free_ns_[b] = now_ns();
      ptr_[b] = nullptr;
    }
    if (done_[at(op.id)] != nullptr) MOETRACE_CUDA_CHECK(cudaEventRecord(done_[at(op.id)], s));
  }

  // ---- ops
  cublasHandle_t blas(const plan::Op& op) const {
    cublasHandle_t h = blas_.at(at(op.stream));
    if (h == nullptr) throw Error(fmt::format("op {}: no cuBLAS handle on its stream", op.name));
    return h;
  }
  char* ws(const plan::Op& op, std::int64_t offset) const {
    if (offset < 0) throw Error(fmt::format("op {}: workspace slot missing", op.name));
    return static_cast<char*>(workspace_.at(at(op.stream))) + offset;
  }
  void same_type(const plan::Op& op, BufferId a, BufferId b) const {
    if (dtype(a) != dtype(b))
      throw Error(fmt::format("op {}: buffers {} and {} have different element types", op.name,
                              plan_.buffer(a).name, plan_.buffer(b).name));
  }

  void execute(const plan::Op& op) {
    std::visit([&](const auto& d) { run_op(op, d); }, op.data);
  }

  void run_op(const plan::Op& op, const plan::TimingOnly& d) {
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

  // Unfused attention of the op's shape (op_layout.h plan_attention) on its
  // input view and workspace; nothing of the plan is written.
  void run_attention(const plan::Op& op, const plan::AttentionWork& a, const OpWorkspace& w) {
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

  void run_op(const plan::Op& op, const plan::GateForward& g) {
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

  void run_op(const plan::Op& op, const plan::GateBackward& g) {
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

  struct Maps {
    std::int32_t* positions;
    std::int32_t* inverse;
  };
  Maps maps(const plan::Op& op, const plan::RoutedLayout& l, BufferId routing, bool count_mismatches) {
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

  void run_op(const plan::Op& op, const plan::Permute& p) {
    same_type(op, p.x.buffer, p.out.buffer);
    if (p.x.rows != p.layout.tokens || p.out.rows != p.layout.total_rows())
      throw Error(fmt::format("op {}: permute views do not match its layout", op.name));
    const Maps m = maps(op, p.layout, p.routing, true);
    kernels::permute_rows(stream(op.stream), dtype(p.x.buffer), view_ptr(p.x), plan_.buffer(p.x.buffer).cols,
                          p.layout.top_k, m.inverse, p.out.rows, view_ptr(p.out));
  }

  void run_op(const plan::Op& op, const plan::PermuteBackward& p) {
    same_type(op, p.d_permuted.buffer, p.dx.buffer);
    if (p.dx.rows != p.layout.tokens || p.d_permuted.rows != p.layout.total_rows())
      throw Error(fmt::format("op {}: permute backward views do not match its layout", op.name));
    const Maps m = maps(op, p.layout, p.routing, false);
    kernels::permute_backward(stream(op.stream), dtype(p.dx.buffer), view_ptr(p.d_permuted),
                              plan_.buffer(p.dx.buffer).cols, m.positions, p.layout.tokens, p.layout.top_k,
                              view_ptr(p.dx));
  }

  void run_op(const plan::Op& op, const plan::Unpermute& u) {
    same_type(op, u.combined.buffer, u.y.buffer);
    if (u.y.rows != u.layout.tokens || u.combined.rows != u.layout.total_rows())
      throw Error(fmt::format("op {}: unpermute views do not match its layout", op.name));
    const Maps m = maps(op, u.layout, u.routing, false);
    kernels::unpermute(stream(op.stream), dtype(u.y.buffer), view_ptr(u.combined),
                       reinterpret_cast<const float*>(buf(u.routing)), m.positions, u.layout.tokens, u.layout.top_k,
                       plan_.buffer(u.y.buffer).cols, view_ptr(u.y));
  }

  void run_op(const plan::Op& op, const plan::UnpermuteBackward& u) {
    same_type(op, u.dy.buffer, u.combined.buffer);
    same_type(op, u.dy.buffer, u.d_combined.buffer);
    if (u.dy.rows != u.layout.tokens || u.combined.rows != u.layout.total_rows() ||
        u.d_combined.rows != u.layout.total_rows())
      throw Error(fmt::format("op {}: unpermute backward views do not match its layout", op.name));
    const Maps m = maps(op, u.layout, u.routing, false);
    kernels::unpermute_backward(stream(op.stream), dtype(u.dy.buffer), view_ptr(u.dy), view_ptr(u.combined),
                                reinterpret_cast<const float*>(buf(u.routing)), m.positions, m.inverse,
                                u.layout.tokens, u.layout.top_k, u.layout.total_rows(),
                                plan_.buffer(u.dy.buffer).cols, view_ptr(u.d_combined),
                                reinterpret_cast<float*>(buf(u.d_weights)));
  }

  // Spans in batches of at most kMaxSpans, with their workspace rows.
  static std::vector<kernels::SpanBatch> span_batches(const std::vector<plan::RowSpan>& rows) {
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

  struct FfnShape {
    std::int64_t M, H;
    DType t;
    int elem;
  };
  FfnShape ffn_shape(const plan::Op& op, BufferId params, BufferId input) const {
    const plan::Buffer& p = plan_.buffer(params);
    if (p.rows % 2 != 0 || p.rows / 2 != plan_.buffer(input).cols)
      throw Error(fmt::format("op {}: parameters {} are {} x {}, inputs have {} columns", op.name, p.name, p.rows,
                              p.cols, plan_.buffer(input).cols));
    same_type(op, params, input);
    return {p.rows / 2, p.cols, dtype(input), dtype_bytes(dtype(input))};
  }
  void check_spans(const plan::Op& op, const std::vector<plan::RowSpan>& rows,
                   std::initializer_list<BufferId> buffers) const {
    for (BufferId b : buffers)
      for (const plan::RowSpan& r : rows)
        if (r.begin < 0 || r.begin + r.count > plan_.buffer(b).rows)
          throw Error(fmt::format("op {}: rows [{}, {}) are outside buffer {}", op.name, r.begin, r.begin + r.count,
                                  plan_.buffer(b).name));
  }

  void** pointer_slot(const plan::Op& op) const {
    const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
    return reinterpret_cast<void**>(ws(op, w.pointers));
  }

  // middle[span] = input[span] W1, one grouped GEMM per batch of spans.
  void first_gemm(const plan::Op& op, const FfnShape& f, BufferId params, BufferId input, BufferId middle,
                  const kernels::SpanBatch& b) {
    std::vector<GroupedProblem> ps;
    for (int i = 0; i < b.n; ++i)
      ps.push_back({b.count[i], buf(input) + b.begin[i] * f.M * f.elem, buf(params),
                    buf(middle) + b.begin[i] * f.H * f.elem});
    grouped_gemm(blas(op), stream(op.stream), row_major(false, false, 0, f.H, f.M), ps, f.t, 1.0f, 0.0f,
                 pointer_slot(op));
  }

  void run_op(const plan::Op& op, const plan::FfnForward& d) {
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
                   pointer_slot(op));
    }
  }

  void run_op(const plan::Op& op, const plan::FfnRecompute& d) {
    const FfnShape f = ffn_shape(op, d.params, d.input);
    same_type(op, d.input, d.middle);
    check_spans(op, d.rows, {d.input, d.middle});
    for (const kernels::SpanBatch& b : span_batches(d.rows)) first_gemm(op, f, d.params, d.input, d.middle, b);
  }

  void run_op(const plan::Op& op, const plan::FfnBackward& d) {
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
      grouped_gemm(blas(op), s, row_major(false, false, 0, f.H, f.M), ps, f.t, 1.0f, 0.0f, pointer_slot(op));
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
      grouped_gemm(blas(op), s, row_major(false, true, 0, f.M, f.H), ps, f.t, 1.0f, 0.0f, pointer_slot(op));
    }
  }

  void run_op(const plan::Op& op, const plan::Collective&) {
    throw Error(fmt::format("op {}: a collective outside a collective step", op.name));
  }

  void run_op(const plan::Op& op, const plan::Copy& c) {
    same_type(op, c.src.buffer, c.dst.buffer);
    if (c.src.rows != c.dst.rows || row_bytes(c.src.buffer) != row_bytes(c.dst.buffer))
      throw Error(fmt::format("op {}: copy of {} rows into {} rows", op.name, c.src.rows, c.dst.rows));
    const auto bytes = static_cast<std::size_t>(c.src.rows * row_bytes(c.src.buffer));
    if (bytes == 0) return;
    MOETRACE_CUDA_CHECK(cudaMemcpyAsync(view_ptr(c.dst), view_ptr(c.src), bytes, cudaMemcpyDefault, stream(op.stream)));
  }

  void run_op(const plan::Op& op, const plan::SgdStep& d) {
    if (plan_.buffer(d.params).elements() != plan_.buffer(d.grads).elements() || dtype(d.grads) != DType::kFp32)
      throw Error(fmt::format("op {}: gradients do not match the parameters", op.name));
    kernels::sgd_step(stream(op.stream), dtype(d.params), buf(d.params), reinterpret_cast<float*>(buf(d.grads)),
                      plan_.buffer(d.params).elements(), static_cast<float>(d.learning_rate));
  }

  // ---- results
  void read_back_load(RunResult& result) {
    const int L = std::max(plan_.dims.num_layers, 1), E = std::max(plan_.dims.num_experts, 1);
    std::vector<unsigned long long> host(static_cast<std::size_t>(plan_.iterations) * L * sources_ * E);
    if (!host.empty())
      MOETRACE_CUDA_CHECK(cudaMemcpy(host.data(), counts_, host.size() * 8, cudaMemcpyDeviceToHost));
    std::set<std::tuple<int, int, int>> counted;
    for (const IssueStep& step : order_)
      for (OpId x : step.ops) {
        const plan::Op& op = plan_.op(x);
        const GateSource src = gate_source(plan_, op);
        if (src.counted && src.block >= 0 && src.block < sources_ && op.coords.iteration >= 0 &&
            op.coords.iteration < plan_.iterations && op.coords.layer >= 0 && op.coords.layer < L)
          counted.insert({op.coords.iteration, op.coords.layer, src.block});
      }
    for (const auto& [it, layer, source] : counted)
      for (int e = 0; e < E; ++e) {
        plan::ExpertLoadEntry entry;
        entry.iteration = it;
        entry.layer = layer;
        entry.source = source;
        entry.expert = e;
        entry.tokens = static_cast<std::int64_t>(host[((static_cast<std::size_t>(it) * L + layer) * sources_ + source) * E + e]);
        result.measured_load.push_back(entry);
      }
  }

  void collect_captures(RunResult& result) {
    if (!opt_.capture_results) return;
    const std::size_t n = static_cast<std::size_t>(plan_.iterations) * static_cast<std::size_t>(std::max(plan_.blocks, 1));
    result.outputs.assign(n, plan::Matrix{});
    result.input_grads.assign(n, plan::Matrix{});
    using K = plan::BufferBinding::Kind;
    for (const plan::Buffer& b : plan_.buffers) {
      const std::int64_t off = capture_offset_[at(b.id)];
      if (off < 0) continue;
      const std::size_t slot = static_cast<std::size_t>(b.binding.iteration) * static_cast<std::size_t>(plan_.blocks) +
                               static_cast<std::size_t>(b.binding.block);
      if (b.binding.iteration < 0 || b.binding.block < 0 || slot >= n) continue;
      plan::Matrix m = plan::Matrix::zeros(b.rows, b.cols);
      from_device_type(static_cast<const char*>(capture_.ptr) + off, b.elements(), dtype_[at(b.id)], m.data.data());
      (b.binding.kind == K::kModelOutput ? result.outputs : result.input_grads)[slot] = std::move(m);
    }
  }

  void read_back_params(RunResult& result) {
    for (const plan::Buffer& b : plan_.buffers) {
      if (!b.persistent || !runs(b.rank) || b.binding.kind != plan::BufferBinding::Kind::kParam) continue;
      std::vector<char> host(static_cast<std::size_t>(bytes_[at(b.id)]));
      MOETRACE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_[at(b.id)], host.size(), cudaMemcpyDefault));
      CapturedParam p;
      p.rank = b.rank;
      p.slice = b.binding.param;
      p.value = plan::Matrix::zeros(b.rows, b.cols);
      from_device_type(host.data(), b.elements(), dtype_[at(b.id)], p.value.data.data());
      result.final_params.push_back(std::move(p));
    }
  }

  void write_buffers(const RunResult& result) {
    instrument::TraceWriter& w = collector_->writer();
    for (const plan::Buffer& b : plan_.buffers) {
      if (!runs(b.rank) || alloc_ns_[at(b.id)] < 0) continue;
      instrument::BufferRecord r;
      r.id = b.id;
      r.rank = b.rank;
      r.tag = std::string(plan::buffer_tag_name(b.tag));
      r.bytes = bytes_[at(b.id)];
      r.memory_kind = b.memory;
      r.layer = b.layer;
      r.chunk = b.chunk;
      r.alloc_ns = alloc_ns_[at(b.id)];
      r.free_ns = b.persistent ? result.end_ns : free_ns_[at(b.id)];
      r.address = address_[at(b.id)];
      w.add(r);
    }
    for (const auto& e : result.measured_load) {
      instrument::ExpertLoadRecord r;
      r.iteration = e.iteration;
      r.layer = e.layer;
      r.src_rank = e.source;
      r.expert = e.expert;
      r.tokens = e.tokens;
      w.add(r);
    }
  }
};

Executor::Executor(const plan::Plan& plan, ExecutorOptions options)
    : impl_(std::make_unique<Impl>(plan, std::move(options))) {
  impl_->setup();
}

Executor::~Executor() = default;

bool Executor::runs_rank(RankId r) const { return impl_->runs(r); }
int Executor::device() const { return impl_->device_; }

namespace {

template <class F>
RunResult run_guarded(Executor::Impl& impl, F&& f) {
  try {
    return f();
  } catch (...) {
    // Leave the device usable for the caller: drain, then drop what this run held.
    cudaDeviceSynchronize();
    for (std::size_t b = 0; b < impl.ptr_.size(); ++b) impl.release_buffer(b);
    impl.collector_ = nullptr;
    throw;
  }
}

}  // namespace

RunResult Executor::run(const plan::ModelWeights& weights, const plan::TrainingData& data,
                        cupti::Collector* collector) {
  return run_guarded(*impl_, [&] { return impl_->run(weights, &data, nullptr, collector); });
}

RunResult Executor::run(const plan::ModelWeights& weights, const RandomTrainingData& data,
                        cupti::Collector* collector) {
  return run_guarded(*impl_, [&] { return impl_->run(weights, nullptr, &data, collector); });
}

}  // namespace moetrace::cuda
