// One run of a plan on the GPU(s), recorded: the CUDA backend of
// `moetrace run`. Writes the trace (run, devices, ranks, layers, op
// dependencies and buffers, placements) and lets the CUPTI collector record
// what the GPU did while the executor runs the plan once (after
// `warmup_runs` unrecorded runs). The run_config keys cuda.collector, cuda.graph,
// cuda.warmup_runs and cuda.wall_ms say how it ran and how long it took. With NCCL and more
// than one process, every rank writes its own trace ("out.rank3.db").
// CUDA-free header.
#pragma once

#include <cstdint>
#include <string>

#include "moetrace/cuda/executor.h"
#include "moetrace/instrument/records.h"
#include "moetrace/plan/plan.h"

namespace moetrace::cuda {

struct CudaRunOptions {
  ExecutorOptions executor;
  std::string trace_path;
  plan::ModelShape shape;        // model the weights and data are drawn for (plan.dims must match)
  std::uint64_t seed = 1;        // weights from seed, training data from seed + 1
  instrument::RunRecord run;     // name, variant, config_json; backend/host/world_size are filled in
  bool collect = true;           // the CUPTI collector (off: the executor runs unobserved)
  // Executions of the whole plan before the recorded one, unrecorded and
  // left out of the trace: CUDA's lazy module loading, cuBLAS's first
  // calls, the memory pool's growth and the clocks' ramp happen there, so
  // the recorded run's wall time compares with and without the collector.
  int warmup_runs = 0;
  std::size_t cupti_buffer_bytes = 8u << 20;
  std::size_t cupti_max_buffers = 128;
  bool cupti_query_api = false;  // records of the API calls that only read state (cupti/api_filter.h)
};

struct CudaRunSummary {
  RunResult result;
  std::string trace_path;
  std::string device_name;
  std::int64_t kernels = 0, op_ranges = 0, dropped_records = 0, activities_without_op = 0;
  std::int64_t graph_activities = 0;  // kernels, copies and memsets a CUDA graph launched
};

// The trace of rank r where every process writes its own: "a/out.db" -> "a/out.rank3.db".
std::string rank_trace_path(const std::string& path, int rank);

// Throws moetrace::Error ("no CUDA GPU found (...)" where there is none),
// moetrace::ConfigError for options that do not fit the plan.
CudaRunSummary run_plan(const plan::Plan& plan, const CudaRunOptions& options);

}  // namespace moetrace::cuda
