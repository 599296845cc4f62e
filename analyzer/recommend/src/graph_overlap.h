// The overlap what-ifs (graph_whatif.h; private to moetrace::recommend).
//
// overlap=off: MoE layer instances (rank, layer, iteration, micro-batch,
// forward or backward) whose GPU windows overlapped on their rank, as
// DualPipe's forward and backward chunks or two micro-batches of an
// overlapped schedule do, run one after the other in the order they
// started: on each stream the first instance's work, then the next's; and
// each instance's work waits for the end of the one before it. The host
// issues as it did (its launches stay where they were); where the host
// waited for work that now runs later (a synchronisation inside the
// schedule), the graph holds a cycle, and the replay says so (unresolved
// points).
//
// overlap=on: the reverse, for a schedule that ran independent work one
// after the other. A pass is a run of consecutive MoE layer instances of a
// rank with the same iteration, micro-batch and direction (micro-batch 1's
// forward through its layers; micro-batch 0's backward). Two adjacent passes
// of different micro-batches are independent; they are paired, in order
// (the first with the second, the third with the fourth: 1F1B's steady
// state pairs each forward with the backward after it, as Megatron-Core's
// combined 1F1B step and DualPipe do; two forward passes pair as DeepSeek's
// two-micro-batch overlap does), and run layer by layer side by side:
//   - a pass runs from the start of its first instance's work to the end of
//     its last's; segment j of a pass is its GPU work from the end of its
//     instance j-1 (the pass's start, for j = 0) to the end of its instance
//     j (the last paired segment takes the rest of the pass): a layer with
//     the non-MoE work before it (attention);
//   - segment j of both passes runs together: each stream runs the two
//     segments' computation in the order of its offset from its segment's
//     start (the first pass first on ties), and their communication (ops
//     of a communication category, or work on a stream the trace marks
//     "comm") alternating, each pass's ops in the order they ran (the first
//     pass's first op, the second's first, the first's second, ...): every
//     rank of a communicator must issue its collectives in one order, which
//     offsets, rank by rank, would not keep. Communication runs apart from
//     computation: where a stream ran both, its communication takes a
//     stream of its own, so one pass's all-to-all runs beside the other's
//     experts;
//   - each pass keeps its own order (its edges between its own work);
//     edges between the two passes' work are dropped;
//   - the second pass's work is issued with the first's: its kernels no
//     longer wait for their own launching calls, which the host made after
//     the first pass; they start no earlier than the first pass. The host
//     itself is unchanged: where it paced the GPU, later work still waits
//     for its launches, so a host-bound job gains little, as it would;
//   - a pair is made only where every rank that shares a collective with
//     its rank (joined by the graph's collective edges) and runs either
//     pass makes the same pair; elsewhere the passes are left as they ran,
//     and a note counts them (one rank reordering its collectives alone
//     would wait for the others forever: the changed graph would hold a
//     cycle);
//   - GPU work between the two passes (pipeline sends and receives) runs
//     after them: the overlapped schedule receives both micro-batches'
//     inputs before it starts and sends after it ends (placing the
//     receives after the passes too keeps their time, not their place).
// Departure: communication keeps its measured duration beside computation,
// and computation its own, though both share the SMs (DeepSeek-V3's report,
// Sec. 3.2.2, gives 20 of the H800's 132 SMs to its all-to-all kernels), so
// the gain is an upper bound; the result says so.
#pragma once

#include "graph_edit.h"
#include "moetrace/analyzer/graph_whatif.h"

namespace moetrace::analyzer::detail {

void apply_serialise(const Trace& trace, ExecGraph& graph, GraphWhatIfResult& out);
void apply_overlap(const Trace& trace, ExecGraph& graph, GraphWhatIfResult& out);

}  // namespace moetrace::analyzer::detail
