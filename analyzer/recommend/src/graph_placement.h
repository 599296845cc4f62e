// The placement=pro-prophet what-if (graph_whatif.h; private to
// moetrace::recommend): Pro-Prophet's planner (pro-prophet Algorithm 1,
// Eq. 1-8) on each MoE layer's measured load (the routing of one iteration,
// moe_layer_workloads), and the graph's work per rank changed as the new
// placement changes the load: on rank i, each expert op's kernels last
// d - beta_e W (1 - H'_i / H_i) and each all-to-all op's d - beta_a V
// (1 - R'_i / R_i), with H and R the tokens computed and received per rank
// (Eq. 2 and 1) before and after, W the op's FLOPs and V its bytes, beta the
// cost model's (never below 0); every iteration of the layer changes by
// those ratios. Trans (the selected experts' parameters, Eq. 4) runs on the
// rank's communication stream before the layer's first forward all-to-all
// and Agg (their gradients, Eq. 5) after its last backward one, each lasting
// the planner's estimate; with the block-wise schedule (Algorithm 2) they
// overlap computation, as the graph lets them.
#pragma once

#include "graph_edit.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer::detail {

// `sources`: as apply_reuse's.
void apply_placement(const Trace& trace, ExecGraph& graph, const sim::CostModel& model, const WorkloadSources& sources,
                     GraphWhatIfResult& out);

}  // namespace moetrace::analyzer::detail
