// The overlap=off what-if (graph_whatif.h; private to moetrace::recommend):
// MoE layer instances (rank, layer, iteration, micro-batch, forward or
// backward) whose GPU windows overlapped on their rank, as DualPipe's
// forward and backward chunks or two micro-batches of an overlapped
// schedule do, run one after the other in the order they started: on each
// stream the first instance's work, then the next's; and each instance's
// work waits for the end of the one before it. The host issues as it did
// (its launches stay where they were); where the host waited for work that
// now runs later (a synchronisation inside the schedule), the graph holds a
// cycle, and the replay says so (unresolved points).
#pragma once

#include "graph_edit.h"
#include "moetrace/analyzer/graph_whatif.h"

namespace moetrace::analyzer::detail {

void apply_serialise(const Trace& trace, ExecGraph& graph, GraphWhatIfResult& out);

}  // namespace moetrace::analyzer::detail
