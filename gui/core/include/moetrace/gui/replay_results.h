// The trace's replay, for the timeline's replayed tracks and the Replay
// panel: the analyzer's execution graph of the trace (exec_graph.h)
// evaluated with the measured durations and compared with the measured trace
// per rank and iteration and per MoE layer (replay.h), as `moetrace replay`
// prints it; with a what-if (graph_whatif.h, `--what-if pipeline_degree=R`)
// the graph's prediction beside them. The tracks then show the predicted
// trace instead of the replayed one. The GUI computes none of these numbers.
#pragma once

#include <memory>
#include <string>

#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/replay.h"
#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

struct ReplayRequest {
  analyzer::GraphWhatIfs what_ifs;     // empty: the replay alone
  // Where the what-ifs' new durations come from (cost model), and the sizes
  // and tokens the trace lacks (model, tokens_per_rank).
  analyzer::RecommendOptions options;
  std::shared_ptr<const analyzer::ModelSpec> model;  // what options.model points to
  analyzer::ExecGraphOptions graph;
};

struct ReplayResults {
  analyzer::GraphWhatIfs what_ifs;     // as requested
  analyzer::ReplaySummary summary;     // measured, replayed and (with what-ifs) predicted
  analyzer::GraphWhatIfResult applied; // what the what-ifs changed, and where their costs came from
  // The timeline it was computed on, with the tracks of the replayed trace
  // (or of the predicted one) added (TimelineModel::with_replay); null where
  // the replay failed.
  std::shared_ptr<const TimelineModel> model;
  bool predicted = false;              // the tracks show the prediction
  std::string error;                   // why it failed
  double seconds = 0;                  // wall time of the whole computation

  // "replayed", or "predicted (pipeline_degree=4)".
  std::string label() const;
  // The summary's row of one rank's iteration (-1: the rank's span where the
  // trace has no iterations), or null.
  const analyzer::ReplayIterationRow* iteration(RankId rank, int iteration) const;
  const analyzer::ReplayLayerRow* layer(int layer) const;
  // The summary's numbers for a span of the timeline (measured or
  // replayed): its iteration's window on its rank, or its layer's mean
  // window; empty where the summary has none.
  std::string span_text(const Span& s) const;
};

// A window measured, replayed and (predicted_ns >= 0) predicted, with the
// replay's error against the measurement and the prediction's change against
// the replay, as `moetrace replay` computes them (analyzer::relative_error):
// "measured 1.84 ms, replayed 1.83 ms (-0.66 %), predicted 4.30 ms (+135.21 %)".
std::string replay_numbers_text(std::int64_t measured_ns, std::int64_t replayed_ns, std::int64_t predicted_ns = -1);

// "pipeline_degree=4, overlap=off" (empty: none).
std::string what_if_text(const analyzer::GraphWhatIfs& w);

// Replays the trace of `base` (on the calling thread; the GUI calls it off
// its own). Errors are returned in `error`, never thrown.
ReplayResults compute_replay(const std::shared_ptr<const TimelineModel>& base, const ReplayRequest& request);

}  // namespace moetrace::gui
