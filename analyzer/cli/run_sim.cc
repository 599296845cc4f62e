// `moetrace run --backend sim`: plan -> discrete-event simulation -> trace.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "commands.h"
#include "moetrace/analyzer/format.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/trace_output.h"
#include "run_backend.h"

namespace moetrace::cli {

void run_sim_backend(const RunRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  const sim::RunSpec& spec = request.spec;
  const sim::CostModel model = spec.resolved_cost_model();
  Progress progress("simulating " + std::string(request.calibration ? "calibration" : spec.preset.empty() ? spec.variant : spec.preset));
  progress.update("building plan", 0.0);
  plan::Plan plan;
  if (request.calibration) {
    // The interference pairs are sized from the model being calibrated
    // against (a GPU backend would use a previous fit or the defaults).
    plan::CalibrationConfig c = *request.calibration;
    const auto& ffn = model.compute_cost(OpKind::kExpertFfn);
    const auto a2a = model.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, c.ranks));
    c.estimates = {ffn.alpha_s, ffn.seconds_per_flop, a2a.alpha_s, a2a.beta_s, model.copy_d2h.alpha_s,
                   model.copy_d2h.beta_s};
    plan = plan::build_calibration(c);
  } else {
    plan = sim::build_plan(spec);
  }
  const std::string what = request.calibration ? "calibration" : spec.preset.empty() ? spec.variant : spec.preset;
  const int world_size = plan.world_size, iterations = plan.iterations;
  sim::SimOptions sim_options;
  sim_options.progress = [&](double f) { progress.update("simulating", 0.05 + 0.45 * f); };
  sim::TraceOutputOptions out;
  out.run_name = fmt::format("{} (simulated, {})", what, model.name);
  out.config_json = request.calibration ? plan.config_json : spec.to_json();
  out.full_op_names = request.full_op_names;
  out.detail = request.lean ? sim::TraceDetail::kLean : sim::TraceDetail::kFull;
  out.progress = [&](double f) { progress.update("writing trace", 0.5 + 0.5 * f); };
  const auto traced = sim::simulate_to_trace(request.output, std::move(plan), model, sim_options, out);
  const sim::SimResult& result = traced.result;
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
        request.calibration ? "calibration sweep" : spec.variant, world_size, iterations, traced.ops, model.name, result.makespan_s * 1e3,
        analyzer::format_gib(peak), worst, request.output, seconds);
  }
  const std::int64_t budget = spec.common.memory_budget_bytes;
  if (budget > 0 && peak > budget && !request.calibration)
    std::cerr << fmt::format(
        "moetrace: warning: rank {} peaks at {} of simulated memory, above memory_budget_bytes ({}); this "
        "configuration would not fit\n",
        worst, analyzer::format_gib(peak), analyzer::format_gib(budget));
}

}  // namespace moetrace::cli
