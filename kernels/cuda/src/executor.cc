// The CUDA executor (executor.h). The host walks issue_order once; for each
// op it enqueues, on the op's stream: the event waits plan_waits chose, the
// allocations (cudaMallocAsync, or a region of the pinned arena) and their
// initial values, the op's kernels / cuBLAS calls / copies / collective,
// then captures, frees (cudaFreeAsync) and the op's completion event.
// Everything an op enqueues happens inside its OpScope (NVTX range +
// CUPTI external correlation id), so the trace attributes it to the op.
#include "moetrace/cuda/executor.h"

#include "executor_impl.h"

namespace moetrace::cuda {

const char* communicator_name(CommunicatorKind k) { return k == CommunicatorKind::kNccl ? "nccl" : "emulated"; }

CommunicatorKind parse_communicator(std::string_view s) {
  if (s == "emulated") return CommunicatorKind::kEmulated;
  if (s == "nccl") return CommunicatorKind::kNccl;
  throw ConfigError(fmt::format("communicator ({}) must be emulated or nccl", s));
}

using namespace exec;

Executor::Impl::~Impl() {
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
  destroy_graphs();
  for (cudaStream_t s : streams_)
    if (s != nullptr) cudaStreamDestroy(s);
}

void Executor::Impl::setup() {
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
  setup_graphs();
  MOETRACE_CUDA_CHECK(cudaDeviceSynchronize());
}

void Executor::Impl::upload_tables() {
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

void Executor::Impl::put_planned(const plan::Op& op, const plan::GateForward& g, std::vector<std::int64_t>& host) {
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
