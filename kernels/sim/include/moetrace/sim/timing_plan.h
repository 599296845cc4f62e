// Timing-only plans for large what-if runs (1024 GPUs and beyond).
//
// The plan builders (kernels/plan) give every all-to-all op its per-peer
// views, so the CPU and CUDA executors can move real rows; that is P x P
// transfers per collective and O(P^2 E) work per layer, too much at 1024
// ranks. The simulator only needs each rank's send and receive totals. This
// builder emits the same plan as build_dpmoe / build_pipemoe — the same ops
// in the same order, with the same names, coordinates, streams, FLOPs,
// bytes, buffers, accesses, allocations, frees and (hazard-derived)
// dependencies — except that:
//  - an all-to-all op lists two aggregated transfers per direction (its
//    segment to itself, and the rest with an invalid peer) and no group;
//  - routed layouts and row spans are empty;
// so it runs in O(P E) per layer and the simulator gives it the same times
// (tests/sim/timing_plan_test.cc checks op for op). It is for the simulator
// only: the CPU and CUDA executors cannot run it.
//
// Loads: up to `max_load_entries` (iteration, layer, source, expert) entries
// are kept per source; beyond that Plan::loads holds per-expert totals with
// source -1 (a 1024 x 1024 expert_load table would dominate the trace).
#pragma once

#include <cstdint>

#include "moetrace/plan/plan.h"
#include "moetrace/plan/routing.h"
#include "moetrace/sim/run_spec.h"

namespace moetrace::sim {

// True where build_timing_plan supports the spec's variant and options
// (dpmoe; pipemoe).
bool timing_plan_supported(const RunSpec& spec);

plan::Plan build_timing_plan(const RunSpec& spec, const plan::ExpertLoad& load,
                             std::int64_t max_load_entries = 4'000'000);

}  // namespace moetrace::sim
