// `moetrace run --backend sim`: plan -> discrete-event simulation -> trace.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "commands.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/trace_output.h"
#include "run_backend.h"

namespace moetrace::cli {

namespace {

std::string gib(std::int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

void run_sim_backend(const RunRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  const sim::RunSpec& spec = request.spec;
  const sim::CostModel model = spec.resolved_cost_model();
  Progress progress("simulating " + (spec.preset.empty() ? spec.variant : spec.preset));
  progress.update("building plan", 0.0);
  const plan::Plan plan = sim::build_plan(spec);
  sim::SimOptions sim_options;
  sim_options.progress = [&](double f) { progress.update("simulating", 0.05 + 0.45 * f); };
  const sim::SimResult result = sim::simulate(plan, model, sim_options);
  sim::TraceOutputOptions out;
  out.run_name = fmt::format("{} (simulated, {})", spec.preset.empty() ? spec.variant : spec.preset, model.name);
  out.config_json = spec.to_json();
  out.full_op_names = request.full_op_names;
  out.detail = request.lean ? sim::TraceDetail::kLean : sim::TraceDetail::kFull;
  out.progress = [&](double f) { progress.update("writing trace", 0.5 + 0.5 * f); };
  sim::write_trace(request.output, plan, model, result, out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Peak memory against the budget (pipemoe Table IV's "valid" rule: the
  // run fits the GPU's memory).
  std::size_t worst = 0;
  for (std::size_t r = 1; r < result.memory.size(); ++r)
    if (result.memory[r].peak_bytes > result.memory[worst].peak_bytes) worst = r;
  const std::int64_t peak = result.memory.empty() ? 0 : result.memory[worst].peak_bytes;
  if (!request.quiet) {
    std::cerr << fmt::format(
        "simulated {} on {} ranks ({} iterations, {} ops) with cost model {}: {:.3f} ms; peak memory {} "
        "(rank {}); wrote {} in {:.2f} s\n",
        spec.variant, plan.world_size, plan.iterations, plan.ops.size(), model.name, result.makespan_s * 1e3,
        gib(peak), worst, request.output, seconds);
  }
  const std::int64_t budget = spec.common.memory_budget_bytes;
  if (budget > 0 && peak > budget)
    std::cerr << fmt::format(
        "moetrace: warning: rank {} peaks at {} of simulated memory, above memory_budget_bytes ({}); this "
        "configuration would not fit\n",
        worst, gib(peak), gib(budget));
}

}  // namespace moetrace::cli
