// The CUDA executor's state (Executor::Impl of executor.h), in three files:
//   executor.cc      setup: devices, streams, cuBLAS handles, workspaces, layout tables;
//   executor_run.cc  a run: staging, the issue order, each op's prologue and epilogue
//                    (waits, allocations, frees, events), read-back of results;
//   executor_ops.cc  what each op enqueues: its kernels, GEMMs, copies, collective.
#pragma once

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
#include "moetrace/cuda/executor.h"
#include "moetrace/cuda/host_data.h"
#include "moetrace/cuda/schedule.h"
#include "moetrace/cupti/collector.h"
#include "moetrace/plan/cpu_executor.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {

namespace exec {

inline std::size_t at(OpId id) { return static_cast<std::size_t>(id.value); }
inline std::size_t at(BufferId id) { return static_cast<std::size_t>(id.value); }
inline std::size_t at(StreamId id) { return static_cast<std::size_t>(id.value); }

constexpr std::size_t kBlasWorkspace = 32u << 20;  // cuBLAS's recommendation for Hopper

// A timing-only op known only by its FLOPs: busy GEMMs stand in for it.
inline bool busy_fallback(const plan::Op& op) {
  const auto* t = std::get_if<plan::TimingOnly>(&op.data);
  if (t == nullptr || t->attention) return false;
  if (t->plan_search && t->plan_search->experts + t->plan_search->devices <= kernels::kPlanSearchMaxSlots)
    return false;
  return op.flops > 0;
}

inline bool uses_blas(const plan::Op& op, bool busy) {
  return std::holds_alternative<plan::GateForward>(op.data) ||
         std::holds_alternative<plan::GateBackward>(op.data) ||
         std::holds_alternative<plan::FfnForward>(op.data) ||
         std::holds_alternative<plan::FfnBackward>(op.data) ||
         std::holds_alternative<plan::FfnRecompute>(op.data) ||
         (busy && (busy_fallback(op) || (std::holds_alternative<plan::TimingOnly>(op.data) &&
                                         std::get<plan::TimingOnly>(op.data).attention)));
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

}  // namespace exec

using exec::at;

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
  std::vector<std::int64_t> issue_ns_;  // RunResult::issue_ns
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
  exec::PinnedBlock arena_block_;
  void* busy_a_ = nullptr;
  void* busy_b_ = nullptr;
  std::int64_t fixed_bytes_ = 0, live_bytes_ = 0, peak_bytes_ = 0;
  std::int64_t waits_issued_ = 0;
  // CUDA graph mode (executor_graph.cc): the graphs, the stream they are
  // captured from and launched on, the events that fork every stream from
  // it and join them back; the graph being captured and the graph of each
  // pinned buffer's last free (-1: none).
  GraphSegments segments_;
  cudaStream_t graph_stream_ = nullptr;
  cudaEvent_t graph_fork_ = nullptr;
  std::vector<cudaEvent_t> graph_join_;
  int segment_ = -1;
  std::vector<int> freed_segment_;
  std::vector<cudaGraphExec_t> graph_execs_;  // of the run in progress
  // Per run:
  cupti::Collector* collector_ = nullptr;
  exec::PinnedBlock staging_;
  std::vector<std::int64_t> staging_offset_;
  std::vector<std::int64_t> draw_first_;  // drawn inputs: index of the first normal, else -1
  std::uint64_t draw_seed_ = 0;
  exec::PinnedBlock capture_;
  std::vector<std::int64_t> capture_offset_;

  Impl(const plan::Plan& plan, ExecutorOptions opt) : plan_(plan), opt_(std::move(opt)) {}

  ~Impl() override;

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
  void setup();

  // Layout tables of the permute family and planned routing, in one upload.
  void upload_tables();

  void put_planned(const plan::Op& op, const plan::GateForward& g, std::vector<std::int64_t>& host);

  // ---- run
  // Exactly one of `data` (host matrices, staged) and `drawn` (drawn on the device) is given.
  RunResult run(const plan::ModelWeights& weights, const plan::TrainingData* data, const RandomTrainingData* drawn,
                cupti::Collector* collector);

  std::int64_t now_ns() const { return collector_ != nullptr ? cupti::Collector::timestamp_ns() : -1; }

  // The persistent buffers of every rank run here, each rank's uploaded (or
  // zeroed) on its first stream inside one setup op (weight_upload_op); the
  // bytes of all of them.
  std::int64_t upload_persistent(const plan::ModelWeights& weights);
  void allocate_persistent(const plan::Buffer& b);
  // A persistent buffer's initial bytes in its device type: the parameter's
  // values, or empty where it starts at zero.
  std::vector<char> persistent_values(const plan::Buffer& b, const plan::ModelWeights& weights) const;

  // Inputs, output gradients (and any transient parameter copy) of this
  // process, converted to their device type in pinned memory once; with
  // `drawn`, inputs and output gradients are not staged but drawn on the
  // device at allocation (draw_first_: their first normal's index).
  void stage_inputs(const plan::TrainingData* data, const RandomTrainingData* drawn,
                    const plan::ModelWeights& weights);

  void prepare_capture();

  void capture_now(std::size_t b) {
    if (capture_offset_.empty() || capture_offset_[b] < 0 || ptr_[b] == nullptr) return;
    MOETRACE_CUDA_CHECK(cudaMemcpy(static_cast<char*>(capture_.ptr) + capture_offset_[b], ptr_[b],
                                   static_cast<std::size_t>(bytes_[b]), cudaMemcpyDefault));
  }

  // ---- issue
  void issue(const IssueStep& step);
  // CUDA graph mode: streams and events once (setup), then each graph
  // captured, instantiated and launched in turn.
  void setup_graphs();
  void destroy_graphs();
  void issue_graphs(RunResult& result);
  void capture_graph(std::size_t first, std::size_t last);
  void release_graph_execs();  // after the device has finished them
  // A wait on `producer`'s event: not issued where an earlier graph holds it
  // (the graph launches are ordered on one stream).
  bool implied_by_graph_order(int producer_segment) const {
    return segment_ >= 0 && producer_segment >= 0 && producer_segment < segment_;
  }

  void prologue(const plan::Op& op);

  void epilogue(const plan::Op& op);

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

  void run_op(const plan::Op& op, const plan::TimingOnly& d);

  // Unfused attention of the op's shape (op_layout.h plan_attention) on its
  // input view and workspace; nothing of the plan is written.
  void run_attention(const plan::Op& op, const plan::AttentionWork& a, const OpWorkspace& w);

  void run_op(const plan::Op& op, const plan::GateForward& g);

  void run_op(const plan::Op& op, const plan::GateBackward& g);

  struct Maps {
    std::int32_t* positions;
    std::int32_t* inverse;
  };
  Maps maps(const plan::Op& op, const plan::RoutedLayout& l, BufferId routing, bool count_mismatches);
  // An error where a permutation op's (`what`) views are not a row per token
  // and a row per routed copy of layout `l`.
  void check_rows(const plan::Op& op, const plan::View& tokens, const plan::View& routed, const plan::RoutedLayout& l,
                  const char* what) const {
    if (tokens.rows != l.tokens || routed.rows != l.total_rows())
      throw Error(fmt::format("op {}: {} views do not match its layout", op.name, what));
  }

  void run_op(const plan::Op& op, const plan::Permute& p);

  void run_op(const plan::Op& op, const plan::PermuteBackward& p);

  void run_op(const plan::Op& op, const plan::Unpermute& u);

  void run_op(const plan::Op& op, const plan::UnpermuteBackward& u);

  // Spans in batches of at most kMaxSpans, with their workspace rows.
  static std::vector<kernels::SpanBatch> span_batches(const std::vector<plan::RowSpan>& rows);

  struct FfnShape {
    std::int64_t M, H;
    DType t;
    int elem;
  };
  FfnShape ffn_shape(const plan::Op& op, BufferId params, BufferId input) const;
  void check_spans(const plan::Op& op, const std::vector<plan::RowSpan>& rows,
                   std::initializer_list<BufferId> buffers) const;

  void** pointer_slot(const plan::Op& op) const {
    const OpWorkspace w = op_workspace(plan_, op, opt_.precision);
    return reinterpret_cast<void**>(ws(op, w.pointers));
  }

  // middle[span] = input[span] W1, one grouped GEMM per batch of spans.
  void first_gemm(const plan::Op& op, const FfnShape& f, BufferId params, BufferId input, BufferId middle,
                  const kernels::SpanBatch& b);

  void run_op(const plan::Op& op, const plan::FfnForward& d);

  void run_op(const plan::Op& op, const plan::FfnRecompute& d);

  void run_op(const plan::Op& op, const plan::FfnBackward& d);

  void run_op(const plan::Op& op, const plan::Collective&) {
    throw Error(fmt::format("op {}: a collective outside a collective step", op.name));
  }

  void run_op(const plan::Op& op, const plan::Copy& c);

  void run_op(const plan::Op& op, const plan::SgdStep& d);

  // ---- results
  void read_back_load(RunResult& result);

  void collect_captures(RunResult& result);

  void read_back_params(RunResult& result);

  void write_buffers(const RunResult& result);
};

}  // namespace moetrace::cuda
