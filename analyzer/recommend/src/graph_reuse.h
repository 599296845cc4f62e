// The reuse=S what-if (graph_whatif.h; private to moetrace::recommend):
// MPipeMoE's memory reuse added to the layers of a trace that ran without
// it. Per chunk of each layer instance (mpipemoe Sec. III-D, Table II; the
// dependencies of moetrace's builder, which the CUDA executor runs):
//   forward:  T_DI offloaded (D2H, a copy stream) after the chunk's
//             dispatch; T_M offloaded after its experts, and (one T_M
//             buffer) the next chunk's experts wait for that offload;
//   backward: before the chunk's experts, T_DI prefetched (H2D) or
//             re-communicated (the chunk's forward dispatch again, as
//             measured), T_M prefetched (after the previous chunk's
//             backward experts: one buffer) or recomputed (the first GEMM of
//             each of the chunk's forward experts again, as measured, after
//             T_DI is back).
// Copies last the cost model's alpha + beta x bytes (T_DI: the dispatch's
// received bytes; T_M = T_DI x H / M); each added op's host work is the
// cost model's host issue term of its kind where it has one, else the
// trace's median launching call (copies), the forward dispatch's host work
// (re-communicate) or its share of the forward expert op's (recompute).
#pragma once

#include "graph_edit.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/plan/config.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer::detail {

// `sources`: the model shapes and tokens the user gave (--model, --tokens),
// where the trace lacks them.
void apply_reuse(const Trace& trace, ExecGraph& graph, plan::ReuseStrategy strategy, const sim::CostModel& model,
                 const WorkloadSources& sources, GraphWhatIfResult& out);

}  // namespace moetrace::analyzer::detail
