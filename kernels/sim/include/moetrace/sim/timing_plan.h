// Timing-only plans for large what-if runs (1024 GPUs and beyond): the
// timing-only mode of build_dpmoe / build_pipemoe (kernels/plan builders.h
// PlanDetail), the same ops in the same order with per-rank all-to-all
// totals, O(P E) per layer instead of O(P^2 E). The simulator gives it the
// same times as the full plan (tests/sim/timing_plan_test.cc); the CPU and
// CUDA executors cannot run it.
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
