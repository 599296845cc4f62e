// What-ifs on a trace's execution graph (exec_graph.h): the graph of the
// user's own job, changed as a configuration change would change it, then
// evaluated again. `moetrace replay --what-if KEY=VALUE` and the trace's
// recommendations use them.
//
//   pipeline_degree=R  Each MoE layer instance (rank, layer, iteration,
//       phase, micro-batch) whose dispatch, expert computation and combine
//       ran unsplit is split into R chunks pipelined as PipeMoE issues them
//       (pipemoe Sec. III; the order of its released code and of moetrace's
//       builder): the host issues the R dispatch chunks, then the experts of
//       chunk 0, 1, ..., then the R combine chunks, each chunk's host work as
//       long as the unsplit op's (the same calls, once per chunk); each
//       chunk's kernels run on the op's stream after those issued before
//       them there, chunk j's experts after chunk j's dispatch and its
//       combine after its experts (the trace's own cross-stream edges,
//       repeated per chunk). A chunk's kernel lasts its measured duration
//       less the share of the work it no longer does: d - S (1 - 1/R), S the
//       part of the op's time that scales with its work (pipemoe Eq. 15-18's
//       beta terms; the alpha part, startup, is paid by every chunk): beta W
//       where the trace gives the op's work W (FLOPs of an expert op, bytes
//       of an all-to-all) and beta the cost model's seconds per FLOP or per
//       byte at the layer's P; else the op's time beyond the cost model's
//       alpha (per GEMM launch, or the all-to-all's at P). Never below d / R
//       nor above d.
//   reuse=S1|S2|S3|S4  MPipeMoE's memory reuse added to each layer that
//       ran without it: offload, prefetch, re-communicate and recompute
//       work in the graph (graph_reuse.h says where and how long).
//   placement=pro-prophet  Pro-Prophet's planner on each layer's measured
//       load; expert and all-to-all work per rank scaled by the new load,
//       Trans and Agg added (graph_placement.h).
//   overlap=off|on     Schedules that run two MoE layer instances side by
//       side (a forward and a backward chunk, DualPipe; two micro-batches):
//       off serialises them; on runs two adjacent passes of different
//       micro-batches side by side, layer by layer, one's communication
//       beside the other's computation (graph_overlap.h).
//
// The cost model (beta) comes from, in this order: the trace's own fit
// where it has the op at several sizes 2x apart, a calibration file
// (--cost-model), else a preset; the result names which.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/replay.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer {

struct GraphWhatIfs {
  int pipeline_degree = 0;      // 0: unchanged
  std::string reuse;            // "S1".."S4"; empty: unchanged
  std::string placement;        // "pro-prophet"; empty: unchanged
  std::optional<bool> overlap;  // unset: unchanged
  bool empty() const { return pipeline_degree == 0 && reuse.empty() && placement.empty() && !overlap; }
};

// Adds one KEY=VALUE to `w`; throws ConfigError naming the key and what it takes.
void parse_graph_what_if(std::string_view key_value, GraphWhatIfs& w);

struct GraphWhatIfResult {
  std::vector<std::string> applied;  // one line per what-if: what changed, and where its costs came from
  std::vector<std::string> notes;    // instances left as they were, and why
  std::map<int, std::string> layer_notes;  // of them, those about one layer, by layer
  int instances_changed = 0;
};

// Changes `graph` (built from `trace`) as `w` says. `options`: the cost model
// (RecommendOptions::cost_model / prefer_fitted, as `recommend` takes them).
GraphWhatIfResult apply_graph_what_ifs(const Trace& trace, ExecGraph& graph, const GraphWhatIfs& w,
                                       const RecommendOptions& options);
// The same on a given cost model; `model_source` says where it came from.
GraphWhatIfResult apply_graph_what_ifs(const Trace& trace, ExecGraph& graph, const GraphWhatIfs& w,
                                       const sim::CostModel& model, const std::string& model_source,
                                       const WorkloadSources& sources = {});

// The trace replayed, then replayed after the what-ifs: measured, replayed
// and predicted side by side (replay.h).
struct ReplayWithWhatIfs {
  ReplaySummary summary;
  GraphWhatIfResult what_ifs;
  std::int64_t predicted_unresolved = 0;  // points on a cycle of the changed graph (then a note says so)
};
ReplayWithWhatIfs replay_with_what_ifs(const Trace& trace, const GraphWhatIfs& w, const RecommendOptions& options,
                                       const ExecGraphOptions& graph_options = {});

}  // namespace moetrace::analyzer
