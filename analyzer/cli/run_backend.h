// Backends of `moetrace run`: each executes a RunSpec (kernels/sim/run_spec.h)
// and writes a trace. The simulator lives in run_sim.cc. The CUDA backend
// (run_cuda.cc) is a plugin, a shared module beside the executable that
// `moetrace` opens only when a run needs it: mapping the CUDA libraries
// (cudart, cuBLAS, NCCL, CUPTI) costs about 220 MB of resident memory and
// 0.1 s, which every other subcommand should not pay.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moetrace/plan/calibration.h"
#include "moetrace/sim/run_spec.h"

namespace moetrace::cli {

struct RunRequest {
  sim::RunSpec spec;
  std::string output;      // trace database to write (replaced if it exists)
  bool full_op_names = true;
  bool lean = false;       // sim: TraceDetail::kLean
  bool quiet = false;      // no summary on stderr
  bool collect = true;     // cuda: the CUPTI collector (`--no-trace`: off)
  int warmup_runs = 0;     // cuda: unrecorded runs of the plan first (`--warmup`)
  bool cuda_graph = false; // cuda: each iteration captured into a CUDA graph (`--cuda-graph`)
  // `--calibrate`: run this sweep (plan/calibration.h) instead of the spec's
  // workload; the spec still gives the cost model (sim) and the device.
  std::optional<plan::CalibrationConfig> calibration;
};

struct RunBackend {
  std::string name;        // "sim", "cuda"
  std::string help;
  void (*run)(const RunRequest&) = nullptr;  // nullptr: not in this build
  std::string unavailable; // why run is nullptr, one line
};

// Every backend this build knows, available or not; the first available is
// the default.
std::vector<RunBackend> run_backends();

// The discrete-event simulator (kernels/sim).
void run_sim_backend(const RunRequest& request);

// The CUDA plugin's entry point, `moetrace_cuda_backend()`, returns this
// table. Errors never cross the module boundary as exceptions: `run` returns
// 1 (moetrace::Error) or 2 (moetrace::ConfigError) with the message.
inline constexpr int kCudaBackendAbi = 3;  // 2: RunRequest::collect, warmup_runs; 3: cuda_graph
struct CudaBackendPlugin {
  int abi = kCudaBackendAbi;
  bool (*gpu_available)() = nullptr;
  int (*run)(const RunRequest& request, std::string* error) = nullptr;
};

// Opens the plugin (once); nullptr with the reason in *why (one line) when
// this build has none or it cannot load.
const CudaBackendPlugin* load_cuda_backend(std::string* why);
// Whether this machine shows an NVIDIA device node, checked before loading
// the plugin to pick the default backend.
bool nvidia_device_present();

}  // namespace moetrace::cli
