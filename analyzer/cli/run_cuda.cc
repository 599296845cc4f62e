// `moetrace run --backend cuda`: the spec's plan on the GPU(s) with the CUDA
// executor and the CUPTI collector (kernels/cuda/include/moetrace/cuda/run.h),
// the same variants, presets and configuration errors as the simulator.
// Built only with MOETRACE_CUDA.
//
// Run options stay shared with the simulator; what only the GPU path needs
// comes from the environment:
//   MOETRACE_CUDA_PRECISION     bf16 (default) | fp32
//   MOETRACE_CUDA_EXPERT_GEMM   grouped (default: one cublasGemmGroupedBatchedEx an
//                               FFN op) | per_expert (one cublasGemmEx a span)
//   MOETRACE_CUDA_COMMUNICATOR  emulated | nccl; default: nccl where a launcher
//                               (mpirun, torchrun-style RANK/WORLD_SIZE, srun,
//                               PMI, PMIx: cuda/launch_env.h) started
//                               several processes, else emulated (all ranks on one GPU)
//   MOETRACE_CUDA_LINK          emulated link model, e.g. "latency_us=10,bandwidth_gb_s=50,sms=8"
//   MOETRACE_CUDA_DEVICE        device index (default: local rank, or 0)
//   MOETRACE_NCCL_ID_FILE       NCCL unique-id file every rank can read
//   MOETRACE_JOB_ID             this run's id, where the launcher sets none
//   MOETRACE_CUPTI_QUERY_API    1: also record the API calls that only read
//                               state (cudaGetDevice, cuKernelGetAttribute, ...;
//                               cupti/api_filter.h), left out by default
// The routing follows the spec's synthetic load (planned routing): the gate
// computes its softmax, tokens go where the load says. The calibration
// sweep's gates pick their own experts (plan/calibration.h).
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "moetrace/analyzer/format.h"
#include "moetrace/cuda/device_probe.h"
#include "moetrace/cuda/run.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/run_spec.h"
#include "run_backend.h"

namespace moetrace::cli {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}


}  // namespace

void run_cuda(const RunRequest& request) {
  sim::RunSpec spec = request.spec;
  if (spec.plan_builder == "timing")
    throw ConfigError("plan_builder \"timing\" is simulator-only: the CUDA backend executes the full plan");
  spec.plan_builder = "full";

  cuda::CudaRunOptions o;
  if (const std::string p = env("MOETRACE_CUDA_PRECISION"); !p.empty()) o.executor.precision = cuda::parse_precision(p);
  if (const std::string g = env("MOETRACE_CUDA_EXPERT_GEMM"); !g.empty())
    o.executor.expert_gemm = cuda::parse_expert_gemm(g);
  const auto launch = cuda::launch_env_from_process();
  o.executor.communicator = launch && launch->world_size > 1 ? cuda::CommunicatorKind::kNccl
                                                             : cuda::CommunicatorKind::kEmulated;
  if (const std::string c = env("MOETRACE_CUDA_COMMUNICATOR"); !c.empty())
    o.executor.communicator = cuda::parse_communicator(c);
  if (const std::string l = env("MOETRACE_CUDA_LINK"); !l.empty()) o.executor.link = cuda::parse_link_model(l);
  if (const std::string d = env("MOETRACE_CUDA_DEVICE"); !d.empty()) {
    auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), o.executor.device);
    if (ec != std::errc() || p != d.data() + d.size() || o.executor.device < 0)
      throw ConfigError(fmt::format("MOETRACE_CUDA_DEVICE ({}) is not a device index", d));
  }
  o.executor.launch = launch;
  o.executor.routing = cuda::RoutingMode::kPlanned;
  o.shape = spec.common.model;
  o.seed = spec.routing.seed;
  o.trace_path = request.output;
  o.collect = request.collect;
  if (const std::string q = env("MOETRACE_CUPTI_QUERY_API"); !q.empty()) {
    if (q != "0" && q != "1") throw ConfigError(fmt::format("MOETRACE_CUPTI_QUERY_API ({}) must be 0 or 1", q));
    o.cupti_query_api = q == "1";
  }
  o.warmup_runs = request.warmup_runs;
  o.executor.cuda_graph = request.cuda_graph;
  const std::string what = spec.preset.empty() ? spec.variant : spec.preset;
  o.run.name = fmt::format("{} (cuda)", what);
  o.run.variant = spec.variant;
  o.run.config_json = spec.to_json();

  Progress progress("running " + what + " on the GPU");
  progress.update("building plan", 0.0);
  // `--calibrate`: the same sweep the simulator runs (plan/calibration.h);
  // its interference pairs are sized from CalibrationConfig's default
  // estimates (or a previous fit the caller put there).
  const plan::Plan plan = request.calibration ? plan::build_calibration(*request.calibration) : sim::build_plan(spec);
  if (request.calibration) {
    o.shape = plan::calibration_model_shape(*request.calibration);
    o.run.name = "calibration (cuda)";
    o.run.variant = "calibration";
    o.run.config_json = plan.config_json;
    // Its gates route by their own (tied) probabilities, which the plan's
    // layouts were built for; there is no load to plan from.
    o.executor.routing = cuda::RoutingMode::kComputed;
  }
  progress.update("running", 0.1);
  const cuda::CudaRunSummary s = cuda::run_plan(plan, o);
  progress.update("done", 1.0);
  const cuda::RunResult& r = s.result;
  if (!request.quiet)
    std::cerr << fmt::format(
        "ran {} on {} ({} ranks, {} communicator, {}{}{}): {:.3f} ms wall, {}; peak device memory {}; wrote {}\n",
        spec.variant, s.device_name, plan.world_size, cuda::communicator_name(o.executor.communicator),
        cuda::precision_name(o.executor.precision),
        o.warmup_runs > 0 ? fmt::format(", after {} warm-up run{}", o.warmup_runs, o.warmup_runs == 1 ? "" : "s")
                          : std::string(),
        o.executor.cuda_graph ? fmt::format(", {} CUDA graphs", r.graphs) : std::string(),
        r.wall_ms,
        o.collect ? fmt::format("{} kernels, {} op ranges, {} dropped records", s.kernels, s.op_ranges,
                                s.dropped_records)
                  : std::string("collector off"),
        analyzer::format_gib(r.device_bytes_peak), s.trace_path);
  if (s.dropped_records > 0)
    std::cerr << fmt::format("moetrace: warning: CUPTI dropped {} activity records (see `moetrace info`)\n",
                             s.dropped_records);
  if (r.routing_mismatches > 0)
    std::cerr << fmt::format("moetrace: warning: {} gate outputs did not match the plan's routing\n",
                             r.routing_mismatches);
}

int run_cuda_catching(const RunRequest& request, std::string* error) {
  try {
    run_cuda(request);
    return 0;
  } catch (const ConfigError& e) {
    *error = e.what();
    return 2;
  } catch (const std::exception& e) {
    *error = e.what();
    return 1;
  }
}

}  // namespace moetrace::cli

// The plugin's entry point (see run_backend.h).
extern "C" const moetrace::cli::CudaBackendPlugin* moetrace_cuda_backend() {
  static const moetrace::cli::CudaBackendPlugin plugin{
      moetrace::cli::kCudaBackendAbi, [] { return moetrace::cuda::gpu_available(); },
      moetrace::cli::run_cuda_catching};
  return &plugin;
}
