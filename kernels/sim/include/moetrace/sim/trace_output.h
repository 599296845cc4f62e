// Writes a simulated run as a moetrace trace (schemas/trace_schema_v2.sql)
// through the TraceWriter: the same tables a GPU run fills — devices, ranks,
// streams, layers, op ranges with their MoE coordinates, op deps, buffers,
// op buffers, memory events, expert load and placement — plus one synthesized
// kernel per op (a memcpy record for copies), attributed to its op, so the
// GPU-oriented views are populated. The run is marked simulated, backend
// "sim".
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "moetrace/plan/plan.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/simulator.h"

namespace moetrace::sim {

// How much of the schema a trace gets. kFull: everything a GPU run has.
// kLean (large what-ifs): op ranges, op deps, buffers and memory events, but
// no synthesized kernels and no op buffer accesses; every analysis of op time,
// overlap and memory still works (an op's time is its own range where no
// kernel claims it).
enum class TraceDetail : std::uint8_t { kFull = 0, kLean = 1 };

struct TraceOutputOptions {
  std::string run_name;     // default: "<variant> (simulated)"
  std::string config_json;  // RunRecord.config_json; default: plan.config_json
  // Op range names: the plan's op names ("L1.it0.dispatch_all_to_all.c1"),
  // or, where false, the op kind's name (fewer strings in very large traces;
  // the coordinates are columns either way).
  bool full_op_names = true;
  TraceDetail detail = TraceDetail::kFull;
  std::function<void(double)> progress;
};

struct TraceOutputStats {
  std::int64_t rows = 0;
  double close_seconds = 0;  // the writer's final flush and index build
};

// Replaces any file at `path`. Throws moetrace::Error where it cannot write.
TraceOutputStats write_trace(const std::string& path, const plan::Plan& plan, const CostModel& model,
                             const SimResult& result, const TraceOutputOptions& options = {});

struct SimulatedTrace {
  SimResult result;
  TraceOutputStats stats;
  double simulate_seconds = 0;       // of the wall time, the simulation's
  std::size_t ops = 0, buffers = 0;  // the plan's
};

// simulate() then write_trace(), with the writer's thread busy from the
// start: the rows that do not wait for the simulation to end (run
// configuration, devices, ranks, streams, layers, expert load and placement;
// each op's kernel as the op ends) are inserted on another core while it
// runs, and the plan, taken by value, is freed while the last rows are. The
// trace is write_trace()'s but for the order of kernel rows (the order the
// ops end in, as CUPTI delivers them).
SimulatedTrace simulate_to_trace(const std::string& path, plan::Plan plan, const CostModel& model,
                                 const SimOptions& sim_options = {}, const TraceOutputOptions& options = {});

// The synthesized kernel name of a (non-copy) op, e.g.
// "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64" for an expert
// FFN, "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)" for an
// all-to-all (NCCL implements all-to-all with send/recv).
std::string kernel_name(const plan::Plan& plan, const plan::Op& op, const DeviceSpec& device);

// Simulated seconds -> trace nanoseconds.
inline std::int64_t to_ns(double seconds) {
  return static_cast<std::int64_t>(seconds * 1e9 + (seconds >= 0 ? 0.5 : -0.5));
}

}  // namespace moetrace::sim
