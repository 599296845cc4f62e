// The pipeline-degree advice from the trace's own execution graph
// (recommendations.h TraceReplay; private to moetrace::recommend).
#pragma once

#include <map>
#include <vector>

#include "hardware.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/recommendations.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer::detail {

// Per MoE layer: measured, replayed, and predicted at each pipeline degree
// of `candidates` (the graph what-if on every instance of the trace at once;
// with the hardware's fitted expert and all-to-all terms at -/+ one
// relative residual for the range). Empty where the trace has no MoE layer
// windows.
std::map<int, TraceReplay> trace_replay_by_layer(const Trace& trace, const Hardware& hw,
                                                  const std::vector<int>& candidates,
                                                  const WorkloadSources& sources = {});

// " On the trace's own execution graph ...: reuse=S1 ... ms (+x %), ..."
// for the what-ifs whose key starts with `prefix` ("reuse", "placement");
// empty where none.
std::string trace_what_if_evidence(const LayerRecommendation& L, std::string_view prefix);

// The pipeline-degree item from a computed TraceReplay (the current r = 1).
RecommendationItem trace_pipeline_item(const LayerRecommendation& L, double min_gain);

}  // namespace moetrace::analyzer::detail
