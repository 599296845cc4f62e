// The CUDA executor: runs a plan (plan.h) on a GPU with real kernels and the
// op-for-op semantics of the CPU executor, forward and backward.
//
//  - Streams and events: one CUDA stream per plan stream of the ranks this
//    process runs; the host enqueues ops in issue_order (schedule.h) and makes
//    an op wait (cudaStreamWaitEvent) for exactly the cross-stream
//    dependencies plan_waits leaves, on events recorded after the ops it
//    depends on. Collectives start together (plan rule 4).
//  - Memory: alloc_before / free_after become cudaMallocAsync / cudaFreeAsync
//    on the op's stream (stream-ordered, so mpipemoe's buffer reuse is real);
//    pinned-host buffers (offloaded T_DI / T_M) come from a pre-pinned arena
//    with stream-ordered reuse; persistent buffers are allocated up front.
//  - Compute: cuBLAS GEMMs (bf16 inputs with fp32 accumulation, or fp32
//    without TF32); experts' row spans go through cublasGemmGroupedBatchedEx
//    (one group per span); gate softmax/top-k, permute/unpermute by index,
//    GeLU, SGD are our kernels. Timing-only ops run work of their shape on
//    scratch: attention as unfused multi-head attention (cuBLAS batched
//    GEMMs and a softmax kernel), the Plan search as a one-block kernel.
//  - Communication: the emulated communicator (P virtual ranks on one GPU,
//    paced copy/reduce kernels under a link model) or NCCL (one process per
//    GPU).
//
// The header is CUDA-free: the CLI includes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "moetrace/cuda/host_data.h"
#include "moetrace/cuda/launch_env.h"
#include "moetrace/cuda/link_model.h"
#include "moetrace/cuda/op_layout.h"
#include "moetrace/plan/plan.h"
#include "moetrace/plan/reference.h"

namespace moetrace::cupti {
class Collector;
}

namespace moetrace::cuda {

// kComputed: the gate picks the top-k experts from its probabilities (the
// plan must have been built from the same routing, e.g. the CPU reference's;
// tokens beyond the plan's rows are dropped and counted as mismatches).
// kPlanned: the gate computes its softmax but routes as the plan's load says
// (planned_assignment, or `routing_table` where given): for plans built from
// synthetic loads.
enum class RoutingMode : std::uint8_t { kComputed = 0, kPlanned = 1 };
enum class CommunicatorKind : std::uint8_t { kEmulated = 0, kNccl = 1 };

const char* communicator_name(CommunicatorKind k);        // "emulated", "nccl"
CommunicatorKind parse_communicator(std::string_view s);  // throws ConfigError

// (iteration, layer, source block) -> tokens x top_k expert ids.
using RoutingKey = std::tuple<int, int, int>;
using RoutingTable = std::map<RoutingKey, std::vector<std::int32_t>>;

struct ExecutorOptions {
  Precision precision = Precision::kBf16;
  ExpertGemm expert_gemm = ExpertGemm::kGrouped;  // FFN ops' row spans: one grouped call or a GEMM each
  RoutingMode routing = RoutingMode::kComputed;
  RoutingTable routing_table;        // kPlanned: explicit routing (tests), else from the plan's loads
  CommunicatorKind communicator = CommunicatorKind::kEmulated;
  LinkModel link;                    // emulated communicator
  std::optional<LaunchEnv> launch;   // NCCL: this process's place (else from the environment)
  std::string nccl_id_file;          // NCCL: unique-id file (else $MOETRACE_NCCL_ID_FILE)
  std::chrono::milliseconds nccl_id_timeout{120000};
  int device = -1;                   // -1: the local rank (NCCL) or device 0
  bool busy_timing_only = true;      // timing-only ops run work of their shape (else nothing)
  bool capture_results = false;      // model outputs, input grads, final parameters to the host
  // Each iteration's work captured once into a CUDA graph (stream capture)
  // and launched with cudaGraphLaunch, so the host's launch cost no longer
  // paces the GPU within an iteration (graph_segments, schedule.h).
  bool cuda_graph = false;
};

struct CapturedParam {
  RankId rank;
  plan::ParamSlice slice;
  plan::Matrix value;
};

struct RunResult {
  // [iteration * blocks + block]; empty matrices where not captured or not on this process.
  std::vector<plan::Matrix> outputs, input_grads;
  std::vector<CapturedParam> final_params;   // persistent parameter buffers of the executed ranks
  std::vector<plan::ExpertLoadEntry> measured_load;  // what the gates routed
  std::int64_t routing_mismatches = 0;  // (gate, expert) pairs whose count differs from the plan
  std::int64_t device_bytes_peak = 0;   // plan buffers and workspaces allocated by the executor
  std::int64_t transient_bytes_peak = 0;  // peak of the plan's non-persistent device buffers
  std::int64_t pinned_arena_bytes = 0;
  std::int64_t host_waits = 0;          // cross-stream event waits enqueued
  int graphs = 0;                       // CUDA graphs launched (cuda_graph)
  double wall_ms = 0;                   // first op enqueued -> device idle
  // [op]: the host's time to issue it (its waits, allocations and
  // launches; steady clock, with or without a collector), ns; -1 for the ops
  // of collectives and ops this process does not run.
  std::vector<std::int64_t> issue_ns;
  std::int64_t start_ns = 0, end_ns = 0;  // CUPTI clock where a collector is active
};

// The setup op of `rank` that uploads its persistent buffers (parameters
// from the host, zeros for gradients and optimizer state) before the first
// iteration: not an op of the plan (its id follows theirs), outside the
// iterations (iteration -1, kind memcpy, phase other), so the trace tells the
// upload from the training step.
inline OpId weight_upload_op(const plan::Plan& plan, RankId rank) {
  return OpId(static_cast<std::int64_t>(plan.ops.size()) + rank.value);
}

class Executor {
 public:
  // Selects the device, creates streams, events, cuBLAS handles and the
  // communicator (NCCL: joins the job), uploads the layout tables. Throws
  // moetrace::Error (every CUDA, cuBLAS and NCCL status is checked).
  Executor(const plan::Plan& plan, ExecutorOptions options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Ranks this process executes.
  bool runs_rank(RankId r) const;
  int device() const;

  // Runs the whole plan once from `weights` and `data`. With a collector, its
  // streams, ops (NVTX + external correlation) and buffers are recorded.
  RunResult run(const plan::ModelWeights& weights, const plan::TrainingData& data,
                cupti::Collector* collector = nullptr);
  // The same with random_training_data's values drawn on the device as each
  // input and output-gradient buffer is allocated: no host copy of them.
  RunResult run(const plan::ModelWeights& weights, const RandomTrainingData& data,
                cupti::Collector* collector = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moetrace::cuda
