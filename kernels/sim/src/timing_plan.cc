// The timing-only mode of the expert-parallel plan builders (builders.h
// PlanDetail) for a run specification; see timing_plan.h.
#include "moetrace/sim/timing_plan.h"

#include <fmt/format.h>

#include "moetrace/plan/builders.h"
#include "moetrace/schema/error.h"

namespace moetrace::sim {

bool timing_plan_supported(const RunSpec& spec) {
  return (spec.variant == "dpmoe" && !spec.capacity_padding) || spec.variant == "pipemoe";
}

plan::Plan build_timing_plan(const RunSpec& spec, const plan::ExpertLoad& load, std::int64_t max_load_entries) {
  if (!timing_plan_supported(spec))
    throw ConfigError(fmt::format("variant {} has no timing-only plan builder (dpmoe and pipemoe have one)",
                                  spec.variant));
  spec.validate();
  if (load.sources != spec.common.ranks || load.experts != spec.common.model.num_experts ||
      load.layers != spec.common.model.num_layers || load.iterations != spec.common.iterations)
    throw ConfigError("the expert load does not match the configuration (sources, experts, layers, iterations)");
  const plan::PlanDetail timing{true, max_load_entries};
  plan::Plan p = spec.variant == "dpmoe"
                     ? plan::build_dpmoe(plan::DpMoeConfig{spec.common, false}, load, timing)
                     : plan::build_pipemoe(plan::PipeMoeConfig{spec.common, spec.pipeline_degree, spec.fused_experts},
                                                         load, timing);
  p.config_json = spec.to_json();  // the run's specification, as `moetrace run` records it
  return p;
}

}  // namespace moetrace::sim
