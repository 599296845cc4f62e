// Backends of `moetrace run`: each executes a RunSpec (kernels/sim/run_spec.h)
// and writes a trace. The simulator lives in run_sim.cc; a CUDA backend plugs
// in from its own file (run_cuda.cc) by adding an entry to run_backends() in
// cmd_run.cc under MOETRACE_HAVE_CUDA_BACKEND.
#pragma once

#include <string>
#include <vector>

#include "moetrace/sim/run_spec.h"

namespace moetrace::cli {

struct RunRequest {
  sim::RunSpec spec;
  std::string output;      // trace database to write (replaced if it exists)
  bool full_op_names = true;
  bool lean = false;       // sim: TraceDetail::kLean
  bool quiet = false;      // no summary on stderr
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

#ifdef MOETRACE_HAVE_CUDA_BACKEND
// The CUDA executor with the CUPTI collector (run_cuda.cc); the default
// backend where a GPU is present (cuda_backend_is_default probes for one).
void run_cuda_backend(const RunRequest& request);
bool cuda_backend_is_default();
#endif

}  // namespace moetrace::cli
